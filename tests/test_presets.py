"""Each experiment preset (config/experiment/) composes and trains a step or two on the tiny model,
cut short: short completions, a small eval. Asserts what makes each preset that recipe. What each
preset teaches the embedded model is measured by benchmarks/presets.py, not here."""

import json

import pytest

from tests.conftest import SCRIPTED_TOOL_ENV, read_jsonl, run_train

pytestmark = pytest.mark.slow
SHORT = [
    "model=tiny_random",
    "eval.size=4",
    "grpo.max_completion_length=16",
    "dataset.train_size=32",
    "grpo.save_strategy=no",
]


def _run(tmp_path, preset: str, *overrides: str, env: dict | None = None):
    proc = run_train(
        f"experiment={preset}", f"output_root={tmp_path}", "run_name=run", *SHORT, *overrides, env=env
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "run"
    evals = {
        int(p.stem.rsplit("_", 1)[1]): json.loads(p.read_text())
        for p in (run_dir / "eval_results").glob("eval_step_*.json")
    }
    train = [
        r for r in read_jsonl(run_dir / "metrics.jsonl") if r["split"] == "train" and "train/reward" in r
    ]
    for result in evals.values():  # the fixed eval's examples: a preset's transfer set is marked eval_set
        result["examples"] = [e for e in result["examples"] if e.get("eval_set") is None]
    return run_dir, evals, train


def test_digits_preset_signed_reward_and_eval_before_and_after(tmp_path):
    _, evals, train = _run(tmp_path, "digits", "max_steps=2")
    assert sorted(evals) == [0, 2]
    assert all(e["task"] == "sum_digits" for e in evals[0]["examples"])
    # sized for the embedded model: one number of 10..99
    for e in evals[0]["examples"]:
        numbers = json.loads(e["question"].split("digit sum of ", 1)[1].rstrip("?"))
        assert len(numbers) == 1 and 10 <= numbers[0] <= 99
    assert len(train) == 2
    for r in train:
        assert "train/rewards/format/mean" not in r  # correctness only
        # every completion scores +1 or -1, so the mean is (correct - wrong) / n
        assert -1.0 <= r["train/rewards/accuracy/mean"] <= 1.0
        assert r["train/rewards/accuracy/mean"] == pytest.approx(2 * r["train/accuracy/sum_digits"] - 1)


def test_digits_reverse_preset_two_digit_numbers_and_a_few_shot_turn(tmp_path):
    from omegaconf import OmegaConf

    run_dir, evals, train = _run(tmp_path, "digits", "dataset=reverse_digits", "max_steps=1")
    assert sorted(evals) == [0, 1] and len(train) == 1
    for e in evals[0]["examples"]:
        assert e["task"] == "reverse_digits"
        assert 10 <= int(e["question"].removeprefix("What is ").removesuffix(" reversed?")) <= 99
    # the worked example travels with the run's config, as a chat turn before every question
    shots = OmegaConf.load(run_dir / "config.yaml").dataset.few_shot
    assert [s.question for s in shots] == ["What is 47 reversed?"] and "[ANSWER] 74" in shots[0].completion
    assert train[0]["train/rewards/accuracy/mean"] == pytest.approx(
        2 * train[0]["train/accuracy/reverse_digits"] - 1
    )


def test_gsm8k_preset_combined_reward_few_shot_turn_lora(tmp_path):
    run_dir, evals, train = _run(tmp_path, "gsm8k", "max_steps=1")
    assert all(e["task"] == "gsm_symbolic" for e in evals[0]["examples"])
    (r,) = train
    assert {"train/rewards/correct_and_format/mean"} <= set(r) and "train/rewards/accuracy/mean" not in r
    assert -0.1 - 1e-6 <= r["train/rewards/correct_and_format/mean"] <= 1.0 + 1e-6  # float32 means
    config = (run_dir / "config.yaml").read_text()
    assert "num_generations: 8" in config and "format_weight: 0.1" in config
    # sized for the embedded model: a worked example as a chat turn, so a group's format can vary
    assert "[ANSWER] 27" in config
    # the recipe's own objective on the fixed eval: 1[correct] + 0.1 (1[format] - 1) per problem
    for e in evals.values():
        m = e["metrics"]
        assert m["reward"] == pytest.approx(
            sum(x["correct"] + 0.1 * (x["format_ok"] - 1) for x in e["examples"]) / len(e["examples"])
        )
    assert (run_dir / "final" / "adapter_model.safetensors").is_file()  # LoRA, as the recipe


def test_digits_tools_preset_the_recipes_ranges_a_python_tool_and_worked_calls(tmp_path):
    """The seed's own digits ranges, both tasks, the python tool, one worked call per task as chat turns; the
    tiny model calls the tool as scripted (tests/scripted/sitecustomize.py), in training and in the eval."""
    from omegaconf import OmegaConf

    long_enough = "grpo.max_completion_length=200"  # the tiny tokenizer is character-level
    run_dir, evals, train = _run(tmp_path, "digits_tools", "max_steps=1", long_enough, env=SCRIPTED_TOOL_ENV)
    examples = evals[0]["examples"]
    assert sorted({e["task"] for e in examples}) == ["reverse_digits", "sum_digits"]
    for e in examples:
        if e["task"] == "sum_digits":
            numbers = json.loads(e["question"].removeprefix("What is the total digit sum of ").rstrip("?"))
            assert 2 <= len(numbers) <= 4 and all(10 <= n <= 999 for n in numbers)
        else:
            assert 100000 <= int(e["question"].removeprefix("What is ").removesuffix(" reversed?")) <= 9999999
        assert e["tool_calls"] == 1 and e["turns"][0]["tool_calls"][0]["function"]["name"] == "python"
    assert train[0]["train/tools/call_frequency"] == 1.0
    shots = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml").dataset.few_shot)
    assert [s["tool_calls"][0]["name"] for s in shots] == ["python", "python"]
    assert [s["completion"] for s in shots] == ["[ANSWER] 28", "[ANSWER] 28174"]


def test_gsm8k_tools_preset_is_gsm8k_with_a_calculator_and_a_worked_call():
    cfg, base = _compose("experiment=gsm8k_tools"), _compose("experiment=gsm8k")
    assert cfg["tools"]["names"] == ["calculator"] and base["tools"]["names"] == []
    (shot,) = cfg["dataset"]["few_shot"]
    assert shot["tool_calls"] == [
        {"name": "calculator", "arguments": {"expression": "12 + 3 * 5"}, "result": "27"}
    ]
    for key in ("rewards", "tasks"):
        assert cfg["dataset"][key] == base["dataset"][key]
    assert cfg["model"]["lora"] == base["model"]["lora"] and cfg["max_steps"] == base["max_steps"]
    assert cfg["grpo"]["activation_checkpointing"] is True  # its ~730-token rollouts: 12-17 GiB without


def test_code_preset_test_reward_and_pass_at_k(tmp_path):
    _, evals, train = _run(tmp_path, "code", "max_steps=1", "eval.pass_k.samples=2", "eval.pass_k.k=[1,2]")
    (r,) = train
    # fraction passed x 1 + 1 for a perfect solution: between 0 and 2
    assert 0.0 <= r["train/rewards/code_tests/mean"] <= 2.0
    assert "train/rewards/accuracy/mean" not in r and 0.0 <= r["train/accuracy/python_functions"] <= 1.0
    metrics = evals[1]["metrics"]
    assert {"pass@1", "pass@2", "accuracy"} <= set(metrics)
    assert 0.0 <= metrics["pass@1"] <= metrics["pass@2"] <= 1.0
    for e in evals[1]["examples"]:
        assert e["task"] == "python_functions" and e["rule"] in ("answer_tag", "fenced", "raw", "none")
        assert e["correct"] == (e["score"] >= 1.0) and e["num_samples"] == 2


def test_rg_multitask_preset_weighted_tasks_and_variance_logging(tmp_path):
    _, evals, train = _run(tmp_path, "rg_multitask", "max_steps=2", "eval.every_n_steps=1")
    assert sorted(evals) == [0, 1, 2]
    tasks = {e["task"] for e in evals[0]["examples"]}
    assert tasks == {"basic_arithmetic", "syllogism", "chain_sum"}  # eval.size per task
    # sized for the embedded model: 2-term additions, 2-term chains of 1-digit numbers
    for e in evals[0]["examples"]:
        if e["task"] != "syllogism":
            assert e["question"].count("+") + e["question"].count(" - ") == 1, e["question"]
    assert len(evals[0]["examples"]) == 12
    for task in tasks:
        assert 0.0 <= evals[2]["metrics"][f"{task}/accuracy"] <= 1.0
    assert len(train) == 2
    for r in train:
        assert 0.0 <= r["train/groups/reward_varied"] <= 1.0 and 0.0 <= r["train/groups/answer_varied"] <= 1.0


def _compose(*overrides: str) -> dict:
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    config_dir = str(Path(__file__).resolve().parents[1] / "config")
    with initialize_config_dir(version_base="1.3", config_dir=config_dir):
        return OmegaConf.to_container(compose("train", overrides=list(overrides)))


_RECIPE_SUM_PROMPT = (
    "Add up every digit of every number in the list. Work step by step, then end with the final answer "
    "on its own line as: [ANSWER] <number>\nExample: What is the total digit sum of [123, 45, 67]?\n"
    "1+2+3 = 6, 4+5 = 9, 6+7 = 13, and 6+9+13 = 28.\n[ANSWER] 28"
)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        # the Monarch RL recipe: 2-4 numbers of 10..999, 7-digit reversals, 20 steps, 20 eval problems
        (
            ["experiment=digits_source"],
            {
                "dataset.tasks.sum_digits.config": {
                    "min_numbers": 2,
                    "max_numbers": 4,
                    "min_value": 10,
                    "max_value": 999,
                },
                "dataset.system_prompt": _RECIPE_SUM_PROMPT,
                "grpo.temperature": 1.0,
                "grpo.max_completion_length": 32,
                "max_steps": 20,
                "eval.size": 20,
                "eval.every_n_steps": 0,
            },
        ),
        (
            ["experiment=digits_source", "dataset=reverse_digits_source"],
            {"dataset.tasks.reverse_digits.config": {"min_value": 100000, "max_value": 9999999}},
        ),
        # tinker GSM8K: the bare question, group 16, 256 tokens, LoRA r32 at 4e-5
        (
            ["experiment=gsm8k_source"],
            {
                "dataset.few_shot": [],
                "grpo.num_generations": 16,
                "grpo.max_completion_length": 256,
                "model.lora.r": 32,
                "learning_rate": 4e-5,
            },
        ),
        # the Q code recipe: every template, the reasoning format, 128 tokens, lr 2e-6, 15 problems / 25 steps
        (
            ["experiment=code_source"],
            {
                "dataset.prompt_format": "think",
                "dataset.tasks.python_functions.config.templates": None,
                "grpo.max_completion_length": 128,
                "learning_rate": 2e-6,
                "grpo.per_device_train_batch_size": 16,
                "eval.size": 15,
                "eval.every_n_steps": 25,
            },
        ),
        (
            ["experiment=rg_multitask_source"],
            {
                "max_steps": 100,
                "learning_rate": 1e-5,
                "eval.size": 50,
                "eval.every_n_steps": 10,
                "dataset.tasks.basic_arithmetic.config.operators": ["+", "-"],
                "dataset.tasks.basic_arithmetic.config.max_terms": 6,
                "dataset.tasks.syllogism.weight": 1.0,
            },
        ),
    ],
)
def test_source_presets_restore_the_recipes_settings(overrides, expected):
    cfg = _compose(*overrides)
    for dotted, value in expected.items():
        node = cfg
        for key in dotted.split("."):
            node = node[key]
        assert node == value, dotted
