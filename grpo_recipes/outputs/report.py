"""A run's report.md with PNG plots (plots.py): at the end of every run, and on demand for any run
directory: `python -m grpo_recipes.outputs.report RUN_DIR ...`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from grpo_recipes.evaluation.console import alarm_message
from grpo_recipes.evaluation.metrics import fixed_examples
from grpo_recipes.outputs.logs import load_evals, read_jsonl, write_atomic
from grpo_recipes.outputs.plots import metric_names, series
from grpo_recipes.outputs.report_tools import clean, tool_section

# (metric, label, format) after the accuracy and pass@k
EVAL_METRICS = [("mean_score", "mean score", "{:.3f}"), ("format", "format compliance", "{:.1%}")]
EVAL_METRICS += [("mean_length", "mean length (tokens)", "{:.1f}")]
EVAL_METRICS += [("truncated", "cut off at max length", "{:.1%}")]


def level_table(first: int, last: int, m0: dict, m1: dict) -> list[str]:
    keys = [k for k in m1 if k.startswith("level/")]
    if not keys:
        return []
    out = ["## Accuracy per curriculum level", ""]
    out += [f"Step {first} -> step {last}, on problems drawn at each level (the same at every eval).", ""]
    out += ["| task | level | accuracy |", "|---|---:|---:|"]
    for key in keys:
        task, level, _ = key.split("/", 1)[1].rsplit("/", 2)
        before = f"{m0[key]:.1%} -> " if key in m0 and first != last else ""
        out.append(f"| {task} | {level} | {before}{m1[key]:.1%} |")
    return out + [""]


def _table(first: int, last: int, m0: dict, m1: dict, tasks: list[str], decoding: str) -> list[str]:
    """Accuracy (greedy unless eval.do_sample) first, then its change, pass@k beside it, the chance line."""
    ks = sorted({k.split("@")[1] for k in m1 if k.startswith("pass@")}, key=int)
    metrics = [("accuracy", "greedy accuracy" if decoding == "greedy" else "accuracy (sampled)", "{:.1%}")]
    metrics += [(f"pass@{k}", f"pass@{k}", "{:.1%}") for k in ks] + EVAL_METRICS
    cols = [label for _, label, _ in metrics]
    out = [f"Step {first} -> step {last}." if first != last else f"Step {last}.", ""]
    header = " | ".join(cols[:1] + ["change", "chance"] + cols[1:])
    out += [f"| task | {header} |", "|---|" + "---:|" * (len(cols) + 2)]
    for task in (["all tasks"] if len(tasks) > 1 else []) + tasks:
        prefix = "" if task == "all tasks" else f"{task}/"
        cells = []
        for key, _, fmt in metrics:
            a, b = m0.get(prefix + key), m1.get(prefix + key)
            changed = first != last and a is not None and b is not None
            shown = "" if b is None else fmt.format(b)
            cells.append(f"{fmt.format(a)} -> {shown}" if changed else shown)
            if key == "accuracy":
                cells.append(f"**{(b - a) * 100:+.1f} pts**" if changed else "")
                chance = m0.get(f"chance/{prefix}accuracy")
                cells.append("" if chance is None else f"{chance:.1%}")
        out.append(f"| {task} | " + " | ".join(cells) + " |")
    return out


def _cut_off(evals: dict[int, dict]) -> list[str]:
    """How many fixed-eval completions hit the length limit at the first and the last eval, and the accuracy
    on those that did not: a gain that is only answering within the limit shows here."""
    parts, finished = [], []
    for step in dict.fromkeys((min(evals), max(evals))):
        rows = fixed_examples(evals[step]["examples"])
        cut = sum(e["truncated"] for e in rows)
        parts.append(f"{cut} of {len(rows)} ({cut / max(len(rows), 1):.1%}) at step {step}")
        done = [e["correct"] for e in rows if not e["truncated"]]
        share = f"{sum(done) / len(done):.1%}" if done else "none ended"
        finished.append(f"{share} at step {step}")
    limit = evals[max(evals)].get("max_new_tokens")
    at = f"at max_new_tokens={limit}" if limit else "at the length limit"
    text = f"Completions cut off {at}: {' -> '.join(parts)}; accuracy on the ones not cut off: "
    return [text + f"{' -> '.join(finished)}.", ""]


def _chance(evals: dict[int, dict], m1: dict) -> list[str]:
    """The chance line (the first eval's constant answers) and whether the final accuracy clears it."""
    from grpo_recipes.evaluation.chance import describe

    step, ev = next(((s, ev) for s, ev in evals.items() if "chance" in ev), (None, None))
    if ev is None:
        return []
    chance, last = ev["metrics"]["chance/accuracy"], max(evals)
    constants = describe(ev["chance"], ev["majority_labels"])
    text = f"Chance line (step {step}, each task's own verifier): {chance:.1%}, each task's best constant "
    out = [text + f"answer (the dashed line of the accuracy plot): {constants}.", ""]
    if m1["accuracy"] <= chance:
        text = f"**Warning: the final accuracy ({m1['accuracy']:.1%} at step {last}) does not clear the "
        out += [text + f"chance line ({chance:.1%}).**", ""]
    return out


def _transfer(evals: dict[int, dict]) -> list[str]:
    """Each named eval set (eval.transfer), scored at the first and the last eval."""
    out = []
    for name in sorted({e["eval_set"] for ev in evals.values() for e in ev["examples"] if e.get("eval_set")}):
        key = f"{name}/accuracy"
        moved = " -> ".join(
            f"{ev['metrics'][key]:.1%} at step {s}" for s, ev in evals.items() if key in ev["metrics"]
        )
        out += [f"The {name} set (scored apart, not in the accuracy above): {moved}.", ""]
    return out


def _alarms(evals: dict[int, dict]) -> list[str]:
    """Each reward-hacking alarm (console.py) the evals recorded, or the steps checked without one."""
    checks = {s: ev["reward_hacking"] for s, ev in evals.items() if "reward_hacking" in ev}
    if not checks:
        return []
    raised = [(s, c) for s, c in checks.items() if c["raised"]]
    if not raised:
        steps = ", ".join(map(str, checks))
        return [f"Reward-hacking alarm: not raised (checked at steps {steps}).", ""]
    return ["## Reward-hacking alarms", "", *(f"- step {s}: {alarm_message(c)}" for s, c in raised), ""]


def _examples(evals: dict[int, dict], n: int = 3) -> list[str]:
    first, last = min(evals), max(evals)
    before, after = fixed_examples(evals[first]["examples"]), fixed_examples(evals[last]["examples"])
    # favour problems whose outcome changed, then the rest, in eval order
    order = sorted(
        range(min(len(before), len(after))), key=lambda i: before[i]["correct"] == after[i]["correct"]
    )
    out = []
    for i in order[:n]:
        b, a = before[i], after[i]
        out += [f"**{b['task']}**: {b['question'][:300]}  (answer: `{b['answer']}`)", ""]
        for step, e in ((first, b), (last, a)) if first != last else ((last, a),):
            mark = "correct" if e["correct"] else "wrong"
            text = e["completion"][:400].replace("\n", " ").replace("|", "\\|")
            out.append(f'- step {step}: {mark}, extracted `{e["extracted"]}` by {e["rule"]}: "{text}"')
        out.append("")
    return out


def _cell(sample: dict[str, Any]) -> str:
    rewards = ", ".join(
        f"{k} {v:g}" if isinstance(v, (int, float)) else f"{k} -" for k, v in sample["rewards"].items()
    )
    cut = " **cut off**" if sample.get("truncated") else ""
    return (
        f"{clean(sample['prompt'], 120)} (answer `{clean(sample.get('answer'), 40)}`)<br>"
        f'"{clean(sample["completion"], 300)}"{cut}<br>'
        f"read `{clean(sample.get('extracted'), 40)}` by {sample.get('rule')}; rewards: {rewards}"
    )


def _samples(run_dir: Path, n: int = 3) -> list[str]:
    from grpo_recipes.train.samples import read_samples

    by_step = read_samples(run_dir / "samples.jsonl")
    if not by_step:
        return []
    first, last = min(by_step), max(by_step)
    count, steps = sum(len(v) for v in by_step.values()), ", ".join(map(str, by_step))
    intro = f"Training rollouts from samples.jsonl ({count} rollouts at steps {steps})"
    out = ["## What the model wrote", "", f"{intro}: first and last sampled steps side by side.", ""]
    if first == last:
        out += [f"| step {first} |", "|---|"] + [f"| {_cell(r)} |" for r in by_step[first][:n]]
    else:
        out += [f"| step {first} | step {last} |", "|---|---|"]
        out += [f"| {_cell(a)} | {_cell(b)} |" for a, b in zip(by_step[first][:n], by_step[last][:n])]
    return out + [""]


def _header(run_dir: Path, train: list[dict]) -> list[str]:
    lines = [f"# Run report: {run_dir.name}", ""]
    if (run_dir / "config.yaml").exists():
        from omegaconf import OmegaConf

        cfg = OmegaConf.load(run_dir / "config.yaml")
        rewards = (f"{k} x {v.get('weight', 1.0)}" for k, v in cfg.dataset.rewards.items() if v is not None)
        lines += [
            f"- model: `{cfg.model.path}`",
            f"- tasks: {', '.join(cfg.dataset.tasks)}",
            f"- rewards: {', '.join(rewards)}",
            (
                f"- learning rate {cfg.learning_rate}, {cfg.grpo.num_generations} completions per prompt, "
                f"max {cfg.grpo.max_completion_length} tokens, seed {cfg.seed}"
            ),
        ]
    if train:
        done = run_dir / "train_results.json"
        results = json.loads(done.read_text()) if done.exists() else {}
        runtime = f" in {results['train_runtime']:.0f} s" if "train_runtime" in results else " (unfinished)"
        lines.append(f"- trained {train[-1]['step']} steps{runtime}")
        levels = []
        for task in metric_names(train, "train/curriculum/", "/level"):  # first -> last logged
            values = series(train, f"train/curriculum/{task}/level")[1]
            levels.append(f"{task} {values[0]:g} -> {values[-1]:g}")
        if levels:
            lines.append(f"- curriculum levels (first -> last logged): {', '.join(levels)}")
    return lines + [""]


def write_report(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    train = read_jsonl(run_dir / "metrics.jsonl")
    train = [r for r in train if r.get("split") == "train" and "train/reward" in r]
    evals = load_evals(run_dir)
    lines = _header(run_dir, train)
    if not evals:
        lines += ["No evaluation has been written yet."]
    else:
        from grpo_common.formats import rule_names
        from grpo_recipes.outputs.plots import make_plots

        tasks = sorted({e["task"] for ev in evals.values() for e in fixed_examples(ev["examples"])})
        first, last = min(evals), max(evals)
        m0, m1 = evals[first]["metrics"], evals[last]["metrics"]
        problems, decoding = m1["num_examples"], evals[last].get("decoding", "greedy")
        if first != last:
            lines.append(
                f"**Fixed-eval accuracy ({decoding}): {m0['accuracy']:.1%} at step {first} -> "
                f"{m1['accuracy']:.1%} at step {last}** ({problems} problems, the same at every eval)."
            )
        else:
            headline = f"**Fixed-eval accuracy ({decoding}) at step {last}: {m1['accuracy']:.1%}**"
            lines.append(f"{headline} ({problems} problems).")
        lines += [""] + _cut_off(evals) + _chance(evals, m1) + _transfer(evals) + _alarms(evals)
        lines += ["## Baseline vs final", ""] + _table(first, last, m0, m1, tasks, decoding) + [""]
        lines += level_table(first, last, m0, m1)
        rules = [f"{r}: {m1[f'rule/{r}']:.0%}" for r in rule_names() if f"rule/{r}" in m1]
        lines += [f"Answers found at step {last} by rule: {', '.join(rules)}.", ""]
        if verifiers := evals[last].get("verifiers"):
            scored_by = "; ".join(f"{t}: {v}" for t, v in verifiers.items())
            lines += [f"Scored by: {scored_by} (training uses the same).", ""]
        plots = make_plots(run_dir, train, evals, tasks)
        lines += ["## Curves", ""] + [f"### {title}\n\n![{title}]({name})\n" for title, name in plots]
        lines += ["## Examples", ""] + _examples(evals)
        lines += tool_section(evals)  # when the eval used tools: one rollout turn by turn
    lines += _samples(run_dir)
    write_atomic(run_dir / "report.md", "\n".join(lines) + "\n")
    return run_dir / "report.md"


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m grpo_recipes.outputs.report RUN_DIR [RUN_DIR ...]")
    for arg in sys.argv[1:]:
        print(write_report(arg))
