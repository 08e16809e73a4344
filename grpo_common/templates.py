"""Chat templates: the `model.chat_template` override, the tool-calling one and its checks, and the response
prefix a template pre-fills. Some templates (Qwen3, DeepSeek-R1 distills) end the generation prompt with
`<think>`, which the model then never writes itself: rewards and eval must read `prefix + completion`, or a
perfect `think` answer would be judged unformatted."""

import importlib.util
from pathlib import Path
from typing import Any

from grpo_common.errors import ConfigError

_OPENERS = ("<think>", "<reasoning>")  # reasoning openers a template may pre-fill
TRL_PREFIX = "trl:"


def load_chat_template(value: str, key: str = "model.chat_template") -> str:
    """A Jinja string, the path of a .jinja file holding one, or trl:<name>: one of the templates TRL ships,
    read byte for byte (TRL recognises its templates by identity: that is how it parses their tool calls)."""
    if value.startswith(TRL_PREFIX):
        folder = Path(importlib.util.find_spec("trl").origin).parent / "chat_templates"  # TRL not imported
        shipped = sorted(p.stem for p in folder.glob("*.jinja") if not p.stem.endswith("_training"))
        if (name := value[len(TRL_PREFIX) :]) not in shipped:
            raise ConfigError(
                f"{key}={value}: the installed TRL ships no such template; accepted: trl:<name> for one of "
                f"{', '.join(shipped) or '(none found)'}; a Jinja template; or a .jinja file"
            )
        return (folder / f"{name}.jinja").read_text(encoding="utf-8")
    if "{%" in value or "{{" in value:
        return value
    if (path := Path(value).expanduser()).is_file():
        return path.read_text()
    raise ConfigError(
        f"{key} '{value}' is neither a Jinja template, an existing file, nor trl:<name> (TRL's templates)"
    )


def response_prefix(setting, tokenizer) -> str:
    """auto: the reasoning opener the generation prompt ends with ("<think>\\n"), or ""."""
    if setting in (None, "auto"):
        messages = [{"role": "user", "content": "ping"}]
        try:
            prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception:  # noqa: BLE001 - a template that cannot render is reported when training starts
            return ""
        stripped = prompt.rstrip()
        opener = next((o for o in _OPENERS if stripped.endswith(o)), None)
        return prompt[len(stripped) - len(opener) :] if opener else ""  # the opener and the whitespace after
    if setting is False or setting == "none":
        return ""
    if not isinstance(setting, str):
        raise ConfigError(f"model.response_prefix must be auto, none or a string, got {setting!r}")
    return setting


def with_prefix(completion, prefix: str):
    """The completion as the whole assistant reply: TRL passes a string or a list of messages."""
    if not prefix:
        return completion
    if isinstance(completion, str):
        return prefix + completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        # the last assistant turn (a tool rollout can end on a tool result, which keeps its own text)
        roles = [m.get("role", "assistant") if isinstance(m, dict) else None for m in completion]
        i = max((j for j, role in enumerate(roles) if role == "assistant"), default=len(completion) - 1)
        last = {**completion[i], "content": prefix + str(completion[i].get("content") or "")}
        return [*completion[:i], last, *completion[i + 1 :]]
    return completion


def set_chat_template(tokenizer, model_cfg: dict[str, Any], tools: bool | str) -> None:
    """model.chat_template over the tokenizer's; with tools (True, or the group giving them: tools or env)
    and no override, model.tool_chat_template."""
    path = model_cfg["path"]
    keys = ("chat_template", "tool_chat_template") if tools else ("chat_template",)
    key = next((k for k in keys if model_cfg.get(k)), None)
    if key is not None:
        tokenizer.chat_template = load_chat_template(model_cfg[key], f"model.{key}")
    if tokenizer.chat_template is None:
        raise ConfigError(f"model '{path}' has no chat template: set model.chat_template")
    if tools:
        group = tools if isinstance(tools, str) else "tools"
        check_tool_calling(tokenizer, path, f"model.{key}" if key else "its own chat template", group)


def check_tool_calling(tokenizer, path: str, source: str, group: str = "tools") -> None:
    """The template renders a tool-calling conversation, and TRL can parse the calls the model writes in it
    (the response schema TRL knows for its own templates, set here so the fixed eval parses them too)."""
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    fix = (
        "set model.chat_template to one that can, e.g. trl:qwen2_5 (TRL's ChatML template with tool calls, "
        f"for ChatML models such as SmolLM2), or {group}=none"
    )
    if not supports_tool_calling(tokenizer):
        raise ConfigError(f"{group}: model '{path}' cannot call tools with {source}; {fix}")
    if all(getattr(tokenizer, a, None) is None for a in ("response_template", "response_schema")):
        try:
            add_response_schema(tokenizer)
        except ValueError:
            raise ConfigError(
                f"{group}: TRL cannot parse the tool calls model '{path}' writes with {source} (it knows "
                f"the response format of its own templates only); {fix}"
            ) from None
