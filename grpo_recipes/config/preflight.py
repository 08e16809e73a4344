"""The command line, checked before Hydra runs a job: group options, keys, values and the run dir.

Hydra creates the run directory before the job starts, so a mistake found inside the job would leave one
behind; here nothing exists yet. Every job of a sweep is checked before the first runs (each swept value
once). A resume is planned here too: the run's own saved overrides replace the command's (resume.py), so Hydra
composes exactly the run that is continued. Values are checked first with Hydra and OmegaConf alone, so a
wrong value costs about a second; the registries (tasks, rewards) and TRL's own rules come next, in this
process, which the job then reuses."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import get_args_parser  # the parser hydra.main reads argv with
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from grpo_common.errors import ConfigError, did_you_mean, first_line
from grpo_recipes.config import resume
from grpo_recipes.config.checks import check_config, check_values, known_keys, unknown_key_message
from grpo_recipes.config.knobs import CLOSED_SECTIONS, KNOBS, SCHEMA, register

MAX_JOBS_PLANNED = 512  # a bigger sweep is checked one swept value at a time, each value once


def parse(argv: list[str]):
    """Hydra's own reading of the command line (the namespace hydra.main gets); None when it runs no job
    (--cfg, --help, --info, ...)."""
    args = get_args_parser().parse_intermixed_args(argv[1:])  # flags anywhere, as before
    informational = ("help", "hydra_help", "cfg", "info", "shell_completion", "experimental_rerun")
    return None if any(getattr(args, name) for name in informational) else args


def config_flags(line) -> list[str]:
    """The command's config flags, as Hydra reads them again (a resume keeps them)."""
    names = {"config_path": "--config-path", "config_name": "--config-name", "config_dir": "--config-dir"}
    given = [f"{flag}={getattr(line, key)}" for key, flag in names.items() if getattr(line, key) is not None]
    return ["-m"] * line.multirun + given


