"""train_grpo.py run as a user would: a subprocess, overrides on the command line, real files."""

import json
import re

import pytest

from tests.conftest import read_jsonl, run_train

pytestmark = pytest.mark.slow
TINY = ["model=tiny_random", "eval.size=4", "grpo.max_completion_length=8"]


@pytest.fixture(scope="module")
def embedded_run(tmp_path_factory):
    """2 training steps on the embedded SmolLM2-135M, with an eval at every step."""
    root = tmp_path_factory.mktemp("outputs")
    proc = run_train(
        "max_steps=2",
        f"output_root={root}",
        "eval.size=8",
        "eval.every_n_steps=1",
        "grpo.max_completion_length=16",
        "grpo.save_steps=1",
        "dataset.train_size=64",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root / "arithmetic-smollm2-135m", proc


def test_embedded_run_writes_every_output(embedded_run):
    run_dir, _ = embedded_run
    for name in [
        "config.yaml",
        "train.log",
        "metrics.jsonl",
        "train_results.json",
        "eval_results/eval_step_0.json",
        "eval_results/eval_step_1.json",
        "eval_results/eval_step_2.json",
        "checkpoint-2/model.safetensors",
        "checkpoint-2/optimizer.pt",
        "checkpoint-2/trainer_state.json",
        "final/model.safetensors",
        "final/config.json",
        "final/tokenizer.json",
        "final/chat_template.jinja",
    ]:
        assert (run_dir / name).is_file(), name


def test_embedded_run_json_fields(embedded_run):
    run_dir, _ = embedded_run
    results = json.loads((run_dir / "train_results.json").read_text())
    assert {"baseline_eval_accuracy", "final_eval_accuracy", "train_runtime", "final_eval_step"} <= set(
        results
    )
    assert results["final_eval_step"] == 2
    evals = {s: json.loads((run_dir / f"eval_results/eval_step_{s}.json").read_text()) for s in (0, 1, 2)}
    assert results["baseline_eval_accuracy"] == evals[0]["metrics"]["accuracy"]
    assert results["final_eval_accuracy"] == evals[2]["metrics"]["accuracy"]
    for step, ev in evals.items():
        fixed = [e for e in ev["examples"] if "eval_set" not in e]
        # the transfer set (3-term additions) is scored at the first and the last eval only, apart
        transfer = [e for e in ev["examples"] if e.get("eval_set") == "transfer"]
        assert ev["step"] == step and len(fixed) == 8 and len(transfer) == (0 if step == 1 else 8)
        assert ("transfer/accuracy" in ev["metrics"]) == (step != 1)
        assert 0.0 <= ev["metrics"]["accuracy"] <= 1.0
        assert ev["metrics"]["basic_arithmetic/accuracy"] == ev["metrics"]["accuracy"]
        for e in fixed:
            assert e["task"] == "basic_arithmetic" and re.fullmatch(r"Calculate \d+ \+ \d+\.", e["question"])
            assert e["correct"] == (e["score"] >= 1.0)
            assert e["correct"] == (e["extracted"] == e["answer"])
            assert 1 <= e["length"] <= 16
    # the same problems at every eval
    assert [e["question"] for e in evals[0]["examples"]] == [e["question"] for e in evals[2]["examples"]]


def test_embedded_run_metrics_and_log(embedded_run):
    run_dir, _proc = embedded_run
    lines = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in lines if r["split"] == "eval"] == [0, 1, 2]
    train = [r for r in lines if r["split"] == "train" and "train/reward" in r]
    assert [r["step"] for r in train] == [1, 2]
    for r in train:
        assert {
            "train/rewards/accuracy/mean",
            "train/rewards/format/mean",
            "train/completions/mean_length",
            "train/loss",
            "train/accuracy/basic_arithmetic",
            "train/groups/reward_varied",
        } <= set(r)
    log = (run_dir / "train.log").read_text()
    assert "[eval step 0] accuracy" in log and "step 2/2 | reward" in log and "Fixed eval accuracy" in log
    assert "\r" not in log
    # CPU: scores completion positions only (completion_head.py)
    assert "completion-only log-prob head" in log
    # on, in the embedded model's run
    assert "each distinct prompt once, completions packed in the training passes," in log
    config = (run_dir / "config.yaml").read_text()
    assert "max_steps: 2" in config and "path: embedded:smollm2-135m-instruct" in config


