# The two commands of the README: `make demo` and `make test`.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint

setup:
	scripts/setup.sh

demo: setup
	$(BIN)/socialbench demo

lint:
	$(BIN)/ruff check .
	$(BIN)/mypy

# pytest exits 5 when it collected no test; that is not a failure of the suite.
test: setup lint
	$(BIN)/pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc
