"""Where a preset's training step and fixed eval spend their time, on the real run path.

    python -m benchmarks.bench_preset_step experiment=code --steps 3
    python -m benchmarks.bench_preset_step experiment=gsm8k grpo.max_completion_length=192

The config is composed as train_grpo.py composes it (any override works); the run is assembled and
its trainer built by grpo_recipes (setup.assemble, trainer.build_trainer, fast paths applied), then
trained for --steps steps with the fixed eval at step 0 only. Prints per-step means of generation,
rewards (sandbox included), the log-prob passes, backward and the optimizer, and for the eval:
generation (greedy and pass@k samples) and scoring.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks.bench_step import StepClock, Timings
from benchmarks.common import ROOT, git_rev, machine


def compose(overrides: list[str], steps: int, out: str) -> dict:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    fixed = [f"max_steps={steps}", "eval.every_n_steps=0", "grpo.save_strategy=no"]
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "config")):
        cfg = hydra_compose("train", overrides=overrides + fixed)
    cfg.output_dir = out
    return OmegaConf.to_container(cfg, resolve=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("overrides", nargs="*", help="train_grpo.py overrides, e.g. experiment=code")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    from grpo_recipes.config.checks import check_config
    from grpo_recipes.config.resume import RunPlan
    from grpo_recipes.train import fast_paths
    from grpo_recipes.train.assemble import assemble
    from grpo_recipes.train.trainer import build_trainer

    with tempfile.TemporaryDirectory() as out:
        cfg = compose(args.overrides, args.steps, out)
        check_config(cfg)
        setup = assemble(cfg, RunPlan("new", Path(out)))
        training = build_trainer(cfg, Path(out), setup)
        trainer = training.trainer
        print(f"machine: {machine()}; commit {git_rev()}")
        print(f"overrides: {' '.join(args.overrides) or '(none)'}")
        print("fast paths:", fast_paths.apply(trainer, cfg["grpo"].get("fast_paths", "auto")))
        g = setup.args
        print(
            f"batch: {g.per_device_train_batch_size // g.num_generations} prompts x {g.num_generations} "
            f"completions, max {g.max_completion_length} tokens; eval {len(setup.eval_rows)} problems"
        )

        # first in line, so that a step's time ends before the fixed eval's callback runs the final eval
        clock = StepClock()
        trainer.callback_handler.callbacks.insert(0, clock)
        train, ev = Timings(), Timings()
        train.wrap(trainer, "_generate", "generation")
        train.wrap(trainer, "_calculate_rewards", "rewards (sandbox included)")
        train.wrap(trainer, "_get_per_token_logps_and_entropies", "log-prob passes (forward)")
        train.wrap(trainer.accelerator, "backward", "backward")
        evaluator = training.evaluation.evaluator
        ev.wrap(evaluator, "generate", "generation")
        ev.wrap(evaluator, "score_batch", "scoring (sandbox included)")
        ev.wrap(evaluator, "run", "total")
        trainer.train()

    step_times, lengths = clock.step_times, [log["completions/mean_length"] for log in clock.logs]
    n = len(step_times)
    mean, median = statistics.mean(step_times), statistics.median(step_times)
    print(f"\ntraining: {mean:.1f} s/step (mean of {n}; median {median:.1f})")
    print(f"  mean completion length {statistics.mean(lengths):.0f} tokens")
    accounted = 0.0
    for label, times in train.parts.items():
        per_step = sum(times) / n
        accounted += per_step
        print(f"  {label:30s} {per_step:6.1f} s")
    print(f"  {'the rest':30s} {max(0.0, mean - accounted):6.1f} s")
    # Two evals ran: at step 0 and at the end.
    runs = len(ev.parts["total"]) or 1
    print(f"\nfixed eval: {sum(ev.parts['total']) / runs:.1f} s per eval (mean of {runs})")
    for label in ("generation", "scoring (sandbox included)"):
        print(f"  {label:30s} {sum(ev.parts[label]) / runs:6.1f} s")


if __name__ == "__main__":
    main()
