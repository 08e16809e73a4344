import json
from types import SimpleNamespace

from grpo_recipes.outputs.sweep import summarize_sweep


def fake_job(root, name, overrides, accs, finished=True):
    job = root / name
    (job / "eval_results").mkdir(parents=True)
    (job / "config.yaml").write_text("seed: 0\n")
    (job / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    for step, acc in accs.items():
        (job / "eval_results" / f"eval_step_{step}.json").write_text(
            json.dumps({"step": step, "metrics": {"accuracy": acc}})
        )
    if finished:
        (job / "train_results.json").write_text("{}")


def test_summary_ranks_jobs_by_latest_accuracy_and_handles_partial_sweeps(tmp_path):
    fake_job(tmp_path, "0", ["output_root=x", "learning_rate=1e-6"], {0: 0.2, 40: 0.3})
    fake_job(tmp_path, "1", ["output_root=x", "learning_rate=1e-5"], {0: 0.2, 40: 0.8})
    fake_job(tmp_path, "2", ["output_root=x", "learning_rate=1e-4"], {0: 0.2, 20: 0.5}, finished=False)
    fake_job(tmp_path, "3", ["output_root=x", "learning_rate=1e-3"], {}, finished=False)
    summary = summarize_sweep(tmp_path).read_text()
    rows = [line for line in summary.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[2].strip() for r in rows] == ["1", "2", "0", "3"]
    assert "`learning_rate=1e-5` | 80.0% | 40 | 20.0% | +60.0 pts |  | finished" in rows[0]
    assert "running or stopped" in rows[1] and "no eval yet" in rows[3]
    assert "output_root" not in summary  # overrides shared by every job are not a sweep parameter
    assert (tmp_path / "summary.png").read_bytes()[:4] == b"\x89PNG"


def finished_trial(root, name, overrides, objective, metric="mean_score"):
    fake_job(root, name, overrides, {0: 0.1, 2: 0.2})
    (root / name / "train_results.json").write_text(
        json.dumps({"objective": objective, "optimized_metric": metric})
    )


def test_a_search_summary_ranks_by_the_objective_in_its_direction_and_plots_it(tmp_path):
    (tmp_path / "search.json").write_text(json.dumps({"study_name": "s", "direction": "minimize"}))
    finished_trial(tmp_path, "0", ["learning_rate=1e-5"], 0.5)
    finished_trial(tmp_path, "1", ["learning_rate=1e-4"], 0.25)
    finished_trial(tmp_path, "2", ["learning_rate=1e-6"], 0.75)
    fake_job(tmp_path, "3", ["learning_rate=3e-6"], {0: 0.1}, finished=False)  # cut off: no objective
    summary = summarize_sweep(tmp_path).read_text()
    rows = [line for line in summary.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[2].strip() for r in rows] == ["1", "0", "2", "3"]  # minimize, unfinished last
    assert "| mean_score 0.25 |" in rows[0]
    assert "Best: job 1, mean_score 0.25 (`learning_rate=1e-4`)" in summary
    assert "ranked by the objective the search optimized (minimize mean_score" in summary
    assert (
        "| rank | job | overrides | final accuracy | at step | baseline | change | objective | status |"
        in summary
    )
    assert (tmp_path / "objective.png").read_bytes()[:4] == b"\x89PNG"


def test_a_stored_study_resumes_where_it_stopped(tmp_path):
    import optuna
    from omegaconf import OmegaConf

    from grpo_recipes.outputs.sweep import prepare_study

    storage = f"sqlite:///{tmp_path}/sweep/optuna.db"
    sweeper = SimpleNamespace(
        storage=storage,
        study_name="lr",
        direction="maximize",
        n_trials=5,
        job_idx=0,
        sweep_dir=str(tmp_path / "sweep"),
    )
    prepare_study(sweeper)  # a new study: nothing to resume, the directory exists for SQLite
    assert (sweeper.n_trials, sweeper.job_idx) == (5, 0)
    assert json.loads((tmp_path / "sweep" / "search.json").read_text())["direction"] == "maximize"
    study = optuna.create_study(study_name="lr", storage=storage, direction="maximize")
    for value in (0.1, 0.3):
        trial = study.ask()
        trial.suggest_float("lr", 1e-6, 1e-4, log=True)
        study.tell(trial, value)
    study.ask()  # the trial that was running when the search was interrupted
    sweeper.direction = OmegaConf.create(["maximize"])  # as the plugin's config gives it
    prepare_study(sweeper)
    assert (sweeper.n_trials, sweeper.job_idx) == (3, 3)  # 2 done of 5; the next trial runs in <sweep>/3
    states = [t.state for t in optuna.load_study(study_name="lr", storage=storage).trials]
    assert states[-1] == optuna.trial.TrialState.FAIL
