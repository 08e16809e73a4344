"""The GPU model presets: each composes, and its keys are valid for the pinned transformers and peft
(each architecture built from its config class at a tiny size: no download)."""

from pathlib import Path

import pytest

from grpo_common.errors import ConfigError
from grpo_recipes.config.checks import check_values
from grpo_recipes.config.preflight import compose, parse
from grpo_recipes.models.hardware import Hardware
from grpo_recipes.models.loading import TARGET_MODULES, lora_config

CONFIG = Path(__file__).resolve().parents[1] / "config"
# preset -> (hub id, the architecture its config.json names)
PRESETS = {
    "qwen2_5_0_5b": ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2"),
    "qwen2_5_1_5b": ("Qwen/Qwen2.5-1.5B-Instruct", "qwen2"),
    "qwen2_5_3b": ("Qwen/Qwen2.5-3B-Instruct", "qwen2"),
    "qwen3_0_6b": ("Qwen/Qwen3-0.6B", "qwen3"),
    "qwen3_1_7b": ("Qwen/Qwen3-1.7B", "qwen3"),
    "llama3_2_1b": ("meta-llama/Llama-3.2-1B-Instruct", "llama"),
    "smollm2_360m": ("HuggingFaceTB/SmolLM2-360M-Instruct", "llama"),
    "smollm2_1_7b": ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "llama"),
}


def composed(preset: str, *overrides: str) -> dict:
    args = [f"model={preset}", *overrides]
    cfg, _ = compose(CONFIG, parse(["x", *args]), args)
    return cfg


def test_every_preset_file_is_listed_here():
    shipped = {p.stem for p in (CONFIG / "model").glob("*.yaml")} - {
        "custom",
        "smollm2_135m",
        "tiny_random",
    }
    assert shipped == set(PRESETS)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_composes_with_its_hub_id_and_gpu_settings(preset):
    cfg = composed(preset)
    check_values(cfg)
    hub_id, _ = PRESETS[preset]
    assert cfg["model"]["path"] == hub_id
    grpo = cfg["grpo"]
    # the preset's batch wins over grpo/default.yaml's CPU batch (16) and holds whole groups of 8
    assert grpo["per_device_train_batch_size"] % grpo["num_generations"] == 0
    assert 0 < grpo["vllm_gpu_memory_utilization"] <= 0.3
    # an experiment still decides its own batch (it comes last)
    assert composed(preset, "experiment=gsm8k")["grpo"]["per_device_train_batch_size"] == 8


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_batch_share_and_lora_are_what_the_memory_estimate_chooses(preset):
    from benchmarks.gpu_memory_estimate import SHAPES, choose

    batch, share, checkpointing, lora = choose(SHAPES[preset])
    cfg = composed(preset)
    assert cfg["grpo"]["per_device_train_batch_size"] == batch
    assert cfg["grpo"]["vllm_gpu_memory_utilization"] == share
    assert cfg["grpo"]["activation_checkpointing"] is checkpointing
    assert cfg["model"]["lora"]["enabled"] is lora


# peft 0.21.2 calls transformers 5.23's deprecated is_gradient_checkpointing when it wraps a model
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_keys_are_valid_for_the_architecture(preset):
    import torch
    from peft import get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = composed(preset)["model"]
    _, model_type = PRESETS[preset]
    config = AutoConfig.for_model(
        model_type,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        vocab_size=64,
        tie_word_embeddings=True,
    )
    model = AutoModelForCausalLM.from_config(
        config, attn_implementation=cfg["attn_implementation"], dtype=torch.float32
    )
    assert model.config._attn_implementation == cfg["attn_implementation"]
    targets = cfg["lora"]["target_modules"]
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    assert set(targets) <= names, f"not in {model_type}: {set(targets) - names}"
    assert targets == TARGET_MODULES[model_type]  # what `auto` would pick too
    lora = lora_config({**cfg["lora"], "enabled": True}, model_type)  # as the run builds it
    peft_model = get_peft_model(model, lora)
    wrapped = {
        n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in peft_model.named_parameters() if ".lora_A" in n
    }
    assert wrapped == set(targets)


def test_offline_a_hub_preset_fails_with_one_message_saying_what_to_do(monkeypatch):
    from huggingface_hub import constants

    from grpo_recipes.config.checks import check_config

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    cfg = composed("qwen2_5_0_5b")
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    message = str(err.value)
    assert "Qwen/Qwen2.5-0.5B-Instruct" in message and "HF_HUB_OFFLINE" in message
    assert "hf download Qwen/Qwen2.5-0.5B-Instruct" in message and "\n" not in message


