"""The PNG plots of a run's report (report.py) and of a sweep's summary (sweep.py)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

STEP, SHARE = "training step", (-0.02, 1.02)  # the x label, and the y range of a share


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


def metric_names(train: list[dict], prefix: str, suffix: str) -> list[str]:
    return sorted({k.split("/")[2] for r in train for k in r if k.startswith(prefix) and k.endswith(suffix)})


def _curve(ax, rows: list[dict], key: str, label: str, color, raw: bool = True, **style) -> bool:
    """A train metric (`train/...`) smoothed, its values per step faint behind (`raw`); an eval metric a
    point per eval. False when nothing was logged."""
    steps, values = series(rows, key)
    if not steps:
        return False
    if not key.startswith("train/"):
        ax.plot(steps, values, style.pop("fmt", "o-"), color=color, label=label, **{"linewidth": 2, **style})
        return True
    if raw and len(steps) > 1:
        ax.plot(steps, values, color=color, alpha=0.25, linewidth=1)
    window = max(1, len(values) // 10)  # a moving average over the last tenth of the run
    smooth = [sum(values[max(0, i - window + 1) : i + 1]) / min(i + 1, window) for i in range(len(values))]
    ax.plot(steps, smooth, color=color, linewidth=2, label=label, **style)
    return True


def _plot_chance(ax, evals: dict, tasks: list[str]) -> None:
    """The chance line (the first eval's best constant answer per task), dashed under the accuracy curves."""
    metrics = next((ev["metrics"] for ev in evals.values() if "chance" in ev), {})
    lines = [(f"chance/{t}/accuracy", t, f"C{i}") for i, t in enumerate(tasks)]
    lines += [("chance/accuracy", "all tasks", "black")] if len(tasks) > 1 else []
    for key, name, color in lines:
        if key in metrics:
            style = {"linestyle": (0, (8, 4)), "linewidth": 1, "alpha": 0.6, "zorder": 1}  # under the curves
            ax.axhline(metrics[key], color=color, label=f"{name}: chance (best constant answer)", **style)


def finish(ax, **labels):
    ax.set(**labels)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


@contextmanager
def figure(path: Path, panels: int = 1, height: float = 4.5):
    """The axes of `panels` panels, one above the other on one step axis, saved to `path` when done."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(panels, 1, figsize=(8, height), sharex=True, squeeze=False)
    yield [row[0] for row in axes]
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def make_plots(run_dir: Path, train: list[dict], evals: dict, tasks: list[str]) -> list[tuple[str, str]]:
    """The report's figures: [(title, file name)]. Colours: C<i>, the i-th of matplotlib's colour cycle."""
    rows = train + [{"step": step, **ev["metrics"]} for step, ev in evals.items()]  # eval keys: no train/
    plots = []

    def plot(name: str, title: str, **size):
        plots.append((title, name))
        return figure(run_dir / name, **size)

    with plot("accuracy.png", "Accuracy per task") as (ax,):
        for i, task in enumerate(tasks):
            c, name = f"C{i}", f"{task}: train samples (smoothed)"
            _curve(ax, rows, f"{task}/accuracy", f"{task}: fixed eval (greedy)", c, markersize=7)
            _curve(ax, rows, f"train/accuracy/{task}", name, c, raw=False, linestyle="--")
        if len(tasks) > 1:
            _curve(ax, rows, "accuracy", "all tasks: fixed eval", "black", fmt="s-", linewidth=2.5)
        _plot_chance(ax, evals, tasks)
        finish(ax, xlabel=STEP, ylabel="accuracy (score >= 1)", ylim=SHARE, title="Accuracy per task")
    if not train:
        return plots

    with plot("reward.png", "Reward and group variance", panels=2, height=6) as (ax1, ax2):
        _curve(ax1, rows, "train/reward", "total reward (weighted sum)", "black")
        for i, name in enumerate(metric_names(train, "train/rewards/", "/mean")):
            _curve(ax1, rows, f"train/rewards/{name}/mean", name, f"C{i}", raw=False)
        finish(ax1, ylabel="reward", title="Train reward (faint: per step, bold: moving average)")
        has = _curve(ax2, rows, "train/groups/reward_varied", "groups whose rewards differ", "C0")
        has |= _curve(ax2, rows, "train/groups/answer_varied", "groups whose answers differ", "C1")
        if not has:
            _curve(ax2, rows, "train/frac_reward_zero_std", "groups with equal rewards", "C0")
        finish(ax2, xlabel=STEP, ylabel="share of prompt groups", ylim=SHARE)

    leveled = metric_names(train, "train/curriculum/", "/level")
    if leveled:
        with plot("curriculum.png", "Curriculum level per task", height=3.5) as (ax,):
            for i, task in enumerate(leveled):
                steps, levels = series(train, f"train/curriculum/{task}/level")
                ax.plot(steps, levels, drawstyle="steps-post", color=f"C{i}", lw=2, label=task)
            ax.yaxis.get_major_locator().set_params(integer=True)
            finish(ax, xlabel=STEP, ylabel="level (0: easiest)", title="Curriculum level per task")

    title = "Completion length and format compliance"
    with plot("length_format.png", title, panels=2, height=6) as (ax1, ax2):
        _curve(ax1, rows, "train/completions/mean_length", "train samples", "C0")
        _curve(ax1, rows, "mean_length", "fixed eval (greedy)", "C1")
        finish(ax1, ylabel="tokens", title="Completion length")
        _curve(ax2, rows, "format", "fixed eval: format compliance", "C2")
        _curve(ax2, rows, "train/completions/clipped_ratio", "train: cut off at max length", "C3")
        finish(ax2, xlabel=STEP, ylabel="share", ylim=SHARE, title="Format compliance and truncation")

    has_kl = any(isinstance(r.get("train/kl"), (int, float)) for r in train)
    with plot("entropy_kl.png", "Entropy and KL", panels=1 + has_kl, height=6 if has_kl else 3.5) as axes:
        _curve(axes[0], rows, "train/entropy", "entropy", "C4")
        finish(axes[0], ylabel="nats per token", title="Policy entropy")
        if has_kl:
            _curve(axes[1], rows, "train/kl", "KL to reference", "C5")
            finish(axes[1], ylabel="KL", title="KL to the reference model")
        axes[-1].set(xlabel=STEP)
    return plots
