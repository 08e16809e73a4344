"""Prompt formats: how the model is asked to present its answer, and how it is read back. One class per
format: its system prompt, the `tags` tag_count rewards, `extract` (names the rule that fired, one of `rules`;
never raises) and `is_formatted` (strict: the whole completion has the format's shape; soft: its answer
marker appears). A new format is one class plus one line in `FORMATS`."""

import re
from dataclasses import dataclass

from grpo_common.errors import ConfigError


@dataclass(frozen=True)
class Extraction:
    answer: str | None
    rule: str


def as_text(text: object) -> str:
    return text if isinstance(text, str) else "" if text is None else str(text)


class PromptFormat:  # one instance serves every run; subclasses define extract and is_formatted
    name: str = ""
    system_prompt: str | None = None
    tags: tuple[str, ...] = ()
    rules: tuple[str, ...] = ("none",)
    reads_code = False  # reads programs (code tasks) rather than answers

    def count(self, text: str, tag: str) -> int:  # how often `tag` (one of `tags`) occurs in `text`
        return text.count(tag)


_FORMAT_CHARS = 20_000  # the format checks read at most this many characters of a completion


# One candidate per completion: the first rule of the chain that finds an answer gives it (trying several
# would let a model fish for reward by writing many). What the model marks as its answer comes first.
class AnswerFormat(PromptFormat):
    rules = ("tag", "phrase", "lead_word", "alone", "last_number", "none")  # the readers of answers.py

    def extract(self, text: object) -> Extraction:
        from grpo_common import answers  # on first use: a run imports it when it reads its first answer

        text = as_text(text)[: answers.MAX_CHARS]
        for rule in self.rules[:-1]:
            if found := getattr(answers, rule)(text):
                return Extraction(found, rule)
        return Extraction(None, "none")


class Plain(AnswerFormat):  # formatted when the answer is explicit: a tag or "the answer is"/"= x"
    name = "plain"

    def is_formatted(self, text: str, strict: bool = True) -> bool:
        return self.extract(text[:_FORMAT_CHARS]).rule in ("tag", "phrase")


# Every pattern here runs in linear time: nested quantifiers that retry the same text (`.*?\S.*?`) made a
# completion of a few thousand characters take seconds.
_TAG_SOFT = re.compile(r"\[ANSWER\][:\s]*\S", re.IGNORECASE)
# The answer on the tag's line, or (multi-line answers: grids, boards) the block below a bare tag line.
_TAG_STRICT = re.compile(
    r"(?:\A|\n)[ \t]*\[ANSWER\][: \t]*(?:\S[^\n]*(?:\n\s*)?|\r?\n\s*\S.*)\Z", re.IGNORECASE | re.DOTALL
)


class AnswerTag(AnswerFormat):  # strict: one tag, ending the completion (its line or the block below)
    name = "answer_tag"
    system_prompt = (
        "Solve the problem. End your reply with the final answer on its own line as: [ANSWER] <answer>"
    )
    tags = ("[ANSWER]",)

    def is_formatted(self, text: str, strict: bool = True) -> bool:
        text = text[:_FORMAT_CHARS]
        if strict:
            return bool(_TAG_STRICT.search(text)) and len(_TAG_SOFT.findall(text)) == 1
        return bool(_TAG_SOFT.search(text))

    def count(self, text: str, tag: str) -> int:  # in any case, as the extraction reads it
        return len(re.findall(re.escape(tag), text, re.IGNORECASE))


# Soft think: after the first <think>, the first `</think> <answer>`, then some text and a </answer>.
_THINK_THEN_ANSWER = re.compile(r"</think>\s*<answer>")
_ANSWER_REST = re.compile(r"\s*\S.*?</answer>", re.DOTALL)
# Strict: the answer may hold code (`a < b`) but no other think/answer tag.
_TAGS = r"</?answer>|</?think>"
_BODY = rf"(?:(?!{_TAGS}).)"
_THINK_STRICT = re.compile(
    r"\A\s*<think>(?:(?!<think>).)*?</think>\s*<answer>"
    rf"(?:\s*(?!{_TAGS})\S{_BODY}*|{_BODY}*(?={_TAGS})<{_BODY}*)</answer>\s*\Z",
    re.DOTALL,
)


