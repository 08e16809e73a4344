"""The value check and the run-directory rules, in process (the command-line cases: test_mistakes.py)."""

import json
import struct

import pytest

from grpo_common.errors import ConfigError
from grpo_recipes.config import resume
from grpo_recipes.config.checks import check_values
from grpo_recipes.config.knobs import SCHEMA
from grpo_recipes.config.values import Value
from tests.test_config import composed


@pytest.mark.parametrize(
    "spec,good,bad",
    [
        (SCHEMA["max_steps"], [1, 100], [0, -1, 1.5, 2.0, True, "10", None]),
        (SCHEMA["learning_rate"], [1e-5, 1, 0.5], [0, -1e-5, "abc", True, None, float("nan"), float("inf")]),
        (SCHEMA["run_name"], ["a", "run-1.2"], ["", " ", ".", "..", "a/b", "../x", None, 3]),
        (SCHEMA["eval.do_sample"], [True, False], ["maybe", 0, 1, "true", None]),
        (SCHEMA["resume"], [True, False, "auto"], ["maybe", 1, 0, "true", None]),
        (SCHEMA["eval.max_new_tokens"], [None, 1, 64], [0, 1.5, "64"]),
        (SCHEMA["grpo.top_p"], [1.0, 0.5, 1], [0, 1.01, "x"]),
        (SCHEMA["model.lora.dropout"], [0, 0.05, 0.99], [1, -0.1]),
        (SCHEMA["eval.pass_k.k"], [[1, 4], []], [[1, 0], [1.5], "1,4", 4]),
        (SCHEMA["model.lora.target_modules"], ["auto", ["q_proj", "v_proj"]], [["q_proj", 1], 3]),
    ],
)
def test_values_are_typed_exactly(spec: Value, good, bad):
    assert all(spec.accepts(v) for v in good)
    assert not any(spec.accepts(v) for v in bad)


def test_the_defaults_and_every_preset_pass_the_whole_check():
    from pathlib import Path

    from grpo_recipes.config.checks import check_config
    from grpo_recipes.config.trainer_args import check_trainer_config

    for preset in [None] + sorted(
        p.stem for p in (Path(__file__).parents[1] / "config/experiment").glob("*.yaml")
    ):
        cfg = composed(*([f"experiment={preset}"] if preset else []))
        check_trainer_config(cfg, check_config(cfg))


def test_every_declared_grpo_knob_is_a_field_of_the_installed_trl_or_the_recipes_own():
    import dataclasses

    from grpo_recipes.config.cli import grpo_field_names
    from grpo_recipes.config.grpo_knobs import RecipeGRPOFields

    keys = {k.split(".", 1)[1] for k in SCHEMA if k.startswith("grpo.")}
    assert keys - {f.name for f in dataclasses.fields(RecipeGRPOFields)} <= grpo_field_names()


def test_trl_errors_name_the_key_the_message_is_about():
    from grpo_recipes.config.trainer_args import name_the_key

    grpo = {"save_strategy": "steps", "generation_batch_size": 32, "steps_per_generation": 2}
    message = "'generation_batch_size' and 'steps_per_generation' can not be both configured at the same time"
    assert name_the_key(message, grpo).startswith("grpo.generation_batch_size=32: ")
    assert name_the_key("nosuch is not a valid SchedulerType", {"lr_scheduler_type": "nosuch"}).startswith(
        "grpo.lr_scheduler_type=nosuch: "
    )


def test_cross_field_batch_rule_counts_processes():
    cfg = composed()  # groups of 8
    cfg["grpo"].update(per_device_train_batch_size=4, gradient_accumulation_steps=1)
    with pytest.raises(ConfigError, match=r"\(4\) x processes \(1\) .* = 4 completions .* not divisible"):
        check_values(cfg, world_size=1)
    check_values(cfg, world_size=2)  # 4 x 2 processes = 8: one whole group


def test_dynamic_sampling_needs_whole_groups_on_each_process():
    cfg = composed()
    cfg["grpo"].update(dynamic_sampling=True, per_device_train_batch_size=4, gradient_accumulation_steps=1)
    with pytest.raises(
        ConfigError,
        match=r"grpo.dynamic_sampling=true: .* = 4 completions per process .* "
        r"not a multiple of grpo.num_generations \(8\)",
    ):
        check_values(cfg, world_size=2)
    cfg["grpo"]["per_device_train_batch_size"] = 8
    check_values(cfg, world_size=2)
    with pytest.raises(ConfigError, match="grpo.dynamic_sampling_max_draws=0: expected an integer >= 1"):
        check_values({**cfg, "grpo": {**cfg["grpo"], "dynamic_sampling_max_draws": 0}}, world_size=2)