@pytest.mark.parametrize(
    "answer, expected",
    [
        (ConnectionError("[Errno -2] Name or service not known"), "the hub could not be reached ([Errno -2]"),
        ("not found", "the hub has no model by that name"),
        (None, None),  # the hub answers: the job downloads it
    ],
)
def test_a_hub_id_not_in_the_cache_is_asked_of_the_hub_once_in_the_check(monkeypatch, answer, expected):
    """Online, a hub id the cache lacks costs one request in the check (not the download's ~50 s of retries
    in the job): an unreachable hub or an unknown id is one line."""
    import httpx2
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import RepositoryNotFoundError

    from grpo_recipes.models.loading import check_model_path

    asked = []

    def model_info(self, repo_id, timeout=None):
        asked.append((repo_id, timeout))
        if answer == "not found":
            response = httpx2.Response(
                404, request=httpx2.Request("GET", f"https://huggingface.co/{repo_id}")
            )
            raise RepositoryNotFoundError("404", response=response)
        if answer is not None:
            raise answer

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(HfApi, "model_info", model_info)
    if expected is None:
        check_model_path("some-org/some-model", ask_hub=True)
    else:
        with pytest.raises(ConfigError, match=r"^model.path 'some-org/some-model'") as err:
            check_model_path("some-org/some-model", ask_hub=True)
        assert expected in str(err.value)
    assert asked == [("some-org/some-model", 10)]  # one request, bounded
    check_model_path("some-org/some-model")  # the job's loader does not ask again
    assert len(asked) == 1


def test_a_missing_run_dir_is_a_missing_path_not_a_hub_id(tmp_path, monkeypatch):
    from grpo_recipes.models.loading import check_model_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    with pytest.raises(ConfigError, match=r"^model.path 'outputs/run1/final' does not exist"):
        check_model_path("outputs/run1/final")
    with pytest.raises(ConfigError, match=r"^model.path 'outputs/run1' does not exist"):
        check_model_path("outputs/run1")


def test_when_the_hub_cannot_be_reached_loading_says_what_to_do(monkeypatch):
    import transformers

    from grpo_recipes.models.loading import load_model_and_tokenizer

    def unreachable(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files\nmore")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", unreachable)
    # online but unreachable, whatever the caller's environment says (HF_HUB_OFFLINE=1 is read at import)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    with pytest.raises(ConfigError) as err:
        load_model_and_tokenizer(composed("llama3_2_1b")["model"], Hardware(False, False, 1))
    message = str(err.value)
    assert "the hub could not be reached (We couldn't connect to 'https://huggingface.co'" in message
    assert "hf download meta-llama/Llama-3.2-1B-Instruct" in message and "gated" in message


# `model.dtype: auto` (grpo_recipes/models/hardware.py): bf16 weights only where the device computes bf16
# natively and something keeps their updates: on a GPU, LoRA's, DeepSpeed's or FSDP's fp32 copies; on a
# CPU, BF16AdamW (a full fine-tune with transformers' AdamW). fp32 otherwise (TRL's default).
@pytest.mark.parametrize(
    "gpu, bf16, overrides, engine, expected",
    [
        (False, False, [], None, "float32"),  # a CPU without native bf16
        (False, True, [], None, "bfloat16"),  # BF16AdamW trains them
        (False, True, ["+grpo.optim=adamw_torch_fused"], None, "bfloat16"),
        (False, True, ["+grpo.optim=sgd"], None, "float32"),  # an optimizer that would round them to nearest
        (False, True, ["grpo.bf16=false"], None, "float32"),  # fp32 asked for
        (False, True, ["model.lora.enabled=true"], None, "float32"),
        (False, True, [], "DEEPSPEED", "float32"),  # DeepSpeed's CPU optimizer
        (True, True, [], None, "float32"),  # a full fine-tune on a GPU: AdamW updates fp32 weights
        (True, True, ["model.lora.enabled=true"], None, "bfloat16"),  # PEFT's adapters are fp32
        (True, True, [], "DEEPSPEED", "bfloat16"),  # DeepSpeed's master weights are fp32
        (True, True, [], "FSDP", "bfloat16"),  # accelerate upcasts what FSDP trains to fp32
        (True, False, ["model.lora.enabled=true"], None, "float32"),  # a GPU without bf16
        (True, True, ["model.dtype=fp16"], None, "float16"),  # asked for: as asked
        (False, False, ["model.dtype=bf16"], None, "bfloat16"),
    ],
)
def test_auto_loads_bf16_weights_only_where_something_keeps_their_updates(
    monkeypatch, gpu, bf16, overrides, engine, expected
):
    from grpo_recipes.models.hardware import Hardware, weights_dtype

    for name in ("DEEPSPEED", "FSDP"):
        monkeypatch.setenv(f"ACCELERATE_USE_{name}", "true" if engine == name else "false")
    cfg = composed("qwen2_5_0_5b", *overrides)
    hw = Hardware(gpu=gpu, bf16=bf16, world_size=1)
    assert weights_dtype(cfg["model"], hw, cfg["grpo"]) == expected


