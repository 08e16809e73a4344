"""Sweeps (`-m`): summary.md ranking a multirun's jobs by their latest fixed-eval accuracy (a search: by its
objective), also on demand (`python -m grpo_recipes.outputs.sweep DIR`), and an Optuna study that resumes."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

from grpo_recipes.config.resume import first_overrides
from grpo_recipes.outputs.logs import load_evals
from grpo_recipes.outputs.plots import figure, finish

log = logging.getLogger("grpo_recipes")


def job_row(job: Path) -> dict[str, Any] | None:
    evals = load_evals(job)
    if not evals and not (job / "config.yaml").exists():
        return None
    finished = (job / "train_results.json").exists()
    results = json.loads((job / "train_results.json").read_text() or "{}") if finished else {}
    first, last = (min(evals), max(evals)) if evals else (None, None)
    return {
        "job": job.name,
        "overrides": first_overrides(job),
        "finished": finished,
        "baseline": evals[first]["metrics"]["accuracy"] if evals else None,
        "final": evals[last]["metrics"]["accuracy"] if evals else None,
        "step": last,
        "objective": results.get("objective"),  # what the job returned to the sweeper (its optimized_metric)
        "metric": results.get("optimized_metric"),
    }


def summarize_sweep(sweep_dir: str | Path) -> Path:
    sweep_dir = Path(sweep_dir)
    jobs = sorted((p for p in sweep_dir.iterdir() if p.is_dir()), key=lambda p: (len(p.name), p.name))
    rows = [r for r in (job_row(j) for j in jobs) if r is not None]
    common = set.intersection(*(set(r["overrides"]) for r in rows)) if rows else set()
    for r in rows:  # only the overrides that differ between jobs: the sweep's own parameters
        r["label"] = " ".join(o for o in r["overrides"] if o not in common) or r["job"]
    search = sweep_dir / "search.json"  # an Optuna search's direction (hydra_plugins/grpo_recipes_search)
    direction = json.loads(search.read_text()).get("direction") if search.is_file() else None
    metrics = sorted({r["metric"] for r in rows if r["metric"]})
    by_objective = direction is not None and len(metrics) == 1
    if by_objective:  # a search: ranked by what it optimized, in its direction; unfinished jobs last
        sign = 1.0 if direction == "maximize" else -1.0
        rows.sort(key=lambda r: (r["objective"] is None, -sign * (r["objective"] or 0.0)))
        ranked = f"the objective the search optimized ({direction} {metrics[0]}, of the final fixed eval)."
    else:
        rows.sort(key=lambda r: -1.0 if r["final"] is None else r["final"], reverse=True)
        ranked = "their latest fixed-eval accuracy."

    def pct(x):
        return "" if x is None else f"{x:.1%}"

    lines = [
        f"# Sweep summary: {sweep_dir.name}",
        "",
        f"{len(rows)} jobs, {sum(r['finished'] for r in rows)} finished; ranked by {ranked}",
        "",
        "| rank | job | overrides | final accuracy | at step | baseline | change | objective | status |",
        "|---:|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for i, r in enumerate(rows, 1):
        change = "" if r["final"] is None else f"{(r['final'] - r['baseline']) * 100:+.1f} pts"
        status = "finished" if r["finished"] else "no eval yet" if r["step"] is None else "running or stopped"
        objective = "" if r["objective"] is None else f"{r['metric']} {r['objective']:.4g}"
        lines.append(
            f"| {i} | {r['job']} | `{r['label']}` | {pct(r['final'])} | "
            f"{r['step'] if r['step'] is not None else ''} "
            f"| {pct(r['baseline'])} | {change} | {objective} | {status} |"
        )
    tail = []
    scored = [r for r in rows if r["objective"] is not None] if by_objective else []
    if scored:
        best = f"Best: job {scored[0]['job']}, {scored[0]['metric']} {scored[0]['objective']:.4g}"
        tail += ["", f"{best} (`{scored[0]['label']}`).", "", "![objective per trial](objective.png)"]
        _plot_trials(sweep_dir, scored, direction, metrics[0])
    if rows:
        _plot(sweep_dir, rows)
        tail += ["", "![final accuracy per job](summary.png)"]
    lines += tail
    path = sweep_dir / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[4 : len(lines) - len(tail)] + [t for t in tail if t.startswith("Best")]))
    return path


def _plot_trials(sweep_dir: Path, rows: list[dict[str, Any]], direction: str, metric: str) -> None:
    trials = sorted(rows, key=lambda r: int(r["job"]) if r["job"].isdigit() else 0)
    x = [int(r["job"]) if r["job"].isdigit() else i for i, r in enumerate(trials)]
    y = [r["objective"] for r in trials]
    pick = max if direction == "maximize" else min
    best = [pick(y[: i + 1]) for i in range(len(y))]
    with figure(sweep_dir / "objective.png", height=4) as (ax,):
        ax.plot(x, y, "o", color="tab:blue", label="trial")
        ax.step(x, best, where="post", color="black", label=f"best so far ({direction})")
        finish(ax, xlabel="trial", ylabel=metric, title=f"Search {sweep_dir.name}: {metric} per trial")


def _plot(sweep_dir: Path, rows: list[dict[str, Any]]) -> None:
    shown = [r for r in rows if r["final"] is not None][::-1]  # best at the top
    if not shown:
        return
    with figure(sweep_dir / "summary.png", height=0.5 * len(shown) + 1.5) as (ax,):
        y = range(len(shown))
        ax.barh(y, [r["final"] for r in shown], color="tab:blue", label="latest fixed eval")
        baselines = [r["baseline"] for r in shown]
        ax.scatter(baselines, y, color="black", marker="|", s=300, label="baseline (step 0)", zorder=3)
        ax.set_yticks(list(y), [f"{r['job']}: {r['label']}"[:60] for r in shown], fontsize=8)
        title = f"Sweep {sweep_dir.name}: jobs ranked by fixed-eval accuracy"
        ax.set(xlabel="accuracy", xlim=(0, 1), title=title)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")


def prepare_study(sweeper: Any) -> None:
    """Before hydra-optuna-sweeper's stock loop: the study continues where it stopped (optuna 2.10, the
    plugin's, needs SQLAlchemy < 2): complete trials count towards n_trials (the stock sweeper would run
    n_trials more), a trial left RUNNING is marked FAIL, and new trials get new job numbers."""
    import optuna

    storage, sweep_dir = sweeper.storage, Path(str(sweeper.sweep_dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)  # SQLite creates its file, not the directory
    direction = sweeper.direction  # a name, a Direction enum, or a list of them (several objectives)
    if not isinstance(direction, str) and not hasattr(direction, "name"):
        direction = next(iter(direction))
    direction = getattr(direction, "name", direction)
    search = {"study_name": sweeper.study_name, "storage": str(storage), "direction": direction}
    (sweep_dir / "search.json").write_text(json.dumps(search))  # what summarize_sweep ranks by
    if storage is None:  # in memory: nothing to resume
        return
    names = {s.study_name for s in optuna.study.get_all_study_summaries(storage=storage)}
    if sweeper.study_name not in names:
        return
    study = optuna.load_study(study_name=sweeper.study_name, storage=storage)
    trials, state = study.get_trials(deepcopy=False), optuna.trial.TrialState
    for trial in trials:
        if trial.state == state.RUNNING:
            study.tell(trial.number, state=state.FAIL)
    done = sum(t.state == state.COMPLETE for t in trials)
    sweeper.n_trials = max(0, sweeper.n_trials - done)
    sweeper.job_idx = len(trials)  # trial k runs in <sweep dir>/k: continue the numbering
    log.info(
        f"Resuming study {sweeper.study_name} ({storage}): {done} trials complete, {sweeper.n_trials} to go"
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m grpo_recipes.outputs.sweep SWEEP_DIR")
    summarize_sweep(sys.argv[1])
