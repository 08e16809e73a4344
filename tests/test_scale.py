"""Scale-out: loss presets, LoRA, multi-process runs, stop-and-resume, accelerate and launcher presets."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tests.conftest import ROOT, accelerate_launch, read_jsonl, run_train

CONFIG = ROOT / "config"
TINY = ["model=tiny_random", "eval.size=4", "grpo.max_completion_length=8"]
LOSS_PRESETS = sorted(
    p.stem for p in (CONFIG / "grpo").glob("*.yaml") if p.stem not in ("default", "vllm_is")
)


def composed(*overrides):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG)):
        return compose("train", overrides=list(overrides))


def test_every_loss_preset_is_listed():
    assert set(LOSS_PRESETS) >= {
        "grpo",
        "dr_grpo",
        "dapo",
        "bnpo",
        "cispo",
        "sapo",
        "gspo",
        "kl",
        "multi_update",
        "off_policy",
    }


@pytest.mark.parametrize("preset", LOSS_PRESETS)
def test_loss_preset_trains_two_steps(preset, tmp_path):
    from grpo_recipes.train.run import train

    cfg = composed(f"grpo={preset}", *TINY, "max_steps=2", "eval.every_n_steps=0")
    cfg.output_dir = str(tmp_path)
    train(cfg)
    train_lines = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "train/loss" in r]
    assert [r["step"] for r in train_lines] == [1, 2]
    assert all(isinstance(r["train/loss"], float) for r in train_lines)
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())["grpo"]
    preset_keys = yaml.safe_load((CONFIG / "grpo" / f"{preset}.yaml").read_text())
    for key, value in preset_keys.items():
        if key != "defaults":  # an interpolation (gspo's, off_policy's steps_per_generation) as resolved
            interpolated = isinstance(value, str) and value.startswith("${")
            assert saved[key] == (OmegaConf.select(cfg, f"grpo.{key}") if interpolated else value)
    if preset == "kl":
        assert all("train/kl" in r for r in train_lines)  # the reference model is in use


def test_vllm_preset_stops_with_a_clear_message_without_a_gpu(tmp_path):
    proc = run_train("grpo=vllm_is", *TINY, f"output_root={tmp_path}")
    assert proc.returncode == 2 and "use_vllm=true needs a CUDA GPU" in proc.stderr


def test_accelerate_configs_load_and_validate():
    from accelerate.commands.config.config_args import load_config_from_file

    expected = {
        "single": "NO",
        "ddp": "MULTI_GPU",
        "cpu_ddp": "MULTI_GPU",
        "zero2": "DEEPSPEED",
        "zero3": "DEEPSPEED",
        "fsdp": "FSDP",
    }
    for name, kind in expected.items():
        cfg = load_config_from_file(str(CONFIG / "accelerate" / f"{name}.yaml"))
        assert cfg.distributed_type.value == kind, name
    z2 = load_config_from_file(str(CONFIG / "accelerate" / "zero2.yaml")).deepspeed_config
    z3 = load_config_from_file(str(CONFIG / "accelerate" / "zero3.yaml")).deepspeed_config
    assert z2["zero_stage"] == 2 and z3["zero_stage"] == 3 and z3["zero3_init_flag"]
    assert load_config_from_file(str(CONFIG / "accelerate" / "fsdp.yaml")).fsdp_config["fsdp_version"] == 2


def test_slurm_preset_composes_and_its_launcher_loads():
    from hydra.utils import instantiate

    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG)):
        cfg = compose(
            "train",
            overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.partition == "gpu" and launcher.gpus_per_node == 1 and launcher.max_num_timeout == 3
    assert type(instantiate(launcher)).__name__ == "SlurmLauncher"


@pytest.mark.slow
def test_local_launcher_runs_each_job_in_its_own_process(tmp_path):
    proc = run_train(
        "-m",
        "hydra/launcher=local",
        "hydra.launcher.gpus_per_node=0",
        *TINY,
        "max_steps=1",
        f"output_root={tmp_path}",
        "run_name=loc",
        "seed=1,2",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sweep = tmp_path / "loc-sweep"
    for job in ("0", "1"):
        assert (sweep / job / "train_results.json").is_file()
    # submitit names each local job's folder by the process id it ran in: two jobs, two processes
    pids = [p.name for p in (sweep / ".submitit").iterdir() if p.name.isdigit()]
    assert len(set(pids)) == 2
    assert (sweep / "summary.md").is_file()


@pytest.mark.slow
def test_two_process_cpu_run_writes_outputs_once(tmp_path):
    cmd = [
        *accelerate_launch(),
        *TINY,
        "eval.size=5",
        "max_steps=2",
        "eval.every_n_steps=1",
        "grpo.per_device_train_batch_size=8",
        "grpo.dynamic_sampling=true",  # one group per process: the draw decisions are taken together
        f"output_root={tmp_path}",
        "run_name=ddp",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "ddp"
    assert "cpu x2, DDP" in (run / "train.log").read_text()  # the engine that runs, named
    lines = read_jsonl(run / "metrics.jsonl")
    keys = [(r["step"], r["split"]) for r in lines if "train/reward" in r or r["split"] == "eval"]
    assert keys == [(0, "eval"), (1, "eval"), (1, "train"), (2, "eval"), (2, "train")]  # once each
    for r in (r for r in lines if "train/reward" in r):  # both processes' groups counted
        draws = r["train/dynamic_sampling/draws"]
        assert r["train/dynamic_sampling/groups_drawn"] == 2 * draws
        assert r["train/dynamic_sampling/groups_kept"] <= 2 and "train/sampling/kl_sample_train_v1" in r
    assert (run / "train.log").read_text().count("[eval step 0]") == 1
    ev = json.loads((run / "eval_results/eval_step_2.json").read_text())
    fixed = [e["index"] for e in ev["examples"] if e.get("eval_set") is None]  # the final eval: + transfer
    assert fixed == [0, 1, 2, 3, 4]  # both ranks' shards gathered
    assert (run / "final/model.safetensors").is_file() and (run / "checkpoint-2").is_dir()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stop_on_signal_then_resume(signum, tmp_path):
    args = [
        sys.executable,
        str(ROOT / "train_grpo.py"),
        *TINY,
        "max_steps=60",
        "grpo.save_steps=5",
        "eval.every_n_steps=25",
        f"output_root={tmp_path}",
        "run_name=r",
    ]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = tmp_path / "r" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until training is under way
        if (
            metrics.exists()
            and sum(1 for line in metrics.read_text().splitlines() if '"train/reward"' in line) >= 10
        ):
            break
        time.sleep(0.05)
    proc.send_signal(signum)
    sent = time.time()
    out, _ = proc.communicate(timeout=60)
    assert time.time() - sent < 15, "a clean stop takes seconds"
    assert proc.returncode == 128 + signum, out[-2000:]
    assert "resume=true" in out
    stopped = [r for r in read_jsonl(metrics) if "train/reward" in r]  # every line is whole JSON
    last = stopped[-1]["step"]
    assert 10 <= last < 60
    assert (tmp_path / "r" / f"checkpoint-{last}").is_dir()
    assert not (tmp_path / "r" / "train_results.json").exists()
    if signum == signal.SIGINT:
        return  # Ctrl-C stops as SIGTERM does (the stop above); what follows is the same for both

    refused = run_train(*args[2:])  # same run_name without resume=true: refused, nothing touched
    assert refused.returncode == 2 and "resume=true" in refused.stderr

    resumed = run_train(*args[2:], "resume=true")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    lines = read_jsonl(metrics)
    steps = [r["step"] for r in lines if "train/reward" in r]
    assert steps == list(range(1, 61))  # the same final step count, no duplicated lines
    assert [r["step"] for r in lines if r["split"] == "eval"] == [0, 25, 50, 60]
    first = json.loads((tmp_path / "r" / "eval_results/eval_step_0.json").read_text())
    final = json.loads((tmp_path / "r" / "eval_results/eval_step_60.json").read_text())
    assert [e["question"] for e in first["examples"]] == [e["question"] for e in final["examples"]]
    assert json.loads((tmp_path / "r" / "train_results.json").read_text())["final_eval_step"] == 60


@pytest.mark.slow
def test_lora_run_on_the_embedded_model_trains_and_saves_only_the_adapter(tmp_path):
    import torch
    from safetensors.torch import load_file

    # a length reward always differs within a group, so every step has a gradient
    proc = run_train(
        "model.lora.enabled=true",
        "model.lora.alpha=24.5",  # a float reaches peft as it is (it was once cut to an int)
        "model.lora.merge_on_save=true",
        "max_steps=2",
        "eval.size=4",
        "grpo.max_completion_length=12",
        "learning_rate=1e-3",
        "grpo.warmup_steps=0",
        "dataset.train_size=64",
        "dataset.rewards.len.fn=tests.test_rewards.length_reward",
        f"output_root={tmp_path}",
        "run_name=lora",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "lora"
    log = (run / "train.log").read_text()
    assert (
        "LoRA r=16 alpha=24.5 on "
        "['down_proj', 'gate_proj', 'k_proj', 'o_proj', 'q_proj', 'up_proj', 'v_proj']" in log
    )
    trained = float(log.split("Training ")[1].split(" M of")[0])
    assert 0 < trained < 0.05 * 134.5  # only the adapter: a few percent of the 134.5 M parameters
    assert (run / "final/adapter_model.safetensors").is_file() and (
        run / "final/adapter_config.json"
    ).is_file()
    assert not (run / "final/model.safetensors").exists()
    adapter = load_file(run / "final/adapter_model.safetensors")
    lora_b = [t for k, t in adapter.items() if "lora_B" in k]
    assert lora_b and any(t.abs().sum() > 0 for t in lora_b)  # lora_B starts at zero: it was trained
    assert (run / "final-merged/model.safetensors").is_file()
    base_cfg = json.loads((run / "final/adapter_config.json").read_text())
    assert base_cfg["lora_alpha"] == 24.5
    assert Path(base_cfg["base_model_name_or_path"]).is_dir()
    # final-merged/ is base + B @ A * alpha / r, in fp32, merged from final/ afresh (not the live model)
    merged = load_file(run / "final-merged/model.safetensors")
    base = load_file(Path(base_cfg["base_model_name_or_path"]) / "model.safetensors")
    name = "model.layers.0.self_attn.q_proj"
    a, b = (adapter[f"base_model.model.{name}.lora_{x}.weight"] for x in "AB")
    delta = (b.float() @ a.float()) * base_cfg["lora_alpha"] / base_cfg["r"]
    assert merged[f"{name}.weight"].dtype == torch.float32 and delta.abs().max() > 0
    torch.testing.assert_close(merged[f"{name}.weight"] - base[f"{name}.weight"].float(), delta)
