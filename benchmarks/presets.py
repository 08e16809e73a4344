"""What each experiment preset teaches the embedded model on this machine: every preset run end to
end, as shipped, the way a user runs it; one table.

    python -m benchmarks.presets                      # every preset, seed 0
    python -m benchmarks.presets --seeds 0 1          # and a second seed (the sign must hold)
    python -m benchmarks.presets --only digits        # one preset (a name from PRESETS)
    python -m benchmarks.presets --write              # also record the rows and put the table into
                                                      # RESULTS.md and the README
    python -m benchmarks.presets --set grpo.bf16=false  # the presets with extra overrides (fp32 on
                                                      # a CPU with native bf16); not recordable

    python -m benchmarks.presets --base-budget 256    # also the base model's eval at 256 new tokens:
                                                      # how much of a gain is room to answer

Per run, greedy accuracy first (the headline of every preset): the fixed eval at step 0 and at the
end and the gain in points; pass@k beside it where the preset samples for it; the transfer set
(`eval.transfer`: held-out variants of the training task) at step 0 and at the end; with tools, the share
of eval problems that called one; the chance line
(the best constant answer: majority label, empty answer, the example's output); the share of eval
completions cut off at step 0 and at the end; with --base-budget, the base model's greedy accuracy
given that many tokens; wall minutes (set-up excluded: from the process start to the end, minus the
model's first load), seconds per training step, and the peak RSS of the run.

With --write each row is recorded in benchmarks/presets.json under its preset and seed (with the
commit and the machine it ran on), replacing an older row of the same pair, and the table written
holds every recorded row: presets measured one at a time add up to one table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, machine
from grpo_recipes.outputs.logs import load_evals

# name -> (overrides, pass@k reported beside greedy accuracy, or None)
PRESETS: dict[str, tuple[list[str], str | None]] = {
    "digits": (["experiment=digits"], None),
    "digits reverse": (["experiment=digits", "dataset=reverse_digits"], None),
    "code": (["experiment=code"], "pass@1"),
    "gsm8k": (["experiment=gsm8k"], None),
    "rg_multitask": (["experiment=rg_multitask"], None),
    "digits_tools": (["experiment=digits_tools"], None),
    "gsm8k_tools": (["experiment=gsm8k_tools"], None),
}
MARK_BEGIN, MARK_END = "<!-- presets table: begin -->", "<!-- presets table: end -->"
RECORD = ROOT / "benchmarks/presets.json"


def train_grpo(args: list[str]) -> tuple[int, str, float, float]:
    """Run train_grpo.py as a user does: (exit code, what it printed, seconds, this run's peak RSS in GiB)."""
    start = time.time()
    with tempfile.TemporaryFile("w+") as output:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "train_grpo.py"), *args],
            cwd=ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        )
        # wait4: this run's own peak RSS (RUSAGE_CHILDREN would hold the largest of all runs so far)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.time() - start
        output.seek(0)
        return os.waitstatus_to_exitcode(status), output.read(), seconds, usage.ru_maxrss / 2**20


def run_preset(name: str, seed: int, out: Path, extra: list[str] = (), base_budget: int | None = None):
    overrides, pass_k = PRESETS[name]
    run_name = f"{name.replace(' ', '_')}-seed{seed}"
    args = [*overrides, *extra, f"seed={seed}", f"output_root={out}"]
    code, printed, seconds, rss = train_grpo([*args, f"run_name={run_name}"])
    if code != 0:
        return {"preset": name, "seed": seed, "error": printed.strip().splitlines()[-1:]}
    run_dir = out / run_name
    evals = {step: ev["metrics"] for step, ev in load_evals(run_dir).items()}
    first, last = min(evals), max(evals)
    m0, m1 = evals[first], evals[last]
    train = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    step_times = [r["train/step_time"] for r in train if "train/step_time" in r]
    row = {
        "preset": name,
        "seed": seed,
        "task": ", ".join(sorted(_tasks(m0))),
        "steps": last,
        "greedy": (m0["accuracy"], m1["accuracy"]),
        "pass_k": (pass_k, m0.get(pass_k), m1.get(pass_k)) if pass_k else None,
        "transfer": (m0.get("transfer/accuracy"), m1.get("transfer/accuracy")),
        "tool_use": (m0.get("tools/used"), m1.get("tools/used")),  # share of eval problems that called a tool
        "chance": m0.get("chance/accuracy"),
        "cut_off": (m0.get("truncated"), m1.get("truncated")),
        "reward": (m0.get("reward"), m1.get("reward")),
        "minutes": (seconds - _setup_seconds((run_dir / "train.log").read_text())) / 60,
        "s_per_step": sum(step_times) / len(step_times) if step_times else None,
        "peak_rss_gib": rss,
    }
    if base_budget:  # the base model given room to answer: is the gain a skill or a shorter answer?
        base = f"{run_name}-base{base_budget}"
        code, printed, _, _ = train_grpo(
            [*args, "eval_only=true", f"eval.max_new_tokens={base_budget}", f"run_name={base}"]
        )
        evals = load_evals(out / base) if code == 0 else {}
        row["base_budget"] = (base_budget, evals[min(evals)]["metrics"]["accuracy"] if evals else None)
    return row


