# the-loop: two entry points, `make run` and `make test`. Both create or refresh .venv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint venv clean bench

venv: $(STAMP)

# Reinstall whenever pyproject.toml changes.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: venv
	./scripts/dev-run.sh

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy graph

test: venv lint
	$(BIN)/python -m pytest -q

bench: venv
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
