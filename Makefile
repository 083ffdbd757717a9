# The two commands of the README: `make demo` and `make test`.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup setup-test demo test lint

setup:
	scripts/setup.sh

setup-test:
	scripts/setup.sh --test

demo: setup
	$(BIN)/socialbench demo

# deptry: every import on a user's path is a runtime dependency (the test extra is
# development-only), and every declared dependency is imported.
lint:
	$(BIN)/ruff check .
	$(BIN)/deptry .
	$(BIN)/python scripts/typecheck.py

# Two passes: every test but the `serial` ones in TEST_WORKERS processes (pytest-xdist, a
# module to a process: most of an end-to-end test is waiting on its stack), then the serial
# ones, which time runs on a quiet host, alone. pytest exits 5 when it collected no test;
# that is not a failure of the suite.
TEST_WORKERS ?= $(shell n=$$(nproc); if [ $$n -gt 4 ]; then n=4; fi; echo $$n)
test: setup-test lint
	@started=$$(date +%s); \
	$(BIN)/pytest -q --durations=30 -m "not serial" -n $(TEST_WORKERS) --dist loadfile; \
	rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; \
	$(BIN)/pytest -q --durations=10 -m serial; \
	rc2=$$?; if [ $$rc2 -eq 5 ]; then rc2=0; fi; \
	echo "==> pytest, both passes: $$(( $$(date +%s) - started )) s"; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi; exit $$rc2
