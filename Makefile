# Two entry points: `make demo` and `make test`. Both build the venv when it is missing.
# pyenv resolves `python3.12` through the committed .python-version file.
PY ?= python3.12
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean notebooks

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[examples,test]"  # the demo's (examples) and the suite's
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/toolkit demo

test: $(STAMP)
	$(BIN)/ruff check toolkit tests graphs benchmarks notebooks
	$(BIN)/lint-imports
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e ".[test,bench]"
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

notebooks: $(STAMP)  # executes every notebook in place with this venv's kernel, saving outputs
	$(BIN)/python -m pip install -q -e ".[notebooks]"
	$(BIN)/python -m tests.notebooks
