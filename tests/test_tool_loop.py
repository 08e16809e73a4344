"""Training's tool loop (TRL's, inside GRPOTrainer) and the fixed eval's (evaluation/tool_loop.py) run the
same rollouts and count tool calls the same way. A random model never calls a tool, so a scripted one does
(tests/scripted/sitecustomize.py: the tiny model's own generate, each token forced to the script's): a call
that works, one that fails, one that never stops calling (the iteration cap) and one whose result does not
fit the completion's length limit (rolled back)."""

from __future__ import annotations

import importlib.util

import pytest
import transformers

from grpo_common.templates import set_chat_template
from grpo_common.tool_use import ToolUse, tool_use
from grpo_recipes.config.trainer_args import RecipeGRPOConfig
from grpo_recipes.evaluation.generation import HFGenerator
from grpo_recipes.evaluation.tool_loop import ToolLoop
from grpo_recipes.models.tiny import tiny_model, tiny_tokenizer
from grpo_recipes.train.sampling_kl import SamplingKLTrainer
from rewards import sandbox
from tests.conftest import ROOT
from tools import build_tools

# TRL 1.16 calls transformers' deprecated alias on every generation (as in test_sampling_kl.py)
pytestmark = pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
QUESTIONS = ["Calculate 4 + 5.", "Calculate 1 / 0.", "Keep adding 3 + 4.", "Calculate 10 ** 390."]
MAX_LENGTH, CAP = 400, 2


@pytest.fixture
def scripted():
    spec = importlib.util.spec_from_file_location("scripted", ROOT / "tests/scripted/sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    original = module.install()
    sandbox.configure(timeout=2)
    yield
    transformers.GenerationMixin.generate = original
    sandbox.configure()


def _tokenizer():
    tokenizer = tiny_tokenizer()
    set_chat_template(tokenizer, {"path": "tiny-random", "tool_chat_template": "trl:qwen2_5"}, tools=True)
    return tokenizer


def scripted_trainer(tmp_path, tokenizer, rows, reward, max_length, cap, **tools_or_env):
    """The recipe's trainer on the tiny model, given `tools=` or `environment_factory=`."""
    from datasets import Dataset

    args = RecipeGRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to="none",
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=max_length,
        max_tool_calling_iterations=cap,
        activation_checkpointing=False,
    )
    model = tiny_model(tokenizer, seed=3)
    data = Dataset.from_list(rows)
    return SamplingKLTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        **tools_or_env,
    )


def test_training_and_the_fixed_eval_run_and_count_the_same_tool_loop(scripted, tmp_path):
    tokenizer, tools, seen = _tokenizer(), build_tools(["python"], 500), []

    def reward(completions, **kwargs):
        seen.extend(completions)
        return [0.0] * len(completions)

    rows = [
        {"prompt": [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": q}]}
        for q in QUESTIONS
    ]
    trainer = scripted_trainer(tmp_path, tokenizer, rows, reward, MAX_LENGTH, CAP, tools=tools)
    trainer.model.train()
    out = trainer._generate_and_score_completions(rows)

    loop = ToolLoop(tokenizer, tools, CAP, MAX_LENGTH)
    generator = HFGenerator(trainer.model, tokenizer, batch_size=8)
    rollouts = loop.run(
        lambda ids, budget: [g[0] for g in generator.generate_ids(ids, 1, None, budget)],
        [loop.render(r["prompt"]) for r in rows],
        generator.eos_token_ids,
    )

    assert [r.turns for r in rollouts] == seen  # the same turns, parsed the same way
    mask = out["completion_mask"].bool()
    assert [r.ids for r in rollouts] == [ids[m].tolist() for ids, m in zip(out["completion_ids"], mask)]
    assert [r.mask for r in rollouts] == [t[m].tolist() for t, m in zip(out["tool_mask"], mask)]
    counts = [tool_use(r.turns) for r in rollouts]
    assert counts == [tool_use(c) for c in seen]
    # works; fails (the error reaches the model); capped at CAP calls; its result would not fit: rolled back
    assert counts == [ToolUse(1, 0), ToolUse(1, 1), ToolUse(CAP, 0), ToolUse(0, 0)]
    assert seen[0][-1]["content"] == "[ANSWER] 9"
    assert seen[1][1]["content"] == "error: ZeroDivisionError: division by zero"
    assert len(seen[2]) == 2 * CAP + 1 and seen[2][-1].get("tool_calls")  # the last call never ran
    assert len(seen[3]) == 1 and seen[3][0].get("tool_calls")
    # TRL's own metric counts the rolled-back call too; the recipe counts what the model read
    calls = sum(c.calls for c in counts)
    assert trainer._metrics["train"]["tools/call_frequency"][-1] == pytest.approx((calls + 1) / len(rows))


def test_every_process_makes_the_same_generate_calls_while_any_still_calls_tools(scripted):
    """Two ranks as threads, meeting at a barrier wherever the eval's processes would all-reduce: rank 0's
    rollouts end after one tool call while rank 1's keep calling up to the cap, yet both call `generate` as
    often, with as many prompts and the same budget (ZeRO-3, FSDP and vLLM's server mode generate
    collectively), and each rank's rollouts are what it gets alone."""
    import threading

    tokenizer, tools = _tokenizer(), build_tools(["python"], 500)
    model = tiny_model(tokenizer, seed=3)
    shards = [QUESTIONS[0:1] + QUESTIONS[1:2], QUESTIONS[2:3] + QUESTIONS[2:3]]  # rank 1: never stops
    barrier, shared = threading.Barrier(2, timeout=120), [0, 0]  # a rank that fails frees the other

    def agree(rank: int):
        def largest(n: int) -> int:
            shared[rank] = n
            barrier.wait()
            value = max(shared)
            barrier.wait()
            return value

        return largest

    def run(rank: int, calls: list, rollouts: list, together: bool = True):
        loop = ToolLoop(tokenizer, tools, CAP, MAX_LENGTH)
        generator = HFGenerator(model, tokenizer, batch_size=8)

        def generate(ids, budget):
            calls.append((len(ids), budget))
            return [g[0] for g in generator.generate_ids(ids, 1, None, budget)]

        prompts = [loop.render([{"role": "user", "content": q}]) for q in shards[rank]]
        kwargs = {"agree": agree(rank)} if together else {}
        rollouts += loop.run(generate, prompts, generator.eos_token_ids, **kwargs)

    calls, rollouts = [[], []], [[], []]
    threads = [
        threading.Thread(target=run, args=(rank, calls[rank], rollouts[rank]), daemon=True) for rank in (0, 1)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert calls[0] == calls[1] and len(calls[0]) == 1 + CAP  # the first turn and every tool turn
    alone = [[], []]
    for rank in (0, 1):
        run(rank, [], alone[rank], together=False)
    assert [[r.ids for r in rs] for rs in rollouts] == [[r.ids for r in rs] for rs in alone]
    assert [tool_use(r.turns) for r in rollouts[0]] == [ToolUse(1, 0), ToolUse(1, 1)]
    assert [tool_use(r.turns) for r in rollouts[1]] == [ToolUse(CAP, 0)] * 2