def _tasks(metrics: dict) -> set[str]:
    skip = ("level/", "transfer/", "chance/")  # the curriculum's levels, the transfer set, the chance line
    return {k.split("/", 1)[0] for k in metrics if k.endswith("/accuracy") and not k.startswith(skip)}


def _setup_seconds(log: str) -> float:
    """Seconds from the first log line to the 'Run dir' line (model load, data): not part of the recipe."""
    stamps = re.findall(r"^(\d\d):(\d\d):(\d\d) INFO", log, re.MULTILINE)
    run_dir = re.search(r"^(\d\d):(\d\d):(\d\d) INFO \S+: Run dir", log, re.MULTILINE)
    if not stamps or not run_dir:
        return 0.0
    to_s = lambda h, m, s: int(h) * 3600 + int(m) * 60 + int(s)
    return max(0.0, to_s(*run_dir.groups()) - to_s(*stamps[0]))


def table(rows: list[dict]) -> str:
    head = [
        "preset",
        "task",
        "seed",
        "greedy: step 0 -> final (gain)",
        "pass@k",
        "transfer",
        "tool use",
        "chance",
    ]
    head += ["cut off", "base, more tokens", "minutes", "s/step", "peak RSS"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    pct = lambda x: "" if x is None else f"{100 * x:.1f} %"
    move = lambda pair: "" if pair is None or pair[0] is None else f"{pct(pair[0])} -> {pct(pair[1])}"
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['preset']} | | {r['seed']} | failed: {' '.join(r['error'])} |" + " |" * 9)
            continue
        g0, g1 = r["greedy"]
        name, k0, k1 = r["pass_k"] or (None, None, None)
        budget, base = r.get("base_budget") or (None, None)
        cells = [
            r["preset"],
            r["task"],
            str(r["seed"]),
            f"**{pct(g0)} -> {pct(g1)}** ({100 * (g1 - g0):+.1f})",
            f"{name} {pct(k0)} -> {pct(k1)}" if name else "",
            move(r["transfer"]),
            move(r.get("tool_use")),
            pct(r["chance"]),
            move(r["cut_off"]),
            f"{pct(base)} at {budget} tokens" if budget and base is not None else "",
            f"{r['minutes']:.1f}",
            "" if r["s_per_step"] is None else f"{r['s_per_step']:.1f}",
            f"{r['peak_rss_gib']:.1f} GiB",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def record(rows: list[dict], command: str) -> list[dict]:
    """Add these rows to RECORD (a row per preset and seed, the newest wins); return all its rows."""
    recorded = json.loads(RECORD.read_text()) if RECORD.exists() else []
    recorded = [r for r in recorded if "greedy" in r]  # older rows: evals with repeats, not held out
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    stamp = {"command": command, "commit": commit, "machine": machine(), "date": time.strftime("%Y-%m-%d")}
    new = {(r["preset"], r["seed"]): {**r, **stamp} for r in rows}
    kept = [r for r in recorded if (r["preset"], r["seed"]) not in new]
    order = {name: i for i, name in enumerate(PRESETS)}
    merged = sorted(kept + list(new.values()), key=lambda r: (order.get(r["preset"], len(order)), r["seed"]))
    RECORD.write_text(json.dumps(merged, indent=1) + "\n")
    return merged


def provenance(rows: list[dict]) -> str:
    """One line per distinct command/commit/machine behind the rows."""
    seen = dict.fromkeys(f"`{r['command']}` at {r['commit']}, {r['date']}, on {r['machine']}" for r in rows)
    return "\n".join(f"- {line}" for line in seen)


def write_between_marks(path: Path, text: str) -> None:
    content = path.read_text()
    if MARK_BEGIN not in content:
        raise SystemExit(f"{path}: no '{MARK_BEGIN}' ... '{MARK_END}' block to fill")
    head, rest = content.split(MARK_BEGIN, 1)
    _, tail = rest.split(MARK_END, 1)
    path.write_text(f"{head}{MARK_BEGIN}\n{text}\n{MARK_END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--only", nargs="+", choices=sorted(PRESETS), default=list(PRESETS))
    parser.add_argument(
        "--write", action="store_true", help="fill the presets block of RESULTS.md and README.md"
    )
    parser.add_argument(
        "--keep", type=Path, help="keep the runs' directories here (default: a temporary dir)"
    )
    parser.add_argument(
        "--set", nargs="+", default=[], metavar="KEY=VALUE", help="train_grpo.py overrides for every run"
    )
    parser.add_argument(
        "--base-budget", type=int, metavar="N", help="also the base model's eval at N new tokens"
    )
    args = parser.parse_args()
    if args.write and args.set:
        parser.error("--write records the presets as shipped; run --set without --write")
    print(machine(), flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp)
        for name in args.only:
            for seed in args.seeds:
                # the base model's longer-budget eval is greedy: the same for every seed, run once
                budget = args.base_budget if seed == args.seeds[0] else None
                rows.append(run_preset(name, seed, out, args.set, budget))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows)
    print(text)
    if args.write:
        rows = record(rows, f"python -m benchmarks.presets {shlex.join(sys.argv[1:])}")
        for path in (ROOT / "benchmarks/RESULTS.md", ROOT / "README.md"):
            write_between_marks(path, f"{table(rows)}\n\nMeasured by:\n{provenance(rows)}")


if __name__ == "__main__":
    main()
