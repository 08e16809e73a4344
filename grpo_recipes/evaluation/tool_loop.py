"""The fixed eval's tool loop: TRL's multi-turn rollout (GRPOTrainer._tool_call_loop is private and bound to
the trainer) rebuilt on TRL's public pieces, batched: one generate call per turn for every rollout still
calling tools. As TRL's: rendered with training's chat template, results appended as token ids, a result past
the length limit rolled back, at most `max_iterations` tool turns, one environment per rollout, reset with its
row."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Rollout:
    """One problem's multi-turn completion: `ids`, every token after the prompt, model turns and tool results;
    `mask` 1 where the model wrote it (TRL's tool_mask); `turns`, the assistant and tool messages."""

    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    environment: Any = None  # None: plain tools


def call_tool(tools: dict[str, Callable], tool_call: dict[str, Any]) -> tuple[str, str]:
    """(name, reply) of one call, as TRL makes them: a raising or unknown tool gets str({"error": ...})."""
    if tool_call.get("type") != "function":
        return tool_call.get("name", "unknown"), str(
            {"error": f"Unsupported tool call type: {tool_call.get('type')}"}
        )
    function = tool_call["function"]
    name = function["name"]
    try:
        if name not in tools:
            raise ValueError(f"Tool {name} not found.")
        result = tools[name](**function["arguments"])
    except Exception as err:  # noqa: BLE001 - as TRL: the model reads the error
        result = {"error": str(err)}
    return name, result if isinstance(result, list) else str(result)


class ToolLoop:
    def __init__(
        self,
        tokenizer,
        tools: Sequence[Callable],
        max_iterations: int | None,
        max_new_tokens: int,
        environment_factory: Callable[[], Any] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ):
        from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

        from tools.environments import offered_tools

        self.tokenizer, self.standalone, self.factory = tokenizer, list(tools), environment_factory
        self.tools = offered_tools(tools, environment_factory)  # the schema shown
        self.by_name = {t.__name__: t for t in self.tools}
        self.max_iterations = sys.maxsize if max_iterations is None else max_iterations  # TRL's None
        self.max_new_tokens = max_new_tokens  # the whole completion's, tool results included (as TRL's)
        # as GRPOTrainer picks at init: the tokenizer's own template, or TRL's prefix-preserving variant of it
        template = (
            None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)
        )
        # grpo.chat_template_kwargs (enable_thinking=...): every rendering, as TRL passes them
        self.template = {
            "chat_template": template,
            "tokenize": True,
            "return_dict": False,
            **(chat_template_kwargs or {}),
        }

    def render(self, messages: list[dict[str, Any]]) -> list[int]:
        """The prompt's ids, with the tools' schemas, as TRL renders a training prompt."""
        apply = self.tokenizer.apply_chat_template
        return list(apply(messages, tools=self.tools, add_generation_prompt=True, **self.template))

    def suffix_ids(self, tool_messages: list[dict[str, Any]]) -> list[int]:
        """The ids that follow an assistant turn to show its tool results and open the next assistant turn
        (TRL's _get_tool_suffix_ids: the difference of two renderings, aligned on the end-of-turn token)."""
        calls = [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]
        dummy = [
            {"role": "user", "content": "dummy"},
            {"role": "assistant", "content": "", "tool_calls": calls},
        ]
        apply = self.tokenizer.apply_chat_template
        prefix = list(apply(dummy, add_generation_prompt=False, **self.template))
        full = list(apply(dummy + tool_messages, add_generation_prompt=True, **self.template))
        eos = [i for i, t in enumerate(prefix) if t == self.tokenizer.eos_token_id]
        prefix = prefix[: eos[-1] + 1] if eos else prefix
        if full[: len(prefix)] != prefix:
            raise ValueError("the chat template does not preserve prefixes: tool results cannot be appended")
        return full[len(prefix) :]

    def start(self, rows: Sequence[dict[str, Any]]) -> tuple[list[list[int]], list[Any]]:
        """Per row: its prompt's ids and its environment (None without one), reset with the row's columns as
        TRL resets it (`rows`: the dataset columns TRL would pass)."""
        environments = [self.factory() if self.factory else None for _ in rows]
        prompt_ids = []
        for row, environment in zip(rows, environments):
            messages = row["prompt"]
            observation = environment.reset(**row) if environment is not None else None
            if observation is not None:  # appended to the last user message, as TRL does
                messages = [
                    *messages[:-1],
                    {**messages[-1], "content": messages[-1]["content"] + observation},
                ]
            prompt_ids.append(self.render(messages))
        return prompt_ids, environments

    def tools_of(self, rollout: Rollout) -> dict[str, Callable]:
        """What a call of this rollout runs: the tools, and its own environment's methods."""
        if rollout.environment is None:
            return self.by_name
        from tools.environments import environment_tools

        return {t.__name__: t for t in [*self.standalone, *environment_tools(rollout.environment)]}

    def parse(self, ids: list[int], prefix: list[int]) -> dict[str, Any]:
        from trl.chat_template_utils import parse_response

        return parse_response(self.tokenizer, ids, prefix=prefix, tools=self.tools) if ids else {}

    def run(
        self,
        generate: Callable,
        prompt_ids: list[list[int]],
        eos_ids: set[int],
        environments: Sequence[Any] | None = None,
        agree: Callable[[int], int] | None = None,
    ) -> list[Rollout]:
        """`generate(list of id lists, max_new_tokens)` -> one id list per prompt (the model's turn);
        `environments`: each prompt's, from `start`; `agree(n)`: the largest n over the processes (None: one
        process). Each turn every process calls `generate` with as many prompts and the same budget as the
        others (placeholders where it has fewer rollouts still calling tools, their replies dropped), as
        long as any has one: generation is collective under ZeRO-3, FSDP and vLLM's server mode."""
        agree = agree or (lambda n: n)

        def until_eos(ids: list[int]) -> list[int]:
            end = next((j + 1 for j, t in enumerate(ids) if t in eos_ids), None)
            return list(ids[:end])

        environments = environments or [None] * len(prompt_ids)
        rollouts = [Rollout(list(p), environment=e) for p, e in zip(prompt_ids, environments)]
        for r, ids in zip(rollouts, generate(prompt_ids, self.max_new_tokens)):
            r.ids = until_eos(ids)
            r.mask = [1] * len(r.ids)
            r.turns = [self.parse(r.ids, r.prompt_ids)] if r.ids else [{"role": "assistant", "content": ""}]
        active = [r for r in rollouts if r.turns[-1].get("tool_calls")]
        for _ in range(self.max_iterations):
            extended = []  # (rollout, prompt + completion + tool results)
            for r in active:
                results = [call_tool(self.tools_of(r), c) for c in r.turns[-1]["tool_calls"]]
                messages = [{"role": "tool", "name": name, "content": content} for name, content in results]
                full = r.prompt_ids + r.ids + self.suffix_ids(messages)
                if len(full) - len(r.prompt_ids) > self.max_new_tokens:
                    continue  # the results would not fit: the rollout ends as it is (TRL rolls them back)
                r.turns += messages
                extended.append((r, full))
            count = agree(len(extended))
            if count == 0:
                break
            budget = agree(
                max((self.max_new_tokens - (len(f) - len(r.prompt_ids)) for r, f in extended), default=1)
            )
            placeholders = [prompt_ids[0]] * (count - len(extended))
            outputs = generate([full for _, full in extended] + placeholders, max(budget, 1))[: len(extended)]
            active = []
            for (r, full), ids in zip(extended, outputs):
                room = self.max_new_tokens - (len(full) - len(r.prompt_ids))
                ids = until_eos(ids)[: max(room, 0)]
                r.mask += [0] * (len(full) - len(r.prompt_ids) - len(r.ids)) + [1] * len(ids)
                r.ids = full[len(r.prompt_ids) :] + ids
                turn = self.parse(ids, full)
                if turn:
                    r.turns.append(turn)
                    if turn.get("tool_calls"):
                        active.append(r)
        return rollouts