@pytest.mark.parametrize("loss", ["gspo", "off_policy"])
@pytest.mark.parametrize("preset", ["smollm2_135m", "qwen2_5_0_5b"])
def test_the_reuse_presets_feed_two_optimizer_steps_at_any_micro_batch_split(preset, loss):
    """TRL counts steps_per_generation in micro-batches: the embedded model's 2 micro-batches a step would
    otherwise make `grpo=gspo` / `off_policy` one step a generation batch, on-policy, their clips idle."""
    grpo = composed(preset, f"grpo={loss}")["grpo"]
    assert grpo["steps_per_generation"] == 2 * grpo["gradient_accumulation_steps"]


def test_a_checkpoint_loads_in_the_dtype_it_trained_in(tmp_path):
    """`model.dtype: auto` on a CPU with native bf16 loads bf16 weights, but a checkpoint this package saved
    (trainer_state.json beside it) keeps its own: eval_only on an fp32-trained run reproduces its evals."""
    import shutil

    from grpo_recipes.models.loading import ensure_tiny, load_model_and_tokenizer

    checkpoint = tmp_path / "checkpoint-2"
    shutil.copytree(ensure_tiny(0), checkpoint)
    cfg = composed("tiny_random", f"model.path={checkpoint}", "model.dtype=auto")["model"]
    amx = Hardware(gpu=False, bf16=True, world_size=1)
    assert str(next(load_model_and_tokenizer(cfg, amx)[0].parameters()).dtype) == "torch.bfloat16"
    (checkpoint / "trainer_state.json").write_text("{}")
    assert str(next(load_model_and_tokenizer(cfg, amx)[0].parameters()).dtype) == "torch.float32"


def bf16_layer_and_one_adamw_step(lr: float):
    """A bf16 layer whose weights straddle the bound at `lr`, and the share one AdamW step (each weight moves
    by exactly lr) leaves unchanged."""
    import torch

    torch.manual_seed(0)
    layer = torch.nn.Linear(256, 256, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(256, 256) * 0.004)
        layer.weight[0, :8] = 0.0  # a zero weight always moves
    trained = torch.nn.Parameter(layer.weight.detach().clone())
    trained.grad = torch.randn_like(trained)
    torch.optim.AdamW([trained], lr=lr, weight_decay=0.0).step()
    return layer, (trained.detach() == layer.weight.detach()).float().mean().item()


def test_a_half_precision_full_fine_tune_warns_with_the_share_of_weights_adamw_cannot_move(monkeypatch):
    """The warning's share is what AdamW does: after one step, the bf16 weights it counts are the ones left
    unchanged."""
    import torch

    from grpo_recipes.models.hardware import half_precision_warning

    for name in ("DEEPSPEED", "FSDP"):
        monkeypatch.delenv(f"ACCELERATE_USE_{name}", raising=False)
    layer, unchanged = bf16_layer_and_one_adamw_step(1e-5)
    assert 0.2 < unchanged < 0.8  # a share the warning must get right, not 0 % or 100 %
    model_cfg = composed("qwen2_5_0_5b", "model.dtype=bf16")["model"]
    warning = half_precision_warning(layer, model_cfg, learning_rate=1e-5)
    assert warning == (
        "model.dtype=bf16: AdamW trains the bfloat16 weights in place, and even a full step of "
        f"learning_rate=1e-05 rounds away on {unchanged:.0%} of the trained weights; model.dtype=fp32 keeps "
        "fp32 weights and computes in bf16"
    )
    fp32 = torch.nn.Linear(256, 256, bias=False)
    assert half_precision_warning(fp32, model_cfg, 1e-5) is None  # fp32 weights (plain LoRA's adapters too)
    frozen = torch.nn.Linear(256, 256, bias=False, dtype=torch.bfloat16).requires_grad_(False)
    assert half_precision_warning(torch.nn.Sequential(frozen, fp32), model_cfg, 1e-5) is None  # LoRA's base
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    assert half_precision_warning(layer, model_cfg, 1e-5) is None  # DeepSpeed's master weights


