"""The scale-out engines: which one runs, sharded saves that load, stops the ranks agree on, the fixed
eval's generation interface, and 2-process DeepSpeed ZeRO-2/3 runs on CPU processes (gloo)."""

import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from grpo_common.errors import ConfigError
from grpo_recipes.models.hardware import Hardware
from tests.conftest import BASE_ENV, ROOT, accelerate_launch, declared, read_jsonl, run_train
from tests.test_evaluation import eval_rows, evaluator

CONFIG = ROOT / "config"
CPU = Hardware(gpu=False, bf16=False, world_size=1)


# --- which engine ---------------------------------------------------------------------------------
def test_fsdp_without_a_gpu_is_refused_by_name():
    from grpo_recipes.models.hardware import check_engine

    fsdp = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "WORLD_SIZE": "2"}
    with pytest.raises(ConfigError, match="distributed_type: FSDP needs CUDA GPUs.*cpu_ddp.yaml"):
        check_engine(gpu=False, env=fsdp)
    check_engine(gpu=True, env=fsdp)  # a GPU runs it
    check_engine(gpu=False, env={"ACCELERATE_USE_DEEPSPEED": "true", "WORLD_SIZE": "2"})


def test_the_log_names_the_engine_the_accelerator_runs():
    from accelerate import Accelerator
    from accelerate.utils import DistributedType

    from grpo_recipes.models.hardware import running_engine

    assert running_engine(Accelerator(cpu=True)) == "single process"

    def fake(kind, **state):
        return SimpleNamespace(distributed_type=kind, state=SimpleNamespace(**state))

    zero3 = fake(DistributedType.DEEPSPEED, deepspeed_plugin=SimpleNamespace(zero_stage=3))
    assert running_engine(zero3) == "DeepSpeed ZeRO-3"
    assert running_engine(fake(DistributedType.FSDP, fsdp_plugin=SimpleNamespace(fsdp_version=2))) == "FSDP2"
    assert running_engine(fake(DistributedType.MULTI_CPU)) == "DDP"


# --- stops the ranks agree on ----------------------------------------------------------------------
class TwoRanks:
    """An accelerator of 2 processes whose all-reduce (max) sees the other rank's value."""

    num_processes, device = 2, torch.device("cpu")

    def __init__(self, other: int):
        self.other = other

    def reduce(self, tensor, reduction):
        assert reduction == "max"
        return torch.maximum(tensor, torch.tensor([self.other]))


def test_a_signal_on_one_rank_stops_every_rank_after_the_same_step():
    from transformers import TrainerControl

    from grpo_recipes.train.stopping import GracefulStop

    quiet = GracefulStop(TwoRanks(other=0))  # no rank received anything
    control = TrainerControl()
    quiet.on_step_end(None, None, control)
    assert not control.should_training_stop and not quiet.requested

    untouched = GracefulStop(TwoRanks(other=int(signal.SIGTERM)))  # only the other rank got SIGTERM
    control = TrainerControl()
    untouched.on_step_end(None, None, control)
    assert control.should_training_stop and control.should_save and untouched.exit_code == 143

    signalled = GracefulStop(TwoRanks(other=0))  # this rank got it: it waits for the step's agreement
    signalled.signum = int(signal.SIGTERM)
    assert not signalled.requested  # (a late signal after the last agreement changes nothing)
    control = TrainerControl()
    signalled.on_step_end(None, None, control)
    assert control.should_training_stop and signalled.requested


