"""Prompt formats: how the model is asked to present its answer.

Each format has a default system prompt (a dataset may override it) and the rules the
extraction chain and the format reward use to read it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PromptFormat:
    name: str
    system_prompt: str | None


FORMATS: dict[str, PromptFormat] = {
    "plain": PromptFormat("plain", None),
    "answer_tag": PromptFormat(
        "answer_tag",
        "Solve the problem. End your reply with the final answer on its own line as: [ANSWER] <answer>",
    ),
    "think": PromptFormat(
        "think",
        "First think about the problem step by step inside <think> </think> tags, then give the final "
        "answer inside <answer> </answer> tags, e.g. <think>reasoning here</think><answer>42</answer>",
    ),
    # Code tasks: the program in one fenced block (with `think`, the block goes inside <answer>).
    "code": PromptFormat(
        "code",
        "You are a careful Python programmer. Reply with the complete function in a single ```python code block.",
    ),
}


def get_format(name: str) -> PromptFormat:
    if name not in FORMATS:
        raise KeyError(name)
    return FORMATS[name]


def build_messages(question: str, system_prompt: str | None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": question}]
