# Two entry points: `make demo` and `make test`. Both build the venv when it is missing and
# install into it from the committed lock files (requirements/*.txt, pinned for Linux /
# CPython 3.12; `make lock` regenerates them):
#   requirements/core.txt   the library alone: what a worker image needs (docs/clusters.md)
#   requirements/demo.txt   core + the `examples` and `serve` extras: `make demo`
#   requirements/test.txt   core + the `examples`, `serve`, `test` and `docs` extras: `make test`
#   requirements/bench.txt  test + the `bench` extra: `make bench`
#   requirements/notebooks.txt  core + `examples` + `notebooks` (jupyterlab)
#   requirements/docs.txt   core + the `serve` and `docs` extras: `make docs` (mkdocs.yml)
# One resolution: test.txt is solved first and every other file is solved under it (-c), so a
# package has the same version in each file and a worker built from core.txt matches a client
# built from any of them.

# Python: PY=/path/to/python names one; otherwise the first of these on PATH that is >= 3.12
# (pyenv's shims answer python3.12 here through the committed .python-version).
PY_CANDIDATES := python3.12 python3.13 python3.14 python3 python
PY_CHECK := import sys; assert sys.version_info >= (3, 12); print(sys.executable)
PY ?= $(shell for p in $(PY_CANDIDATES); do $$p -c '$(PY_CHECK)' 2>/dev/null && break; done)

# in a recipe that runs $(PY): one line and exit 2 when there is none (no make backtrace)
need_py = $(if $(and $(PY),$(shell $(PY) -c '$(PY_CHECK)' 2>/dev/null)),,$(error $(if $(filter command line environment,$(origin PY)),PY=$(PY) is not a Python >= 3.12,no Python >= 3.12 on PATH (tried $(PY_CANDIDATES))); name one with `make PY=/usr/bin/python3.13 test`))

VENV := .venv
BIN := $(VENV)/bin
LOCK := requirements
# uv resolves the lock files (pip installs them); pinned so a rerun of `make lock` is repeatable
UV_VERSION := 0.13.9
UV_VENV := .venv-lock

.PHONY: demo test lint bench lock clean print-py notebooks docs

# the venv itself; only made when missing, so an existing .venv never needs $(PY)
$(BIN)/python:
	$(need_py)
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# one stamp per installed set: `make demo` then `make test` adds the test set to the same venv;
# a changed lock file (or pyproject.toml) reinstalls that set
$(VENV)/.installed-%: $(LOCK)/%.txt pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -r $(LOCK)/$*.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	@touch $@

demo: $(VENV)/.installed-demo
	$(BIN)/toolkit demo

test: $(VENV)/.installed-test
	$(BIN)/ruff check toolkit tests graphs benchmarks notebooks
	$(BIN)/lint-imports
	$(BIN)/python -m pytest

docs: $(VENV)/.installed-docs  # the documentation site on http://127.0.0.1:8000
	$(BIN)/mkdocs serve

lint: $(VENV)/.installed-test
	$(BIN)/ruff check toolkit tests graphs benchmarks notebooks
	$(BIN)/lint-imports

bench: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks

# Regenerate the lock files from pyproject.toml (needs the package index; run it after editing
# the dependencies, then commit requirements/). uv (pinned, in its own .venv-lock) runs, e.g.
#   uv pip compile pyproject.toml -q --python-version 3.12 --python-platform x86_64-unknown-linux-gnu \
#       --custom-compile-command "make lock" --annotation-style line \
#       --extra examples --extra serve --extra test --extra docs -o requirements/test.txt
# and then the same with, in place of the last line:
#   --extra examples --extra serve             -c requirements/test.txt -o requirements/demo.txt
#   (no extra)                                 -c requirements/test.txt -o requirements/core.txt
#   --extra examples --extra serve --extra test --extra docs --extra bench -c requirements/test.txt \
#       -o requirements/bench.txt
#   --extra examples --extra notebooks         -c requirements/test.txt -o requirements/notebooks.txt
#   --extra serve --extra docs                 -c requirements/test.txt -o requirements/docs.txt
# uv resolves against PyPI (it does not read pip.conf); pip installs the pins from whatever index
# pip is configured with. `make lock` keeps the pins that still satisfy pyproject.toml;
# `make lock UPGRADE=1` moves every pin to the newest release allowed. No hashes, by choice:
# pip's hash-checking mode refuses an editable `-e .` in the same command, and the pins alone are
# what the workers' version check compares.
COMPILE = $(UV_VENV)/bin/uv pip compile pyproject.toml -q --python-version 3.12 \
	--python-platform x86_64-unknown-linux-gnu --custom-compile-command "make lock" --annotation-style line $(if $(UPGRADE),--upgrade)
lock:
	$(if $(wildcard $(UV_VENV)/bin/uv),,$(need_py))
	@test -x $(UV_VENV)/bin/uv || { $(PY) -m venv $(UV_VENV) && $(UV_VENV)/bin/python -m pip install -q uv==$(UV_VERSION); }
	@mkdir -p $(LOCK)
	$(COMPILE) --extra examples --extra serve --extra test --extra docs -o $(LOCK)/test.txt
	$(COMPILE) --extra examples --extra serve -c $(LOCK)/test.txt -o $(LOCK)/demo.txt
	$(COMPILE) -c $(LOCK)/test.txt -o $(LOCK)/core.txt
	$(COMPILE) --extra examples --extra serve --extra test --extra docs --extra bench -c $(LOCK)/test.txt -o $(LOCK)/bench.txt
	$(COMPILE) --extra examples --extra notebooks -c $(LOCK)/test.txt -o $(LOCK)/notebooks.txt
	$(COMPILE) --extra serve --extra docs -c $(LOCK)/test.txt -o $(LOCK)/docs.txt

clean:  # keeps the lock files (requirements/)
	rm -rf $(VENV) $(UV_VENV) .pytest_cache .ruff_cache .hypothesis

print-py:  # which Python would build .venv (debug aid)
	@echo $(PY)

notebooks: $(VENV)/.installed-notebooks  # re-executes every notebook in place, saving outputs
	$(BIN)/python -m tests.notebooks
