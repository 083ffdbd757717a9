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

# pytest exits 5 when it collected no test; that is not a failure of the suite.
test: setup-test lint
	$(BIN)/pytest -q --durations=30; rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc
