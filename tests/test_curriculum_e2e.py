"""dataset.curriculum end to end: train_grpo.py on the tiny random model, levels forced up with raise_at=0."""

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, accelerate_launch, read_jsonl, run_train

pytestmark = pytest.mark.slow
# sum_digits has levels 0..3; 16 completions a step fill a window of 16, and raise_at=0 passes every window
CURRICULUM = [
    "model=tiny_random",
    "dataset=sum_digits",
    "eval.size=4",
    "eval.every_n_steps=0",
    "grpo.max_completion_length=8",
    "dataset.curriculum.enabled=true",
    "dataset.curriculum.raise_at=0.0",
    "dataset.curriculum.lower_at=0.0",
    "dataset.curriculum.window=16",
]
LEVEL = "train/curriculum/sum_digits/level"


def expected_level(step: int) -> int:
    """The level logged at `step`: a move lands at the end of every step whose batch was drawn at the
    current level; the next batch was already drawn (the data loader fetches one ahead), so every other."""
    return min(3, step // 2)


def levels(run_dir) -> dict[int, float]:
    return {r["step"]: r[LEVEL] for r in read_jsonl(run_dir / "metrics.jsonl") if LEVEL in r}


def test_levels_rise_are_logged_and_survive_a_stop_and_resume(tmp_path):
    args = [*CURRICULUM, "max_steps=200", "grpo.save_steps=2", f"output_root={tmp_path}", "run_name=c"]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "train_grpo.py"), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    run = tmp_path / "c"
    deadline = time.time() + 300
    while time.time() < deadline and (not (run / "metrics.jsonl").exists() or len(levels(run)) < 5):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out[-3000:]
    before = levels(run)
    stopped = max(before)
    assert before == {s: expected_level(s) for s in range(1, stopped + 1)}
    saved = json.loads((run / f"checkpoint-{stopped}" / "trainer_state.json").read_text())
    state = saved["stateful_callbacks"]["CurriculumCallback"]["attributes"]["levels_and_windows"]
    restored_level = state["levels"]["sum_digits"]
    assert restored_level == min(3, (stopped + 1) // 2) >= 2  # the level after step `stopped`'s update

    resumed = run_train(*args, f"max_steps={stopped + 4}", "resume=true")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    after = levels(run)
    assert sorted(after) == list(range(1, stopped + 5))  # each step once
    assert after[stopped + 1] == restored_level  # not back to start_level
    assert after[stopped + 4] == 3  # the top level, and no further
    assert f"curriculum levels restored at step {stopped}: sum_digits {restored_level}/3" in resumed.stdout
    # the fixed eval never moved: the target difficulty at step 0 and at the end
    first = json.loads((run / "eval_results/eval_step_0.json").read_text())
    final = json.loads((run / f"eval_results/eval_step_{stopped + 4}.json").read_text())
    assert [e["question"] for e in first["examples"]] == [e["question"] for e in final["examples"]]
    report = (run / "report.md").read_text()
    assert "![Curriculum level per task](curriculum.png)" in report and (run / "curriculum.png").is_file()
    assert "curriculum levels (first -> last logged): sum_digits 0 -> 3" in report


def test_two_processes_hold_the_same_levels_and_share_the_per_level_eval(tmp_path):
    """Each rank draws 8 of the 16 completions a step; the levels follow all 16 (gathered), and the logged
    level, averaged over the ranks by TRL, is a whole number at every step (the ranks agree). The eval's
    per-level sets (2 problems at each of levels 0..3) are split over the ranks like the fixed set."""
    cmd = [
        *accelerate_launch(),
        *CURRICULUM,
        "max_steps=5",
        "grpo.per_device_train_batch_size=8",
        "grpo.save_strategy=no",
        "dataset.curriculum.eval_per_level=2",
        f"output_root={tmp_path}",
        "run_name=ddp",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "ddp"
    assert levels(run) == {s: expected_level(s) for s in range(1, 6)}

    level_keys = {f"level/sum_digits/{lv}/accuracy" for lv in range(4)}
    first, final = (json.loads((run / f"eval_results/eval_step_{s}.json").read_text()) for s in (0, 5))
    for ev in (first, final):
        assert ev["metrics"]["num_examples"] == 4  # the headline is the fixed set's alone
        marks = sorted(e.get("eval_level", -1) for e in ev["examples"] if e.get("eval_set") is None)
        assert marks == [-1] * 4 + [0, 0, 1, 1, 2, 2, 3, 3]  # (the transfer set's rows are apart)
        assert {k for k in ev["metrics"] if k.startswith("level/")} == level_keys
        for lv in range(4):
            on_level = [e["correct"] for e in ev["examples"] if e.get("eval_level") == lv]
            assert ev["metrics"][f"level/sum_digits/{lv}/accuracy"] == sum(on_level) / 2
    assert [e["question"] for e in first["examples"]] == [e["question"] for e in final["examples"]]
    logged = [r for r in read_jsonl(run / "metrics.jsonl") if r.get("split") == "eval"]
    assert {r["step"] for r in logged if "eval/level/sum_digits/3/accuracy" in r} == {0, 5}
    report = (run / "report.md").read_text()
    assert "## Accuracy per curriculum level" in report and "| sum_digits | 3 |" in report
