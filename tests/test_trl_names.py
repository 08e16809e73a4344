"""TRL's spelling on the command line (model_name_or_path, lora_r, num_generations, report_to ...)."""

import dataclasses
from pathlib import Path

import pytest

from grpo_common.errors import ConfigError
from grpo_recipes.config.checks import check_values
from grpo_recipes.config.cli import grpo_field_names, rewrite_argv
from grpo_recipes.config.preflight import compose, parse

CONFIG = Path(__file__).resolve().parents[1] / "config"


def rewritten(*args: str) -> list[str]:
    return rewrite_argv(["train_grpo.py", *args], CONFIG)[1:]


def test_field_names_read_from_source_are_grpo_configs_fields():
    from trl import GRPOConfig

    assert grpo_field_names() == {f.name for f in dataclasses.fields(GRPOConfig) if f.init}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # a hub id a preset is for picks the preset (its dtype, LoRA modules, batch come along)
        (["model_name_or_path=Qwen/Qwen2.5-1.5B-Instruct"], ["model=qwen2_5_1_5b"]),
        (["model.model_name_or_path=Qwen/Qwen3-0.6B"], ["model=qwen3_0_6b"]),
        (["model=meta-llama/Llama-3.2-1B-Instruct"], ["model=llama3_2_1b"]),
        (
            ["model_name_or_path=org/other-1B"],
            ["model=custom", "model.path=org/other-1B", "model.name=other-1B"],
        ),
        (
            ["model_name_or_path=tiny-random"],
            ["model=custom", "model.path=tiny-random", "model.name=tiny-random"],
        ),
        (["model_name_or_path=tiny_random"], ["model=tiny_random"]),
        (
            ["use_peft=true", "lora_r=8", "lora_alpha=16"],
            ["model.lora.enabled=true", "model.lora.r=8", "model.lora.alpha=16"],
        ),
        (["load_in_4bit=true"], ["model.lora.quantize=4bit"]),
        (
            ["torch_dtype=bfloat16", "attn_implementation=eager"],
            ["model.dtype=bfloat16", "model.attn_implementation=eager"],
        ),
        # GRPOConfig fields at the top level, as TRL's scripts take them
        (["num_generations=4", "beta=0.04"], ["++grpo.num_generations=4", "++grpo.beta=0.04"]),
        (["-m", "num_generations=4,8"], ["-m", "++grpo.num_generations=4,8"]),
        (["vllm_gpu_memory_utilization=0.5"], ["++grpo.vllm_gpu_memory_utilization=0.5"]),
        # report_to names a logger: the logger option (it also says where the tracker's files go)
        (["report_to=trackio"], ["logger=trackio"]),
        (["report_to=[wandb,tensorboard]"], ["report_to=[wandb,tensorboard]"]),
        # our own keys and typos are left alone (a typo gets its own message)
        (
            ["max_steps=3", "learning_rate=1e-5", "max_step=3"],
            ["max_steps=3", "learning_rate=1e-5", "max_step=3"],
        ),
    ],
)
def test_trl_spelling_becomes_ours(args, expected):
    assert rewritten(*args) == expected


def test_a_trl_command_line_composes_to_our_keys():
    args = rewritten(
        "model_name_or_path=tiny-random", "num_generations=4", "per_device_train_batch_size=8", "beta=0.01"
    )
    cfg, _ = compose(CONFIG, parse(["x", *args]), args)
    check_values(cfg)
    assert cfg["model"]["path"] == "tiny-random"
    assert (cfg["grpo"]["num_generations"], cfg["grpo"]["per_device_train_batch_size"]) == (4, 8)
    assert cfg["grpo"]["beta"] == 0.01


def test_trl_names_in_a_yaml_file_get_our_key_named():
    cfg, _ = compose(CONFIG, parse(["x"]), [])
    with pytest.raises(ConfigError, match="model_name_or_path is TRL's name; here it is model.path"):
        check_values({**cfg, "model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"})
    with pytest.raises(ConfigError, match="num_generations is TRL's name; here it is grpo.num_generations"):
        check_values({**cfg, "num_generations": 4})
    # any GRPOConfig field, not only those the recipe declares
    with pytest.raises(ConfigError, match="vllm_server_host is TRL's name; here it is grpo.vllm_server_host"):
        check_values({**cfg, "vllm_server_host": "0.0.0.0"})