# --- sharded checkpoints that load -----------------------------------------------------------------
def test_an_fsdp_sharded_checkpoint_loads_through_torchs_converter(tmp_path, tiny, monkeypatch):
    """Under SHARDED_STATE_DICT a checkpoint holds only accelerate's torch distributed checkpoint of
    {"model": state_dict} in pytorch_model_fsdp_0/ (transformers writes no config or tokenizer there). The
    callback adds those after the save; eval_only (load_model_and_tokenizer) then reads the model back whole
    from a kept consolidated copy (its name_or_path stays a directory that loads); the checkpoint is kept."""
    import torch.distributed.checkpoint as dcp
    from transformers import TrainerControl

    from grpo_recipes.models.loading import load_model_and_tokenizer
    from grpo_recipes.models.weights import FSDP_MODEL_DIR, CompleteShardedCheckpoints, sharded_format

    monkeypatch.setenv("GRPO_RECIPES_CACHE", str(tmp_path / "cache"))
    model, tokenizer = tiny
    checkpoint = tmp_path / "run" / "checkpoint-3"
    state = {k: v.clone() for k, v in model.state_dict().items()}
    dcp.save({"model": state}, checkpoint_id=str(checkpoint / FSDP_MODEL_DIR))  # all the trainer leaves
    assert sharded_format(checkpoint) == "fsdp" and not (checkpoint / "config.json").exists()

    args = SimpleNamespace(output_dir=str(tmp_path / "run"))
    for rank0 in (False, True):  # only the main process writes
        run_state = SimpleNamespace(global_step=3, is_world_process_zero=rank0)
        CompleteShardedCheckpoints().on_save(
            args, run_state, TrainerControl(), model=model, processing_class=tokenizer
        )
        assert (checkpoint / "config.json").is_file() == rank0
    before = sorted(p.name for p in checkpoint.rglob("*"))

    loaded, loaded_tokenizer = load_model_and_tokenizer(
        declared("model", path=str(checkpoint), dtype="float32"), CPU
    )
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert loaded_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert sorted(p.name for p in checkpoint.rglob("*")) == before  # the checkpoint is not changed
    again = type(loaded).from_pretrained(loaded.name_or_path)  # what TRL's reference model and vLLM load
    assert all(torch.equal(a, b) for a, b in zip(again.parameters(), loaded.parameters(), strict=True))


# --- the fixed eval's generation interface ---------------------------------------------------------
class Scripted:
    """A CompletionGenerator that returns fixed token ids and records how it was asked."""

    def __init__(self, completions, eos):
        self.completions, self.eos_token_ids, self.calls = completions, {eos}, []

    def generate(self, prompts, n, temperature, max_new_tokens):
        self.calls.append((len(prompts), n, temperature, max_new_tokens))
        return [self.completions[:n] for _ in prompts]


def test_any_generator_feeds_the_same_eval_contract(tiny):
    _, tokenizer = tiny
    taskset, rows = eval_rows(4)
    ev = evaluator(rows, taskset, tokenizer, max_new_tokens=6)
    eos = tokenizer.eos_token_id
    text = tokenizer("[ANSWER] 7", add_special_tokens=False)["input_ids"]
    finished = [*text, eos, tokenizer.pad_token_id]  # ends with EOS, then padding (ignored)
    scripted = Scripted([finished], eos)
    out = ev.generate(scripted, [0, 1, 2])
    assert scripted.calls == [(3, 1, None, 6)]  # greedy: temperature None
    assert out == [(tokenizer.decode(text, skip_special_tokens=True), len(text) + 1, False, [*text, eos])] * 3
    cut = Scripted([text[:3]], eos)  # no EOS: cut at the length limit
    assert ev.generate(cut, [0]) == [
        (tokenizer.decode(text[:3], skip_special_tokens=True), 3, True, text[:3])
    ]


