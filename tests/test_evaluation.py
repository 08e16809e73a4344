import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from grpo_recipes.evaluation.evaluator import FixedEvaluator, rank_shard
from grpo_recipes.evaluation.metrics import summarize
from tests.conftest import declared, read_jsonl

CONFIG = Path(__file__).resolve().parents[1] / "config"


# FixedEvaluator's own keywords; the rest of `given` is the eval group
OWN = (
    "max_new_tokens",
    "response_prefix",
    "rewards",
    "holdout",
    "tools",
    "max_tool_iterations",
    "chat_template_kwargs",
)


def evaluator(rows, taskset, tokenizer, prompt_format="answer_tag", **given):
    """A FixedEvaluator with the eval group's declared defaults (config/knobs.py), `given` over them."""
    own = {k: given.pop(k) for k in OWN if k in given}
    return FixedEvaluator(rows, taskset, tokenizer, prompt_format, {**declared("eval"), **given}, **own)


def example(task, correct, score, fmt, length, rule="tag"):
    return {
        "task": task,
        "correct": correct,
        "score": score,
        "format_ok": fmt,
        "length": length,
        "rule": rule,
        "truncated": False,
    }


def test_summarize_overall_and_per_task():
    rows = [
        example("a", True, 1.0, True, 10),
        example("a", False, 0.5, False, 20, "last_number"),
        example("b", True, 1.0, True, 30),
        example("b", False, 0.0, True, 40, "none"),
    ]
    m = summarize(rows, "plain")
    assert m["num_examples"] == 4
    assert (
        m["accuracy"] == 0.5 and m["mean_score"] == 0.625 and m["format"] == 0.75 and m["mean_length"] == 25
    )
    assert (
        m["a/accuracy"] == 0.5
        and m["a/mean_score"] == 0.75
        and m["b/format"] == 1.0
        and m["b/mean_length"] == 35
    )
    assert m["rule/tag"] == 0.5 and m["rule/last_number"] == 0.25 and m["rule/none"] == 0.25
    assert m["b/rule/none"] == 0.5 and m["a/rule/phrase"] == 0.0


def test_per_level_rows_are_reported_apart_from_the_fixed_eval():
    fixed = [example("a", True, 1.0, True, 10), example("a", False, 0.0, True, 10)]
    leveled = [
        {**example("a", True, 1.0, True, 10), "eval_level": 0},
        {**example("a", True, 1.0, True, 10), "eval_level": 0},
        {**example("a", False, 0.0, False, 90), "eval_level": 1},
        {**example("a", True, 1.0, False, 90), "eval_level": 1},
        {**example("a", False, 0.0, False, 90), "eval_level": 1},
        {**example("a", False, 0.0, False, 90), "eval_level": 1},
    ]
    m = summarize(fixed + leveled, "plain")
    assert m == {**summarize(fixed, "plain"), "level/a/0/accuracy": 1.0, "level/a/1/accuracy": 0.25}
    assert m["num_examples"] == 2 and m["accuracy"] == 0.5 and m["format"] == 1.0


@pytest.mark.parametrize("world", [1, 2, 3])
def test_rank_shards_cover_every_index_in_equal_counts(world):
    indices = [4, 5, 6, 7, 8]
    shards = [rank_shard(indices, rank, world) for rank in range(world)]
    assert len({len(s) for s in shards}) == 1  # collective generation: the same count on every rank
    assert sorted(set().union(*shards)) == indices
    assert rank_shard([], 0, world) == []


