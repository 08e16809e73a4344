"""Faults never cost a run (README "When things go wrong"): a reward that fails in any way, a crash inside
a training step and a full disk while saving each end as described there, with one line on the console
and nothing earlier lost. The damaged-checkpoint cases are in test_checkpoint_faults.py."""

import json
import re

import pytest

from grpo_recipes.outputs.logs import eval_files
from tests.conftest import ROOT, read_jsonl, run_train

TINY = ["model=tiny_random", "eval.size=4", "grpo.max_completion_length=8", "run_name=r"]
FAULTS = {"PYTHONPATH": str(ROOT / "tests" / "faults")}  # its sitecustomize injects the faults


def reward(key: str, fn: str) -> str:
    return f"dataset.rewards.{key}={{fn: tests.fault_rewards.{fn}, weight: 0.1}}"


def train_steps(run) -> list[int]:
    return [r["step"] for r in read_jsonl(run / "metrics.jsonl") if "train/reward" in r]


def test_each_way_a_reward_fails_costs_only_its_scores(tmp_path):
    """A reward that raises on some batches, returns the wrong number of scores, returns NaN or hangs: the run
    finishes; each failing call scores None (the other rewards still count), is counted in
    rewards/<name>/errors and kept in reward_errors.jsonl, and the first failure of each is one warning."""
    failing = {"sevens": "raises_on_sevens", "short": "wrong_length", "nan": "nan", "hang": "hangs"}
    out = run_train(
        *TINY,
        "max_steps=3",
        f"output_root={tmp_path}",
        *(reward(k, fn) for k, fn in failing.items()),
        "grpo.reward_timeout=0.5",
        "grpo.reward_errors_stop_at=1.0",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stdout + out.stderr
    run = tmp_path / "r"
    assert train_steps(run) == [1, 2, 3]
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if "train/reward" in r]
    assert all(r["train/rewards/accuracy/mean"] is not None for r in rows)  # the others still count
    for key in ("short", "hang"):  # every call failed: no score at all, an error share of 1
        assert all(r[f"train/rewards/{key}/mean"] is None for r in rows)
        assert all(r[f"train/rewards/{key}/errors"] == 1 for r in rows)
    assert all(r["train/rewards/nan/mean"] == 0.0 and r["train/rewards/nan/errors"] == 1 for r in rows)
    errors = read_jsonl(run / "reward_errors.jsonl")
    first = {}
    for e in errors:
        first.setdefault(e["reward"], e)
    assert first["short"]["error"].startswith("returned 1 scores for ")
    assert first["hang"]["error"] == "RewardTimeout: took longer than grpo.reward_timeout=0.5 s"
    assert first["nan"]["error"].startswith("returned nan for 1 of ") and "completion" in first["nan"]
    # every train call of these three failed, and the fixed eval's twice (steps 0 and 3)
    assert sum(e["reward"] == "short" and e["split"] == "train" for e in errors) == 3
    assert sum(e["reward"] == "short" and e["split"] == "eval" for e in errors) == 2
    if "sevens" in first:  # sampled text contains a 7 on most batches: the first keeps where and why
        assert first["sevens"]["error"] == "KeyError: '7'" and "7" in first["sevens"]["completion"]
        assert "raise KeyError" in first["sevens"]["traceback"]
    for key in first:
        assert out.stdout.count(f"reward '{key}' failed (") == 1


def test_scores_reach_trl_as_floats_and_an_async_reward_runs(tmp_path):
    """In-process, the guard alone: numeric strings would crash TRL's float tensor, so they fail the call; a
    numpy or 0-d torch number is a score; an `async def` reward (which TRL runs natively) is awaited."""
    import numpy as np
    import torch

    from rewards.guard import RewardFaults

    faults = RewardFaults(tmp_path / "errors.jsonl")
    call = {"completions": ["a", "b"], "prompts": ["p", "p"]}

    async def later(completions, **kwargs):
        return [1, 0.5]

    assert faults.call(later, "later", call) == [1.0, 0.5]
    assert faults.call(lambda completions, **k: ["1.0", 2], "strings", call) == [None, 2.0]
    assert faults.call(lambda completions, **k: [np.float32(0.25), torch.tensor(1)], "np", call) == [
        0.25,
        1.0,
    ]
    errors = read_jsonl(tmp_path / "errors.jsonl")
    assert [(e["reward"], e["error"]) for e in errors] == [
        ("strings", "returned '1.0' for 1 of 2 completions")
    ]


def test_a_reward_that_keeps_failing_stops_the_run_as_a_signal_would(tmp_path):
    out = run_train(
        *TINY,
        "max_steps=20",
        "grpo.save_steps=50",
        f"output_root={tmp_path}",
        reward("boom", "raises"),
        "grpo.reward_errors_window=3",
    )
    assert out.returncode == 1, out.stderr[-3000:]
    assert "Traceback" not in out.stdout + out.stderr
    run = tmp_path / "r"
    assert (run / "checkpoint-3").is_dir() and not (run / "train_results.json").exists()
    assert train_steps(run) == [1, 2, 3]
    stop = [line for line in out.stdout.splitlines() if "Stopping: " in line]
    assert len(stop) == 1 and "reward 'boom' failed 3 of 3 calls over the last 3 steps" in stop[0]
    assert "ValueError: a bug in the user's reward" in stop[0]
    assert "resume=true" in out.stdout and (run / "report.md").is_file()
    first = read_jsonl(run / "reward_errors.jsonl")[0]
    assert first["split"] == "eval" and "raise ValueError" in first["traceback"] and first["completion"]


