"""Checkpoints are whole or absent (grpo_recipes/outputs/checkpoints.py): a save killed midway leaves no
checkpoint-N, and a resume continues from the newest whole checkpoint, setting the damaged ones aside."""

import json
import logging
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from grpo_common.errors import ConfigError
from grpo_recipes.config import resume
from grpo_recipes.outputs.checkpoints import WholeCheckpoints, problem, usable_checkpoint
from tests.conftest import read_jsonl, run_train

RUN = [
    *("model=tiny_random", "eval.size=4", "grpo.max_completion_length=8", "eval.every_n_steps=0"),
    *("grpo.save_steps=1", "dataset.rewards.boom.fn=tests.test_checkpoint_faults.exit_at_step"),
]


def exit_at_step(prompts, completions, **kwargs):
    """A reward that kills its process outright (no cleanup, as a crash or SIGKILL) once FAULT_EXIT_AT_STEP
    steps are trained; otherwise it scores 0 and changes nothing (the fixed eval calls it with no state)."""
    state = kwargs.get("trainer_state")
    if state is not None and os.environ.get("FAULT_EXIT_AT_STEP") == str(state.global_step):
        os._exit(9)
    return [0.0] * len(completions)


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    """A real run of 5 steps killed before its 4th: checkpoint-2 and checkpoint-3 (save_total_limit 2)."""
    root = tmp_path_factory.mktemp("killed")
    fault = {"FAULT_EXIT_AT_STEP": "3"}
    proc = run_train(*RUN, "max_steps=5", f"output_root={root}", "run_name=r", env=fault)
    assert proc.returncode == 9, proc.stderr[-3000:]
    run = root / "r"
    assert names(run) == ["checkpoint-2", "checkpoint-3"]
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl") if "train/loss" in r] == [1, 2, 3]
    assert not (run / "reward_errors.jsonl").exists()
    return run


def listing(d: Path) -> list[tuple[str, int]]:  # every file and its size (a set-aside name as it was)
    return sorted(
        (str(p.relative_to(d)).replace(".damaged", ""), p.stat().st_size) for p in d.rglob("*") if p.is_file()
    )


def names(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("checkpoint-*"))


def cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def set_step(checkpoint: Path, step: int) -> None:
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    (checkpoint / "trainer_state.json").write_text(json.dumps({**state, "global_step": step}))


