"""Tools a model may call mid-answer, TRL's way (`GRPOTrainer(tools=[...])`): each a typed function with a
Google-style docstring, from which transformers builds the JSON schema the chat template shows the model.
A tool never raises: a failure comes back to the model as a string starting with `error: ` (ERROR_PREFIX),
which is also how the fixed eval, the samples and the tool rewards count tool errors
(grpo_common/tool_use.py). Environments (TRL's `environment_factory`) are in environments.py. Import-light:
the knob declarations read TOOL_NAMES and ENV_TOOLS."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

from grpo_common.tool_use import ERROR_PREFIX  # noqa: F401 - the tools' failure mark

TOOL_NAMES = ("python", "calculator")  # `tools.names`: tools/<name>.py's make(max_output_chars) builds each
# `env.name`: the environments of tools/environments.py, with the tools their methods give the model
ENV_TOOLS = {"python_session": ("python",), "feedback": ("submit",)}


def runs_code(names: Sequence[str], env: str | None) -> bool:
    """Whether the model may run code through these tools (in the sandbox)."""
    return "python" in (*names, *ENV_TOOLS.get(env or "", ()))


def build_tools(names: Sequence[str], max_output_chars: int) -> list[Callable]:
    """The tool functions for `tools.names`, each reply cut to `max_output_chars`."""
    unknown = [n for n in names if n not in TOOL_NAMES]
    if unknown:
        raise ValueError(f"tools.names: unknown tool '{unknown[0]}'; accepted: {', '.join(TOOL_NAMES)}")
    return [importlib.import_module(f"tools.{name}").make(max_output_chars) for name in dict.fromkeys(names)]


def cut(text: str, limit: int) -> str:
    """`text` within `limit` characters, saying so when it was cut."""
    if len(text) <= limit:
        return text
    note = f"... [cut: {len(text)} characters]"
    return text[: max(limit - len(note), 0)] + note
