"""The numbers the fixed eval reports beside its accuracy: the transfer set scored apart, greedy accuracy as
the headline, the chance line (constant answers scored by the tasks' verifiers), cut-off counts, and the
reward-hacking alarm (unit tests on synthetic rows and histories; one slow run that raises it)."""

import json
import logging
from types import SimpleNamespace

import pytest

from grpo_recipes.evaluation.chance import chance_metrics, chance_table
from grpo_recipes.evaluation.console import alarm_message, check_hacking, train_rewards
from grpo_recipes.evaluation.metrics import summarize
from tasks import TaskSet
from tests.conftest import read_jsonl, run_train
from tests.test_evaluation import eval_rows, evaluator, example

SOLO = SimpleNamespace(process_index=0, num_processes=1, is_main_process=True)  # a one-process accelerator


def marked(row, **marks):
    return {**row, **marks}


def test_transfer_rows_count_only_in_their_own_metrics():
    fixed = [example("a", True, 1.0, True, 10), example("b", False, 0.0, True, 10)]
    transfer = [marked(example("a", ok, float(ok), False, 90), eval_set="transfer") for ok in (True, False)]
    transfer += [marked(example("b", False, 0.0, False, 90), eval_set="transfer")] * 2
    transfer[1]["truncated"] = True
    m = summarize(fixed + transfer, "plain")
    expected = {"transfer/accuracy": 0.25, "transfer/truncated": 0.25, "transfer/a/accuracy": 0.5}
    assert m == {**summarize(fixed, "plain"), **expected, "transfer/b/accuracy": 0.0}
    assert m["num_examples"] == 2 and m["accuracy"] == 0.5 and m["a/accuracy"] == 1.0


class Generator:
    """Stands in for the policy: every prompt answers `text`, and the prompts asked for are kept."""

    def __init__(self, tokenizer, text):
        self.ids, self.prompts = tokenizer(text, add_special_tokens=False)["input_ids"], []
        self.eos_token_ids = {tokenizer.eos_token_id}

    def generate(self, prompts, n, temperature, max_new_tokens):
        self.prompts.append(len(prompts))
        return [[self.ids + [min(self.eos_token_ids)]] * n for _ in prompts]


def test_transfer_set_is_generated_at_the_first_and_last_eval_only(tiny, tmp_path, caplog):
    _, tokenizer = tiny
    taskset, rows = eval_rows(8)
    rows = rows[:6] + [marked(r, eval_set="transfer", transfer="t") for r in rows[6:]]
    ev = evaluator(rows, taskset, tokenizer, max_new_tokens=8)
    gen = Generator(tokenizer, f"[ANSWER] {rows[0]['answer']}")
    with caplog.at_level(logging.INFO):
        first, _ = ev.run(gen, SOLO, 0, tmp_path, first=True, last=False)
        middle, _ = ev.run(gen, SOLO, 5, tmp_path, first=False, last=False, chance=first["chance/accuracy"])
        last, _ = ev.run(gen, SOLO, 9, tmp_path, first=False, last=True, chance=first["chance/accuracy"])
    assert gen.prompts == [8, 6, 8]
    assert "transfer/accuracy" in first and "transfer/accuracy" in last and "transfer/accuracy" not in middle
    assert first["num_examples"] == middle["num_examples"] == 6 and first["accuracy"] == middle["accuracy"]
    # the chance line once, at the first eval; the JSON says how the headline was decoded, and the hold-out
    assert "chance/accuracy" in first and "chance/accuracy" not in middle
    saved = json.loads((tmp_path / "eval_step_0.json").read_text())
    assert saved["decoding"] == "greedy" and saved["max_new_tokens"] == 8
    assert saved["holdout"] == taskset.holdout and saved["holdout"]["sum_digits"] == "question"
    assert set(saved["chance"]) >= {
        "all tasks",
        "sum_digits",
    }
    assert {e["eval_set"] for e in saved["examples"] if "eval_set" in e} == {"transfer"}
    log = caplog.text
    right = sum(r["answer"] == rows[0]["answer"] for r in rows[:6])
    assert f"[eval step 0] accuracy {right / 6:.3f} (greedy)" in log and "0/6 cut off" in log
    assert log.count("transfer set: accuracy") == 2 and log.count("  chance ") == 1