class Think(AnswerFormat):  # strict: <think>..</think><answer>..</answer> and nothing else
    name = "think"
    system_prompt = (
        "First think about the problem step by step inside <think> </think> tags, then give the final answer "
        "inside <answer> </answer> tags, e.g. <think>reasoning here</think><answer>42</answer>"
    )
    tags = ("<think>", "</think>", "<answer>", "</answer>")

    def is_formatted(self, text: str, strict: bool = True) -> bool:
        text = text[:_FORMAT_CHARS]
        if strict:
            return bool(_THINK_STRICT.search(text))
        start = text.find("<think>")
        close = _THINK_THEN_ANSWER.search(text, start + len("<think>")) if start >= 0 else None
        return bool(close and _ANSWER_REST.match(text, close.end()))


# A closed fenced block (the format check); the reader also takes one a truncated completion left open.
_FENCE_CLOSED = re.compile(r"```[^\n]*\n.*?```", re.DOTALL)
_FENCE = re.compile(r"```[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CODE_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|\Z)", re.DOTALL | re.IGNORECASE)
_CODE_START = re.compile(r"^(?:def |class |import |from |async def |@)", re.MULTILINE)
_CODE_CHARS = 50_000


class Code(PromptFormat):  # reads a program; strict: exactly one fenced block, soft: at least one
    name = "code"
    system_prompt = (
        "You are a careful Python programmer. Reply with the complete function in a single "
        "```python code block."
    )
    rules = ("answer_tag", "fenced", "raw", "none")
    reads_code = True

    def extract(self, text: object) -> Extraction:
        """`<answer>` content (fences inside stripped), else the fenced block that defines a function (the
        last such, or the last block), else raw text from the first `def`/`import` line."""
        text = as_text(text)[:_CODE_CHARS]
        if found := [m.group(1) for m in _CODE_ANSWER.finditer(text) if m.group(1).strip()]:
            fenced = _FENCE.findall(found[-1])
            return Extraction((fenced[-1] if fenced else found[-1]).strip("\n"), "answer_tag")
        if blocks := [body for body in _FENCE.findall(text) if body.strip()]:
            with_def = [b for b in blocks if re.search(r"^\s*def ", b, re.MULTILINE)]
            return Extraction((with_def or blocks)[-1].strip("\n"), "fenced")
        start = _CODE_START.search(text)
        return Extraction(text[start.start() :].strip("\n"), "raw") if start else Extraction(None, "none")

    def is_formatted(self, text: str, strict: bool = True) -> bool:
        blocks = len(_FENCE_CLOSED.findall(text[:_FORMAT_CHARS]))
        return blocks == 1 if strict else blocks >= 1


FORMATS: dict[str, PromptFormat] = {f.name: f for f in (Plain(), AnswerTag(), Think(), Code())}


def get_format(name: str) -> PromptFormat:
    if name not in FORMATS:
        raise ConfigError(f"dataset.prompt_format '{name}' is not one of: {', '.join(FORMATS)}")
    return FORMATS[name]


def reader(prompt_format: str, code_task: bool) -> PromptFormat:
    """The run's format when it reads what the task asks for (a program or an answer), else code or plain."""
    fmt = get_format(prompt_format)
    return fmt if fmt.reads_code == code_task else FORMATS["code" if code_task else "plain"]


def rule_names() -> list[str]:
    """Every registered format's extraction rules, each once, in registry order; "none" last."""
    found = dict.fromkeys(rule for fmt in FORMATS.values() for rule in fmt.rules if rule != "none")
    return [*found, "none"]
