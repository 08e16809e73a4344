"""Sweep summary: the jobs of a multirun directory ranked by their latest fixed-eval accuracy (an Optuna
search, hparams_search=: by the objective it optimized, with objective.png, the objective per trial).

Written automatically when a `-m` sweep ends (a Hydra callback, see config/train.yaml), and on
demand for any sweep directory, finished or still running:

    python -m grpo_recipes.outputs.sweep outputs/<run_name>-sweep

Writes summary.md and summary.png into the sweep directory and prints the table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from grpo_recipes.config.resume import first_overrides


def job_row(job: Path) -> dict[str, Any] | None:
    evals = {}
    for path in (job / "eval_results").glob("eval_step_*.json"):
        evals[int(path.stem.rsplit("_", 1)[1])] = path
    overrides = first_overrides(job)
    if not evals and not (job / "config.yaml").exists():
        return None
    row = {
        "job": job.name,
        "overrides": overrides,
        "finished": (job / "train_results.json").exists(),
        "baseline": None,
        "final": None,
        "step": None,
        "objective": None,  # the value the job returned to the sweeper (its optimized_metric)
        "metric": None,
    }
    if row["finished"]:
        results = json.loads((job / "train_results.json").read_text() or "{}")
        row["objective"], row["metric"] = results.get("objective"), results.get("optimized_metric")
    if evals:
        first, last = min(evals), max(evals)
        row["baseline"] = json.loads(evals[first].read_text())["metrics"]["accuracy"]
        row["final"] = json.loads(evals[last].read_text())["metrics"]["accuracy"]
        row["step"] = last
    return row


def _varying(rows: list[dict[str, Any]]) -> None:
    """Keep only the overrides that differ between jobs (the sweep's own parameters)."""
    common = set.intersection(*(set(r["overrides"]) for r in rows)) if rows else set()
    for r in rows:
        r["label"] = " ".join(o for o in r["overrides"] if o not in common) or r["job"]


def search_direction(sweep_dir: Path) -> str | None:
    """maximize | minimize for an Optuna search (search.json, written by grpo_recipes/outputs/search.py);
    None for a grid sweep."""
    path = sweep_dir / "search.json"
    return json.loads(path.read_text()).get("direction") if path.is_file() else None


def summarize_sweep(sweep_dir: str | Path) -> Path:
    sweep_dir = Path(sweep_dir)
    jobs = sorted((p for p in sweep_dir.iterdir() if p.is_dir()), key=lambda p: (len(p.name), p.name))
    rows = [r for r in (job_row(j) for j in jobs) if r is not None]
    _varying(rows)
    direction = search_direction(sweep_dir)
    metrics = sorted({r["metric"] for r in rows if r["metric"]})
    by_objective = direction is not None and len(metrics) == 1
    if by_objective:  # a search: ranked by what it optimized, in its direction; unfinished jobs last
        sign = 1.0 if direction == "maximize" else -1.0
        rows.sort(key=lambda r: (r["objective"] is None, -sign * (r["objective"] or 0.0)))
    else:
        rows.sort(key=lambda r: -1.0 if r["final"] is None else r["final"], reverse=True)

    def pct(x):
        return "" if x is None else f"{x:.1%}"

    lines = [
        f"# Sweep summary: {sweep_dir.name}",
        "",
        f"{len(rows)} jobs, {sum(r['finished'] for r in rows)} finished; ranked by "
        + (
            f"the objective the search optimized ({direction} {metrics[0]}, of the final fixed eval)."
            if by_objective
            else "their latest fixed-eval accuracy."
        ),
        "",
        "| rank | job | overrides | final accuracy | at step | baseline | change | objective | status |",
        "|---:|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for i, r in enumerate(rows, 1):
        change = "" if r["final"] is None else f"{(r['final'] - r['baseline']) * 100:+.1f} pts"
        status = (
            "finished"
            if r["finished"]
            else ("running or stopped" if r["step"] is not None else "no eval yet")
        )
        objective = "" if r["objective"] is None else f"{r['metric']} {r['objective']:.4g}"
        lines.append(
            f"| {i} | {r['job']} | `{r['label']}` | {pct(r['final'])} | "
            f"{r['step'] if r['step'] is not None else ''} "
            f"| {pct(r['baseline'])} | {change} | {objective} | {status} |"
        )
    tail = []
    if by_objective:
        scored = [r for r in rows if r["objective"] is not None]
        if scored:
            best = scored[0]
            tail += [
                "",
                f"Best: job {best['job']}, {best['metric']} {best['objective']:.4g} (`{best['label']}`).",
            ]
            _plot_trials(sweep_dir, scored, direction, metrics[0])
            tail += ["", "![objective per trial](objective.png)"]
    if rows:
        _plot(sweep_dir, rows)
        tail += ["", "![final accuracy per job](summary.png)"]
    lines += tail
    path = sweep_dir / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[4 : len(lines) - len(tail)] + [t for t in tail if t.startswith("Best")]))
    return path


def _plot_trials(sweep_dir: Path, rows: list[dict[str, Any]], direction: str, metric: str) -> None:
    """objective.png: each trial's objective in the order the search ran them, and the best so far."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trials = sorted(rows, key=lambda r: int(r["job"]) if r["job"].isdigit() else 0)
    x = [int(r["job"]) if r["job"].isdigit() else i for i, r in enumerate(trials)]
    y = [r["objective"] for r in trials]
    pick = max if direction == "maximize" else min
    best = [pick(y[: i + 1]) for i in range(len(y))]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(x, y, "o", color="tab:blue", label="trial")
    ax.step(x, best, where="post", color="black", label=f"best so far ({direction})")
    ax.set(xlabel="trial", ylabel=metric, title=f"Search {sweep_dir.name}: {metric} per trial")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sweep_dir / "objective.png", dpi=110)
    plt.close(fig)


def _plot(sweep_dir: Path, rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r["final"] is not None][::-1]  # best at the top
    if not shown:
        return
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(shown) + 1.5))
    y = range(len(shown))
    ax.barh(y, [r["final"] for r in shown], color="tab:blue", label="latest fixed eval")
    ax.scatter(
        [r["baseline"] for r in shown],
        y,
        color="black",
        marker="|",
        s=300,
        label="baseline (step 0)",
        zorder=3,
    )
    ax.set_yticks(list(y), [f"{r['job']}: {r['label']}"[:60] for r in shown], fontsize=8)
    ax.set(
        xlabel="accuracy", xlim=(0, 1), title=f"Sweep {sweep_dir.name}: jobs ranked by fixed-eval accuracy"
    )
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(sweep_dir / "summary.png", dpi=110)
    plt.close(fig)


class SweepSummaryCallback(Callback):
    """Hydra callback: write the sweep summary when a multirun ends."""

    def on_multirun_end(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if sweep_dir.is_dir():
            print(f"Sweep summary: {summarize_sweep(sweep_dir)}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m grpo_recipes.outputs.sweep SWEEP_DIR")
    summarize_sweep(sys.argv[1])