def expand(line) -> tuple[list[list[str]], bool]:
    """The jobs of the command in Hydra's order (a sweep: as the basic sweeper splits it), and whether their
    directories can be planned here. A sweep that is too big, or ranges a search samples from
    (interval(...)), are checked one value at a time; the values a search picks are checked inside each
    job."""
    try:
        parsed = OverridesParser.create().parse_overrides(line.overrides)
    except OverrideParseException as err:
        raise ConfigError(f"{first_line(err)} (overrides are key=value; quote values with spaces)") from None
    swept = [o for o in parsed if o.is_sweep_override()]
    if swept and not line.multirun:
        raise ConfigError(
            f"{swept[0].input_line}: several values are a sweep; add -m to run one job per value"
        )
    discrete = [o for o in parsed if not o.is_sweep_override() or o.is_discrete_sweep()]
    plannable = len(discrete) == len(parsed)
    choices = [
        [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
        if o.is_sweep_override()
        else [o.input_line]
        for o in discrete
    ]
    if math.prod(len(c) for c in choices) <= MAX_JOBS_PLANNED:
        return BasicSweeper.split_arguments(discrete, max_batch_size=None)[0], plannable
    return [[c[i % len(c)] for c in choices] for i in range(max(len(c) for c in choices))], False


def compose(
    config_dir: Path,
    line,
    overrides: list[str],
    job_num: int | None = None,
    hydra_cfg: dict | None = None,
) -> tuple[dict[str, Any], Path]:
    """The resolved config of one job, and its run directory (`job_num`: a sweep's job); Hydra's errors
    as one line. `hydra_cfg` receives the job's launcher and sweeper targets."""
    register()  # the declared defaults (train_grpo.py registers them too; tests call this directly)
    search = [f"hydra.job.num={job_num}"] if job_num is not None else []
    if line.config_dir is not None:
        search.append(f"hydra.searchpath=[file://{Path(line.config_dir).expanduser().resolve()}]")
    # --config-path is relative to train_grpo.py, as Hydra reads it
    where = str((config_dir if line.config_path is None else config_dir.parent / line.config_path).resolve())
    try:
        with initialize_config_dir(version_base="1.3", config_dir=where, job_name="train_grpo"):
            cfg = hydra_compose(
                line.config_name or "train", overrides=overrides + search, return_hydra_config=True
            )
    except MissingConfigException as err:
        raise ConfigError(_missing_option(err)) from None
    except ConfigCompositionException as err:
        raise ConfigError(_composition_error(err)) from None
    except ValueError as err:  # OmegaConf reads the key after a list value as an index (eval.pass_k.k.x=1)
        raise ConfigError(_under_a_value(overrides) or first_line(err)) from None
    raw = OmegaConf.to_container(cfg, resolve=False)
    if missing := _unset({k: v for k, v in raw.items() if k != "hydra"}):  # before run_name reads them
        doc = KNOBS[missing].metadata["doc"] if missing in KNOBS else "a value"
        raise ConfigError(f"{missing}: not set; it takes {doc}: add {missing}=... or set it in its file")
    try:
        hydra = cfg.hydra
        run_dir = Path(hydra.run.dir) if job_num is None else Path(hydra.sweep.dir, str(hydra.sweep.subdir))
        if hydra_cfg is not None:
            hydra_cfg.update(launcher=hydra.launcher._target_, sweeper=hydra.sweeper._target_)
        with open_dict(cfg):
            cfg.output_dir = os.path.abspath(run_dir)  # as Hydra sets ${hydra:runtime.output_dir} in the job
            del cfg["hydra"]
        return OmegaConf.to_container(cfg, resolve=True), run_dir
    except OmegaConfBaseException as err:
        raise ConfigError(first_line(err)) from None


def _unset(node: Any, prefix: str = "") -> str | None:
    """The first key left at OmegaConf's mandatory `???` (model.path under model=custom, a dataset file's
    name), or None."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        found = f"{prefix}{key}" if value == "???" else _unset(value, f"{prefix}{key}.")
        if found:
            return found
    return None


def _missing_option(err) -> str:
    missing = err.missing_cfg_file or ""
    if err.options is None or "/" not in missing:
        return first_line(err)
    group, value = missing.rsplit("/", 1)
    hint = did_you_mean(value, err.options, cutoff=0.5)
    own = " (a model of your own: model=<org/name> or model=<local dir>, or model=custom model.path=<it>)"
    extra = own if group == "model" else ""
    return f"{group}={value}: no such option.{hint} Options: {', '.join(sorted(err.options))}{extra}"


def _composition_error(err) -> str:
    """An unknown key (`max_step=100`, `eval.sizes=3`): name it with the declared keys at its level."""
    match = re.search(r"Could not override '([^']+)'", str(err))
    if not match:
        return first_line(err)
    key = match.group(1)
    if under := _under_a_value([key]):
        return under
    parent, _, name = key.rpartition(".")
    if parent in CLOSED_SECTIONS:  # a declared key fails only under a section set to null: Hydra's line then
        known = known_keys(parent)
        return first_line(err) if name in known else unknown_key_message(key, known)
    head = key.split(".")[0]  # the unknown part is higher up (`evall.size`): name that; hydra's are Hydra's
    known = known_keys("")
    return first_line(err) if head in known or head == "hydra" else unknown_key_message(head, known)


def _under_a_value(overrides: list[str]) -> str | None:
    """A key under a declared value (`seed.x=1`, `eval.pass_k.k.x=1`), which has no keys; else None."""
    for override in overrides:
        parts = override.lstrip("+~").split("=", 1)[0].split(".")
        for head in (".".join(parts[:i]) for i in range(1, len(parts))):
            if head in SCHEMA and SCHEMA[head].kind != "dict":  # a dict value (dataset.tasks) takes keys
                return f"{'.'.join(parts)}: {head} is a value, not a section; set {head}=<value>"
    return None


def check(argv: list[str], config_dir: Path) -> list[str]:
    """Check every job of the command; returns the argv Hydra should run (a resume: the run's own)."""
    line = parse(argv)
    if line is None:
        return argv
    argv = argv[:1] + config_flags(line) + line.overrides  # flags first: Hydra's parser wants them there
    if any(o.split("=", 1)[0].lstrip("+") == "output_dir" for o in line.overrides):
        raise ConfigError(
            "output_dir is the run directory Hydra makes: set output_root=... and run_name=... "
            "(or hydra.run.dir=...) instead"
        )
    job_overrides, plannable = expand(line)
    check_search(line)
    hydra_cfg: dict[str, Any] = {}
    jobs = [
        compose(config_dir, line, job, i if line.multirun else None, hydra_cfg)
        for i, job in enumerate(job_overrides)
    ]
    for cfg, _ in jobs:  # every value first: a typo in a sweep's last job costs no import
        check_values(cfg)
    basic_sweeper = hydra_cfg.get("sweeper", "").endswith("BasicSweeper")
    if not line.multirun and not basic_sweeper:
        raise ConfigError(
            "a search (hparams_search=... or hydra/sweeper=...) runs many jobs: add -m, as in "
            "`python train_grpo.py -m hparams_search=lr_beta`"
        )
    main, plans = int(os.environ.get("RANK", "0")) == 0, []
    if plannable and basic_sweeper:  # otherwise each job plans its own (train/run.py)
        plans = [resume.plan_run(run_dir, cfg["resume"], cfg["eval_only"], main) for cfg, run_dir in jobs]
    if not line.multirun and plans[0].action != "new":  # a resume: the run's own overrides, checked again
        argv, jobs = _resume(argv, config_dir, line, jobs[0][1], plans[0])
    elif plans and all(p.action == "finished" for p in plans):
        for cfg, run_dir in jobs:
            resume.check_finished(run_dir, cfg["max_steps"])
        print(
            f"every job of this sweep already finished: nothing to do, and nothing was changed "
            f"({', '.join(str(p.run_dir) for p in plans)})"
        )
        sys.exit(0)
    weights = [check_config(cfg) for cfg, _ in jobs]
    # TRL's rules need the hardware that runs the jobs: this one, unless a launcher sends them elsewhere
    if not line.multirun or hydra_cfg.get("launcher", "").endswith("BasicLauncher"):
        from grpo_recipes.config.trainer_args import check_trainer_config  # TRL: the job needs it anyway

        for (cfg, _), reward_weights in zip(jobs, weights):
            check_trainer_config(cfg, reward_weights)  # kept: the job runs this GRPOConfig
    return argv


def check_search(line) -> None:
    """hparams_search= needs the Optuna sweeper plugin, an optional extra."""
    searched = [
        o for o in line.overrides if o.lstrip("+").startswith("hparams_search=") and not o.endswith("=null")
    ]
    if searched and importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None:
        raise ConfigError(
            f"{searched[0]}: the search runs on Optuna's Hydra sweeper, which is not installed: "
            "pip install -e '.[optuna]'"
        )


def _resume(argv: list[str], config_dir: Path, line, run_dir: Path, plan) -> tuple[list, list]:
    """The resumed run's own overrides with this command's on top: refused if they change what it learns."""
    saved = resume.saved_overrides(run_dir)
    overrides = resume.merge_overrides(saved, line.overrides) if saved is not None else line.overrides
    now, _ = compose(config_dir, line, overrides)
    check_values(now)
    # changes from its config.yaml; a finished run's from its overrides composed again, so that only what
    # this command asks to change counts, not newer defaults
    before = resume.saved_config(run_dir) if plan.action == "resume" else None
    if before is None:
        before = compose(config_dir, line, saved)[0] if saved is not None else now
    resume.check_changes(run_dir, before, now)
    if plan.action == "finished":
        resume.check_finished(run_dir, now["max_steps"])
        print(resume.finished_message(run_dir))
        sys.exit(0)
    resume.check_resume_point(run_dir, now["max_steps"])
    return argv[:1] + config_flags(line) + overrides, [(now, run_dir)]


def check_command_line(argv: list[str], config_dir: Path) -> list[str]:
    """check(), with a mistake printed as one line and exit code 2 (HYDRA_FULL_ERROR=1: the traceback)."""
    try:
        return check(argv, config_dir)
    except ConfigError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
