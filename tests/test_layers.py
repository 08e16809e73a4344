"""Imports point down only: train_grpo.py -> grpo_recipes -> tasks -> tools -> rewards -> grpo_common.

Every module of each package is parsed (imports inside functions count too); a module may import
its own package and any lower layer, never a higher one. tasks and rewards share a level in the
design, with one direction between them: tasks import rewards (the code tasks run their tests
through the code reward's sandbox), rewards never import tasks. tools (what a model may call mid-answer) run
model code in the rewards' sandbox, so they sit above rewards; neither rewards nor tasks import them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["grpo_common", "rewards", "tools", "tasks", "grpo_recipes", "train_grpo"]  # bottom to top


def imported(path: Path) -> set[str]:
    """The top-level names of every module `path` imports (relative imports resolve to its own package)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(path.relative_to(ROOT).parts[0] if node.level else (node.module or "").split(".")[0])
    return names


def upward_imports(package: str) -> list[str]:
    higher = set(LAYERS[LAYERS.index(package) + 1 :])
    return [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in sorted(imported(path) & higher)
    ]


@pytest.mark.parametrize("package", LAYERS[:-1])
def test_no_module_imports_a_higher_layer(package):
    assert (ROOT / package / "__init__.py").exists()
    assert upward_imports(package) == []


def test_the_check_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import os\n\n\ndef f():\n    from grpo_recipes.train.data import to_row\n    import tasks.code\n"
    )
    assert imported(module) == {"os", "grpo_recipes", "tasks"}
