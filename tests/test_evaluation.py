import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from grpo_recipes.evaluation import FixedEvaluator, summarize
from tests.conftest import read_jsonl

CONFIG = Path(__file__).resolve().parents[1] / "config"


def example(task, correct, score, fmt, length, rule="tag"):
    return {"task": task, "correct": correct, "score": score, "format_ok": fmt, "length": length, "rule": rule,
            "truncated": False}


def test_summarize_overall_and_per_task():
    rows = [example("a", True, 1.0, True, 10), example("a", False, 0.5, False, 20, "last_number"),
            example("b", True, 1.0, True, 30), example("b", False, 0.0, True, 40, "none")]
    m = summarize(rows)
    assert m["num_examples"] == 4
    assert m["accuracy"] == 0.5 and m["mean_score"] == 0.625 and m["format"] == 0.75 and m["mean_length"] == 25
    assert m["a/accuracy"] == 0.5 and m["a/mean_score"] == 0.75 and m["b/format"] == 1.0 and m["b/mean_length"] == 35
    assert m["rule/tag"] == 0.5 and m["rule/last_number"] == 0.25 and m["rule/none"] == 0.25
    assert m["b/rule/none"] == 0.5 and m["a/rule/phrase"] == 0.0


def eval_rows(n=12):
    from grpo_recipes.data import build_datasets

    ds = {"tasks": {"sum_digits": {}, "reverse_digits": {}}, "prompt_format": "answer_tag", "system_prompt": None,
          "train_size": 50, "seed": 1}
    taskset, _, rows = build_datasets(ds, {"size": n // 2, "seed": 7})
    return taskset, rows


def test_batched_greedy_generation_equals_one_at_a_time(tiny):
    model, tokenizer = tiny
    taskset, rows = eval_rows()
    batched = FixedEvaluator(rows, taskset, tokenizer, "answer_tag", max_new_tokens=12, batch_size=12)
    single = FixedEvaluator(rows, taskset, tokenizer, "answer_tag", max_new_tokens=12, batch_size=1)
    indices = list(range(len(rows)))
    a, b = batched.generate(model, indices), single.generate(model, indices)
    assert [x[0] for x in a] == [x[0] for x in b]
    assert all(1 <= length <= 12 for _, length, _ in a)


def test_score_uses_the_extraction_chain_and_the_verifier(tiny):
    _, tokenizer = tiny
    taskset, rows = eval_rows()
    ev = FixedEvaluator(rows, taskset, tokenizer, "answer_tag", max_new_tokens=8)
    good = ev.score(0, f"work\n[ANSWER] {rows[0]['answer']}", 5, False)
    assert good["correct"] and good["score"] == 1.0 and good["rule"] == "tag" and good["format_ok"]
    bad = ev.score(0, "the answer is -1", 5, True)
    assert not bad["correct"] and bad["rule"] == "phrase" and bad["extracted"] == "-1" and not bad["format_ok"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A 3-step in-process run on the tiny model with an eval every 2 steps."""
    from grpo_recipes.run import train

    out = tmp_path_factory.mktemp("run") / "job"
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG)):
        cfg = compose("train", overrides=["model=tiny_random", "max_steps=3", "eval.size=6", "eval.every_n_steps=2",
                                          "grpo.max_completion_length=8", "grpo.save_steps=2"])
    cfg.output_dir = str(out)
    accuracy = train(cfg)
    return out, cfg, accuracy


def test_eval_runs_at_step_zero_every_n_and_at_the_end(tiny_run):
    out, _, accuracy = tiny_run
    files = sorted(p.name for p in (out / "eval_results").iterdir())
    assert files == ["eval_step_0.json", "eval_step_2.json", "eval_step_3.json"]
    final = json.loads((out / "eval_results" / "eval_step_3.json").read_text())
    assert final["step"] == 3 and final["metrics"]["accuracy"] == accuracy
    assert len(final["examples"]) == 6  # eval.size per task, one task
    assert {"question", "answer", "completion", "extracted", "score", "correct", "task", "rule"} <= set(
        final["examples"][0])
    assert set(final["metrics"]) >= {"accuracy", "mean_score", "format", "mean_length"}


def test_step_zero_eval_is_the_untrained_model(tiny_run, tiny):
    from grpo_recipes.data import build_datasets
    from grpo_recipes.tiny import tiny_model

    out, cfg, _ = tiny_run
    container = OmegaConf.to_container(cfg, resolve=True)
    taskset, _, rows = build_datasets(container["dataset"], container["eval"])
    _, tokenizer = tiny
    untrained = tiny_model(tokenizer, seed=container["seed"])
    ev = FixedEvaluator(rows, taskset, tokenizer, "answer_tag", max_new_tokens=8)
    expected = [c for c, _, _ in ev.generate(untrained, list(range(len(rows))))]
    step0 = json.loads((out / "eval_results" / "eval_step_0.json").read_text())
    assert [e["completion"] for e in step0["examples"]] == expected


def test_eval_metrics_reach_metrics_jsonl(tiny_run):
    out, _, _ = tiny_run
    lines = read_jsonl(out / "metrics.jsonl")
    evals = [(r["step"], r["eval/accuracy"]) for r in lines if r["split"] == "eval"]
    assert [s for s, _ in evals] == [0, 2, 3]
    train_steps = [r["step"] for r in lines if r["split"] == "train" and "reward" in r]
    assert train_steps == [1, 2, 3]
    assert any("rewards/accuracy/mean" in r and "rewards/format/mean" in r for r in lines)
