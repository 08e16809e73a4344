from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from grpo_common.errors import ConfigError
from grpo_recipes.config.cli import rewrite_argv
from grpo_recipes.config.trainer_args import build_grpo_kwargs
from grpo_recipes.models.hardware import Hardware

CONFIG = Path(__file__).resolve().parents[1] / "config"
CPU = Hardware(gpu=False, bf16=False, world_size=1)
GPU = Hardware(gpu=True, bf16=True, world_size=1)


def composed(*overrides: str) -> dict:
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG)):
        cfg = compose("train", overrides=list(overrides))
    cfg.output_dir = "/tmp/unused"  # ${hydra:runtime.output_dir} exists only inside a Hydra job
    return OmegaConf.to_container(cfg, resolve=True)


# Unresolved on purpose: TRL then falls back to its deprecated `gradient_checkpointing` default (True).
@pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")
def test_defaults_compose_into_a_valid_grpo_config():
    import torch

    from grpo_recipes.config.trainer_args import RecipeGRPOConfig
    from grpo_recipes.models.hardware import resolve_activation_checkpointing

    cfg = composed()
    assert cfg["model"]["path"] == "embedded:smollm2-135m-instruct"
    assert cfg["dataset"]["name"] == "arithmetic" and cfg["run_name"] == "arithmetic-smollm2-135m"
    kwargs = build_grpo_kwargs(cfg, CPU, reward_weights=[1.0, 0.2])
    args = RecipeGRPOConfig(**kwargs)
    assert args.use_cpu and not args.bf16
    assert args.max_steps == cfg["max_steps"] and args.learning_rate == cfg["learning_rate"]
    assert args.reward_weights == [1.0, 0.2]
    assert kwargs["activation_checkpointing"] is None  # auto: resolved once the model is loaded
    resolve_activation_checkpointing(kwargs, torch.nn.Linear(10, 10), CPU, lora=False)
    assert RecipeGRPOConfig(**kwargs).activation_checkpointing is False  # TRL's own default would be True
    assert args.generation_batch_size % args.num_generations == 0
    assert (args.fast_paths, args.no_signal_warning) == ("auto", 3)  # the recipe's knobs, read from the args


def test_top_level_knobs_and_group_overrides():
    cfg = composed(
        "max_steps=7",
        "learning_rate=5e-6",
        "seed=3",
        "run_name=x",
        "dataset=sum_digits",
        "model=tiny_random",
        "++grpo.num_iterations=2",
    )
    kwargs = build_grpo_kwargs(cfg, CPU)
    assert (kwargs["max_steps"], kwargs["learning_rate"], kwargs["seed"], kwargs["run_name"]) == (
        7,
        5e-6,
        3,
        "x",
    )
    assert kwargs["num_iterations"] == 2
    assert list(cfg["dataset"]["tasks"]) == ["sum_digits"] and cfg["dataset"]["rewards"]["accuracy"]
    assert cfg["model"]["path"] == "tiny-random"


def test_every_dataset_option_is_valid(tmp_path):
    from tasks import validate_tasks

    sample = tmp_path / "qa.jsonl"
    sample.write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    code = tmp_path / "code.jsonl"
    code.write_text('{"question": "Write f.", "tests": ["assert f() == 1"]}\n')
    needs = {
        "qa_file": [f"dataset.tasks.qa_file.config.path={sample}"],  # the options with a required key
        "code_file": [f"dataset.tasks.code_file.config.path={code}"],
    }
    for option in sorted(p.stem for p in (CONFIG / "dataset").glob("*.yaml")):
        validate_tasks(composed(f"dataset={option}", *needs.get(option, []))["dataset"]["tasks"])


def test_logger_group_sets_report_to():
    assert composed("logger=tensorboard")["report_to"] == "tensorboard"
    assert build_grpo_kwargs(composed("logger=tensorboard"), CPU)["report_to"] == ["tensorboard"]


def test_unknown_grpo_key_is_named_with_close_matches():
    cfg = composed("++grpo.max_prompt_length=64")
    with pytest.raises(
        ConfigError, match="grpo.max_prompt_length: not a GRPOConfig field.*max_completion_length"
    ):
        build_grpo_kwargs(cfg, CPU)


def test_top_level_knob_inside_grpo_is_refused():
    with pytest.raises(ConfigError, match="top-level knob"):
        build_grpo_kwargs(composed("++grpo.max_steps=3"), CPU)


