"""LoRA / QLoRA through peft, from the `model.lora` config block.

GRPOTrainer wraps the model with the returned LoraConfig: only the adapter trains, and
`save_model` writes the adapter (adapter_config.json + adapter_model.safetensors).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from grpo_common.errors import ConfigError

_ATTN_MLP = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# Attention and MLP projections per architecture (config.model_type); others use peft's "all-linear".
TARGET_MODULES: dict[str, list[str]] = {
    **{
        t: _ATTN_MLP
        for t in (
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "gemma",
            "gemma2",
            "gemma3_text",
            "granite",
            "olmo",
            "olmo2",
            "smollm3",
        )
    },
    "phi3": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "gpt_neox": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
    "falcon": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
}


def target_modules(setting: Any, model_type: str) -> list[str] | str:
    if setting in (None, "auto"):
        return TARGET_MODULES.get(model_type, "all-linear")
    return setting if isinstance(setting, str) else list(setting)


def lora_config(lora: dict[str, Any], model_type: str):
    """A peft LoraConfig, or None when LoRA is off."""
    if not lora or not lora.get("enabled"):
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=int(lora["r"]),
        lora_alpha=int(lora["alpha"]),
        lora_dropout=float(lora["dropout"]),
        target_modules=target_modules(lora.get("target_modules"), model_type),
        task_type="CAUSAL_LM",
    )


def quantization_config(lora: dict[str, Any], on_gpu: bool):
    """bitsandbytes config for QLoRA (`model.lora.quantize: 4bit | 8bit`), checked against the hardware."""
    mode = (lora or {}).get("quantize")
    if not mode:
        return None
    if mode not in ("4bit", "8bit"):
        raise ConfigError(f"model.lora.quantize={mode!r}; accepted: 4bit, 8bit or null")
    if not lora.get("enabled"):
        raise ConfigError("model.lora.quantize needs model.lora.enabled=true (QLoRA trains an adapter)")
    if not on_gpu:
        raise ConfigError(
            "model.lora.quantize (QLoRA) needs a CUDA GPU: bitsandbytes quantization does not run on "
            "this CPU-only machine; use plain LoRA (model.lora.quantize=null)"
        )
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError("model.lora.quantize needs bitsandbytes: pip install bitsandbytes")
    import torch
    from transformers import BitsAndBytesConfig

    if mode == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
