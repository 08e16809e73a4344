"""A new user's habits, end to end on the tiny model: their own configs (--config-dir), TRL's names,
logger=trackio (offline, local), samples.jsonl; and an Optuna search that resumes."""

import json
import sqlite3
import textwrap
from pathlib import Path

import pytest
import yaml
from conftest import read_jsonl, run_train

from grpo_common.errors import ConfigError
from grpo_recipes.config.preflight import check, compose, parse

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config"
TINY = ["eval.size=2", "eval.batch_size=4", "grpo.max_completion_length=8", "max_steps=2"]

# Loaded first by the run (PYTHONPATH): every connection to anything but this machine is refused and noted.
NO_NETWORK = """
import os, socket
_connect = socket.socket.connect
def connect(self, address):
    host = address[0] if isinstance(address, tuple) else str(address)
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
        with open(os.environ["NETWORK_LOG"], "a") as f:
            f.write(f"{address}\\n")
        raise OSError("network refused by the test")
    return _connect(self, address)
socket.socket.connect = connect
"""


def user_configs(root: Path) -> Path:
    """What a user keeps outside the package: a dataset and an experiment of their own."""
    (root / "dataset").mkdir(parents=True)
    (root / "experiment").mkdir()
    (root / "dataset" / "my_sums.yaml").write_text(
        textwrap.dedent("""\
        defaults: [/_schema/dataset@_here_, _self_]
        name: my_sums
        tasks:
          basic_arithmetic: {weight: 1.0, config: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}}
        """)
    )
    (root / "experiment" / "mine.yaml").write_text(
        textwrap.dedent("""\
        # @package _global_
        defaults:
          - override /dataset: my_sums
        learning_rate: 3.0e-5
        run_name: mine
        """)
    )
    return root


def test_a_users_dataset_without_its_name_is_one_line(tmp_path):
    """A dataset file that builds on the declared defaults but leaves their mandatory `name` unset: the
    line names the key, not OmegaConf's interpolation error from run_name."""
    configs = user_configs(tmp_path / "my_configs")
    mine = configs / "dataset" / "my_sums.yaml"
    mine.write_text(mine.read_text().replace("name: my_sums\n", ""))
    with pytest.raises(ConfigError, match=r"^dataset.name: not set; it takes the dataset's short name"):
        check(["train_grpo.py", "--config-dir", str(configs), "dataset=my_sums"], CONFIG)


def test_config_dir_adds_a_users_dataset_and_experiment(tmp_path):
    configs = user_configs(tmp_path / "my_configs")
    argv = ["train_grpo.py", "--config-dir", str(configs), "experiment=mine", "model=tiny_random"]
    line = parse(argv)
    cfg, run_dir = compose(CONFIG, line, line.overrides)
    assert cfg["dataset"]["name"] == "my_sums" and cfg["learning_rate"] == 3e-5
    assert cfg["dataset"]["tasks"]["basic_arithmetic"]["config"]["max_digits"] == 1
    assert cfg["dataset"]["rewards"]  # inherited from the declared dataset defaults (_schema/dataset)
    assert run_dir == Path("outputs/mine")
    # the whole pre-flight check passes; Hydra gets the flags first
    assert check(argv, CONFIG) == [argv[0], f"--config-dir={configs}", "experiment=mine", "model=tiny_random"]