@pytest.mark.parametrize(
    "overrides,world",
    [
        (["grpo.per_device_train_batch_size=12", "grpo.gradient_accumulation_steps=1"], 1),
        (["grpo.per_device_train_batch_size=4", "grpo.gradient_accumulation_steps=1"], 1),
        (["grpo.num_generations=6"], 1),  # the default: 8 completions x 2 micro-batches
        (["++grpo.generation_batch_size=20"], 1),
    ],
)
def test_batch_not_divisible_by_num_generations(overrides, world):
    cfg = composed(*overrides)
    with pytest.raises(ConfigError, match="not divisible by grpo.num_generations"):
        build_grpo_kwargs(cfg, Hardware(False, False, world))


def test_batch_counts_processes():
    cfg = composed("grpo.per_device_train_batch_size=4", "grpo.gradient_accumulation_steps=1")
    build_grpo_kwargs(cfg, Hardware(False, False, 2))  # 4 x 2 processes = 8: fine


def test_activation_checkpointing_only_where_memory_needs_it():
    import torch

    from grpo_recipes.models.hardware import resolve_activation_checkpointing

    model = torch.nn.Linear(1000, 1000)  # 4 MB of fp32 weights: 16 MB of full fine-tuning state
    for memory, lora, expected in [
        (128 << 20, False, False),
        (32 << 20, False, True),
        (32 << 20, True, False),
    ]:
        grpo = build_grpo_kwargs(composed(), CPU)
        assert resolve_activation_checkpointing(grpo, model, CPU, lora, memory_bytes=memory) is expected
        assert grpo["activation_checkpointing"] is expected
    for setting in (True, False):  # an explicit choice is kept, under either name
        grpo = build_grpo_kwargs(composed(f"grpo.activation_checkpointing={setting}"), CPU)
        assert resolve_activation_checkpointing(grpo, model, CPU, False, memory_bytes=1) is setting
        grpo = build_grpo_kwargs(composed(f"++grpo.gradient_checkpointing={setting}"), CPU)
        assert resolve_activation_checkpointing(grpo, model, CPU, False, memory_bytes=1) is setting


def test_hardware_rules():
    assert build_grpo_kwargs(composed(), GPU)["bf16"] is True

    assert "use_cpu" not in build_grpo_kwargs(composed(), GPU)
    with pytest.raises(ConfigError, match="fp16=true needs a GPU"):
        build_grpo_kwargs(composed("++grpo.fp16=true"), CPU)
    with pytest.raises(ConfigError, match="grpo.use_vllm is a top-level knob here: set `use_vllm=...`"):
        build_grpo_kwargs(composed("++grpo.use_vllm=true"), CPU)
    with pytest.raises(ConfigError, match="use_vllm=true needs a CUDA GPU"):
        build_grpo_kwargs(composed("use_vllm=true"), CPU)
    assert build_grpo_kwargs(composed(), CPU)["use_vllm"] is False
    # the top-level knob beats a preset's setting: use_vllm=false turns grpo=vllm_is's vLLM off
    assert build_grpo_kwargs(composed("grpo=vllm_is", "use_vllm=false"), CPU)["use_vllm"] is False
    with pytest.raises(ConfigError, match="use_vllm=true needs a CUDA GPU"):
        build_grpo_kwargs(composed("grpo=vllm_is"), CPU)


def test_generation_cache_is_static_only_where_it_was_measured(monkeypatch):
    """null: a static cache (its decoding step compiled) for one process training all the weights on a GPU
    under bf16 autocast, one turn a rollout; TRL's default on a CPU, under LoRA, with tools, over several
    processes or a sharding engine, with fp16 or TRL's compile; a value set is kept, and a typo is named."""

    def cache(*overrides, hw=GPU):
        return build_grpo_kwargs(composed(*overrides), hw)["cache_implementation"]

    assert cache() == "static"
    assert cache(hw=CPU) is None
    assert cache("model.lora.enabled=true") is None
    assert cache("tools=python") is None and cache("env=feedback") is None  # rollouts of several turns
    assert cache("++grpo.torch_compile=true") is None and cache("++grpo.fp16=true") is None
    assert cache("++grpo.deepspeed=config/ds.json") is None  # a DeepSpeed run started without accelerate
    assert cache(hw=Hardware(gpu=True, bf16=True, world_size=2)) is None
    assert cache("grpo.cache_implementation=dynamic") == "dynamic"
    assert cache("grpo.cache_implementation=static", hw=CPU) == "static"
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert cache() is None
    from grpo_recipes.config.checks import check_values

    with pytest.raises(ConfigError, match="grpo.cache_implementation.*one of: static, dynamic"):
        check_values(composed("grpo.cache_implementation=statik"))


