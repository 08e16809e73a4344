"""train_grpo.py with tools=, as a user runs it: training's rollouts go through TRL's tool loop and the fixed
eval through the same loop, each turn recorded; a model whose template cannot call tools is refused in one
line before anything is written. The tiny random model never calls a tool by itself: the scripted run makes
its generate write a python call, then the answer it read (tests/scripted/sitecustomize.py)."""

import json
import os
import subprocess

import pytest

from tests.conftest import ROOT, SCRIPTED_TOOL_ENV, accelerate_launch, read_jsonl, run_train

pytestmark = pytest.mark.slow
TINY = ["model=tiny_random", "eval.size=4", "dataset.train_size=16", "max_steps=2"]


def test_a_python_tool_run_goes_through_the_tool_loop_in_training_and_eval(tmp_path):
    proc = run_train(
        *TINY,
        "tools=python",
        "grpo.max_completion_length=160",
        f"output_root={tmp_path}",
        "run_name=tools",
        env=SCRIPTED_TOOL_ENV,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "tools"
    train = [m for m in read_jsonl(run_dir / "metrics.jsonl") if "train/tools/call_frequency" in m]
    assert len(train) == 2 and all(m["train/tools/call_frequency"] == 1.0 for m in train)  # TRL's loop ran
    for step in (0, 2):
        result = json.loads((run_dir / f"eval_results/eval_step_{step}.json").read_text())
        metrics = result["metrics"]
        assert metrics["tools/calls_per_problem"] == 1.0 and metrics["tools/used"] == 1.0
        assert metrics["tools/accuracy_with_tool"] == metrics["accuracy"] == 1.0
        example = result["examples"][0]
        assert [t["role"] for t in example["turns"]] == ["assistant", "tool", "assistant"]
        assert example["turns"][0]["tool_calls"][0]["function"]["name"] == "python"
        assert example["turns"][1]["content"] == example["answer"]  # what the sandbox printed
        assert example["completion"] == f"[ANSWER] {example['answer']}"
        assert example["tool_calls"] == 1 and example["tool_errors"] == 0
    assert "tools: python; tool-calling turns per rollout: 2" in proc.stdout + proc.stderr
    assert (run_dir / "final/model.safetensors").is_file()


@pytest.mark.parametrize("group", ["tools=python", "env=feedback"])
def test_a_model_that_cannot_call_tools_is_refused_in_one_line(tmp_path, group):
    proc = run_train(*TINY, group, "model.tool_chat_template=null", f"output_root={tmp_path}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    key, _ = group.split("=")
    assert proc.stderr.strip().splitlines() == [
        (
            f"error: {key}: model 'tiny-random' cannot call tools with its own chat template; set "
            "model.chat_template to one that can, e.g. trl:qwen2_5 (TRL's ChatML template with tool calls, "
            f"for ChatML models such as SmolLM2), or {key}=none"
        )
    ]
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_the_calculator_composes_with_a_random_model_that_never_calls_it(tmp_path):
    proc = run_train(*TINY, "tools=calculator", "max_steps=1", f"output_root={tmp_path}", "run_name=calc")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "calc/eval_results/eval_step_1.json").read_text())
    assert result["metrics"]["tools/used"] == 0.0 and "tools/accuracy_without_tool" in result["metrics"]
    assert all(len(e["turns"]) == 1 for e in result["examples"])


def test_a_python_session_run_goes_through_trl_environment_factory_in_training_and_eval(tmp_path):
    proc = run_train(
        *TINY,
        "env=python_session",
        "max_steps=1",
        "log_samples_every=1",
        "+dataset.rewards.tool_format.weight=0.1",
        "+dataset.rewards.tool_errors.weight=0.1",
        "grpo.max_completion_length=160",
        f"output_root={tmp_path}",
        "run_name=session",
        env=SCRIPTED_TOOL_ENV,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "session"
    train = [m for m in read_jsonl(run_dir / "metrics.jsonl") if "train/tools/call_frequency" in m]
    assert train and train[0]["train/tools/call_frequency"] == 1.0  # TRL's loop ran the session's tool
    assert (
        train[0]["train/rewards/tool_format/mean"] == 1.0 and train[0]["train/rewards/tool_errors/mean"] == 0
    )
    result = json.loads((run_dir / "eval_results/eval_step_1.json").read_text())
    assert result["metrics"]["tools/used"] == 1.0 and result["metrics"]["accuracy"] == 1.0
    example = result["examples"][0]
    assert [t["role"] for t in example["turns"]] == ["assistant", "tool", "assistant"]
    sample = read_jsonl(run_dir / "samples.jsonl")[0]
    assert [t["role"] for t in sample["turns"]] == ["assistant", "tool", "assistant"]
    assert sample["tool_calls"] == 1 and sample["rewards"]["tool_format"] == 1.0
    report = (run_dir / "report.md").read_text()
    assert "## Tool use" in report and "-> calls `python(code=" in report
    assert "environment: python_session; tool-calling turns per rollout: 3" in proc.stdout + proc.stderr


def test_an_environment_and_a_tool_of_the_same_name_are_refused_in_one_line(tmp_path):
    proc = run_train(*TINY, "env=python_session", "tools=python", f"output_root={tmp_path}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and "keep one (tools=none, or env=none)" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_tools_under_two_process_ddp_count_each_rollout_once(tmp_path):
    """Two CPU processes (accelerate, DDP): each runs TRL's tool loop on its own share of the rollouts and of
    the fixed eval; the eval's shards are gathered with their turns, and training's tool metrics count both
    processes' rollouts."""
    cmd = [
        *accelerate_launch(),
        *TINY,
        "eval.size=6",  # 3 problems a rank
        "tools=python",
        "grpo.max_completion_length=160",
        "grpo.per_device_train_batch_size=8",
        f"output_root={tmp_path}",
        "run_name=ddp_tools",
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, **SCRIPTED_TOOL_ENV}
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "ddp_tools"
    assert "cpu x2, DDP" in (run_dir / "train.log").read_text()
    train = [m for m in read_jsonl(run_dir / "metrics.jsonl") if "train/tools/call_frequency" in m]
    assert [m["step"] for m in train] == [1, 2]  # logged once per step, not once per process
    assert all(m["train/tools/call_frequency"] == 1.0 and m["train/reward"] > 0 for m in train)
    result = json.loads((run_dir / "eval_results/eval_step_2.json").read_text())
    fixed = [e for e in result["examples"] if e.get("eval_set") is None]
    assert sorted(e["index"] for e in fixed) == list(range(6))  # both ranks' shards, each problem once
    assert all(e["tool_calls"] == 1 and e["turns"][1]["content"] == e["answer"] for e in fixed)
    assert result["metrics"]["tools/calls_per_problem"] == 1.0 and result["metrics"]["accuracy"] == 1.0


def test_a_sandbox_that_cannot_run_code_stops_a_python_tool_run_in_one_line(tmp_path):
    """Otherwise every tool call would answer the same error for the whole run (every reward -1)."""
    broken = 'sandbox.languages={python: {command: [/nonexistent/python3, "{file}"]}}'
    proc = run_train(*TINY, "tools=python", broken, f"output_root={tmp_path}", "run_name=broken")
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        (
            "error: sandbox: cannot run a program on this machine: "
            "interpreter '/nonexistent/python3' for language 'python' not found on PATH"
        )
    ]
