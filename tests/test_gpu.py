"""The GPU acceptance suite: `make test-gpu` (pytest -m gpu) on a machine with one CUDA GPU.

Each test trains the embedded model for 2 steps as a user would and asserts numbers: the loss is
finite, the weights moved, the fixed eval's JSON is written at step 0 and at the end, the saved model
loads. Skipped, with the reason, without a GPU (tests/conftest.py), and where an optional package
(vllm, bitsandbytes, deepspeed) is not installed.
"""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, read_jsonl, run_train

pytestmark = pytest.mark.gpu
CONFIG = ROOT / "config"
SHORT = [
    "max_steps=2",
    "eval.size=8",
    "grpo.max_completion_length=32",
    "learning_rate=1e-5",
    "grpo.warmup_steps=0",
    "dataset.rewards.len.fn=tests.test_rewards.length_reward",  # differs within a group: a gradient
]


def needs(package: str):
    return pytest.mark.skipif(importlib.util.find_spec(package) is None, reason=f"{package} is not installed")


def trained_as_asked(run: Path, steps: int = 2) -> list[dict]:
    """Train lines with finite losses for every step, eval JSON at 0 and at the end, written once."""
    lines = read_jsonl(run / "metrics.jsonl")
    train = [r for r in lines if "train/loss" in r]
    assert [r["step"] for r in train] == list(range(1, steps + 1))
    assert all(math.isfinite(r["train/loss"]) for r in train)
    assert [r["step"] for r in lines if r["split"] == "eval"] == [0, steps]
    for step in (0, steps):
        ev = json.loads((run / "eval_results" / f"eval_step_{step}.json").read_text())
        fixed = [e for e in ev["examples"] if e.get("eval_set") is None and e.get("eval_level") is None]
        assert ev["metrics"]["num_examples"] == len(fixed) == 8  # eval.size; the transfer set's rows apart
        assert len(ev["examples"]) > len(fixed)  # the transfer set was evaluated too (at step 0 and the end)
        assert all(math.isfinite(v) for v in ev["metrics"].values() if isinstance(v, float))
    return lines


def weights_moved(final: Path, base: Path) -> float:
    """The largest change of any weight between two saved models (loaded in fp32)."""
    import torch
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32)
    b = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    assert all(torch.isfinite(p).all() for p in a.parameters())
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters(), strict=True))


def share_moved(final: Path, base: Path) -> float:
    """The share of the weights that differ between two saved models."""
    import torch
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32)
    b = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    pairs = list(zip(a.parameters(), b.parameters(), strict=True))
    return sum(int((p != q).sum()) for p, q in pairs) / sum(p.numel() for p, _ in pairs)


def embedded_dir() -> Path:
    from grpo_recipes.models.loading import ensure_embedded

    return ensure_embedded("smollm2-135m-instruct")


def test_full_training_of_the_embedded_model_keeps_fp32_weights_that_every_step_moves(tmp_path):
    """bf16 compute under autocast; AdamW updates fp32 weights (in bf16 it would lose 98 % of them)."""
    proc = run_train(*SHORT, f"output_root={tmp_path}", "run_name=bf16")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "bf16"
    log = (run / "train.log").read_text()
    assert "cuda x1, single process" in log and "parameters, float32)" in log  # the run's description
    assert "AdamW trains the" not in log
    trained_as_asked(run)
    assert weights_moved(run / "final", embedded_dir()) > 0
    assert share_moved(run / "final", embedded_dir()) > 0.9


