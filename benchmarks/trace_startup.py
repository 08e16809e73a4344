"""How much of the project's own code a run executes before training starts: distinct lines of the
project's files run from the command line until TRL's `GRPOTrainer.train` is entered (sys.settrace).

    python -m benchmarks.trace_startup model=tiny_random eval.size=4     # any train_grpo.py overrides

Prints the total and the files with the most lines; the run stops at `train()` (nothing is trained).
"""

import collections
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = tuple(
    str(ROOT / p)
    for p in ("grpo_recipes", "grpo_common", "tasks", "rewards", "tools", "hydra_plugins", "train_grpo.py")
)


def main(overrides: list[str]) -> None:
    import runpy

    from trl import GRPOTrainer

    seen: dict[str, set[int]] = collections.defaultdict(set)
    train_code = GRPOTrainer.train.__code__

    def tracer(frame, event, arg):
        if frame.f_code is train_code:  # report and stop here: nothing is trained
            sys.settrace(None)
            report(seen)
            os._exit(0)
        if frame.f_code.co_filename.startswith(PACKAGES):
            seen[frame.f_code.co_filename].add(frame.f_lineno)
            return local
        return None

    def local(frame, event, arg):
        if event == "line":
            seen[frame.f_code.co_filename].add(frame.f_lineno)
        return local

    out = tempfile.mkdtemp(prefix="trace-startup-")  # a fresh run dir: it is written before training
    sys.argv = [str(ROOT / "train_grpo.py"), *overrides, f"output_root={out}"]
    sys.settrace(tracer)
    runpy.run_path(str(ROOT / "train_grpo.py"), run_name="__main__")
    sys.exit("the run ended before GRPOTrainer.train was entered")


def report(seen: dict[str, set[int]]) -> None:
    total = sum(len(lines) for lines in seen.values())
    print(f"{total} distinct lines of the project's code in {len(seen)} files before GRPOTrainer.train")
    for name, lines in sorted(seen.items(), key=lambda kv: -len(kv[1]))[:20]:
        print(f"  {len(lines):5d}  {Path(name).relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
