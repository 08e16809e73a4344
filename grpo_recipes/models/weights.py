"""Saved models that load with `from_pretrained`, whichever engine trained them: ZeRO-3 shards (without
`zero3_save_16bit_model`) and FSDP's SHARDED_STATE_DICT are gathered or converted with the libraries' own
tools at the final save and when eval_only reads them. Checkpoints keep the engines' state as written."""

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

log = logging.getLogger("grpo_recipes")

# What from_pretrained (or peft) reads; any of them makes a directory loadable as it is.
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin")
WEIGHT_FILES += ("model.safetensors.index.json", "pytorch_model.bin.index.json")  # weights in shards
ZERO_TAG_FILE = "latest"  # DeepSpeed's save_checkpoint: names the global_step<N>/ folder
FSDP_MODEL_DIR = "pytorch_model_fsdp_0"  # accelerate's save_fsdp_model with SHARDED_STATE_DICT


def sharded_format(path: Path) -> str | None:
    """'deepspeed' or 'fsdp' when the directory holds an engine's shards and no loadable weights."""
    if not path.is_dir() or any((path / name).is_file() for name in WEIGHT_FILES):
        return None
    if (path / ZERO_TAG_FILE).is_file():
        return "deepspeed"
    if (path / FSDP_MODEL_DIR).is_dir():
        return "fsdp"
    return None


def consolidated_state_dict(path: Path) -> dict[str, Any]:
    if sharded_format(path) == "deepspeed":
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        return get_fp32_state_dict_from_zero_checkpoint(str(path))
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    # FSDP: torch's converter (accelerate's merge_fsdp_weights wraps it, on rank 0 only)
    with tempfile.TemporaryDirectory() as tmp:
        dcp_to_torch_save(str(path / FSDP_MODEL_DIR), str(Path(tmp) / "model.pt"))
        state = torch.load(Path(tmp) / "model.pt", weights_only=True)
    return state.get("model", state)


def consolidated_copy(path: Path) -> Path:
    """A sharded checkpoint's consolidated weights beside its config and tokenizer files, in the cache: the
    model's `name_or_path` must stay a directory (TRL rebuilds the reference model from it, vLLM loads it)."""
    import hashlib

    import torch

    from grpo_recipes.models.loading import build_once, cache_root

    path = path.resolve()
    shards = path / (FSDP_MODEL_DIR if sharded_format(path) == "fsdp" else ZERO_TAG_FILE)
    key = hashlib.sha1(f"{path}:{shards.stat().st_mtime_ns}".encode()).hexdigest()[:16]

    def build(tmp: Path) -> None:  # the ranks of a multi-process eval_only convert it once
        state_dict = consolidated_state_dict(path)
        for item in path.iterdir():  # config, generation config, tokenizer, chat template
            if item.is_file() and item.suffix in (".json", ".jinja", ".txt", ".model"):
                shutil.copy(item, tmp)
        torch.save(state_dict, tmp / "pytorch_model.bin")  # tied weights share storage: not safetensors

    return build_once(cache_root() / "consolidated" / f"{path.name}-{key}", build)


class CompleteShardedCheckpoints(TrainerCallback):
    """Under FSDP's SHARDED_STATE_DICT a checkpoint gets only accelerate's shards: add the config and the
    tokenizer after each save, so eval_only can load it."""

    def on_save(self, args, state, control, model, processing_class, **kwargs):
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if not state.is_world_process_zero or (checkpoint / "config.json").is_file():
            return
        if sharded_format(checkpoint) == "fsdp":
            inner = getattr(model, "module", model)  # an FSDP1 wrapper holds the model; FSDP2 keeps its class
            inner.config.save_pretrained(checkpoint)
            if inner.generation_config is not None:
                inner.generation_config.save_pretrained(checkpoint)
            processing_class.save_pretrained(checkpoint)


def save_final_model(trainer, out_dir: Path) -> None:
    """trainer.save_model, then whatever makes `out_dir` load with from_pretrained (all ranks call it)."""
    accelerator, model = trainer.accelerator, trainer.accelerator.unwrap_model(trainer.model)
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if plugin is not None and "FULL_STATE_DICT" not in str(plugin.state_dict_type):
        # transformers' save_model writes nothing under a sharded FSDP state dict: gather it (collective)
        state_dict = accelerator.get_state_dict(trainer.model)
        if accelerator.is_main_process:
            model.save_pretrained(out_dir, state_dict=state_dict)
            trainer.processing_class.save_pretrained(out_dir)
        accelerator.wait_for_everyone()
        return
    trainer.save_model(str(out_dir))
    accelerator.wait_for_everyone()  # every rank's shards are written before they are read
    if accelerator.is_main_process and sharded_format(out_dir) == "deepspeed":
        # ZeRO shards -> fp32 safetensors in place (save_pretrained handles tied weights, which safetensors
        # refuses); the shards go: the final model is not resumed, checkpoint-<N>/ keep DeepSpeed's state
        tag = (out_dir / ZERO_TAG_FILE).read_text().strip()
        model.save_pretrained(out_dir, state_dict=consolidated_state_dict(out_dir))
        shutil.rmtree(out_dir / tag)
        for name in (ZERO_TAG_FILE, "zero_to_fp32.py", "zero_to_torch.py"):  # DeepSpeed's recovery scripts
            (out_dir / name).unlink(missing_ok=True)
        log.info("%s: DeepSpeed ZeRO shards converted to fp32 safetensors (deepspeed zero_to_fp32)", out_dir)
    accelerator.wait_for_everyone()


def save_merged_model(adapter_dir: Path, out_dir: Path, tokenizer) -> None:
    """The base model with the adapter in `adapter_dir` (final/) merged in, loaded afresh on the CPU (the
    live model may be sharded by ZeRO-3 or FSDP, or quantized by QLoRA) and kept in fp32: merged into bf16
    weights, a small LoRA change would round away."""
    import torch
    from peft import AutoPeftModelForCausalLM
    from transformers.integrations import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()  # training is over; ZeRO-3's would partition this one process's load
    model = AutoPeftModelForCausalLM.from_pretrained(str(adapter_dir), dtype=torch.float32)
    model.merge_and_unload().save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