def test_changed_keys_and_what_a_resume_may_change(tmp_path):
    saved = {"max_steps": 40, "eval": {"size": 8, "seed": 1}, "dataset": {"tasks": {"a": {"weight": 1}}}}
    now = {"max_steps": 80, "eval": {"size": 16, "seed": 1}, "dataset": {"tasks": {"a": {"weight": 1}}}}
    assert resume.check_changes(tmp_path, saved, now) == ["max_steps", "eval.size"]
    now["dataset"]["tasks"] = {"b": {"weight": 1}}
    with pytest.raises(
        ConfigError, match="dataset.tasks.a, dataset.tasks.b would change what the run learns"
    ):
        resume.check_changes(tmp_path, saved, now)
    with pytest.raises(ConfigError, match=r"eval.seed \(1 -> 2\)"):
        resume.check_changes(tmp_path, saved, {**saved, "eval": {"size": 8, "seed": 2}})


def test_plan_run_rules(tmp_path):
    run = tmp_path / "run"
    assert resume.plan_run(run, False).action == "new" and resume.plan_run(run, "auto").action == "new"
    with pytest.raises(ConfigError, match="resume=true: there is no run"):
        resume.plan_run(run, True)
    run.mkdir()
    assert resume.plan_run(run, False).action == "new"  # an empty directory holds no run
    (run / "config.yaml").write_text("max_steps: 2\n")
    with pytest.raises(
        ConfigError, match="already holds a run: pass resume=true to continue it, or a new run_name"
    ):
        resume.plan_run(run, False)
    assert resume.plan_run(run, True).action == "resume" and resume.plan_run(run, "auto").action == "resume"
    (run / "train_results.json").write_text(json.dumps({"final_eval_step": 2}))
    assert resume.plan_run(run, True).action == "finished"
    resume.check_finished(run, 2)  # the step it finished at: nothing to do
    with pytest.raises(
        ConfigError, match="max_steps=5: .* is a finished run \\(step 2\\); a finished run is never"
    ):
        resume.check_finished(run, 5)
    assert resume.plan_run(run, False, main=False).action == "new"  # rank 0 decides; the others never refuse