def sharded(c: Path) -> None:  # transformers' sharded weights: an index and the shards it names
    (c / "model.safetensors").rename(c / "model-00001-of-00002.safetensors")
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (c / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    shutil.copy(c / "model-00001-of-00002.safetensors", c / "model-00002-of-00002.safetensors")


def zero(c: Path) -> None:  # a DeepSpeed ZeRO-3 checkpoint: per-rank torch.save shards, no safetensors
    (c / "global_step3").mkdir()
    for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt"):
        shutil.copy(c / "optimizer.pt", c / "global_step3" / name)
    (c / "latest").write_text("global_step3")
    (c / "model.safetensors").unlink()


def fsdp(c: Path) -> None:  # FSDP's SHARDED_STATE_DICT: torch distributed checkpoint directories
    for d in ("pytorch_model_fsdp_0", "optimizer_0"):
        (c / d).mkdir()
        (c / d / "__0_0.distcp").write_bytes(b"\0" * 64)
    (c / "model.safetensors").unlink()


def lora(c: Path) -> None:
    (c / "model.safetensors").rename(c / "adapter_model.safetensors")
    (c / "adapter_config.json").write_text(json.dumps({"r": 8}))


WHOLE = {"full": lambda c: None, "lora": lora, "sharded": sharded, "zero": zero, "fsdp": fsdp}
DAMAGES = {  # what is done to checkpoint-3: what problem() says
    "model_cut": (lambda c: cut(c / "model.safetensors"), "model.safetensors: "),
    "optimizer_cut": (lambda c: cut(c / "optimizer.pt"), "optimizer.pt: not a readable archive"),
    "scheduler_cut": (lambda c: cut(c / "scheduler.pt"), "scheduler.pt: not a readable archive"),
    "rng_cut": (lambda c: cut(c / "rng_state.pth"), "rng_state.pth: not a readable archive"),
    "state_missing": (lambda c: (c / "trainer_state.json").unlink(), "trainer_state.json: missing"),
    "state_cut": (lambda c: cut(c / "trainer_state.json"), "trainer_state.json: not valid JSON"),
    "state_other_step": (lambda c: set_step(c, 2), "trainer_state.json: global_step 2, not the step of"),
    "shard_missing": (
        lambda c: (sharded(c), (c / "model-00002-of-00002.safetensors").unlink()),
        "model.safetensors.index.json: shard model-00002-of-00002.safetensors is missing",
    ),
    "zero_optim_cut": (
        lambda c: (zero(c), cut(c / "global_step3/zero_pp_rank_0_mp_rank_00_optim_states.pt")),
        "global_step3/zero_pp_rank_0_mp_rank_00_optim_states.pt: not a readable archive",
    ),
    "adapter_cut": (lambda c: (lora(c), cut(c / "adapter_model.safetensors")), "adapter_model.safetensors"),
    "no_weights": (lambda c: (c / "model.safetensors").unlink(), "no model weights"),
}


def copy_run(killed: Path, tmp_path: Path) -> Path:
    run = tmp_path / "r"
    for name in ("checkpoint-2", "checkpoint-3"):
        shutil.copytree(killed / name, run / name)
    return run


@pytest.mark.parametrize("layout", WHOLE)
def test_a_whole_checkpoint_of_each_layout_has_no_problem(layout, killed, tmp_path):
    run = copy_run(killed, tmp_path)
    WHOLE[layout](run / "checkpoint-3")
    assert problem(run / "checkpoint-3") is None
    assert usable_checkpoint(run, main=True) == run / "checkpoint-3"


@pytest.mark.parametrize("damage,said", DAMAGES.values(), ids=DAMAGES)
def test_a_damaged_checkpoint_is_set_aside_and_the_one_before_is_used(damage, said, killed, tmp_path, caplog):
    run = copy_run(killed, tmp_path)
    damage(run / "checkpoint-3")
    files = listing(run)
    why = problem(run / "checkpoint-3")
    assert why is not None and why.startswith(said), why
    assert usable_checkpoint(run, main=False) == run / "checkpoint-2"  # another rank: skipped, not moved
    assert (run / "checkpoint-3").is_dir() and not caplog.records
    with caplog.at_level(logging.INFO, logger="grpo_recipes"):
        assert usable_checkpoint(run, main=True) == run / "checkpoint-2"
    assert [r.getMessage() for r in caplog.records] == [
        f"checkpoint-3 is damaged ({why}): moved to checkpoint-3.damaged; continuing from checkpoint-2"
    ]
    assert listing(run) == files and (run / "checkpoint-3.damaged").is_dir()  # renamed, kept as it was
    assert not (run / "checkpoint-3").exists() and usable_checkpoint(run, main=True) == run / "checkpoint-2"
    assert len(caplog.records) == 1  # asked again: nothing more to set aside or say


def test_a_safetensors_file_is_as_long_as_its_header_says(killed, tmp_path):
    weights = copy_run(killed, tmp_path) / "checkpoint-3" / "model.safetensors"
    size = weights.stat().st_size
    cut(weights)
    said = f"model.safetensors: {size // 2} bytes, its header says {size} (cut short?)"
    assert problem(weights.parent) == said
    weights.write_bytes(weights.read_bytes()[:100])  # inside its JSON header
    assert problem(weights.parent) == "model.safetensors: unreadable header, cut short?"


def test_every_checkpoint_damaged_is_one_error_and_nothing_is_deleted(killed, tmp_path):
    run = copy_run(killed, tmp_path)
    (run / "checkpoint-3.damaged").mkdir()  # taken by an earlier resume: the next name is used
    cut(run / "checkpoint-2" / "optimizer.pt")
    (run / "checkpoint-3" / "trainer_state.json").unlink()
    with pytest.raises(ConfigError) as err:
        usable_checkpoint(run, main=True)
    assert str(err.value) == (
        f"'{run}' has no usable checkpoint, every one is damaged: checkpoint-3 (trainer_state.json: "
        "missing) moved to checkpoint-3.damaged-2; checkpoint-2 (optimizer.pt: not a readable archive, cut "
        "short?) moved to checkpoint-2.damaged. resume=true again trains it from step 0, or run_name=<new> "
        "starts a new run"
    )
    assert names(run) == ["checkpoint-2.damaged", "checkpoint-3.damaged", "checkpoint-3.damaged-2"]
    assert (run / "checkpoint-3.damaged-2" / "model.safetensors").is_file()
    assert usable_checkpoint(run, main=True) is None  # what resume=true then does: a start from step 0


def test_a_killed_saves_leftover_is_removed_and_no_checkpoint_is_none(tmp_path, caplog):
    (tmp_path / ".saving" / "checkpoint-1").mkdir(parents=True)
    assert usable_checkpoint(tmp_path, main=False) is None and (tmp_path / ".saving").is_dir()
    with caplog.at_level(logging.INFO, logger="grpo_recipes"):
        assert usable_checkpoint(tmp_path, main=True) is None
    assert not (tmp_path / ".saving").exists()
    assert [r.getMessage() for r in caplog.records] == [
        f"removed {tmp_path / '.saving'}: a checkpoint save that was cut short"
    ]


def test_the_max_steps_check_counts_from_the_checkpoint_that_is_used(killed, tmp_path):
    run = copy_run(killed, tmp_path)
    cut(run / "checkpoint-3" / "model.safetensors")
    resume.check_resume_point(run, 3)  # continues from checkpoint-2: step 3 is left to train
    assert resume.last_checkpoint_step(run) == 2 and (run / "checkpoint-3.damaged").is_dir()
    with pytest.raises(ConfigError, match="max_steps=2: .* continues from checkpoint-2, so max_steps must"):
        resume.check_resume_point(run, 2)


class FakeTrainer:
    """What WholeCheckpoints needs of transformers' Trainer; its save writes where _get_output_dir says."""

    def __init__(self, run_dir: Path, source: Path):
        self.args = SimpleNamespace(output_dir=str(run_dir), should_save=True, save_total_limit=2)
        self.state = SimpleNamespace(global_step=0, best_model_checkpoint=None)
        self.accelerator = SimpleNamespace(wait_for_everyone=lambda: None)
        self.source, self.written = source, []

    def _get_output_dir(self, trial) -> str:
        return self.args.output_dir

    def _save_checkpoint(self, model, trial) -> None:
        out = Path(self._get_output_dir(trial)) / f"checkpoint-{self.state.global_step}"
        shutil.copytree(self.source, out)
        set_step(out, self.state.global_step)
        self.written.append(out)


Saving = type("Saving", (WholeCheckpoints, FakeTrainer), {})  # as SamplingKLTrainer is built


def test_a_checkpoint_is_written_aside_then_renamed_in_and_rotated(killed, tmp_path):
    run = tmp_path / "r"
    (run / "checkpoint-9.damaged").mkdir(parents=True)  # set aside by a resume: never rotated away
    trainer = Saving(run, killed / "checkpoint-3")
    for step in (1, 2, 3, 3):  # the second save of step 3 replaces the first (marked "old")
        if (run / "checkpoint-3").is_dir():
            (run / "checkpoint-3" / "old").touch()
        trainer.state.global_step = step
        trainer._save_checkpoint(None, None)
        assert trainer.written[-1] == run / ".saving" / f"checkpoint-{step}"
        assert problem(run / f"checkpoint-{step}") is None and trainer._get_output_dir(None) == str(run)
    assert names(run) == ["checkpoint-2", "checkpoint-3", "checkpoint-9.damaged"]
    assert not (run / "checkpoint-3" / "old").exists()  # the first save of step 3 was replaced, whole
    assert sorted(p.name for p in run.iterdir()) == names(run)  # no .saving left behind


def test_a_run_killed_mid_training_resumes_past_its_damaged_newest_checkpoint(killed, tmp_path):
    run = tmp_path / "r"
    shutil.copytree(killed, run)
    cut(run / "checkpoint-3" / "optimizer.pt")
    proc = run_train(*RUN, "max_steps=5", f"output_root={tmp_path}", "run_name=r", "resume=auto")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "checkpoint-3 is damaged (optimizer.pt: not a readable archive, cut short?): moved to "
        "checkpoint-3.damaged; continuing from checkpoint-2" in proc.stdout + proc.stderr
    )
    assert f"Resuming from {run / 'checkpoint-2'}" in (run / "train.log").read_text()
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl") if "train/loss" in r] == [1, 2, 3, 4, 5]
    assert (run / "checkpoint-3.damaged" / "optimizer.pt").is_file()
    assert names(run) == ["checkpoint-3.damaged", "checkpoint-4", "checkpoint-5"]
    assert problem(run / "checkpoint-5") is None and not (run / ".saving").exists()


