"""A run's report: `report.md` with PNG plots, readable without opening any other file.

Written at the end of every run, and on demand for any run directory (finished or not):

    python -m grpo_recipes.outputs.report outputs/<run_name> [more run dirs]

Reads only what the run wrote: metrics.jsonl, eval_results/*.json, train_results.json, config.yaml.
The plots are drawn by plots.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from grpo_common.formats import rule_names
from grpo_recipes.outputs.plots import make_plots, series

EVAL_METRICS = [
    ("accuracy", "accuracy", "{:.1%}"),
    ("mean_score", "mean score", "{:.3f}"),
    ("format", "format compliance", "{:.1%}"),
    ("mean_length", "mean length (tokens)", "{:.1f}"),
    ("truncated", "cut off at max length", "{:.1%}"),
]


def load_evals(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The run's fixed evals (eval_results/eval_step_<N>.json), by step in order."""
    evals = {}
    for path in (Path(run_dir) / "eval_results").glob("eval_step_*.json"):
        ev = json.loads(path.read_text())
        evals[int(ev["step"])] = ev
    return dict(sorted(evals.items()))


def load_run(run_dir: Path) -> dict[str, Any]:
    lines = []
    if (run_dir / "metrics.jsonl").exists():
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a crash: skip it, keep the rest
                continue
    results = (
        json.loads((run_dir / "train_results.json").read_text())
        if (run_dir / "train_results.json").exists()
        else {}
    )
    return {
        "train": [r for r in lines if r.get("split") == "train" and "train/reward" in r],
        "evals": load_evals(run_dir),
        "results": results,
    }


def fixed_examples(ev: dict[str, Any]) -> list[dict]:
    """An eval's fixed-set examples (not the curriculum's per-level problems)."""
    return [e for e in ev["examples"] if e.get("eval_level") is None]


def tasks_of(evals: dict[int, dict]) -> list[str]:
    return sorted({e["task"] for ev in evals.values() for e in fixed_examples(ev)})


def level_table(evals: dict[int, dict]) -> list[str]:
    """The curriculum's per-level evals: accuracy per task and level, first eval -> last (no rows: [])."""
    first, last = min(evals), max(evals)
    m0, m1 = evals[first]["metrics"], evals[last]["metrics"]
    keys = [k for k in m1 if k.startswith("level/")]
    if not keys:
        return []
    out = [
        "## Accuracy per curriculum level",
        "",
        f"Step {first} -> step {last}, on problems drawn at each level (the same at every eval).",
        "",
        "| task | level | accuracy |",
        "|---|---:|---:|",
    ]
    for key in keys:
        task, level, _ = key.split("/", 1)[1].rsplit("/", 2)
        before = f"{m0[key]:.1%} -> " if key in m0 and first != last else ""
        out.append(f"| {task} | {level} | {before}{m1[key]:.1%} |")
    return out + [""]


def _table(evals: dict[int, dict], tasks: list[str]) -> list[str]:
    """One row per task (and all tasks): each metric as `baseline -> final`, accuracy change in points."""
    first, last = min(evals), max(evals)
    m0, m1 = evals[first]["metrics"], evals[last]["metrics"]
    ks = sorted({k.split("@")[1] for k in m1 if k.startswith("pass@")}, key=int)
    metrics = EVAL_METRICS + [(f"pass@{k}", f"pass@{k}", "{:.1%}") for k in ks]
    cols = [label for _, label, _ in metrics]
    out = [
        f"Step {first} -> step {last}." if first != last else f"Step {last}.",
        "",
        "| task | " + " | ".join(cols[:1] + ["change"] + cols[1:]) + " |",
        "|---|" + "---:|" * (len(cols) + 1),
    ]
    for task in (["all tasks"] if len(tasks) > 1 else []) + tasks:
        prefix = "" if task == "all tasks" else f"{task}/"
        cells = []
        for key, _, fmt in metrics:
            a, b = m0.get(prefix + key), m1.get(prefix + key)
            cell = (
                ""
                if b is None
                else (fmt.format(b) if first == last or a is None else f"{fmt.format(a)} -> {fmt.format(b)}")
            )
            cells.append(cell)
            if key == "accuracy":
                delta = None if first == last or a is None or b is None else (b - a) * 100
                cells.append("" if delta is None else f"**{delta:+.1f} pts**")
        out.append(f"| {task} | " + " | ".join(cells) + " |")
    return out


