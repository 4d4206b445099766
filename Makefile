# Two entry points: `make run` (the tour) and `make test` (lint, types, tests);
# `make docs` builds the documentation site into docs/_build/html.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test test-full lint typecheck pytest pytest-full tour docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# --no-compile: pip would byte-compile every installed file (about 30 s here); Python
# compiles the modules it imports on first use instead.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --no-compile -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --no-compile -e '.[test,bench,train,models]'
	touch $@ $(VENV)/.installed-run

$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --no-compile -e '.[docs,train,models]'
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/shardkit tour

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests docs
	$(BIN)/ruff format --check src tests docs

typecheck: $(VENV)/.installed-test
	$(BIN)/pyright

# Two workers: compiling is single-threaded, so one process leaves a core idle.
PYTEST_WORKERS ?= 2

# The installs skip byte-compiling (--no-compile above), so Python must be free to
# cache the bytecode of what it imports: with PYTHONDONTWRITEBYTECODE set, every
# process the tests start (CLI, launcher ranks, tour) compiled jax and shardkit from
# source again (tests/test_cli.py alone: 53 -> 35 CPU-s with the cache).
unexport PYTHONDONTWRITEBYTECODE

# worksteal: an idle worker takes tests queued on the other, so the run does not end
# with one worker still holding a long queue.
pytest: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal

# The whole test matrix (every mesh x axis type x dtype cell); `make test` samples it.
pytest-full: $(VENV)/.installed-test
	SHARDKIT_FULL_TESTS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal

test: lint typecheck pytest

test-full: lint typecheck pytest-full

# Strict: a warning (broken reference, export missing from the reference, a notebook
# cell that raises or writes to stderr) fails the build; --keep-going lists them all.
# Then every page is opened in Chromium (docs/check_site.py): a console error, a failed
# request, a broken link, anchor or image, or a guide without a picture fails it too.
docs: $(VENV)/.installed-docs
	$(BIN)/python -m sphinx -b html -W --keep-going docs docs/_build/html
	$(BIN)/python docs/check_site.py docs/_build/html

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache docs/_build