def eval_rows(n=12):
    from grpo_recipes.train.data import build_datasets

    tasks = {"sum_digits": {}, "reverse_digits": {}}
    ds = declared("dataset", tasks=tasks, prompt_format="answer_tag", train_size=50, seed=1)
    taskset, _, rows = build_datasets(ds, declared("eval", size=n // 2, seed=7))
    return taskset, rows


def test_batched_greedy_generation_equals_one_at_a_time(tiny):
    model, tokenizer = tiny
    taskset, rows = eval_rows()
    batched = evaluator(rows, taskset, tokenizer, max_new_tokens=12, batch_size=12)
    single = evaluator(rows, taskset, tokenizer, max_new_tokens=12, batch_size=1)
    indices = list(range(len(rows)))
    a, b = batched.generate(model, indices), single.generate(model, indices)
    assert [x[0] for x in a] == [x[0] for x in b]
    assert all(1 <= length <= 12 and len(ids) == length for _, length, _, ids in a)


def test_score_uses_the_extraction_chain_and_the_verifier(tiny):
    _, tokenizer = tiny
    taskset, rows = eval_rows()
    ev = evaluator(rows, taskset, tokenizer, max_new_tokens=8)
    good, bad = ev.score_batch(
        [0, 0],
        [(f"work\n[ANSWER] {rows[0]['answer']}", 5, False, [1] * 5), ("the answer is -1", 5, True, [1] * 5)],
    )
    assert good["correct"] and good["score"] == 1.0 and good["rule"] == "tag" and good["format_ok"]
    assert (
        not bad["correct"] and bad["rule"] == "phrase" and bad["extracted"] == "-1" and not bad["format_ok"]
    )


def test_eval_reward_is_the_weighted_training_reward(tiny):
    """gsm8k's recipe objective 1[correct] + 0.1 (1[format] - 1), computed by the run's own reward."""
    from rewards import RewardContext, build_rewards

    _, tokenizer = tiny
    taskset, rows = eval_rows()
    ctx = RewardContext(scorer=taskset.score, prompt_format="answer_tag", judge=taskset.judge)
    funcs, weights = build_rewards({"correct_and_format": {"weight": 1.0, "format_weight": 0.1}}, ctx)
    ev = evaluator(rows, taskset, tokenizer, max_new_tokens=8, rewards=zip(funcs, weights))
    right = f"[ANSWER] {rows[0]['answer']}"
    wrong_unformatted = "no idea"
    records = ev.score_batch([0, 1], [(right, 5, False, [1] * 5), (wrong_unformatted, 3, False, [1] * 3)])
    assert [r["reward"] for r in records] == pytest.approx([1.0, -0.1])
    assert summarize(records, "plain")["reward"] == pytest.approx(0.45)
    # without rewards the key is absent, not zero
    plain = evaluator(rows, taskset, tokenizer, max_new_tokens=8)
    assert "reward" not in summarize(plain.score_batch([0], [(right, 5, False, [1] * 5)]), "plain")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A 3-step in-process run on the tiny model with an eval every 2 steps."""
    from grpo_recipes.train.run import train

    out = tmp_path_factory.mktemp("run") / "job"
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG)):
        cfg = compose(
            "train",
            overrides=[
                "model=tiny_random",
                "max_steps=3",
                "eval.size=6",
                "eval.every_n_steps=2",
                "grpo.max_completion_length=8",
                "grpo.save_steps=2",
            ],
        )
    cfg.output_dir = str(out)
    accuracy = train(cfg)
    return out, cfg, accuracy


def test_eval_runs_at_step_zero_every_n_and_at_the_end(tiny_run):
    out, _, accuracy = tiny_run
    files = sorted(p.name for p in (out / "eval_results").iterdir())
    assert files == ["eval_step_0.json", "eval_step_2.json", "eval_step_3.json"]
    final = json.loads((out / "eval_results" / "eval_step_3.json").read_text())
    assert final["step"] == 3 and final["metrics"]["accuracy"] == accuracy
    # eval.size per task, one task; the default's transfer set too (the first and last evals), marked apart
    assert [e.get("eval_set") for e in final["examples"]] == [None] * 6 + ["transfer"] * 6
    middle = json.loads((out / "eval_results" / "eval_step_2.json").read_text())
    assert [e.get("eval_set") for e in middle["examples"]] == [None] * 6
    assert {"question", "answer", "completion", "extracted", "score", "correct", "task", "rule"} <= set(
        final["examples"][0]
    )
    assert set(final["metrics"]) >= {"accuracy", "mean_score", "format", "mean_length"}


def test_step_zero_eval_is_the_untrained_model(tiny_run, tiny):
    from grpo_recipes.models.tiny import tiny_model
    from grpo_recipes.train.data import build_datasets

    out, cfg, _ = tiny_run
    container = OmegaConf.to_container(cfg, resolve=True)
    taskset, _, rows = build_datasets(container["dataset"], container["eval"])
    _, tokenizer = tiny
    import torch

    from grpo_recipes.models.hardware import detect_hardware

    untrained = tiny_model(tokenizer, seed=container["seed"])
    ev = evaluator(rows, taskset, tokenizer, max_new_tokens=8)
    # the run trains (and evaluates) under bf16 autocast where the CPU has native bf16
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=detect_hardware().bf16):
        expected = [c for c, *_ in ev.generate(untrained, list(range(len(rows))))]
    step0 = json.loads((out / "eval_results" / "eval_step_0.json").read_text())
    assert [e["completion"] for e in step0["examples"]] == expected


def test_eval_metrics_reach_metrics_jsonl(tiny_run):
    out, _, _ = tiny_run
    lines = read_jsonl(out / "metrics.jsonl")
    evals = [(r["step"], r["eval/accuracy"]) for r in lines if r["split"] == "eval"]
    assert [s for s, _ in evals] == [0, 2, 3]
    # the default run's rewards (accuracy + 0.2 strict format) on the eval's greedy completions
    assert all(0.0 <= r["eval/reward"] <= 1.2 for r in lines if r["split"] == "eval")
    train = [r for r in lines if r["split"] == "train" and "train/reward" in r]
    assert [r["step"] for r in train] == [1, 2, 3]
    # the names wandb and TensorBoard show: train/<TRL key>, eval/<our key>
    for r in train:
        assert {
            "train/rewards/accuracy/mean",
            "train/rewards/format/mean",
            "train/accuracy/basic_arithmetic",
            "train/groups/reward_varied",
            "train/groups/answer_varied",
            "train/entropy",
        } <= set(r)
        assert 0.0 <= r["train/groups/answer_varied"] <= 1.0
    assert all(k.startswith("eval/") for r in lines if r["split"] == "eval" for k in r if "/" in k)


def brute_pass_at_k(n, c, k):
    """Probability that a random k-subset of n samples (c correct) holds a correct one, by enumeration."""
    from itertools import combinations

    samples = [True] * c + [False] * (n - c)
    subsets = list(combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(
    "n,c,k", [(4, 1, 1), (4, 1, 4), (4, 0, 2), (5, 2, 2), (8, 3, 4), (8, 8, 1), (6, 1, 3)]
)
def test_pass_at_k_is_the_unbiased_estimator(n, c, k):
    from grpo_recipes.evaluation.metrics import pass_at_k

    assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k))


def test_summarize_reports_pass_at_k_per_task():
    rows = [
        dict(example("a", False, 0, False, 5), num_samples=4, samples_correct=2),
        dict(example("b", True, 1, True, 5), num_samples=4, samples_correct=0),
    ]
    m = summarize(rows, "plain", ks=[1, 4])
    assert m["a/pass@1"] == 0.5 and m["a/pass@4"] == 1.0 and m["b/pass@4"] == 0.0
    assert m["pass@1"] == 0.25 and m["pass@4"] == 0.5


def test_sampled_pass_at_k_generation(tiny):
    model, tokenizer = tiny
    taskset, rows = eval_rows(4)
    ev = evaluator(
        rows,
        taskset,
        tokenizer,
        max_new_tokens=6,
        batch_size=8,
        pass_k={"samples": 3, "temperature": 1.0, "k": [1, 2, 8]},
    )
    assert ev.ks == [1, 2]  # k > samples is dropped
    samples = ev.generate(model, [0, 1, 2, 3], sampled=True)
    assert len(samples) == 4 and all(len(s) == 3 for s in samples)
    scored = ev.score_batch([0], ev.generate(model, [0]), [samples[0]])[0]
    assert scored["num_samples"] == 3 and 0 <= scored["samples_correct"] <= 3


def test_train_stats_groups_and_tasks():
    from types import SimpleNamespace

    from rewards.accuracy import log_stats

    logged = {}
    questions = ["q1"] * 4 + ["q2"] * 4
    tasks = ["t1"] * 4 + ["t2"] * 4
    rows = [{"question": q, "task": t} for q, t in zip(questions, tasks)]
    rewards = [1, 0, 0, 0] + [0, 0, 0, 0]
    answers = ["1", "2", "2", "2"] + ["5", "5", "5", "5"]
    judged = [(SimpleNamespace(answer=a), r) for a, r in zip(answers, rewards)]
    log_stats({"log_metric": logged.__setitem__}, rows, rewards, [r == 1 for r in rewards], judged)
    assert logged == {
        "accuracy/t1": 0.25,
        "accuracy/t2": 0.0,
        "groups/reward_varied": 0.5,
        "groups/answer_varied": 0.5,
    }


def test_report_is_written_with_plots(tiny_run):
    out, _, _ = tiny_run
    report = (out / "report.md").read_text()
    assert (
        "Fixed-eval accuracy (greedy)" in report and "| task | greedy accuracy | change | chance |" in report
    )
    for png in ["accuracy.png", "reward.png", "length_format.png", "entropy_kl.png"]:
        assert f"]({png})" in report
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert "## Examples" in report and "step 0:" in report and "step 3:" in report


def test_report_on_demand_for_a_partial_run(tiny_run, tmp_path):
    import shutil
    import subprocess
    import sys

    partial = tmp_path / "partial"
    shutil.copytree(tiny_run[0], partial)
    (partial / "train_results.json").unlink()
    (partial / "eval_results" / "eval_step_3.json").unlink()
    with open(partial / "metrics.jsonl", "a") as f:
        f.write('{"step": 9, "split": "tra')  # a line cut by a crash
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_recipes.outputs.report", str(partial)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    report = (partial / "report.md").read_text()
    assert "at step 0 -> " in report and "at step 2**" in report and "(unfinished)" in report


def test_console_shows_examples_at_each_eval(tiny_run):
    log = (tiny_run[0] / "train.log").read_text()
    assert log.count("[eval step") == 3
    assert "Q: Calculate" in log and "extracted" in log


def test_callback_runs_each_step_once_and_a_resume_reads_its_earlier_evals(tmp_path):
    """Step 0, every N steps, the last step (not again at train end); the vLLM generator when given."""
    import torch
    from transformers import TrainerState

    from grpo_recipes.evaluation.callback import FixedEvalCallback

    class Evaluator:
        def __init__(self):
            self.settings = {"every_n_steps": 2, "hacking_window": 10, "hacking_drop": 0.05}
            self.calls, self.marks = [], []

        def run(self, generator, accelerator, step, out_dir, first, last, chance):
            self.calls.append((step, generator))
            self.marks.append((first, last))
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"eval_step_{step}.json").write_text(json.dumps({"metrics": {"accuracy": step / 10}}))
            return {"accuracy": step / 10}, []

    def callback(evaluator, **kwargs):
        sent = []
        cb = FixedEvalCallback(
            evaluator,
            tmp_path,
            accelerator=None,
            send_logs=lambda logs, state: sent.append((state.global_step, logs)),
            vllm_generator=lambda m: ("vllm", m),  # the transformers path: the e2e tests
            **kwargs,
        )
        return cb, sent

    model, state = torch.nn.Linear(2, 2), TrainerState(max_steps=3)
    model.train()
    evaluator = Evaluator()
    cb, sent = callback(evaluator)
    cb.on_train_begin(None, state, None, model=model)
    for step in (1, 2, 3):
        state.global_step = step
        cb.on_step_end(None, state, None, model=model)
    cb.on_train_end(None, state, None, model=model)
    assert [step for step, _ in evaluator.calls] == [0, 2, 3]
    assert evaluator.marks == [(True, False), (False, False), (False, True)]  # (first, last)
    assert all(generator == ("vllm", model) for _, generator in evaluator.calls) and model.training
    # the evals after the first are checked for reward hacking (nothing logged here: not raised)
    assert sent == [(0, {"eval_accuracy": 0.0})] + [
        (s, {"eval_accuracy": s / 10, "eval_reward_hacking": 0}) for s in (2, 3)
    ]
    assert cb.history == {
        0: {"accuracy": 0.0},
        2: {"accuracy": 0.2, "reward_hacking": 0},
        3: {"accuracy": 0.3, "reward_hacking": 0},
    }
    # resumed at step 2: steps 0 and 2 read back (not 3, after the checkpoint), none evaluated again;
    # stopped early at step 3, it evaluates at the end unless the stop was a signal's
    for signalled, expected in ((True, []), (False, [3])):
        state = TrainerState(max_steps=10, global_step=2)
        resumed, _ = callback(Evaluator(), skip_final_eval=lambda signalled=signalled: signalled)
        resumed.on_train_begin(None, state, None, model=model)
        assert set(resumed.history) == {0, 2}
        state.global_step = 3
        resumed.on_step_end(None, state, None, model=model)
        resumed.on_train_end(None, state, None, model=model)
        assert [step for step, _ in resumed.evaluator.calls] == expected
        assert resumed.evaluator.marks == [(False, True)] * len(expected)  # not the first: step 0 was


def test_the_eval_renders_prompts_with_grpo_chat_template_kwargs(tiny):
    """grpo.chat_template_kwargs reach the eval's prompts as they reach TRL's, with and without tools: Qwen3's
    template with enable_thinking=false opens an empty think block."""
    import copy

    from grpo_common.templates import load_chat_template
    from tools import build_tools

    _, tokenizer = tiny
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.chat_template = load_chat_template("trl:qwen3")
    taskset, rows = eval_rows(2)
    tools = {"tools": build_tools(["calculator"], 100), "max_tool_iterations": 1}
    for kwargs in ({}, {"enable_thinking": False}):
        plain = evaluator(rows, taskset, tokenizer, max_new_tokens=8, chat_template_kwargs=kwargs)
        looped = evaluator(rows, taskset, tokenizer, max_new_tokens=8, chat_template_kwargs=kwargs, **tools)
        rendered = [plain.texts[0], tokenizer.decode(looped.prompt_ids[0])]
        think = kwargs == {"enable_thinking": False}
        # (the tiny tokenizer decodes the template's "\n\n" as <unk>)
        assert ["</think>" in t[-16:] for t in rendered] == [think] * 2
        assert "calculator" in rendered[1] and "calculator" not in rendered[0]
