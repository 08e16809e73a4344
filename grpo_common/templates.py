"""Chat templates: the `model.chat_template` override, and the response prefix a template pre-fills. Some
templates (Qwen3, DeepSeek-R1 distills) end the generation prompt with `<think>`, which the model then never
writes itself: rewards and eval must read `prefix + completion`, or a perfect `think` answer would be judged
unformatted."""

from pathlib import Path

from grpo_common.errors import ConfigError

# Reasoning openers a template may pre-fill at the start of the assistant turn.
_OPENERS = ("<think>", "<reasoning>")


def load_chat_template(value: str) -> str:
    """A Jinja string, or the path of a .jinja file holding one."""
    if "{%" in value or "{{" in value:
        return value
    if (path := Path(value).expanduser()).is_file():
        return path.read_text()
    raise ConfigError(f"model.chat_template '{value}' is neither a Jinja template nor an existing file")


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
        last = {**completion[-1], "content": prefix + str(completion[-1].get("content") or "")}
        return [*completion[:-1], last]
    return completion