def test_a_static_cache_compiles_the_decoding_step_on_a_gpu():
    """grpo.cache_implementation=static on a GPU: the recipe undoes TRL's `disable_compile`, so transformers
    compiles the decoding step (inductor, CUDA graphs) on the recipe's reused bf16 cache; the first tokens and
    logits are the eager default cache's (compiled kernels round differently later on)."""
    import copy

    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from torch._dynamo.utils import counters
    from transformers import GenerationConfig

    from grpo_recipes.models.tiny import tiny_model, tiny_tokenizer
    from grpo_recipes.train import fast_generation
    from grpo_recipes.train.static_cache import static_cache_generation

    AcceleratorState._reset_state(reset_partial_state=True)
    tokenizer = tiny_tokenizer()
    plain = tiny_model(tokenizer, seed=2, hidden_size=64).cuda()  # fp32 weights, bf16 autocast: as a run's
    fast = copy.deepcopy(plain)
    accelerator = Accelerator(mixed_precision="bf16")
    fast_generation.fast_generation(fast, accelerator)
    static_cache_generation(fast)
    enc = tokenizer(
        ["<|im_start|>user\n12+7?<|im_end|>\n", "9"] * 4,
        return_tensors="pt",
        padding=True,
        padding_side="left",
    ).to("cuda")
    greedy = {
        "max_new_tokens": 16,
        "do_sample": False,
        "pad_token_id": tokenizer.pad_token_id,
        "output_logits": True,
        "return_dict_in_generate": True,
    }
    config = GenerationConfig(**greedy, cache_implementation="static", disable_compile=True)  # as TRL's
    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        with accelerator.autocast():
            expected = plain.generate(**enc, **greedy)
        got = [fast.generate(**enc, generation_config=config) for _ in range(2)]
    assert counters["stats"]["unique_graphs"] >= 1  # the decoding step was compiled
    width = enc["input_ids"].shape[1]
    for out in got:
        assert torch.equal(out.sequences[:, : width + 1], expected.sequences[:, : width + 1])
        assert torch.allclose(out.logits[0], expected.logits[0], atol=0.05)


def test_a_run_with_a_static_cache_trains(tmp_path):
    proc = run_train(*SHORT, "grpo.cache_implementation=static", f"output_root={tmp_path}", "run_name=s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "s"
    assert (
        "a static KV cache reused, its decoding step compiled (CUDA graphs)"
        in (run / "train.log").read_text()
    )
    trained_as_asked(run)


@pytest.mark.parametrize("quantize", [None, "4bit"])
def test_lora_and_qlora_train_an_adapter(quantize, tmp_path):
    if quantize and importlib.util.find_spec("bitsandbytes") is None:
        pytest.skip("bitsandbytes is not installed: QLoRA not tested")
    from safetensors.torch import load_file

    extra = [f"model.lora.quantize={quantize}"] if quantize else []
    proc = run_train(
        *SHORT,
        "model.lora.enabled=true",
        "learning_rate=1e-3",
        *extra,
        f"output_root={tmp_path}",
        "run_name=l",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trained_as_asked(tmp_path / "l")
    adapter = load_file(tmp_path / "l" / "final" / "adapter_model.safetensors")
    lora_b = [t for k, t in adapter.items() if "lora_B" in k]
    assert lora_b and max(t.abs().max().item() for t in lora_b) > 0  # lora_B starts at zero


def launch_single(preset: str, tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """`accelerate launch` with a shipped preset, on one process (one GPU)."""
    cfg = yaml.safe_load((CONFIG / "accelerate" / f"{preset}.yaml").read_text())
    cfg.update(num_processes=1)
    config = tmp_path / f"{preset}-1.yaml"
    config.write_text(yaml.safe_dump(cfg))
    return subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config)]
        + [str(ROOT / "train_grpo.py"), *overrides],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        capture_output=True,
        text=True,
        timeout=1200,
    )


@needs("deepspeed")
@pytest.mark.parametrize(("preset", "engine"), [("zero2", "DeepSpeed ZeRO-2"), ("zero3", "DeepSpeed ZeRO-3")])
def test_deepspeed_presets_on_one_gpu(preset, engine, tmp_path):
    proc = launch_single(preset, tmp_path, *SHORT, f"output_root={tmp_path}", "run_name=ds")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "ds"
    log = (run / "train.log").read_text()
    assert f"cuda x1, {engine}" in log
    # DeepSpeed keeps fp32 master weights: the model loads as the checkpoint's bf16, with no warning
    assert "parameters, bfloat16)" in log and "AdamW trains the" not in log
    trained_as_asked(run)
    assert (run / "final" / "model.safetensors").is_file()
    assert weights_moved(run / "final", embedded_dir()) > 0


