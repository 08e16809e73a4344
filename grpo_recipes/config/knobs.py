"""Every knob of the recipe, declared once: its default, what it accepts, a one-line doc, and whether a
resume may change it. Import-light (no torch or TRL).

Everything else reads these declarations: Hydra's defaults (`register()` puts each group's defaults in
its ConfigStore, so `--cfg job` prints them and the YAML files are small diffs over them), the value
check (checks.py), the resume rules (resume.py) and the README's config table (`python -m
grpo_recipes.config`).

The defaults go to Hydra as plain values rather than typed dataclass nodes: OmegaConf's typed nodes
coerce (`yes` to true, `1` to "1"), and the contract here is exact types, checked by `checks.py`.
The `grpo` group's declarations: grpo_knobs.py.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

from grpo_recipes.config.grpo_knobs import GRPO
from grpo_recipes.config.values import (
    BOOL,
    COUNT,
    OPT_STR,
    PROB,
    STEPS,
    STR,
    TRL_DEFAULT,
    Choice,
    Float,
    Int,
    Value,
    knob,
)
from tools import ENV_TOOLS, TOOL_NAMES

DTYPE_NAMES = ("auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16")


@dataclass
class Top:
    max_steps: int = knob(40, COUNT, "training steps", resume=True)
    learning_rate: float = knob(1.0e-5, Float(above=0), "the optimizer's learning rate")
    seed: int = knob(0, Int(0), "seed of the model's sampling and initialisation")
    run_name: str = knob("${dataset.name}-${model.name}", Value("name"), "the run dir's name", resume=True)
    output_root: str = knob("outputs", Value("path"), "where run dirs are made", resume=True)
    output_dir: str = knob("${hydra:runtime.output_dir}", STR, "the run dir (set by Hydra)", resume=True)
    resume: Any = knob(
        False, Choice(True, False, "auto"), "true: continue the run | auto: if unfinished", resume=True
    )
    use_vllm: bool = knob(False, BOOL, "generate with vLLM (GPU; grpo.vllm_mode colocate | server)")
    eval_only: bool = knob(False, BOOL, "only the fixed eval, on model=<checkpoint dir> or a base model")
    report_to: Any = knob("none", Value("str_or_list"), "trackers (set by logger=...)", resume=True)
    log_samples_every: int = knob(10, STEPS, "samples.jsonl: rollouts every N steps (0: off)", resume=True)
    log_samples_count: int = knob(8, COUNT, "rollouts kept per sampled step", resume=True)
    optimized_metric: str = knob("accuracy", STR, "the final eval metric a sweeper gets", resume=True)


@dataclass
class PassK:
    samples: int = knob(0, STEPS, "sampled completions per problem for pass@k (0: off)", resume=True)
    temperature: float = knob(1.0, Float(above=0), "pass@k's sampling temperature", resume=True)
    k: list = knob([1, 4, 8], Value("list", item=COUNT), "the k reported (only k <= samples)", resume=True)


@dataclass
class Eval:
    size: int = knob(128, COUNT, "problems per task", resume=True)
    seed: int = knob(12345, Int(0), "the eval problems' seed; differs from dataset.seed")
    every_n_steps: int = knob(20, STEPS, "eval every N steps (0: only at step 0 and the end)", resume=True)
    batch_size: int = knob(64, COUNT, "prompts per generate call", resume=True)
    max_new_tokens: Any = knob(None, Int(1, optional=True), "null: grpo.max_completion_length", resume=True)
    do_sample: bool = knob(False, BOOL, "false: greedy", resume=True)
    temperature: float = knob(1.0, Float(above=0), "used only when do_sample=true", resume=True)
    print_examples: int = knob(2, STEPS, "problems shown in the console at each eval", resume=True)
    hacking_window: int = knob(10, COUNT, "reward-hacking alarm: train steps per reward mean", resume=True)
    hacking_drop: float = knob(0.05, PROB, "reward-hacking alarm: accuracy fall that raises it", resume=True)
    transfer: dict = knob({}, Value("dict"), "held-out variants: key -> {task, config}", resume=True)
    pass_k: PassK = field(default_factory=PassK)


@dataclass
class Lora:
    enabled: bool = knob(False, BOOL, "train a LoRA adapter (peft) instead of every weight")
    r: int = knob(16, COUNT, "the adapter's rank")
    alpha: float = knob(32, Float(above=0), "LoRA's alpha")
    dropout: float = knob(0.05, Float(0, below=1), "LoRA's dropout")
    target_modules: Any = knob("auto", Value("str_or_list"), "auto: attention + MLP; a list; all-linear")
    merge_on_save: bool = knob(False, BOOL, "also write final-merged/: the adapter merged into the weights")
    quantize: Any = knob(None, Choice("4bit", "8bit", optional=True), "QLoRA base weights (CUDA GPU only)")


@dataclass
class Model:
    name: str = knob("???", STR, "the model's short name (in run_name)")
    path: str = knob("???", STR, "a hub id, a local dir, embedded:<name> or tiny-random")
    dtype: str = knob(
        "auto",
        Choice(*DTYPE_NAMES),
        "auto: bf16 where updates survive (CPU: native bf16 + AdamW; GPU: LoRA, DeepSpeed, FSDP), else fp32",
    )
    attn_implementation: Any = knob(None, OPT_STR, "null: transformers' default (sdpa)", resume=True)
    chat_template: Any = knob(None, OPT_STR, "the tokenizer's, replaced: Jinja, a .jinja file, or trl:<name>")
    tool_chat_template: Any = knob(None, OPT_STR, "the template with tools= (when its own cannot call tools)")
    response_prefix: Any = knob("auto", OPT_STR, "what the template pre-fills: auto | none | a string")
    lora: Lora = field(default_factory=Lora)


@dataclass
class Curriculum:
    enabled: bool = knob(False, BOOL, "each task's level follows its rolling train accuracy")
    start_level: int = knob(0, STEPS, "every task's first level")
    raise_at: float = knob(0.7, PROB, "a full window at >= this accuracy: one level up")
    lower_at: float = knob(0.3, PROB, "a full window below this accuracy: one level down")
    window: int = knob(64, COUNT, "completions per task in the rolling accuracy")
    eval_per_level: int = knob(0, STEPS, "> 0: also this many eval problems per task and level")


@dataclass
class Dataset:
    name: str = knob("???", STR, "the dataset's short name (in run_name)")
    prompt_format: str = knob("answer_tag", STR, "plain | answer_tag | think | code")
    system_prompt: Any = knob(None, OPT_STR, "null: the prompt format's default system prompt")
    few_shot: Any = knob(
        [], Value("list", optional=True), "worked examples: [{question, completion, tool_calls?}]"
    )
    train_size: int = knob(2000, COUNT, "training problems")
    seed: int = knob(1, Int(0), "the training problems' seed")
    tasks: dict = knob({}, Value("dict"), "task -> {weight, config}")
    holdout: str = knob(
        "auto",
        Choice("auto", "question", "function", "template"),
        "what eval problems keep out of training: auto = function (code), else question",
    )
    rewards: dict = knob(
        {"accuracy": {"weight": 1.0, "mode": "binary"}, "format": {"weight": 0.2, "mode": "strict"}},
        Value("dict"),
        "reward -> {weight, options} (null: off)",
    )
    curriculum: Curriculum = field(default_factory=Curriculum)


@dataclass
class Sandbox:
    timeout: float = knob(5.0, Float(above=0), "seconds per program that sets none")
    memory_mb: int = knob(1024, COUNT, "address-space limit")
    max_output_kb: int = knob(1024, COUNT, "a program printing more than this fails")
    max_processes: int = knob(64, COUNT, "processes a program may start")
    disk_mb: int = knob(64, COUNT, "size of its working directory")
    workers: Any = knob(None, Int(1, optional=True), "programs in parallel; null: one per core", resume=True)
    isolation: str = knob("full", Choice("full", "basic"), "full: + namespaces, Landlock where allowed")
    read_paths: list = knob([], Value("list", item=STR), "extra read-only paths an interpreter needs")
    languages: dict = knob({}, Value("dict"), "more interpreters: {name: {command: [...], extension: ..}}")


@dataclass
class Tools:
    names: list = knob([], Value("list", item=Choice(*TOOL_NAMES)), "tools the model may call (TRL's tools=)")
    max_output_chars: int = knob(
        400, COUNT, "a tool's (or env= method's) reply is cut to this many characters"
    )


@dataclass
class Env:
    name: Any = knob(None, Choice(*ENV_TOOLS, optional=True), "a stateful environment per rollout (TRL's)")
    max_turns: int = knob(3, COUNT, "feedback: answers the model may submit per rollout")


# Each group's declaration; "" is the top level. Every group but grpo is closed (an unknown key is a
# mistake); grpo also takes any GRPOConfig field.
GROUPS: dict[str, type] = {
    "": Top,
    "eval": Eval,
    "model": Model,
    "dataset": Dataset,
    "sandbox": Sandbox,
    "tools": Tools,
    "env": Env,
}
OPEN_GROUPS: dict[str, type] = {"grpo": GRPO}
# GRPOConfig fields not declared above that a resume may change: where and how often it logs and saves.
RESUMABLE_TRL_PREFIXES = (
    "logging_",
    "project",
    "trackio_",
    "save_",
    "disable_tqdm",
    "log_completions",
    "num_completions_to_print",
)


def walk(cls: type, prefix: str = ""):
    """(dotted key, dataclasses.Field) for every knob of a declaration, nested groups included."""
    for f in dataclasses.fields(cls):
        if "accepts" in f.metadata:
            yield prefix + f.name, f
        else:  # a nested group (pass_k, lora, curriculum)
            yield from walk(f.default_factory, f"{prefix}{f.name}.")


KNOBS: dict[str, dataclasses.Field] = {
    key: f
    for group, cls in {**GROUPS, **OPEN_GROUPS}.items()
    for key, f in walk(cls, f"{group}." if group else "")
}
SCHEMA: dict[str, Value] = {key: f.metadata["accepts"] for key, f in KNOBS.items()}
# Sections whose every key is declared: the groups and their nested groups ("" is the top level).
CLOSED_SECTIONS = (*GROUPS, *sorted({k.rsplit(".", 1)[0] for k in KNOBS if k.count(".") == 2}))


def may_change_on_resume(key: str) -> bool:
    """Whether a resume may change `key` (dotted): it changes how the run logs, saves or is evaluated, not
    what it learns."""
    if key in KNOBS:
        return KNOBS[key].metadata["resume"]
    if key.startswith("eval."):  # a key inside an eval setting (pass_k.k's items)
        return True
    return key.startswith("grpo.") and key[5:].startswith(RESUMABLE_TRL_PREFIXES)


def defaults(cls: type) -> dict[str, Any]:
    """A declaration's defaults as plain values (TRL_DEFAULT knobs left out)."""
    return {
        name: defaults(type(value)) if dataclasses.is_dataclass(value) else value
        for name, value in vars(cls()).items()
        if value is not TRL_DEFAULT
    }


@functools.cache  # once per process: the command-line check composes every job of a sweep
def register() -> None:
    """The declared defaults as Hydra configs: `_schema/<group>` for the groups whose files build on them
    (`_schema/top`, and the model presets', datasets', tools' and envs' `defaults: [/_schema/<group>@..]`;
    none of them an option of its group), and `eval/default`, `sandbox/default` and `grpo/default` (the
    options train.yaml picks)."""
    import math

    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    # ${mul:a,b}: TRL counts steps_per_generation in micro-batches, so the loss presets that reuse a batch
    # for 2 optimizer steps ask for 2 x gradient_accumulation_steps of them
    OmegaConf.register_new_resolver("mul", lambda *xs: math.prod(xs), replace=True)
    store = ConfigStore.instance()
    for name, cls in (("top", Top), ("model", Model), ("dataset", Dataset), ("tools", Tools), ("env", Env)):
        store.store(group="_schema", name=name, node=defaults(cls))
    for group, cls in (("eval", Eval), ("sandbox", Sandbox), ("grpo", GRPO)):
        store.store(group=group, name="default", node=defaults(cls))