@pytest.mark.skipif(__import__("platform").libc_ver()[0] != "glibc", reason="glibc's malloc tunables")
def test_a_script_starts_again_once_with_the_malloc_tunables_unless_the_user_set_them(tmp_path):
    """hardware.relaunch_with_malloc_tunables: `python [options] script ...` runs again as the same process,
    with its flags and arguments, now with GLIBC_TUNABLES; the user's own allocator settings, and a script
    run by another program (pdb, a test's fork server, a benchmark's runpy) or piped in, are left alone."""
    import os
    import re
    import subprocess
    import sys

    from grpo_recipes.models.hardware import MALLOC_TUNABLES

    script = tmp_path / "script.py"
    script.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(CONFIG.parent)!r})\n"
        "from grpo_recipes.models.hardware import malloc_tuning, relaunch_with_malloc_tunables\n"
        "print('start', os.getpid(), flush=True)\n"
        "relaunch_with_malloc_tunables()\n"
        "print(sys.argv[1:], sys.orig_argv[1], malloc_tuning(), os.environ.get('GLIBC_TUNABLES'))\n"
    )
    mine = ("GLIBC_TUNABLES", "LD_PRELOAD", "GRPO_RECIPES_RELAUNCHED")
    env = {k: v for k, v in os.environ.items() if k not in mine and not k.startswith("MALLOC_")}

    def run(*args: str, stdin: str = "", **extra: str) -> list[str]:
        cmd = [sys.executable, *args]
        done = subprocess.run(
            cmd, env={**env, **extra}, input=stdin, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip().split("\n")

    first, again, result = run("-u", "-X", "dev", str(script), "a=1", "b")
    assert first == again and first.startswith("start")  # started twice, as the same process
    assert result == f"['a=1', 'b'] -u glibc malloc tuned (huge pages, freed memory kept) {MALLOC_TUNABLES}"
    untuned = (
        "glibc malloc untuned (started another way, not on glibc, or the allocator settings are the user's)"
    )
    for extra in ({"GLIBC_TUNABLES": ""}, {"MALLOC_ARENA_MAX": "2"}):
        _, result = run("-u", str(script), "a=1", **extra)
        assert result == f"['a=1'] -u {untuned} {extra.get('GLIBC_TUNABLES')}".strip()
    debugged = run("-u", "-m", "pdb", str(script), "x", stdin="c\nq\n")  # one start, in pdb's session
    starts = [line for line in debugged if re.search(r"start \d+$", line)]
    assert len(starts) == 1 and f"['x'] -u {untuned} None" in debugged
    piped = run("-u", "-", "y", stdin=script.read_text())
    assert len(piped) == 2 and piped[1] == f"['y'] -u {untuned} None"

    # train_grpo.py does it first: its process ends (here, a mistake refused) with the tunables set
    (tmp_path / "sitecustomize.py").write_text(
        "import atexit, os, sys\n"
        "show = lambda: print('GLIBC_TUNABLES', os.environ.get('GLIBC_TUNABLES'), file=sys.stderr)\n"
        "atexit.register(show)\n"
    )
    cmd = [sys.executable, str(CONFIG.parent / "train_grpo.py"), "max_steps=-1"]
    done = subprocess.run(
        cmd, env={**env, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "max_steps" in done.stderr
    assert done.stderr.strip().endswith(f"GLIBC_TUNABLES {MALLOC_TUNABLES}"), done.stderr[-2000:]


def test_cli_rewrites_model_paths_and_open_mappings():
    argv = [
        "train_grpo.py",
        "model=Qwen/Qwen2.5-0.5B",
        "model=Qwen/Qwen2.5-0.5B-Instruct",
        "model=tiny_random",
        "grpo.beta=0.1",
        "dataset.tasks.syllogism.weight=2",
        "+grpo.x=1",
        "max_steps=3",
        "model=a,b",
        "-m",
    ]
    assert rewrite_argv(argv, CONFIG) == [
        "train_grpo.py",
        "-m",
        "model=custom",
        "model.path=Qwen/Qwen2.5-0.5B",
        "model.name=Qwen2.5-0.5B",
        "model=qwen2_5_0_5b",  # the hub id a preset is for picks the preset
        "model=tiny_random",
        "++grpo.beta=0.1",
        "++dataset.tasks.syllogism.weight=2",
        "+grpo.x=1",
        "max_steps=3",
        "model=a,b",
    ]


def test_vllm_without_the_package_on_a_gpu_machine(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    with pytest.raises(ConfigError, match="vllm is not installed"):
        build_grpo_kwargs(composed("use_vllm=true"), GPU)