def test_fsdp2_preset_on_one_gpu_saves_a_loadable_model(tmp_path):
    """fsdp.yaml saves SHARDED_STATE_DICT checkpoints; the final model is gathered (weights.py)."""
    proc = launch_single("fsdp", tmp_path, *SHORT, f"output_root={tmp_path}", "run_name=fsdp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "fsdp"
    log = (run / "train.log").read_text()
    assert "cuda x1, FSDP2" in log
    assert "AdamW trains the" not in log  # accelerate upcasts the weights FSDP trains to fp32
    trained_as_asked(run)
    assert weights_moved(run / "final", embedded_dir()) > 0


@needs("vllm")
def test_vllm_colocate_trains_and_the_fixed_eval_generates_with_it(tmp_path):
    """use_vllm colocate: training and the fixed eval both generate with the trainer's vLLM engine; the
    eval JSON keeps the HF path's contract (eval_only with transformers on the same final model: same
    problems, same metric names)."""
    overrides = [
        *SHORT,
        "use_vllm=true",
        "grpo.vllm_mode=colocate",
        "grpo.vllm_gpu_memory_utilization=0.3",
        f"output_root={tmp_path}",
    ]
    proc = run_train(*overrides, "run_name=v")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "v"
    assert "fixed eval generates with the trainer's vLLM engine (colocate)" in (run / "train.log").read_text()
    trained_as_asked(run)
    assert weights_moved(run / "final", embedded_dir()) > 0

    hf = run_train(
        *SHORT, f"model.path={run / 'final'}", "eval_only=true", f"output_root={tmp_path}", "run_name=h"
    )
    assert hf.returncode == 0, hf.stderr[-3000:]
    by_vllm = json.loads((run / "eval_results" / "eval_step_2.json").read_text())
    by_hf = json.loads((tmp_path / "h" / "eval_results" / "eval_step_2.json").read_text())
    assert [e["question"] for e in by_vllm["examples"]] == [e["question"] for e in by_hf["examples"]]
    # the same metric names, less what one side alone has: the chance line, scored at a run's first eval
    # (eval_only's is its first), and the reward-hacking alarm, a run's training reward against its eval
    chance = {k for k in by_hf["metrics"] if k.startswith("chance/")}
    first = json.loads((run / "eval_results" / "eval_step_0.json").read_text())
    assert chance and chance <= set(first["metrics"]) and "reward_hacking" in by_vllm["metrics"]
    run_only = {"seconds", "reward_hacking"}
    assert set(by_vllm["metrics"]) - run_only == set(by_hf["metrics"]) - {"seconds"} - chance
    assert set(by_vllm["examples"][0]) == set(by_hf["examples"][0])


@needs("vllm")
def test_digits_tools_under_vllm_colocate_learns_to_call_the_tool_and_counts_calls_as_training_does(tmp_path):
    """The digits_tools preset as shipped, generating with vLLM: training's rollouts go through TRL's tool
    loop on the vLLM engine, the fixed eval through the recipe's loop on the same engine. Every step logs
    its tool calls, the eval's tool metrics are the means of its examples' counts, and the model learns to
    call the tool (0 % at step 0 on the CPU, greedy)."""
    vllm = ["use_vllm=true", "grpo.vllm_mode=colocate", "grpo.vllm_gpu_memory_utilization=0.3"]
    proc = run_train("experiment=digits_tools", *vllm, f"output_root={tmp_path}", "run_name=vt")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "vt"
    assert "fixed eval generates with the trainer's vLLM engine (colocate)" in (run / "train.log").read_text()
    lines = read_jsonl(run / "metrics.jsonl")
    train = [r for r in lines if "train/tools/call_frequency" in r]
    assert [r["step"] for r in train] == list(range(1, 13))
    assert all(math.isfinite(r["train/loss"]) for r in train)
    used = {}
    for step in (0, 6, 12):
        ev = json.loads((run / "eval_results" / f"eval_step_{step}.json").read_text())
        fixed = [e for e in ev["examples"] if e.get("eval_set") is None]
        assert len(fixed) == 64  # 32 held-out problems per task
        assert all(e["tool_calls"] <= 1 for e in fixed)  # grpo.max_tool_calling_iterations: 1
        metrics = ev["metrics"]
        assert metrics["tools/calls_per_problem"] == pytest.approx(sum(e["tool_calls"] for e in fixed) / 64)
        assert metrics["tools/used"] == pytest.approx(sum(e["tool_calls"] > 0 for e in fixed) / 64)
        used[step] = (metrics["tools/used"], metrics["accuracy"])
        print(f"eval step {step}: tools/used {metrics['tools/used']:.3f}, accuracy {metrics['accuracy']:.3f}")
    assert max(r["train/tools/call_frequency"] for r in train) > 0
    assert used[12][0] > used[0][0] and used[12][1] > used[0][1]  # it learned to call the tool, and to answer