def test_hf_generator_matches_transformers_generate_bit_for_bit(tiny):
    from transformers import GenerationConfig

    from grpo_recipes.evaluation.generation import HFGenerator

    model, tokenizer = tiny
    prompts = ["12+3=", "abc", "a much longer prompt than the others"]
    got = HFGenerator(model, tokenizer, batch_size=8).generate(prompts, 1, None, 7)
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    config = GenerationConfig(
        max_new_tokens=7,
        do_sample=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.no_grad():
        expected = model.generate(**enc, generation_config=config)[:, enc["input_ids"].shape[1] :].tolist()
    assert got == [[ids] for ids in expected]
    torch.manual_seed(0)
    sampled = HFGenerator(model, tokenizer, batch_size=4).generate(prompts[:2], 2, 1.0, 5)
    assert [len(group) for group in sampled] == [2, 2] and all(len(ids) <= 5 for g in sampled for ids in g)


def test_hf_generator_ignores_the_models_own_decoding_defaults(tiny):
    """A hub model's generation_config.json (Qwen2.5: repetition_penalty 1.05, top_k 20, top_p 0.8) and
    transformers' top_k 50 do not reach the eval: greedy is argmax, sampling the temperature alone, as TRL
    samples in training and vLLM in the eval."""
    import copy

    from grpo_recipes.evaluation.generation import HFGenerator

    model, tokenizer = tiny
    prompts = ["12+3=", "abc", "a much longer prompt than the others"]
    plain = copy.deepcopy(model)
    opinionated = copy.deepcopy(model)
    opinionated.generation_config.repetition_penalty = 5.0  # changes the tiny model's greedy text
    opinionated.generation_config.top_k = 1  # would make sampling greedy
    penalised = copy.deepcopy(plain)
    penalised.generation_config.repetition_penalty = 5.0

    def greedy(m):
        return HFGenerator(m, tokenizer, batch_size=8).generate(prompts, 1, None, 12)

    def sampled(m):
        torch.manual_seed(0)
        return HFGenerator(m, tokenizer, batch_size=8).generate(prompts, 4, 1.0, 12)

    assert greedy(opinionated) == greedy(plain)
    assert sampled(opinionated) == sampled(plain)
    assert len({tuple(ids) for group in sampled(plain) for ids in group}) > 3  # it does sample
    # the settings do change these outputs when generate is left to take them
    with torch.no_grad():
        enc = tokenizer(
            prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        )
        kwargs = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": tokenizer.pad_token_id}
        assert not torch.equal(penalised.generate(**enc, **kwargs), plain.generate(**enc, **kwargs))


def test_vllm_server_generator_syncs_once_and_keeps_the_order(tiny):
    """Server mode on one process: the main process's client generates every rank's prompts (here one
    rank), after one weight sync per eval; greedy is vLLM's temperature 0."""
    from accelerate import Accelerator

    from grpo_recipes.evaluation.generation import VLLMGenerator

    model, tokenizer = tiny
    asked = []

    class Client:
        def generate(self, prompts, n, temperature, max_tokens):
            asked.append((prompts, n, temperature, max_tokens))
            return {"completion_ids": [[len(p), k] for p in prompts for k in range(n)]}

    engine = SimpleNamespace(mode="server", accelerator=Accelerator(cpu=True), vllm_client=Client(), synced=0)
    engine.sync_weights = lambda: setattr(engine, "synced", engine.synced + 1)
    gen = VLLMGenerator(engine, tokenizer, model)
    first = gen.generate(["ab", "abcd"], 1, None, 9)
    sampled = gen.generate(["ab"], 3, 0.7, 9)
    assert engine.synced == 1  # once per eval, before its first generation
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in ["ab", "abcd"]]
    assert asked[0] == (ids, 1, 0.0, 9) and asked[1][1:] == (3, 0.7, 9)
    assert first == [[[len(ids[0]), 0]], [[len(ids[1]), 0]]]
    assert sampled == [[[len(ids[0]), 0], [len(ids[0]), 1], [len(ids[0]), 2]]]
    assert gen.eos_token_ids == {tokenizer.eos_token_id}


# --- 2-process DeepSpeed runs on CPU processes ---------------------------------------------------------
TINY = [
    "model=tiny_random",
    "eval.size=6",
    "grpo.max_completion_length=8",
    "learning_rate=1e-3",  # large, so that a few steps visibly move the weights
    "grpo.warmup_steps=0",
    "dataset.rewards.len.fn=tests.test_rewards.length_reward",  # always differs in a group: a gradient
    "grpo.save_steps=1",
]


