"""The code sandbox: HumanEval canonical solutions passed, and a batch of 64 programs run in
parallel versus one by one (the code_tests reward's path).

    python -m benchmarks.bench_sandbox --repeat 3
"""

from __future__ import annotations

import argparse
import os

from benchmarks.common import machine, timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    from rewards.code import TestSuite, run_suites
    from rewards.sandbox.executor import Executor
    from tasks.code import HumanEvalConfig, HumanEvalDataset
    from tasks.python_functions import PythonFunctionsConfig, PythonFunctionsDataset

    parallel = Executor(workers=len(os.sched_getaffinity(0)))
    serial = Executor(workers=1)
    print(machine())
    print(f"sandbox layers: {parallel.layers()}; parallel workers: {parallel.workers}")

    humaneval = HumanEvalDataset(HumanEvalConfig(seed=0))
    entries = [humaneval[i] for i in range(164)]
    suites = [TestSuite.from_metadata(e["metadata"]) for e in entries]
    seconds, _, outcomes = timed(lambda: run_suites([e["answer"] for e in entries], suites, 3.0, parallel), 1)
    passed = sum(o.passed == o.total for o in outcomes)
    print(
        f"HumanEval canonical solutions passing all their tests: {passed}/164 "
        f"({sum(o.total for o in outcomes)} tests) in {seconds:.1f} s"
    )

    tasks = PythonFunctionsDataset(PythonFunctionsConfig(seed=0, size=args.batch))
    batch = [tasks[i] for i in range(args.batch)]
    suites = [TestSuite.from_metadata(e["metadata"]).limited(3) for e in batch]
    codes = [e["answer"] for e in batch]
    par, par_runs, out = timed(lambda: run_suites(codes, suites, 2.0, parallel), args.repeat)
    ser, ser_runs, _ = timed(lambda: run_suites(codes, suites, 2.0, serial), args.repeat)
    assert all(o.passed == o.total for o in out)
    print(f"{args.batch} programs (python_functions reference solutions, 3 tests each):")
    print(
        f"  parallel ({parallel.workers} workers): {par:6.2f} s  (runs: "
        f"{', '.join(f'{t:.2f}' for t in par_runs)})"
    )
    print(f"  one by one:           {ser:6.2f} s  (runs: {', '.join(f'{t:.2f}' for t in ser_runs)})")
    print(
        f"  speed-up:             {ser / par:6.2f} x  ({1000 * ser / args.batch:.0f} ms a program one by one)"
    )


if __name__ == "__main__":
    main()
