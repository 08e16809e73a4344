"""Every extra of pyproject.toml resolves, together with the core pins, to exactly its pinned versions.

For each extra: `pip install --dry-run --report` of the core dependencies plus the extra's, in this
environment (CI's: `make setup`'s fresh one); nothing is installed. What pip would install comes from
its report, the rest is what is installed. Fails when pip finds a conflict, or when a pinned package
(`name==version`) would end at another version. Needs the package index (CI has it).

    python .ci/check_extras.py [extra ...]      # default: every extra
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from importlib.metadata import distributions
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def pins(requirements: list[str]) -> dict[str, Version]:
    """name -> version for each `name==version` requirement."""
    out = {}
    for line in requirements:
        req = Requirement(line)
        exact = [s for s in req.specifier if s.operator == "=="]
        if exact:
            out[canonicalize_name(req.name)] = Version(exact[0].version)
    return out


def resolve(requirements: list[str]) -> tuple[dict[str, Version] | None, str]:
    """The versions this environment would have after installing these: (name -> version, pip's output)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet"]
        proc = subprocess.run(
            [*cmd, "--report", str(report), *requirements], capture_output=True, text=True, timeout=1800
        )
        if proc.returncode != 0:
            return None, proc.stdout + proc.stderr
        installs = json.loads(report.read_text())["install"]
    resolved = {canonicalize_name(d.metadata["Name"]): Version(d.version) for d in distributions()}
    resolved.update(  # what pip would add or change
        {canonicalize_name(i["metadata"]["name"]): Version(i["metadata"]["version"]) for i in installs}
    )
    return resolved, proc.stdout + proc.stderr


def check(extra: str, core: list[str], extras: dict[str, list[str]]) -> list[str]:
    """The problems with one extra (empty: it resolves to its pins)."""
    requirements = core + extras[extra]
    start = time.time()
    resolved, output = resolve(requirements)
    took = time.time() - start
    if resolved is None:
        return [f"[{extra}] pip could not resolve it ({took:.0f} s):\n{output[-3000:]}"]
    problems = []
    for name, pinned in pins(requirements).items():
        got = resolved.get(name)
        # a local build of the pinned version (torch 2.13.0+cpu) is that version
        if got is None or Version(got.public) != pinned:
            problems.append(f"[{extra}] {name}: pinned {pinned}, resolves to {got}")
    shown = ", ".join(f"{n}=={resolved[n]}" for n in sorted(pins(extras[extra])) if n in resolved)
    print(f"[{extra}] resolves with the core pins in {took:.0f} s: {shown or 'no pins of its own'}")
    return problems


def main(argv: list[str]) -> int:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core, extras = project["dependencies"], project["optional-dependencies"]
    unknown = [e for e in argv if e not in extras]
    if unknown:
        print(f"unknown extra(s) {unknown}; pyproject.toml has {sorted(extras)}", file=sys.stderr)
        return 2
    unpinned = [
        f"[{e}] {r}"
        for e in (argv or extras)
        for r in extras[e]
        if canonicalize_name(Requirement(r).name) not in pins([r])
    ]
    problems = []
    for extra in argv or extras:
        problems += check(extra, core, extras)
    if unpinned:
        print("not pinned (any version may come):\n  " + "\n  ".join(unpinned))
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