def test_a_resume_needs_steps_left_after_its_checkpoint(tmp_path):
    for step in (5, 10):  # whole checkpoints (outputs/checkpoints.py reads them back): a state and weights
        (c := tmp_path / f"checkpoint-{step}").mkdir()
        (c / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        (c / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"{}")
    assert resume.last_checkpoint_step(tmp_path) == 10
    resume.check_resume_point(tmp_path, 11)
    with pytest.raises(
        ConfigError, match="max_steps=10: .* continues from checkpoint-10, so max_steps must be above 10"
    ):
        resume.check_resume_point(tmp_path, 10)


def test_overrides_yaml_keeps_the_first_entry_and_merges_later_ones(tmp_path):
    resume.record_overrides(tmp_path, ["experiment=digits", "max_steps=20", "run_name=r"], resumed=False)
    resume.record_overrides(
        tmp_path, ["experiment=digits", "max_steps=30", "run_name=r", "resume=true"], resumed=True
    )
    entries = resume.read_override_entries(tmp_path)
    assert (
        entries[0]["overrides"] == ["experiment=digits", "max_steps=20", "run_name=r"]
        and not entries[0]["resume"]
    )
    assert entries[1]["overrides"] == ["max_steps=30", "resume=true"] and entries[1]["resume"]
    assert resume.saved_overrides(tmp_path) == [
        "experiment=digits",
        "max_steps=30",
        "run_name=r",
        "resume=true",
    ]
    assert resume.first_overrides(tmp_path) == ["experiment=digits", "max_steps=20", "run_name=r"]
    # back to a value an earlier entry had: still recorded, and it is what the next resume composes
    resume.record_overrides(
        tmp_path, ["experiment=digits", "max_steps=20", "run_name=r", "resume=true"], resumed=True
    )
    assert resume.read_override_entries(tmp_path)[2]["overrides"] == ["max_steps=20"]
    assert "max_steps=20" in resume.saved_overrides(tmp_path)
    (tmp_path / "overrides.yaml").write_text("- a=1\n- b=2\n")  # written by an older version
    assert resume.saved_overrides(tmp_path) == ["a=1", "b=2"]


# Each knob's facts live in one declaration; these are the places where copies once disagreed.


def test_every_loss_type_the_installed_trl_supports_is_accepted_and_no_other():
    from grpo_recipes.config.checks import check_config
    from grpo_recipes.config.trainer_args import (
        RecipeGRPOConfig,
        check_trainer_config,
        supported_values,
    )

    supported = supported_values(RecipeGRPOConfig, "loss_type")
    assert {"grpo", "dapo", "dr_grpo", "bnpo", "cispo", "sapo"} <= set(supported)  # read from TRL, not a copy
    for loss in ("sapo", supported[-1]):
        cfg = composed(f"grpo.loss_type={loss}", "model=tiny_random")
        check_trainer_config(cfg, check_config(cfg))
    with pytest.raises(ConfigError, match="grpo.loss_type=nosuch: expected one of: " + ", ".join(supported)):
        cfg = composed("grpo.loss_type=nosuch", "model=tiny_random")
        check_trainer_config(cfg, check_config(cfg))


def test_consumers_get_the_declared_defaults_not_their_own():
    import inspect

    from grpo_common.formats import AnswerTag
    from grpo_recipes.config.knobs import KNOBS
    from grpo_recipes.evaluation.console import log_eval
    from grpo_recipes.evaluation.evaluator import FixedEvaluator
    from grpo_recipes.train.data import system_prompt

    cfg = composed()  # the default run: answer_tag (data.py once fell back to plain) and 2 printed examples
    assert system_prompt(cfg["dataset"]) == AnswerTag.system_prompt
    assert cfg["eval"]["print_examples"] == KNOBS["eval.print_examples"].default == 2
    # the evaluator reads the eval group it is handed, with no fallback of its own (run.py once passed 0)
    assert inspect.signature(FixedEvaluator).parameters["settings"].default is inspect.Parameter.empty
    source = inspect.getsource(FixedEvaluator) + inspect.getsource(log_eval)
    assert 'settings["print_examples"]' in source and "settings.get(" not in source


def test_a_bool_reward_weight_is_refused_by_the_check_and_the_registry_alike():
    from rewards import RewardContext, build_rewards

    for weight in (True, False):
        cfg = composed(f"dataset.rewards.accuracy.weight={str(weight).lower()}")
        with pytest.raises(ConfigError, match=r"dataset\.rewards\.accuracy"):
            check_values(cfg)
        with pytest.raises(ConfigError, match=r"dataset\.rewards\.accuracy\.weight must be a number"):
            build_rewards(cfg["dataset"]["rewards"], RewardContext(lambda a, e: 0.0, "answer_tag", 32))


@pytest.mark.slow
def test_a_run_checks_its_config_once_and_trains_with_the_grpo_config_the_check_built(tmp_path):
    """The check before Hydra checks the config and builds its GRPOConfig; the job reuses both."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    probe = f"""
import runpy, sys
import grpo_recipes.config.checks as checks, grpo_recipes.config.preflight as preflight
import grpo_recipes.config.trainer_args as trainer_args, grpo_recipes.train.run as run
calls = {{"check_config": 0, "build_grpo_config": 0}}
def counted(name, fn):
    def wrapper(*a, **k):
        calls[name] += 1
        return fn(*a, **k)
    return wrapper
preflight.check_config = run.check_config = counted("check_config", checks.check_config)
trainer_args.build_grpo_config = counted("build_grpo_config", trainer_args.build_grpo_config)
sys.argv = ["train_grpo.py", "model=tiny_random", "max_steps=1", "eval.size=2", "output_root={tmp_path}"]
try:
    runpy.run_path("train_grpo.py", run_name="__main__")
finally:
    print("CALLS", calls)
"""
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert "CALLS {'check_config': 1, 'build_grpo_config': 1}" in out.stdout, out.stderr[-2000:]
    assert (tmp_path / "arithmetic-tiny-random" / "final").is_dir()
