"""The command line, checked before Hydra runs a job: group options, keys, values and the run dir.

Hydra creates the run directory before the job starts, so a mistake found inside the job would
leave one behind; here nothing exists yet. Every job of a sweep is checked before the first runs
(each swept value once). A resume is planned here too: the run's own saved overrides replace the
command's (resume.py), so Hydra composes exactly the run that is continued.
Values are checked first with Hydra and OmegaConf alone, so a wrong value costs about a second;
the registries (tasks, rewards) and TRL's own rules come next, in this process, which the job then
reuses.
"""
from __future__ import annotations

import difflib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_common.errors import ConfigError
from grpo_recipes.checks import check_config, check_values, unknown_key_message

# Hydra's own informational flags: they run no job, so nothing is checked.
INFO_FLAGS = ("--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc",
              "--version", "--resolve", "--package", "-p", "--config-path", "-cp", "--experimental-rerun")


@dataclass
class CommandLine:
    flags: list[str] = field(default_factory=list)  # kept as given (-m, --config-dir X, ...)
    overrides: list[str] = field(default_factory=list)
    config_name: str = "train"
    search_dirs: list[str] = field(default_factory=list)
    multirun: bool = False


def parse(argv: list[str]) -> CommandLine | None:
    """None when the command runs no job (--cfg, --help, ...) or uses flags left to Hydra."""
    line, args = CommandLine(), iter(argv[1:])
    for arg in args:
        name, eq, inline = arg.partition("=")
        if name in INFO_FLAGS:
            return None
        if arg in ("-m", "--multirun"):
            line.multirun = True
            line.flags.append(arg)
        elif name in ("--config-dir", "-cd", "--config-name", "-cn"):
            value = inline if eq else next(args, "")
            line.flags += [name, value]
            if name in ("--config-dir", "-cd"):
                line.search_dirs.append(str(Path(value).expanduser().resolve()))
            else:
                line.config_name = value
        elif arg.startswith("-"):
            return None
        else:
            line.overrides.append(arg)
    return line


def job_variants(overrides: list[str]) -> list[list[str]]:
    """The jobs to check: every value of each swept key once, the other keys at their first value.
    Ranges a search samples from (interval(...)) are checked inside each job instead."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as err:
        raise ConfigError(f"{_first_line(err)} (overrides are key=value; quote values with spaces)") from None
    fixed, swept = [], []
    for o in parsed:
        if not o.is_sweep_override():
            fixed.append(o.input_line)
        elif o.is_discrete_sweep():
            swept.append([f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()])
    first = [values[0] for values in swept]
    jobs = [fixed + first]
    for i, values in enumerate(swept):
        jobs += [fixed + first[:i] + [v] + first[i + 1:] for v in values[1:]]
    return jobs


def compose(config_dir: Path, line: CommandLine, overrides: list[str]) -> tuple[dict[str, Any], Path]:
    """The resolved config of one job, and its run directory; Hydra's errors as one line."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import ConfigCompositionException, MissingConfigException
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    search = [f"hydra.searchpath=[{','.join('file://' + d for d in line.search_dirs)}]"] if line.search_dirs else []
    error = None
    with initialize_config_dir(version_base="1.3", config_dir=str(config_dir), job_name="train_grpo"):
        try:
            cfg = hydra_compose(line.config_name, overrides=overrides + search, return_hydra_config=True)
        except MissingConfigException as err:
            raise ConfigError(_missing_option(err)) from None
        except ConfigCompositionException as err:
            error = err
    if error is not None:  # outside the block: naming an unknown key composes the config again
        raise ConfigError(_composition_error(error, config_dir, line, overrides))
    try:
        run_dir = Path(OmegaConf.select(cfg, "hydra.run.dir"))
        with open_dict(cfg):
            cfg.output_dir = str(run_dir)  # ${hydra:runtime.output_dir} exists only inside the job
            del cfg["hydra"]
        return OmegaConf.to_container(cfg, resolve=True), run_dir
    except OmegaConfBaseException as err:
        raise ConfigError(f"{_first_line(err)}") from None


def _missing_option(err) -> str:
    missing = err.missing_cfg_file or ""
    if err.options is None or "/" not in missing:
        return _first_line(err)
    group, value = missing.rsplit("/", 1)
    close = difflib.get_close_matches(value, err.options, n=3, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    extra = " (or model=<hub id or local dir>: a hub id is org/name)" if group == "model" else ""
    return f"{group}={value}: no such option.{hint} Options: {', '.join(sorted(err.options))}{extra}"


def _composition_error(err, config_dir: Path, line: CommandLine, overrides: list[str]) -> str:
    """An unknown key (`max_step=100`, `eval.sizes=3`): name it with the close matches at its level."""
    import re

    from omegaconf import OmegaConf

    match = re.search(r"Could not override '([^']+)'", str(err))
    if not match:
        return _first_line(err)
    key = match.group(1)
    rest = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] != key]
    try:
        cfg, _ = compose(config_dir, line, rest)
    except ConfigError:
        return _first_line(err)
    parent = OmegaConf.select(OmegaConf.create(cfg), key.rpartition(".")[0]) if "." in key else cfg
    if not hasattr(parent, "keys"):
        return _first_line(err)
    return unknown_key_message(key, sorted(parent.keys()))


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def check(argv: list[str], config_dir: Path) -> list[str]:
    """Check every job of the command; returns the argv Hydra should run (a resume: the run's own)."""
    from grpo_recipes import resume

    line = parse(argv)
    if line is None:
        return argv
    jobs = [compose(config_dir, line, job) for job in job_variants(line.overrides)]
    for cfg, _ in jobs:  # every value first: a typo in a sweep's last job costs no import
        check_values(cfg)
    for cfg, _ in jobs:
        check_config(cfg)
    from grpo_recipes.config import (
        check_trainer_config,  # TRL: seconds to import, and the job needs it anyway
    )

    for cfg, _ in jobs:
        check_trainer_config(cfg)
    if line.multirun:
        return argv  # each job plans its own directory (run.py)
    cfg, run_dir = jobs[0]
    plan = resume.plan_run(run_dir, cfg["resume"], cfg["eval_only"])
    if plan.action == "new":
        return argv
    saved = resume.saved_overrides(run_dir)
    overrides = resume.merge_overrides(saved, line.overrides) if saved is not None else line.overrides
    now, _ = compose(config_dir, line, overrides)
    check_config(now)
    check_trainer_config(now)
    before = compose(config_dir, line, saved)[0] if saved is not None else None
    resume.check_changes(run_dir, _read_config(run_dir) or before or now, now)
    if plan.action == "finished":
        resume.check_finished(run_dir, resume.changed_keys(before or _read_config(run_dir) or now, now))
        print(resume.finished_message(run_dir))
        sys.exit(0)
    return argv[:1] + line.flags + overrides


def _read_config(run_dir: Path) -> dict[str, Any] | None:
    """The run's resolved config as written when it started (config.yaml)."""
    from omegaconf import OmegaConf

    path = run_dir / "config.yaml"
    if not path.is_file():
        return None
    cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    cfg["output_dir"] = str(run_dir)
    return cfg


def check_command_line(argv: list[str], config_dir: Path) -> list[str]:
    """check(), with a mistake printed as one line and exit code 2 (HYDRA_FULL_ERROR=1: the traceback)."""
    try:
        return check(argv, config_dir)
    except ConfigError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