def test_the_last_eval_warns_when_its_accuracy_does_not_clear_the_chance_line(tiny, tmp_path, caplog):
    _, tokenizer = tiny
    taskset, rows = eval_rows(4)
    ev = evaluator(rows, taskset, tokenizer, max_new_tokens=8)
    gen = Generator(tokenizer, "no idea")
    with caplog.at_level(logging.INFO):
        ev.run(gen, SOLO, 5, tmp_path, first=False, last=False, chance=0.5)
        assert "does not clear" not in caplog.text  # not the last eval
        ev.run(gen, SOLO, 9, tmp_path, first=False, last=True, chance=0.5)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith(
        "final fixed-eval accuracy 0.000 (step 9) does not clear the chance line 0.500"
    )


def test_a_standalone_eval_is_both_first_and_last(tiny, tmp_path):
    _, tokenizer = tiny
    taskset, rows = eval_rows(4)
    rows = rows[:2] + [marked(r, eval_set="transfer") for r in rows[2:]]
    gen = Generator(tokenizer, "no idea")
    metrics, _ = evaluator(rows, taskset, tokenizer, max_new_tokens=8).run(gen, SOLO, 0, tmp_path)
    assert gen.prompts == [4] and "transfer/accuracy" in metrics and "chance/accuracy" in metrics


def test_rewards_get_the_columns_not_the_eval_marks(tiny):
    _, tokenizer = tiny
    taskset, rows = eval_rows(4)
    rows = [marked(rows[0], eval_set="transfer", transfer="t"), marked(rows[1], eval_level=2), *rows[2:]]
    seen = []

    def reward(prompts, completions, completion_ids, **columns):
        seen.append(set(columns))
        return [1.0] * len(completions)

    ev = evaluator(rows, taskset, tokenizer, max_new_tokens=8, rewards=[(reward, 1.0)])
    ev.score_batch([0, 1, 2, 3], [("x", 1, False, [1])] * 4)
    assert seen == [{"question", "answer", "task", "metadata"}]


def rows_of(task, size, seed, prompt_format="answer_tag"):
    from grpo_recipes.train.data import to_row

    return [to_row(e, None) for e in TaskSet({task: {}}, prompt_format).sample(size, seed)]


def test_chance_is_the_majority_label_scored_by_the_tasks_verifier():
    rows = rows_of("syllogism", 24, 7)
    answers = [r["answer"] for r in rows]
    majority = max(set(answers), key=answers.count)
    table, labels = chance_table(rows, TaskSet({"syllogism": {}}, "answer_tag"))
    assert labels == {"syllogism": majority}
    assert table["syllogism"] == {"majority": answers.count(majority) / 24, "empty": 0.0}
    assert chance_metrics(table) == {
        "chance/accuracy": answers.count(majority) / 24,
        "chance/syllogism/accuracy": answers.count(majority) / 24,
    }


def test_chance_over_several_tasks_takes_each_tasks_best():
    class Exact:  # a verifier: 1 for the reference answer
        def score(self, answer, row):
            return float(answer == row["answer"])

    rows = [{"task": "a", "answer": x} for x in "yyyn"] + [{"task": "b", "answer": x} for x in "pqrs"]
    table, labels = chance_table(rows, Exact())
    assert labels == {"a": "y", "b": "p"}
    assert table["a"]["majority"] == 0.75 and table["b"]["majority"] == 0.25
    assert table["all tasks"] == {"majority": 0.5, "empty": 0.0, "best": 0.5}


def code_row(answer, example_output, test="assert f(2) == 5"):
    meta = {"source_dataset": "python_functions", "entry_point": "f", "tests": [[test, True]], "setup": ""}
    if example_output is not None:
        meta["example_output"] = example_output
    return {"task": "python_functions", "question": "f", "answer": answer, "metadata": json.dumps(meta)}


def test_code_chance_runs_the_example_output_program_in_the_sandbox():
    taskset = TaskSet({"python_functions": {}}, "code")
    rows = [
        code_row("def f(x):\n    return x + 3", 5),  # the example is the test: a constant passes
        code_row("def f(x):\n    return x + 3", 4),
        code_row("def f(x):\n    return 2 * x", [1, 2], test="assert f(4) == 8"),
    ]
    table, _ = chance_table(rows, taskset)
    # no majority "label": the commonest reference program solves its own problems, no constant could
    assert table["python_functions"] == {"empty": 0.0, "example_output": 1 / 3}
    # without the example output recorded, that constant is not tried
    table, _ = chance_table([code_row("def f(x):\n    return x + 3", None)], taskset)
    assert set(table["python_functions"]) == {"empty"}