def test_rerun_same_run_name_refuses_and_keeps_the_run(embedded_run):
    run_dir, _ = embedded_run
    before = (run_dir / "metrics.jsonl").read_text()
    proc = run_train("max_steps=2", f"output_root={run_dir.parent}")
    assert proc.returncode == 2
    assert "already holds a run: pass resume=true" in proc.stderr
    assert (run_dir / "metrics.jsonl").read_text() == before


def test_override_run(tmp_path):
    proc = run_train(
        *TINY,
        f"output_root={tmp_path}",
        "dataset=sum_digits",
        "run_name=my_run",
        "max_steps=1",
        "learning_rate=5e-6",
        "seed=3",
        "grpo.num_generations=4",
        "grpo.per_device_train_batch_size=8",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = tmp_path / "my_run"
    config = (run_dir / "config.yaml").read_text()
    for expected in ["learning_rate: 5.0e-06", "seed: 3", "num_generations: 4", "name: sum_digits"]:
        assert expected in config
    ev = json.loads((run_dir / "eval_results/eval_step_0.json").read_text())
    assert {e["task"] for e in ev["examples"]} == {"sum_digits"}
    args = json.loads((run_dir / "final/config.json").read_text())
    assert args["hidden_size"] == 32  # the tiny model was trained, not the default


def test_two_by_two_multirun_gives_each_job_its_own_dir_and_a_ranked_summary(tmp_path):
    proc = run_train(
        *TINY,
        f"output_root={tmp_path}",
        "max_steps=1",
        "run_name=sweep",
        "-m",
        "seed=1,2",
        "learning_rate=1e-5,2e-5",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sweep = tmp_path / "sweep-sweep"
    jobs = sorted((j for j in sweep.iterdir() if j.is_dir()), key=lambda j: j.name)
    assert [j.name for j in jobs] == ["0", "1", "2", "3"]
    configs = [(j / "config.yaml").read_text() for j in jobs]
    points = {
        (
            re.search(r"^seed: (\d+)", c, re.MULTILINE).group(1),
            re.search(r"^learning_rate: (\S+)", c, re.MULTILINE).group(1),
        )
        for c in configs
    }
    assert points == {("1", "1.0e-05"), ("2", "1.0e-05"), ("1", "2.0e-05"), ("2", "2.0e-05")}
    for j in jobs:
        assert (j / "train_results.json").is_file() and (j / "eval_results/eval_step_1.json").is_file()
        assert (j / "report.md").is_file()
    summary = (sweep / "summary.md").read_text()
    assert summary.count("| finished |") == 4 and "`seed=1 learning_rate=2e-05`" in summary
    accuracies = [
        float(row.split("|")[4].strip().rstrip("%"))
        for row in summary.splitlines()
        if row.startswith("| ") and row[2].isdigit()
    ]
    assert accuracies == sorted(accuracies, reverse=True)


def test_cfg_job_prints_the_config_and_runs_nothing(tmp_path):
    proc = run_train("--cfg", "job", "max_steps=5", f"output_root={tmp_path}")
    assert proc.returncode == 0 and "max_steps: 5" in proc.stdout and "basic_arithmetic:" in proc.stdout
    assert not any(tmp_path.iterdir())


def _without_timing(metrics):
    """The eval's own numbers: not its time, nor what it says in its run (eval_only is a run's first eval,
    which scores the chance line; a trained run's later evals check for reward hacking)."""
    run_context = ("seconds", "reward_hacking")
    return {k: v for k, v in metrics.items() if k not in run_context and not k.startswith("chance/")}


def test_eval_only_on_the_final_model_reproduces_the_final_eval(embedded_run, tmp_path):
    run_dir, _ = embedded_run
    proc = run_train(
        "eval_only=true",
        f"model={run_dir}/final",
        f"output_root={tmp_path}",
        "run_name=final_eval",
        "eval.size=8",
        "grpo.max_completion_length=16",
        # a fresh interpreter, not a fork of the test's fork server: set order may not carry the result
        env={"PYTHONHASHSEED": "random"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trained = json.loads((run_dir / "eval_results/eval_step_2.json").read_text())
    again = json.loads((tmp_path / "final_eval/eval_results/eval_step_2.json").read_text())
    assert again["step"] == 2
    assert _without_timing(again["metrics"]) == _without_timing(trained["metrics"])
    assert [e["completion"] for e in again["examples"]] == [e["completion"] for e in trained["examples"]]
    assert (tmp_path / "final_eval/report.md").is_file()
    assert not (tmp_path / "final_eval/checkpoint-2").exists()


def test_eval_only_on_the_base_model_reproduces_the_baseline(embedded_run, tmp_path):
    run_dir, _ = embedded_run
    proc = run_train(
        "eval_only=true",
        f"output_root={tmp_path}",
        "run_name=base_eval",
        "eval.size=8",
        "grpo.max_completion_length=16",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    baseline = json.loads((run_dir / "eval_results/eval_step_0.json").read_text())
    again = json.loads((tmp_path / "base_eval/eval_results/eval_step_0.json").read_text())
    assert [e["completion"] for e in again["examples"]] == [e["completion"] for e in baseline["examples"]]
    lines = read_jsonl(tmp_path / "base_eval/metrics.jsonl")
    assert len(lines) == 1 and lines[0]["eval/accuracy"] == baseline["metrics"]["accuracy"]


def test_tensorboard_logger_writes_the_same_metric_names(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    proc = run_train(*TINY, f"output_root={tmp_path}", "max_steps=2", "logger=tensorboard", "run_name=tb")
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = EventAccumulator(str(tmp_path / "tb/tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {
        "eval/accuracy",
        "eval/basic_arithmetic/accuracy",
        "train/reward",
        "train/rewards/accuracy/mean",
        "train/accuracy/basic_arithmetic",
        "train/groups/reward_varied",
    } <= tags
    assert [e.step for e in events.Scalars("eval/accuracy")] == [0, 2]
    jsonl_names = {k for r in read_jsonl(tmp_path / "tb/metrics.jsonl") for k in r if "/" in k}
    assert {"eval/accuracy", "train/reward", "train/groups/reward_varied"} <= jsonl_names


def test_wandb_offline_logger_gives_each_sweep_job_its_own_run(tmp_path):
    proc = run_train(
        *TINY,
        f"output_root={tmp_path}",
        "max_steps=1",
        "logger=wandb",
        "run_name=wb",
        "-m",
        "seed=1,2",
        env={"WANDB_MODE": "offline"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for job in ("0", "1"):
        runs = list((tmp_path / "wb-sweep" / job / "wandb").glob("offline-run-*/run-*.wandb"))
        assert len(runs) == 1
        # the offline log holds its protobuf records uncompressed: the metric names appear as bytes
        data = runs[0].read_bytes()
        for name in (b"eval/accuracy", b"train/reward", b"train/groups/reward_varied"):
            assert name in data
        assert b"eval_accuracy" not in data


def test_a_question_answer_file_trains_from_the_command_line(tmp_path):
    rows = [
        {"question": f"What is {a} plus {b}?", "answer": f"{a} + {b} = {a + b}\n#### {a + b:,}"}
        for a, b in [(1000, 500), (3, 4), (12, 30), (7, 8), (900, 200), (5, 5)]
    ]
    path = tmp_path / "gsm.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run_train(
        *TINY,
        f"output_root={tmp_path}",
        "dataset=qa_file",
        f"dataset.tasks.qa_file.config.path={path}",
        "eval.size=2",
        "max_steps=1",
        "run_name=qa",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ev = json.loads((tmp_path / "qa" / "eval_results" / "eval_step_1.json").read_text())
    answers = {str(a + b) for a, b in [(1000, 500), (3, 4), (12, 30), (7, 8), (900, 200), (5, 5)]}
    assert len(ev["examples"]) == 2 and all(
        e["task"] == "qa_file" and e["answer"] in answers for e in ev["examples"]
    )


def test_humaneval_evaluates_from_the_command_line(tmp_path):
    proc = run_train(
        *TINY, f"output_root={tmp_path}", "dataset=humaneval", "eval_only=true", "eval.size=3", "run_name=he"
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "model-written code runs in the sandbox" in proc.stdout + proc.stderr
    (path,) = (tmp_path / "he" / "eval_results").glob("eval_step_*.json")
    ev = json.loads(path.read_text())
    assert len(ev["examples"]) == 3
    for e in ev["examples"]:
        assert e["task"] == "humaneval" and e["question"].startswith("Complete this Python function")
        assert e["rule"] in ("answer_tag", "fenced", "raw", "none") and 0.0 <= e["score"] <= 1.0