def test_a_run_whose_checkpoints_are_all_damaged_is_refused_in_one_line(killed, tmp_path):
    run = tmp_path / "r"
    shutil.copytree(killed, run)
    cut(run / "checkpoint-2" / "model.safetensors")
    cut(run / "checkpoint-3" / "scheduler.pt")
    before = listing(run)
    proc = run_train(*RUN, "max_steps=5", f"output_root={tmp_path}", "run_name=r", "resume=auto")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: '{run}' has no usable checkpoint, every one is damaged: checkpoint-3 ")
    assert line.endswith("resume=true again trains it from step 0, or run_name=<new> starts a new run")
    assert listing(run) == before  # renamed aside, nothing deleted or changed


SITECUSTOMIZE = """
import os
if os.environ.get("FAULT_SAVE_PATH"):  # kill the process as torch.save begins that file, saying where
    import torch
    _save = torch.save
    def save(obj, f, *args, **kwargs):
        if str(f).endswith(os.environ["FAULT_SAVE_PATH"]):
            with open(os.environ["FAULT_LOG"], "w") as log:
                log.write(str(f))
            os._exit(9)
        return _save(obj, f, *args, **kwargs)
    torch.save = save
"""


def test_a_kill_during_a_save_leaves_no_checkpoint_and_the_resume_continues(tmp_path):
    (hook := tmp_path / "hook").mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    python_path = os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {"PYTHONPATH": python_path, "FAULT_LOG": str(tmp_path / "at")}
    env["FAULT_SAVE_PATH"] = "checkpoint-3/optimizer.pt"  # the second file of that checkpoint
    run, common = tmp_path / "r", [*RUN, "max_steps=4", f"output_root={tmp_path}", "run_name=r"]
    proc = run_train(*common, env=env)
    assert proc.returncode == 9, proc.stderr[-3000:]
    assert (tmp_path / "at").read_text() == str(run / ".saving" / "checkpoint-3" / "optimizer.pt")
    assert names(run) == ["checkpoint-1", "checkpoint-2"]
    assert (run / ".saving" / "checkpoint-3" / "model.safetensors").is_file()  # the half-written save

    resumed = run_train(*common, "resume=auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming from {run / 'checkpoint-2'}" in (run / "train.log").read_text()
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl") if "train/loss" in r] == [1, 2, 3, 4]
    assert names(run) == ["checkpoint-3", "checkpoint-4"]
    assert not (run / ".saving").exists() and problem(run / "checkpoint-4") is None