def two_process_config(preset: str, tmp_path: Path, **changes) -> Path:
    """The shipped preset as 2 CPU processes (no mixed precision: fp32 on a CPU)."""
    cfg = yaml.safe_load((CONFIG / "accelerate" / f"{preset}.yaml").read_text())
    cfg.update(num_processes=2, mixed_precision="no")
    cfg["deepspeed_config"].update(changes)
    path = tmp_path / f"{preset}-2.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def launch(config: Path, *overrides: str) -> subprocess.Popen:
    # CPU processes even on a GPU machine (accelerate picks NCCL if it sees one)
    env = {**os.environ, **BASE_ENV, "DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.Popen(
        [*accelerate_launch(config), *overrides],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(launcher: subprocess.Popen, timeout: int = 900) -> str:
    """The launch's output; on a timeout its workers and the launcher are killed, not left behind."""
    import psutil

    try:
        return launcher.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        for proc in [*psutil.Process(launcher.pid).children(recursive=True), launcher]:
            proc.kill()
        raise


def rank0_worker(launcher: subprocess.Popen):
    import psutil

    for child in psutil.Process(launcher.pid).children(recursive=True):
        if child.environ().get("RANK") == "0":
            return child
    return None


def stop_rank0_after_first_step(launcher: subprocess.Popen, metrics: Path) -> str:
    """SIGTERM to rank 0 alone once a step is logged: both ranks must stop after the same step."""
    deadline = time.time() + 600
    while time.time() < deadline and launcher.poll() is None:
        if metrics.exists() and '"train/loss"' in metrics.read_text():
            rank0_worker(launcher).send_signal(signal.SIGTERM)
            break
        time.sleep(0.1)
    return finish(launcher)


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["zero2", "zero3"])
def test_deepspeed_two_processes_train_stop_resume_save_and_reevaluate(preset, tmp_path):
    """One sequence per ZeRO stage, 2 CPU processes: train, SIGTERM to rank 0 only (the ranks agree and
    stop after the same step with a checkpoint), resume to a later max_steps, final/ loads with
    from_pretrained, and eval_only on final/ gives the run's last eval exactly. ZeRO-3 runs without
    gathering 16-bit weights at save, so final/ is DeepSpeed's zero_to_fp32 conversion and the
    checkpoint holds shards only (eval_only's loader converts them)."""
    from transformers import AutoModelForCausalLM

    from grpo_recipes.models.loading import ensure_tiny, load_model_and_tokenizer
    from grpo_recipes.outputs.checkpoints import problem

    changes = {"zero3_save_16bit_model": False} if preset == "zero3" else {}
    config = two_process_config(preset, tmp_path, **changes)
    run = tmp_path / "ds"
    common = [*TINY, f"output_root={tmp_path}", "run_name=ds"]
    out = stop_rank0_after_first_step(launch(config, *common, "max_steps=40"), run / "metrics.jsonl")
    assert "SIGTERM received" in out, out[-3000:]
    log = (run / "train.log").read_text()
    engine = "DeepSpeed ZeRO-3" if preset == "zero3" else "DeepSpeed ZeRO-2"
    assert f"cpu x2, {engine}" in log
    stopped = int(log.split("Stopped at step ")[1].split()[0])
    assert 1 <= stopped < 40
    shards = run / f"checkpoint-{stopped}" / f"global_step{stopped}"
    # both ranks saved their shard of the checkpoint (DeepSpeed adds "bf16_" where the CPU runs bf16)
    assert sorted(p.name.removeprefix("bf16_") for p in shards.glob("*optim_states.pt")) == [
        f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt" for rank in (0, 1)
    ]
    assert not (run / "train_results.json").exists()
    assert problem(run / f"checkpoint-{stopped}") is None and not (run / ".saving").exists()  # whole

    end = stopped + 2
    resumed = launch(config, *common, "resume=true", f"max_steps={end}")
    rout = finish(resumed)
    assert resumed.returncode == 0, rout[-3000:]
    lines = read_jsonl(run / "metrics.jsonl")
    train = [r for r in lines if "train/loss" in r]
    assert [r["step"] for r in train] == list(range(1, end + 1))  # each step once, across the resume
    assert all(math.isfinite(r["train/loss"]) for r in train)
    assert [r["step"] for r in lines if r["split"] == "eval"] == [0, end]  # once each, not once per rank
    assert (run / "train.log").read_text().count("[eval step 0]") == 1
    assert sorted(p.name for p in (run / "eval_results").iterdir()) == [
        "eval_step_0.json",
        f"eval_step_{end}.json",
    ]
    last = json.loads((run / "eval_results" / f"eval_step_{end}.json").read_text())
    fixed = [e["index"] for e in last["examples"] if e.get("eval_set") is None]  # the final eval: + transfer
    assert fixed == list(range(6))  # both ranks' shards

    final = run / "final"
    assert (final / "model.safetensors").is_file() and not (final / "latest").exists()
    # final/ holds fp32 weights; from_pretrained would load config.json's dtype (bf16 where the CPU runs it)
    trained = AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32)
    start = AutoModelForCausalLM.from_pretrained(ensure_tiny(0))
    moved = [
        (a - b).abs().max().item() for a, b in zip(trained.parameters(), start.parameters(), strict=True)
    ]
    assert all(math.isfinite(p.abs().sum().item()) for p in trained.parameters()) and max(moved) > 1e-4

    proc = run_train(*TINY, f"model.path={final}", "eval_only=true", f"output_root={tmp_path}", "run_name=eo")
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads((tmp_path / "eo" / "eval_results" / f"eval_step_{end}.json").read_text())
    assert [e["completion"] for e in again["examples"]] == [e["completion"] for e in last["examples"]]
    for key in ("accuracy", "mean_score", "mean_length", "reward", "format"):
        assert again["metrics"][key] == last["metrics"][key], key

    checkpoint = run / f"checkpoint-{end}"
    assert problem(checkpoint) is None and not (run / ".saving").exists()
    if preset == "zero3":  # shards only: eval_only's loader converts them (deepspeed zero_to_fp32)
        assert not (checkpoint / "model.safetensors").exists() and (checkpoint / "latest").is_file()
    from_checkpoint, _ = load_model_and_tokenizer(
        declared("model", path=str(checkpoint), dtype="float32"), CPU
    )
    for a, b in zip(from_checkpoint.parameters(), trained.parameters(), strict=True):
        assert torch.equal(a, b)  # the last checkpoint is the final model
