"""Target 5: start-up. `python train_grpo.py --cfg job` wall time, the time from launch to the
end of the first training step of the default run (embedded model already converted), and at the other
end, the time from a short run's last file (report.md) to its process's exit.

    python benchmarks/bench_startup.py [--repeat 5]

The launch-to-first-step time is read from the run's own files: the process start time versus the
first train line of metrics.jsonl, with the step-0 baseline eval shown separately.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, machine, timed


def cfg_job() -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "train_grpo.py"), "--cfg", "job"],
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )


def first_step(extra: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        start = time.time()
        proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "train_grpo.py"),
                "max_steps=2",
                f"output_root={out}",
                "run_name=s",
                *extra,
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        )
        metrics = Path(out) / "s" / "metrics.jsonl"
        marks = {}
        while proc.poll() is None and "train" not in marks:
            if metrics.exists():
                for line in metrics.read_text().splitlines():
                    record = json.loads(line)
                    if record["split"] == "eval" and "eval" not in marks:
                        marks["eval"] = record["time"] - start
                        marks["eval_seconds"] = record["eval/seconds"]
                    if record["split"] == "train" and "train/reward" in record:
                        marks["train"] = record["time"] - start
                        marks["step_time"] = record["train/step_time"]
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        return marks


def exit_after_report() -> float:
    """Seconds from report.md, the last file a run writes, to the end of its process."""
    with tempfile.TemporaryDirectory() as out:
        short = ["max_steps=1", "eval.size=8", "dataset.train_size=64", f"output_root={out}", "run_name=e"]
        subprocess.run(
            [sys.executable, str(ROOT / "train_grpo.py"), *short],
            check=True,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        )
        return time.time() - (Path(out) / "e" / "report.md").stat().st_mtime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    t, runs, _ = timed(cfg_job, args.repeat)
    print(
        f"python train_grpo.py --cfg job: {t:.2f} s median (runs: {', '.join(f'{x:.2f}' for x in runs)}) "
        "(target <= 3)"
    )
    for label, extra in [
        ("default (128-problem baseline eval first)", []),
        ("with a 16-problem baseline eval", ["eval.size=16"]),
    ]:
        marks = [first_step(extra) for _ in range(max(1, args.repeat // 2))]
        firsts = sorted(m["train"] for m in marks)
        m = marks[0]
        print(
            f"launch -> first training step done, {label}: {firsts[len(firsts) // 2]:.1f} s median "
            f"(baseline eval {m['eval_seconds']:.1f} s of it, first step {m['step_time']:.1f} s; "
            f"launch -> start of step 1: {firsts[len(firsts) // 2] - m['step_time']:.1f} s) (target <= 25)"
        )
    ends = sorted(exit_after_report() for _ in range(max(1, args.repeat // 2)))
    print(f"report.md written -> process exit, a 1-step run: {ends[len(ends) // 2]:.2f} s median")


if __name__ == "__main__":
    main()
