"""Sweep summary: the jobs of a multirun directory ranked by their latest fixed-eval accuracy.

Written automatically when a `-m` sweep ends (a Hydra callback, see config/train.yaml), and on
demand for any sweep directory, finished or still running:

    python -m grpo_recipes.sweep outputs/<run_name>-sweep

Writes summary.md and summary.png into the sweep directory and prints the table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from grpo_recipes.resume import first_overrides


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
    }
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


def summarize_sweep(sweep_dir: str | Path) -> Path:
    sweep_dir = Path(sweep_dir)
    jobs = sorted((p for p in sweep_dir.iterdir() if p.is_dir()), key=lambda p: (len(p.name), p.name))
    rows = [r for r in (job_row(j) for j in jobs) if r is not None]
    _varying(rows)
    rows.sort(key=lambda r: -1.0 if r["final"] is None else r["final"], reverse=True)

    def pct(x):
        return "" if x is None else f"{x:.1%}"

    lines = [
        f"# Sweep summary: {sweep_dir.name}",
        "",
        (
            f"{len(rows)} jobs, {sum(r['finished'] for r in rows)} finished; ranked by their latest "
            "fixed-eval "
            "accuracy."
        ),
        "",
        "| rank | job | overrides | final accuracy | at step | baseline | change | status |",
        "|---:|---|---|---:|---:|---:|---:|---|",
    ]
    for i, r in enumerate(rows, 1):
        change = "" if r["final"] is None else f"{(r['final'] - r['baseline']) * 100:+.1f} pts"
        status = (
            "finished"
            if r["finished"]
            else ("running or stopped" if r["step"] is not None else "no eval yet")
        )
        lines.append(
            f"| {i} | {r['job']} | `{r['label']}` | {pct(r['final'])} | "
            f"{r['step'] if r['step'] is not None else ''} "
            f"| {pct(r['baseline'])} | {change} | {status} |"
        )
    if rows:
        _plot(sweep_dir, rows)
        lines += ["", "![final accuracy per job](summary.png)"]
    path = sweep_dir / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[4:-2] if rows else lines))
    return path


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
        sys.exit("usage: python -m grpo_recipes.sweep SWEEP_DIR")
    summarize_sweep(sys.argv[1])