@pytest.mark.slow
def test_a_users_run_with_trl_names_trackio_and_samples(tmp_path):
    configs = user_configs(tmp_path / "my_configs")
    (tmp_path / "guard").mkdir()
    (tmp_path / "guard" / "sitecustomize.py").write_text(NO_NETWORK)
    import os

    proc = run_train(
        "--config-dir",
        str(configs),
        "experiment=mine",
        "model_name_or_path=tiny-random",  # TRL's name
        "num_generations=4",  # a GRPOConfig field at the top level
        "torch_dtype=bfloat16",  # a GPU script's habit: bf16 weights, trained by the rounding AdamW
        "report_to=trackio",  # -> logger=trackio
        "log_samples_every=1",
        f"output_root={tmp_path}",
        *TINY,
        env={
            "PYTHONPATH": os.pathsep.join([str(tmp_path / "guard"), os.environ.get("PYTHONPATH", "")]),
            "NETWORK_LOG": str(tmp_path / "network.log"),
        },
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "mine"
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["dataset"]["name"] == "my_sums" and cfg["grpo"]["num_generations"] == 4
    assert cfg["model"]["path"] == "tiny-random" and cfg["report_to"] == "trackio"
    log = (run / "train.log").read_text()
    assert "parameters, bfloat16)" in log  # as asked, and told once how they train
    assert log.count("AdamW on the bf16 weights in fp32 math, weights and moments rounded stochastic") == 1
    # samples.jsonl: what the model wrote at each step, with each reward and the answer read
    samples = read_jsonl(run / "samples.jsonl")
    assert sorted({s["step"] for s in samples}) == [1, 2]
    assert all(set(s["rewards"]) == {"accuracy", "format"} for s in samples)
    assert all(isinstance(s["truncated"], bool) and s["rule"] for s in samples)
    assert "## What the model wrote" in (run / "report.md").read_text()
    # trackio: a local database under <output_root>/trackio with metrics.jsonl's names, and no network
    assert not (tmp_path / "network.log").exists(), (tmp_path / "network.log").read_text()
    databases = list((tmp_path / "trackio").rglob("*.db"))
    assert databases, list((tmp_path / "trackio").rglob("*"))
    logged = set()
    for db in databases:
        with sqlite3.connect(db) as con:
            tables = [t for (t,) in con.execute("select name from sqlite_master where type='table'")]
            if "metrics" in tables:
                for (text,) in con.execute("select metrics from metrics"):
                    logged |= set(json.loads(text))
    metric_names = {k for line in read_jsonl(run / "metrics.jsonl") for k in line} - {"step", "split", "time"}
    assert {"train/reward", "eval/accuracy"} <= logged
    assert {k for k in metric_names if k.startswith(("train/rewards/", "eval/"))} <= logged
    assert "train/samples" in logged  # the samples table


@pytest.mark.slow
def test_optuna_search_of_three_trials_ends_with_a_best_value_and_resumes(tmp_path):
    search = [
        "-m",
        "hparams_search=lr_beta",
        "model=tiny_random",
        "hydra.sweeper.n_trials=3",
        "run_name=s",
        "log_samples_every=0",
        f"output_root={tmp_path}",
        *TINY[:3],
        "max_steps=1",
    ]
    proc = run_train(*search, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = tmp_path / "s-lr_beta"
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert set(best["best_params"]) == {"learning_rate", "grpo.beta"} and 0.0 <= best["best_value"] <= 1.0
    assert "Best parameters" in proc.stdout + proc.stderr
    summary = (sweep / "summary.md").read_text()
    rows = [line for line in summary.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 3 and all("accuracy " in r for r in rows)  # each trial's objective
    assert "Best: job" in summary
    assert (sweep / "objective.png").read_bytes()[:4] == b"\x89PNG"
    # the same command with one more trial wanted: the study continues, trials 0-2 are left as they were
    before = {j: (sweep / j / "train_results.json").read_text() for j in "012"}
    proc = run_train(*[a.replace("n_trials=3", "n_trials=4") for a in search], timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "3 trials complete, 1 to go" in proc.stdout + proc.stderr
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1", "2", "3"]
    assert {j: (sweep / j / "train_results.json").read_text() for j in "012"} == before


def test_a_search_without_multirun_is_one_clear_message():
    from grpo_common.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"runs many jobs: add -m, as in `python train_grpo.py -m hparams_search"
    ):
        check(["train_grpo.py", "hparams_search=lr_beta", "model=tiny_random"], CONFIG)