def test_bf16_asked_for_on_a_cpu_without_it_warns_that_it_is_emulated():
    """grpo.bf16=true or bf16 weights on a CPU without AMX / AVX-512-BF16: one line, since `auto` there picks
    fp32 and emulated bf16 GEMMs are ~50x slower; silent where bf16 is native, on a GPU, or in fp32."""
    import torch

    from grpo_recipes.models.hardware import emulated_bf16_warning

    fp32, bf16 = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4, dtype=torch.bfloat16)
    avx2, amx = Hardware(gpu=False, bf16=False, world_size=1), Hardware(gpu=False, bf16=True, world_size=1)
    said = emulated_bf16_warning(avx2, True, fp32)
    assert said.startswith("grpo.bf16=true: this CPU has no native bf16 (AMX or AVX-512-BF16)")
    assert said.endswith("grpo.bf16=false model.dtype=fp32 computes in fp32")
    assert emulated_bf16_warning(avx2, False, bf16).startswith("bf16 weights: this CPU has no native bf16")
    assert emulated_bf16_warning(avx2, False, fp32) is None  # auto's fp32
    assert emulated_bf16_warning(amx, True, bf16) is None
    assert emulated_bf16_warning(Hardware(gpu=True, bf16=False, world_size=1), True, fp32) is None


def test_qloras_bf16_adapters_get_the_warning_with_their_share(monkeypatch):
    """TRL casts QLoRA's trainable adapters to bf16; the share counts all trained weights."""
    import torch

    from grpo_recipes.models.hardware import half_precision_warning

    for name in ("DEEPSPEED", "FSDP"):
        monkeypatch.delenv(f"ACCELERATE_USE_{name}", raising=False)
    adapter, unchanged = bf16_layer_and_one_adamw_step(1e-5)
    base = torch.nn.Linear(256, 256, bias=False, dtype=torch.bfloat16).requires_grad_(False)
    lora_b = torch.nn.Linear(256, 256, bias=False, dtype=torch.bfloat16)
    torch.nn.init.zeros_(lora_b.weight)  # LoRA's B starts at zero: every update moves it
    qlora = composed("qwen2_5_0_5b", "model.lora.enabled=true", "model.lora.quantize=4bit")["model"]
    warning = half_precision_warning(torch.nn.Sequential(base, adapter, lora_b), qlora, 1e-5)
    assert warning.startswith("model.lora.quantize=4bit: AdamW trains the bfloat16 LoRA adapters in place")
    assert f"rounds away on {unchanged / 2:.0%} of the trained weights" in warning
    assert "a LoRA learning rate (1e-4 or more)" in warning


def test_continuous_batching_is_refused_where_trl_would_cast_fp32_weights_to_bf16(monkeypatch):
    from types import SimpleNamespace

    from grpo_recipes.models.hardware import check_generation_cast

    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    full, lora = (composed("qwen2_5_0_5b", *o)["model"] for o in ([], ["model.lora.enabled=true"]))
    on = SimpleNamespace(use_transformers_continuous_batching=True, bf16=True, fp16=False)
    with pytest.raises(ConfigError, match=r"^grpo.use_transformers_continuous_batching=true: TRL casts"):
        check_generation_cast(full, on)
    check_generation_cast(lora, on)  # PEFT's fp32 adapters are not cast: TRL's own QLoRA case aside
    check_generation_cast(
        full, SimpleNamespace(use_transformers_continuous_batching=True, bf16=False, fp16=False)
    )
    check_generation_cast(
        full, SimpleNamespace(use_transformers_continuous_batching=False, bf16=True, fp16=False)
    )
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    check_generation_cast(full, on)


def test_vllms_context_is_the_longest_prompt_as_trl_renders_it_plus_room_and_the_completion_budget():
    """Unset, vLLM would size its KV cache for the model's whole context (40,960 tokens for Qwen3-1.7B)."""
    from transformers import AutoTokenizer

    from grpo_common.templates import load_chat_template
    from grpo_recipes.models.loading import ensure_embedded
    from grpo_recipes.train.assemble import CONTEXT_ROOM, vllm_context_length

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_embedded("smollm2-135m-instruct")))
    tokenizer.chat_template = load_chat_template("trl:qwen2_5")  # the template a tool run gives it
    short = [{"role": "user", "content": "2 + 2?"}]
    long = [{"role": "system", "content": "Think step by step. " * 20}, {"role": "user", "content": "7 * 6?"}]

    def rendered(messages, tools=None):
        ids = tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, return_dict=True
        )
        return len(ids["input_ids"])

    def add(a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: the first
            b: the second
        """
        return a + b

    plain = vllm_context_length(tokenizer, [short, long], (), None, 64, 8192)
    assert plain == rendered(long) + CONTEXT_ROOM + 64
    with_tool = vllm_context_length(tokenizer, [short, long], (add,), None, 64, 8192)
    assert with_tool == rendered(long, [add]) + CONTEXT_ROOM + 64 > plain  # the tool schemas count
    assert vllm_context_length(tokenizer, [short, long], (), None, 64, 100) == 100  # at most the model's own