def test_a_resume_after_a_hard_kill_drops_the_evals_past_its_checkpoint(tmp_path):
    """Killed at step 6 (evals 0-5 written, checkpoint-3 the last), then resumed to max_steps=4: the evals
    of steps 4 and 5 belonged to the discarded steps; left, the report would call step 5 the final eval."""
    args = [*TINY, f"output_root={tmp_path}", "grpo.save_steps=3", "eval.every_n_steps=1"]
    killed = run_train(*args, "max_steps=8", reward("kill", "killed_in_step_6"))
    assert killed.returncode in (-9, 137), killed.stderr[-3000:]
    run = tmp_path / "r"
    assert list(eval_files(run)) == [0, 1, 2, 3, 4, 5] and (run / "checkpoint-3").is_dir()
    resumed = run_train(*args, "max_steps=4", "resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "metric lines and 2 eval files after step 3 dropped" in resumed.stdout
    assert list(eval_files(run)) == [0, 1, 2, 3, 4]
    assert json.loads((run / "train_results.json").read_text())["final_eval_step"] == 4
    assert re.search(r"% at step 0 -> [\d.]+% at step 4\*\*", (run / "report.md").read_text())


def test_a_reward_whose_signature_cannot_take_trls_call_is_refused_before_loading(tmp_path):
    out = run_train(*TINY, f"output_root={tmp_path}", reward("mine", "impossible"))
    assert out.returncode == 2
    assert out.stderr.startswith("error: dataset.rewards.mine: impossible(completions, solution) cannot take")
    assert "'solution'" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_crash_inside_a_step_saves_the_last_completed_one_and_resumes(tmp_path):
    args = [*TINY, "max_steps=5", "grpo.save_steps=50", f"output_root={tmp_path}"]
    out = run_train(*args, env={**FAULTS, "FAULT_RAISE_IN_BACKWARD": "3"})
    assert out.returncode == 1
    assert "Traceback" not in out.stdout + out.stderr
    run = tmp_path / "r"
    failed = [line for line in out.stdout.splitlines() if "Training failed in step 3" in line]
    assert len(failed) == 1 and "RuntimeError: CUDA out of memory (injected" in failed[0]
    assert "checkpoint-2 saved (the last completed step)" in failed[0] and failed[0].endswith("resume=true")
    assert (run / "checkpoint-2").is_dir() and "Traceback" in (run / "train.log").read_text()
    again = run_train(*args, "resume=true")
    assert again.returncode == 0, again.stderr[-3000:]
    assert train_steps(run) == [1, 2, 3, 4, 5]  # nothing logged twice, nothing lost


@pytest.mark.slow
def test_a_full_disk_while_saving_stops_in_one_line_and_keeps_the_earlier_checkpoint(tmp_path):
    args = [*TINY, "max_steps=4", "grpo.save_steps=2", f"output_root={tmp_path}"]
    out = run_train(*args, env={**FAULTS, "FAULT_ENOSPC_ON_SAVE": "optimizer.pt@2"})  # checkpoint-4's
    assert out.returncode == 1
    assert "Traceback" not in out.stdout + out.stderr
    run = tmp_path / "r"
    said = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(said) == 1 and said[0].startswith("error: no space left on the device writing ")
    assert "optimizer.pt" in said[0] and "MiB free there" in said[0] and said[0].endswith("resume=true")
    assert (run / "checkpoint-2" / "optimizer.pt").is_file() and not (run / "checkpoint-4").exists()
    assert not (run / ".saving").exists()  # the cut-short save's space is given back
    again = run_train(*args, "max_steps=6", "resume=true")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Resuming from" in again.stdout and "checkpoint-2" in again.stdout
    assert train_steps(run) == [1, 2, 3, 4, 5, 6]
    assert json.loads((run / "train_results.json").read_text())["final_eval_step"] == 6


@pytest.mark.parametrize(
    "error",
    [
        OSError(28, "No space left on device", "RUN/metrics.jsonl"),  # an append to the metrics
        OSError(28, "No space left on device", "RUN/report.md"),  # the report
        RuntimeError(
            "[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file "
            "data/3: file write failed"
        ),  # torch.save's zip writer names no errno
        RuntimeError("Error while serializing: IoError(Os { code: 28, kind: StorageFull })"),  # safetensors
    ],
)
def test_a_full_disk_is_one_line_whichever_writer_hit_it(error, tmp_path, monkeypatch, capsys):
    import collections
    import shutil

    from grpo_recipes.train.stopping import full_disk

    run = tmp_path / "r"
    (run / ".saving" / "checkpoint-4").mkdir(parents=True)
    if isinstance(error, OSError):
        error.filename = error.filename.replace("RUN", str(run))
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10 * 2**30, 10 * 2**30 - 2**20, 2**20))
    cfg = {"output_dir": str(run), "output_root": str(tmp_path), "run_name": "r"}
    assert full_disk(error, cfg)
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith(f"error: no space left on the device writing {run}")
    assert "(1 MiB free there)" in said[0] and said[0].endswith(
        f"run_name=r output_root={tmp_path} resume=true"
    )
    assert not (run / ".saving").exists()  # the cut-short save's space is given back
    assert not full_disk(ValueError("not a disk"), cfg)
