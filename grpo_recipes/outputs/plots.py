"""The PNG plots of a run's report (report.py)."""

from __future__ import annotations

from pathlib import Path

STEP, SHARE = "training step", (-0.02, 1.02)  # the x label, and the y range of a share


def _smooth(values: list[float]) -> list[float]:
    window = max(1, len(values) // 10)
    return [sum(values[max(0, i - window + 1) : i + 1]) / min(i + 1, window) for i in range(len(values))]


def series(train: list[dict], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["step"], r[key]) for r in train if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


def _names(train: list[dict], prefix: str, suffix: str) -> list[str]:
    return sorted({k.split("/")[2] for r in train for k in r if k.startswith(prefix) and k.endswith(suffix)})


def _plot_train(ax, train, key, label, color=None, raw=True):
    steps, values = series(train, key)
    if not steps:
        return False
    if raw and len(steps) > 1:
        ax.plot(steps, values, color=color, alpha=0.25, linewidth=1)
    ax.plot(steps, _smooth(values), color=color, linewidth=2, label=label)
    return True


def _plot_eval(ax, evals, key, label, color, fmt="o-", linewidth=2, **style):
    steps = list(evals)
    values = [evals[s]["metrics"].get(key) for s in steps]
    ax.plot(steps, values, fmt, color=color, linewidth=linewidth, label=label, **style)


def _plot_chance(ax, evals: dict, tasks: list[str], colors: list[str]) -> None:
    """The chance line (the first eval's best constant answer per task), dashed under the accuracy curves."""
    metrics = next((ev["metrics"] for ev in evals.values() if "chance" in ev), None)
    if metrics is None:
        return
    lines = [(f"chance/{t}/accuracy", t, colors[i % len(colors)]) for i, t in enumerate(tasks)]
    lines += [("chance/accuracy", "all tasks", "black")] if len(tasks) > 1 else []
    for key, name, color in lines:
        if key in metrics:
            style = {"linestyle": (0, (8, 4)), "linewidth": 1, "alpha": 0.6, "zorder": 1}  # under the curves
            ax.axhline(metrics[key], color=color, label=f"{name}: chance (best constant answer)", **style)


def finish(ax, **labels):
    ax.set(**labels)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)


def make_plots(run_dir: Path, train: list[dict], evals: dict, tasks: list[str]) -> list[tuple[str, str]]:
    plt = pyplot()
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    plots = []

    def save(fig, name, title):
        save_figure(fig, run_dir / name)
        plots.append((title, name))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, task in enumerate(tasks):
        c = colors[i % len(colors)]
        _plot_eval(ax, evals, f"{task}/accuracy", f"{task}: fixed eval (greedy)", c, markersize=7)
        _plot_train(ax, train, f"train/accuracy/{task}", f"{task}: train samples (smoothed)", c, raw=False)
        if ax.lines:
            ax.lines[-1].set_linestyle("--")
    if len(tasks) > 1:
        _plot_eval(ax, evals, "accuracy", "all tasks: fixed eval", "black", fmt="s-", linewidth=2.5)
    _plot_chance(ax, evals, tasks, colors)
    finish(ax, xlabel=STEP, ylabel="accuracy (score >= 1)", ylim=SHARE, title="Accuracy per task")
    save(fig, "accuracy.png", "Accuracy per task")
    if not train:
        return plots

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    _plot_train(ax1, train, "train/reward", "total reward (weighted sum)", color="black")
    for i, name in enumerate(_names(train, "train/rewards/", "/mean")):
        _plot_train(ax1, train, f"train/rewards/{name}/mean", name, color=colors[i % len(colors)], raw=False)
    finish(ax1, ylabel="reward", title="Train reward (faint: per step, bold: moving average)")
    has = _plot_train(ax2, train, "train/groups/reward_varied", "groups whose rewards differ", colors[0])
    has |= _plot_train(ax2, train, "train/groups/answer_varied", "groups whose answers differ", colors[1])
    if not has:
        _plot_train(ax2, train, "train/frac_reward_zero_std", "groups with equal rewards", color=colors[0])
    finish(ax2, xlabel=STEP, ylabel="share of prompt groups", ylim=SHARE)
    save(fig, "reward.png", "Reward and group variance")

    leveled = _names(train, "train/curriculum/", "/level")
    if leveled:
        fig, ax = plt.subplots(figsize=(8, 3.5))
        for i, task in enumerate(leveled):
            steps, levels = series(train, f"train/curriculum/{task}/level")
            ax.plot(steps, levels, drawstyle="steps-post", color=colors[i % len(colors)], lw=2, label=task)
        ax.yaxis.get_major_locator().set_params(integer=True)
        finish(ax, xlabel=STEP, ylabel="level (0: easiest)", title="Curriculum level per task")
        save(fig, "curriculum.png", "Curriculum level per task")

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    _plot_train(ax1, train, "train/completions/mean_length", "train samples", color=colors[0])
    _plot_eval(ax1, evals, "mean_length", "fixed eval (greedy)", colors[1])
    finish(ax1, ylabel="tokens", title="Completion length")
    _plot_eval(ax2, evals, "format", "fixed eval: format compliance", colors[2])
    _plot_train(ax2, train, "train/completions/clipped_ratio", "train: cut off at max length", colors[3])
    finish(ax2, xlabel=STEP, ylabel="share", ylim=SHARE, title="Format compliance and truncation")
    save(fig, "length_format.png", "Completion length and format compliance")

    has_kl = any(isinstance(r.get("train/kl"), (int, float)) for r in train)
    fig, axes = plt.subplots(1 + has_kl, 1, figsize=(8, 6 if has_kl else 3.5), sharex=True, squeeze=False)
    _plot_train(axes[0][0], train, "train/entropy", "entropy", color=colors[4])
    finish(axes[0][0], ylabel="nats per token", title="Policy entropy")
    if has_kl:
        _plot_train(axes[1][0], train, "train/kl", "KL to reference", color=colors[5])
        finish(axes[1][0], ylabel="KL", title="KL to the reference model")
    axes[-1][0].set(xlabel=STEP)
    save(fig, "entropy_kl.png", "Entropy and KL")
    return plots