def test_the_alarm_needs_the_reward_up_and_the_accuracy_down_by_more_than_the_drop():
    rising = [(s, float(s)) for s in range(1, 20)]
    check = check_hacking(rising, 20, 10, 0.60, 0.40, window=5, drop=0.05)
    # now: the 5 logged up to step 20 (15..19); before: the 5 before step 10's eval (5..9)
    assert (check["reward_before"], check["reward_now"]) == (7.0, 17.0) and check["raised"]
    message = alarm_message(check)
    assert "eval.hacking_window=5" in message and "eval.hacking_drop=0.05" in message
    assert "7.000" in message and "0.400" in message
    assert not check_hacking(rising, 20, 10, 0.60, 0.56, window=5, drop=0.05)["raised"]  # fell 0.04 only
    falling = [(s, -float(s)) for s in range(1, 20)]
    assert not check_hacking(falling, 20, 10, 0.60, 0.10, window=5, drop=0.05)["raised"]
    # the previous eval at step 0: the first window stands in
    first = check_hacking(rising, 20, 0, 0.60, 0.10, window=5, drop=0.05)
    assert first["first_window"] and first["reward_before"] == 3.0 and first["raised"]
    assert check_hacking([], 20, 10, 0.6, 0.1, window=5, drop=0.05) is None
    history = [{"reward": 1.0, "step": 1}, {"reward": float("nan"), "step": 2}, {"train_runtime": 3}]
    assert train_rewards(history) == [(1, 1.0)]


def test_callback_raises_the_alarm_in_the_log_the_metric_and_the_json(tmp_path, caplog):
    import torch
    from transformers import TrainerState

    from grpo_recipes.evaluation.callback import FixedEvalCallback

    accuracy = {0: 0.5, 2: 0.5, 4: 0.2}

    class Evaluator:
        def __init__(self):
            self.settings = {"every_n_steps": 2, "hacking_window": 1, "hacking_drop": 0.05}
            self.chances = []

        def run(self, generator, accelerator, step, out_dir, first, last, chance):
            self.chances.append(chance)
            metrics = {"accuracy": accuracy[step], **({"chance/accuracy": 0.3} if first else {})}
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"eval_step_{step}.json").write_text(json.dumps({"metrics": metrics}))
            return dict(metrics), []

    sent = []
    cb = FixedEvalCallback(
        Evaluator(),
        tmp_path,
        accelerator=None,
        send_logs=lambda logs, state: sent.append((state.global_step, logs)),
        vllm_generator=lambda m: m,
    )
    model, state = torch.nn.Linear(1, 1), TrainerState(max_steps=4)
    with caplog.at_level(logging.WARNING):
        cb.on_train_begin(None, state, None, model=model)
        for step in range(1, 5):
            state.global_step = step
            cb.on_step_end(None, state, None, model=model)
            state.log_history.append({"reward": float(step), "step": step})  # logged after the step's eval
    assert [(s, logs.get("eval_reward_hacking")) for s, logs in sent] == [(0, None), (2, 0), (4, 1)]
    assert cb.evaluator.chances == [None, 0.3, 0.3]  # the first eval's chance line, handed to the later
    saved = json.loads((tmp_path / "eval_results/eval_step_4.json").read_text())
    assert saved["metrics"]["reward_hacking"] == 1
    assert saved["reward_hacking"]["raised"] and saved["reward_hacking"]["reward_now"] == 3.0
    assert caplog.text.count("reward hacking?") == 1


def write_eval(run_dir, step, metrics, examples, **extra):
    (run_dir / "eval_results").mkdir(parents=True, exist_ok=True)
    result = {"step": step, "decoding": "greedy", "max_new_tokens": 32, "metrics": metrics, **extra}
    (run_dir / f"eval_results/eval_step_{step}.json").write_text(json.dumps({**result, "examples": examples}))