def _examples(evals: dict[int, dict], n: int = 3) -> list[str]:
    first, last = min(evals), max(evals)
    before, after = fixed_examples(evals[first]), fixed_examples(evals[last])
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
    """One rollout in a table cell: the problem, the completion, what each reward gave, what was read."""

    def clean(text: Any, n: int) -> str:
        text = str(text)
        return (text[:n] + " ..." if len(text) > n else text).replace("\n", " ").replace("|", "\\|")

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
    """A few rollouts of the first and the last sampled step, side by side (samples.jsonl)."""
    from grpo_recipes.train.samples import read_samples

    by_step = read_samples(run_dir / "samples.jsonl")
    if not by_step:
        return []
    first, last = min(by_step), max(by_step)
    out = [
        "## What the model wrote",
        "",
        (
            f"Training rollouts from samples.jsonl ({sum(len(v) for v in by_step.values())} rollouts at "
            f"steps {', '.join(map(str, by_step))}): first and last sampled steps side by side."
        ),
        "",
    ]
    if first == last:
        out += [f"| step {first} |", "|---|"] + [f"| {_cell(r)} |" for r in by_step[first][:n]]
    else:
        out += [f"| step {first} | step {last} |", "|---|---|"]
        out += [f"| {_cell(a)} | {_cell(b)} |" for a, b in zip(by_step[first][:n], by_step[last][:n])]
    return out + [""]


def curriculum_levels(train: list[dict]) -> dict[str, tuple[float, float]]:
    """dataset.curriculum's level per task: {task: (first logged, last logged)}."""
    out = {}
    for key in sorted(
        {k for r in train for k in r if k.startswith("train/curriculum/") and k.endswith("/level")}
    ):
        _, values = series(train, key)
        out[key.split("/")[2]] = (values[0], values[-1])
    return out


def write_report(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    evals, train, results = run["evals"], run["train"], run["results"]
    lines = [f"# Run report: {run_dir.name}", ""]
    config = run_dir / "config.yaml"
    if config.exists():
        from omegaconf import OmegaConf

        cfg = OmegaConf.load(config)
        rewards = ", ".join(
            f"{k} x {v.get('weight', 1.0)}" for k, v in cfg.dataset.rewards.items() if v is not None
        )
        lines += [
            f"- model: `{cfg.model.path}`",
            f"- tasks: {', '.join(cfg.dataset.tasks)}",
            f"- rewards: {rewards}",
            (
                f"- learning rate {cfg.learning_rate}, {cfg.grpo.num_generations} completions per prompt, "
                f"max {cfg.grpo.max_completion_length} tokens, seed {cfg.seed}"
            ),
        ]
    if train:
        lines.append(
            f"- trained {train[-1]['step']} steps"
            + (f" in {results['train_runtime']:.0f} s" if "train_runtime" in results else " (unfinished)")
        )
        levels = curriculum_levels(train)
        if levels:
            lines.append(
                "- curriculum levels (first -> last logged): "
                + ", ".join(f"{task} {a:g} -> {b:g}" for task, (a, b) in levels.items())
            )
    lines.append("")
    if not evals:
        lines += ["No evaluation has been written yet."]
    else:
        tasks = tasks_of(evals)
        first, last = min(evals), max(evals)
        m0, m1 = evals[first]["metrics"], evals[last]["metrics"]
        if first != last:
            lines += [
                (
                    f"**Fixed-eval accuracy: {m0['accuracy']:.1%} at step {first} -> {m1['accuracy']:.1%} "
                    "at step "
                    f"{last}** ({m1['num_examples']} problems, the same at every eval)."
                ),
                "",
            ]
        else:
            lines += [
                (
                    f"**Fixed-eval accuracy at step {last}: {m1['accuracy']:.1%}** ({m1['num_examples']} "
                    "problems)."
                ),
                "",
            ]
        lines += ["## Baseline vs final", ""] + _table(evals, tasks) + [""]
        lines += level_table(evals)
        # the rules the eval recorded: the run's formats' (code tasks add theirs where they fired)
        rules = [f"{r}: {m1[f'rule/{r}']:.0%}" for r in rule_names() if f"rule/{r}" in m1]
        lines += [f"Answers found at step {last} by rule: {', '.join(rules)}.", ""]
        verifiers = evals[last].get("verifiers") or {}
        lines += (
            [
                (
                    f"Scored by: {'; '.join(f'{t}: {v}' for t, v in verifiers.items())} (training uses the "
                    "same)."
                ),
                "",
            ]
            if verifiers
            else []
        )
        plots = make_plots(run_dir, run, tasks)
        lines += ["## Curves", ""] + [f"### {title}\n\n![{title}]({name})\n" for title, name in plots]
        lines += ["## Examples", ""] + _examples(evals)
    lines += _samples(run_dir)
    path = run_dir / "report.md"
    tmp = path.with_name(".report.md.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    return path


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m grpo_recipes.outputs.report RUN_DIR [RUN_DIR ...]")
    for arg in sys.argv[1:]:
        print(write_report(arg))
