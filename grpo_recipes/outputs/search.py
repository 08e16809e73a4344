"""Hyperparameter search (`-m hparams_search=<preset>`): Optuna through Hydra's sweeper plugin, with a
study that resumes.

Each trial is one job of train_grpo.py, in <sweep dir>/<trial number>; it returns the final fixed
eval's `optimized_metric` (run.py), which Optuna maximizes or minimizes. The study lives in
<sweep dir>/optuna.db (SQLite; optuna 2.10, the version the Hydra plugin takes, needs SQLAlchemy < 2,
pinned in pyproject.toml). Re-running the same command continues it:
  - trials already complete count towards n_trials (the stock sweeper would run n_trials more);
  - a trial left RUNNING by an interrupted search is marked FAIL (its job never returned a value);
  - new trials get new job numbers, so no finished trial's directory is touched.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("grpo_recipes")


def prepare_study(sweeper: Any) -> None:
    """Before the stock sweep loop: settle an existing study's interrupted trials and count what is left.

    `sweeper` is hydra-optuna-sweeper's OptunaSweeperImpl (storage, study_name, n_trials, job_idx,
    sweep_dir)."""
    import optuna

    storage = sweeper.storage
    sweep_dir = Path(str(sweeper.sweep_dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)  # SQLite creates its file, not the directory
    direction = sweeper.direction  # a name, a Direction enum, or a list of them (several objectives)
    if not isinstance(direction, str) and not hasattr(direction, "name"):
        direction = next(iter(direction))
    # what the sweep summary ranks by (sweep.py): this search's direction
    (sweep_dir / "search.json").write_text(
        json.dumps(
            {
                "study_name": sweeper.study_name,
                "storage": str(storage),
                "direction": getattr(direction, "name", direction),
            }
        )
    )
    if storage is None:  # in memory: nothing to resume
        return
    names = {s.study_name for s in optuna.study.get_all_study_summaries(storage=storage)}
    if sweeper.study_name not in names:
        return
    study = optuna.load_study(study_name=sweeper.study_name, storage=storage)
    trials = study.get_trials(deepcopy=False)
    for trial in trials:
        if trial.state == optuna.trial.TrialState.RUNNING:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
    done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    sweeper.n_trials = max(0, sweeper.n_trials - done)
    sweeper.job_idx = len(trials)  # trial k runs in <sweep dir>/k: continue the numbering
    log.info(
        "Resuming study %s (%s): %d trials complete, %d to go",
        sweeper.study_name,
        storage,
        done,
        sweeper.n_trials,
    )