def test_report_states_chance_cut_offs_transfer_and_alarms(tmp_path):
    from grpo_recipes.outputs.report import write_report

    def rows(correct, cut):
        """8 fixed rows, the first `correct` right, the last `cut` cut off; one transfer row, right."""
        out = []
        for i in range(8):
            e = example("syllogism", i < correct, float(i < correct), True, 5)
            out.append({**e, "question": f"q{i}", "answer": "Yes", "completion": "c", "extracted": "Yes"})
            out[-1]["truncated"] = i >= 8 - cut
        return out + [{**out[0], "correct": True, "truncated": False, "eval_set": "transfer"}]

    chance = {"syllogism": {"majority": 0.5, "empty": 0.0}, "all tasks": {"majority": 0.5, "best": 0.5}}
    m0 = {**summarize(rows(4, 6), "plain"), "chance/accuracy": 0.5, "chance/syllogism/accuracy": 0.5}
    m0 |= {"syllogism/pass@1": 0.5, "pass@1": 0.5}
    write_eval(tmp_path, 0, m0, rows(4, 6), chance=chance, majority_labels={"syllogism": "Yes"})
    m1 = {**summarize(rows(2, 0), "plain"), "syllogism/pass@1": 0.75, "pass@1": 0.75, "reward_hacking": 1}
    alarm = {"step": 10, "previous_step": 0, "reward_before": 1.0, "reward_now": 2.0, "accuracy_before": 0.5}
    alarm |= {"accuracy_now": 0.25, "window": 10, "drop": 0.05, "first_window": True, "raised": True}
    write_eval(tmp_path, 10, m1, rows(2, 0), reward_hacking=alarm)
    report = write_report(tmp_path).read_text()
    assert "**Fixed-eval accuracy (greedy): 50.0% at step 0 -> 25.0% at step 10**" in report
    # greedy accuracy first, its change and the chance line beside it, then pass@k (never instead)
    assert "| task | greedy accuracy | change | chance | pass@1 |" in report
    assert "| syllogism | 50.0% -> 25.0% | **-25.0 pts** | 50.0% | 50.0% -> 75.0% |" in report
    assert "Completions cut off at max_new_tokens=32: 6 of 8 (75.0%) at step 0 -> 0 of 8 (0.0%)" in report
    assert "accuracy on the ones not cut off: 100.0% at step 0 -> 25.0% at step 10" in report
    assert "syllogism: majority 'Yes' 50.0%, empty 0.0%" in report
    assert "the final accuracy (25.0% at step 10) does not clear the chance line (50.0%)" in report
    assert "The transfer set (scored apart, not in the accuracy above): 100.0% at step 0 -> 100.0%" in report
    assert "## Reward-hacking alarms" in report
    assert (
        "- step 10: reward hacking? the mean train reward over eval.hacking_window=10 logged steps rose "
        "1.000 (the first steps) -> 2.000" in report
    )


@pytest.mark.slow
def test_a_reward_paying_for_length_raises_the_reward_hacking_alarm(tmp_path):
    """The embedded model paid only for long completions, at a high learning rate: the train reward rises as
    the answers run past the token limit and the fixed-eval accuracy falls (measured at 4 steps: 50 % -> 0 %
    on one thread, -> 12.5 % on two; at 3 steps, since sampled decoding attends with matmuls, one thread's
    run still held 50 %)."""
    only_length = ["dataset.rewards.accuracy=null", "dataset.rewards.format=null"]
    only_length += ["dataset.rewards.length={fn: tests.test_rewards.length_reward}"]
    proc = run_train(
        *["max_steps=4", "eval.every_n_steps=0", "eval.size=8", "eval.hacking_window=1"],
        "eval_sets@eval=none",  # no transfer set: the alarm reads the headline set only
        "grpo.max_completion_length=48",
        # one prompt x 8 completions a step, on fp32 weights: where the collapse was measured (bf16 weights
        # in one micro-batch of 8 held the eval's accuracy at 3 steps)
        *["grpo.per_device_train_batch_size=8", "grpo.gradient_accumulation_steps=1", "model.dtype=fp32"],
        *["learning_rate=1e-4", "dataset.train_size=64", *only_length],
        *[f"output_root={tmp_path}", "run_name=hacked"],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = tmp_path / "hacked"
    alarm = [line for line in (run / "train.log").read_text().splitlines() if "reward hacking?" in line]
    assert len(alarm) == 1 and "eval.hacking_window=1" in alarm[0] and "eval.hacking_drop=0.05" in alarm[0]
    evals = [r for r in read_jsonl(run / "metrics.jsonl") if r["split"] == "eval"]
    assert [(r["step"], r.get("eval/reward_hacking")) for r in evals] == [(0, None), (4, 1)]
    final = json.loads((run / "eval_results/eval_step_4.json").read_text())
    check = final["reward_hacking"]
    assert check["raised"] and check["reward_now"] > check["reward_before"]
    assert check["accuracy_before"] - check["accuracy_now"] > 0.05
    assert "## Reward-hacking alarms" in (run / "report.md").read_text()
