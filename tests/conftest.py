import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny():
    from grpo_recipes.tiny import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    return tiny_model(tokenizer, seed=0), tokenizer


def run_train(
    *overrides: str, cwd: Path = ROOT, timeout: int = 900, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run train_grpo.py as a user would, in a subprocess."""
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "train_grpo.py"), *overrides],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
