"""The README's "Extending" section, applied to a copy of the project as a user would: each edit it shows
is made, each command it shows is run, and what it says happens does (a new knob is checked, printed by
`--cfg job` and classified for resume; a model preset composes; a reward by dotted path trains). Also:
the README's "Config reference" table is the declaration's own."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_recipes.config.__main__ import knob_table
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
SECTION = README.split("\n## Extending\n", 1)[1].split("\n## ", 1)[0]
BLOCKS = re.findall(r"```(python|yaml|bash)\n(.*?)```", SECTION, re.DOTALL)


def apply_edit(root: Path, header: str, body: str) -> None:
    """`# new file: PATH` writes the block; `# edit: PATH, in class C, after FIELD` inserts it after FIELD."""
    if header.startswith("# new file: "):
        (root / header.removeprefix("# new file: ").strip()).write_text(body)
        return
    path, cls, after = re.fullmatch(r"# edit: (\S+), in class (\w+), after (\w+)", header.strip()).groups()
    lines = (root / path).read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(f"class {cls}"))
    at = next(i for i in range(start, len(lines)) if lines[i].startswith(f"    {after}:"))
    while not lines[at].rstrip().endswith(")"):  # the declaration may span lines
        at += 1
    lines.insert(at + 1, body)
    (root / path).write_text("".join(lines))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the project's files with every edit of the section applied."""
    root = tmp_path_factory.mktemp("project")
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, root / name)
    for kind, block in BLOCKS:
        if kind != "bash":
            header, body = block.split("\n", 1)
            apply_edit(root, header, body)
    return root


def run(project: Path, command: str) -> subprocess.CompletedProcess:
    args = [a.strip("'") for a in re.findall(r"'[^']*'|\S+", command.split("  #", 1)[0])]
    assert args[:2] == ["python", "train_grpo.py"], command
    return subprocess.run(
        [sys.executable, "train_grpo.py", *args[2:]], cwd=project, capture_output=True, text=True, timeout=600
    )


def commands() -> list[str]:
    return [line for kind, block in BLOCKS if kind == "bash" for line in block.splitlines() if line.strip()]


def test_the_section_shows_each_kind_of_addition():
    assert [kind for kind, _ in BLOCKS].count("bash") >= 3
    assert any("# edit: grpo_recipes/config/knobs.py" in block for _, block in BLOCKS)


@pytest.mark.slow
@pytest.mark.parametrize("command", commands())
def test_each_command_does_what_the_section_says(project, command):
    result = run(project, command)
    said = command.split("  # ", 1)[1].strip() if "  # " in command else ""
    if said.startswith("error: "):
        assert result.returncode == 2 and result.stderr.strip() == said, result.stderr
        return
    assert result.returncode == 0, result.stderr[-2000:]
    if "dataset.rewards." in command:  # the reward trained: TRL logged it under its key
        metrics = (project / "outputs/arithmetic-tiny-random/metrics.jsonl").read_text()
        assert '"train/rewards/brevity/mean"' in metrics or '"rewards/brevity/mean"' in metrics
    if "--cfg job" in command:  # every override it names is in the printed config
        printed = result.stdout
        for override in re.findall(r"(?:^|\s)([\w.]+)=(\S+)", command.split("--cfg job", 1)[1]):
            key, value = override
            if key == "model":
                assert f"name: {value.replace('_', '-')}" in printed
            else:
                assert f"{key.rsplit('.', 1)[-1]}: {value}" in printed, (key, printed)


@pytest.mark.slow
def test_the_new_knob_is_declared_once_and_classified_for_resume(project):
    probe = (
        "from grpo_recipes.config.knobs import SCHEMA, may_change_on_resume as m;"
        "print(SCHEMA['eval.example_chars'].describe(), m('eval.example_chars'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=project, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "an integer >= 1 True"
    shown = run(project, "python train_grpo.py --cfg job")
    assert "example_chars: 400" in shown.stdout


def test_the_readme_config_reference_is_the_declaration():
    table = README.split("<!-- knobs:start -->\n", 1)[1].split("<!-- knobs:end -->", 1)[0]
    assert table.strip() == knob_table().strip(), "regenerate it: python -m grpo_recipes.config"


@pytest.mark.parametrize(
    "knob",
    [
        "no_signal_warning",
        "log_samples_count",
        "fast_paths",
        "eval_per_level",
        "dynamic_sampling_max_draws",
        "print_examples",
    ],
)
def test_a_knob_is_named_by_its_declaration_and_its_consumers_only(knob):
    """No parallel table of knobs: a knob's name appears in its declaration and the few modules that read
    it (at most 3 files of product code), not in lists that restate it."""
    packages = ("grpo_recipes", "rewards", "tasks", "grpo_common", "tools", "hydra_plugins")
    files = [p for d in packages for p in (ROOT / d).rglob("*.py")] + [ROOT / "train_grpo.py"]
    naming = [str(p.relative_to(ROOT)) for p in files if re.search(rf"\b{knob}\b", p.read_text())]
    assert len(naming) <= 3, naming
