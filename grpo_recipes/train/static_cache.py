"""`generate` on a static KV cache where one is asked for (grpo.cache_implementation=static, which TRL passes
to `generate`): the recipe's own, since transformers' fails under autocast, reused across calls; on a GPU
with transformers' compile of the decoding step into CUDA graphs, which TRL's generation config turns off
(benchmarks/RESULTS.md, "A static KV cache with a compiled decoding step")."""

import copy
import functools
import logging

from grpo_recipes.train.fast_generation import sequences_per_prompt

log = logging.getLogger("grpo_recipes")

CACHE_LENGTH_STEP = 128  # static caches come in multiples of this: a few sizes, each compiled once


def static_cache_shape(kwargs: dict, config) -> tuple[int, int]:
    """(rows, positions) a `generate` call's static cache needs: the rows it decodes (beams or samples a
    prompt, as transformers counts them) and its prompt plus new tokens, rounded up to CACHE_LENGTH_STEP."""
    new_tokens = kwargs.get("max_new_tokens", config.max_new_tokens)
    ids = kwargs["input_ids"]
    need = ids.size(1) + new_tokens if new_tokens is not None else kwargs.get("max_length", config.max_length)
    per_prompt = max(kwargs.get("num_beams", config.num_beams) or 1, sequences_per_prompt(kwargs))
    return len(ids) * per_prompt, -(-need // CACHE_LENGTH_STEP) * CACHE_LENGTH_STEP


@functools.cache
def one_dtype_layer():
    """transformers' StaticLayer keeping keys and values in the values' dtype: under autocast a Llama's
    rotated keys come out fp32 (its rotary tables follow the fp32 embeddings) and its values bf16, and
    StaticLayer allocates both as the keys, then cannot store the values. SDPA casts keys to bf16 anyway."""
    from transformers.cache_utils import StaticLayer

    class OneDtypeLayer(StaticLayer):
        def update(self, key_states, value_states, *args, **kwargs):
            dtype = self.dtype if self.is_initialized else value_states.dtype
            return super().update(key_states.to(dtype), value_states.to(dtype), *args, **kwargs)

    return OneDtypeLayer


def reused_static_cache(model, caches: dict, kwargs: dict, config):
    """The static cache for this `generate`, reset: one per row count in `caches`, replaced only by a longer
    one. The same tensors at every call let a compiled decoding step replay its CUDA graphs instead of
    recording new ones."""
    from transformers.cache_utils import StaticCache

    rows, length = static_cache_shape(kwargs, config)
    if rows not in caches or caches[rows].layers[0].max_cache_len < length:
        cache = StaticCache(config=model.config, max_cache_len=length)
        cache.layers = [one_dtype_layer()(max_cache_len=length) for _ in cache.layers]
        caches[rows] = cache
    caches[rows].reset()
    return caches[rows]


def static_generation(model, caches: dict | None, kwargs: dict, config) -> None:
    """This `generate` call's arguments for the recipe's static cache (None: generate's default cache);
    compiled on a GPU, where eager launches ~25 kernels a layer a token. On a CPU transformers does not
    compile it: the static cache alone, and the recipe's prefill of each distinct prompt is skipped."""
    cache = None if caches is None else reused_static_cache(model, caches, kwargs, config)
    compiled = cache is not None and model.device.type == "cuda"
    asked = {"cache_implementation": None} | ({"disable_compile": False} if compiled else {})
    if "generation_config" in kwargs:  # TRL's: asked on a copy (kwargs beside a config are deprecated)
        kwargs["generation_config"] = copy.deepcopy(config)
        for name, value in asked.items():
            setattr(kwargs["generation_config"], name, value)
            kwargs.pop(name, None)  # a keyword beside the config would win over it
    else:
        kwargs.update(asked)
    if cache is not None:
        kwargs["past_key_values"] = cache


def static_cache_generation(model) -> str:
    """Make `model.generate` calls that ask for a static cache run on the recipe's, whether or not the fast
    paths are on (installed over fast_generate, which then finds the cache given). A model whose layers need
    another kind of static cache (sliding windows, ...) generates on the default cache, said once here.
    Returns what it does."""
    from transformers.cache_utils import StaticCache, StaticLayer

    layers = StaticCache(config=model.config, max_cache_len=1).layers  # allocated only when first used
    holds = all(type(layer) is StaticLayer for layer in layers)
    if not holds:
        log.warning(
            "grpo.cache_implementation=static: %s has layers of another kind (sliding windows, ...), which "
            "the recipe's static cache does not hold: generating with the default cache",
            type(model).__name__,
        )
    generate = model.generate
    if not getattr(generate, "_static", False):
        caches = {} if holds else None  # rows -> StaticCache, reused

        @functools.wraps(generate)
        def static_generate(*args, **kwargs):
            config = kwargs.get("generation_config") or model.generation_config
            asked = kwargs.get("cache_implementation", config.cache_implementation)
            if (
                asked == "static"
                and kwargs.get("input_ids") is not None
                and kwargs.get("past_key_values") is None
            ):
                static_generation(model, caches, kwargs, config)
            return generate(*args, **kwargs)

        static_generate._static = True
        model.generate = static_generate
    if not holds:
        return "a static KV cache off: the model's layers need another kind"
    if model.device.type == "cuda":
        return "a static KV cache reused, its decoding step compiled (CUDA graphs)"
    return "a static KV cache (not compiled on a CPU; each distinct prompt's own prefill off)"
