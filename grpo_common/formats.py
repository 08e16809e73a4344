"""Prompt formats: how the model is asked to present its answer, and how the answer is read back.

One class per format owns all of it, and tasks, rewards, the evaluation and the report ask it:
- `system_prompt`: the default system prompt (a dataset may override it);
- `tags`: the markers `tag_count` rewards, each expected exactly once (`count` finds them);
- `extract(text)`: the fallback chain, reporting which rule fired; never raises, whatever the text;
- `rules`: the names `extract` reports, in the order tried (the eval and the report show them);
- `is_formatted(text, strict)`: the format reward. strict: the whole completion has the format's
  shape (the answer tag alone on the last line, or a bare tag line with a multi-line answer below
  it, ending the completion; <think>..</think><answer>..</answer> and nothing else; exactly one
  fenced block). soft: the format's answer marker appears somewhere (at least one fenced block).
  `plain` complies with any explicit answer (a tag or "the answer is"/"= x").
A new format is one class plus one line in `FORMATS`.

The answer formats (plain, answer_tag, think) share one chain (grpo_common/answers.py reads each step):
1. tag:         `[ANSWER] x` or `<answer>x</answer>` (the last one that holds an answer)
2. phrase:      "the answer is x" (x as on a tag line: lists, expressions, sentences, a grid below) or
                "= x" (a number), whichever comes last in the text
3. lead_word:   a yes/no/true/false opening the reply ("No, because ..."), or a word before its reason
                ("Saturday, since ...")
4. alone:       the whole reply when it is nothing but an answer: one line ("Paris.", "[6, 69, 7]"),
                or a block of lines without prose (a grid, a board, a list of moves)
5. last_number: the last number in the text
6. none:        nothing found
`code` reads a program: `<answer>` content (answer_tag), a ``` block (fenced), the text from the
first `def`/`import` line (raw), or none. A code task's program is read as code whatever the prompt
format asks (the code preset has `think`, with the program inside <answer>): see `reader`.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

from grpo_common import answers
from grpo_common.errors import ConfigError


@dataclass(frozen=True)
class Extraction:
    answer: str | None
    rule: str


def as_text(text: object) -> str:
    """What a caller passed, as text (None: empty)."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    return text


class PromptFormat(ABC):
    """One prompt format (see the module docstring); instances hold no state, so one serves every run."""

    name: str = ""
    system_prompt: str | None = None
    tags: tuple[str, ...] = ()
    rules: tuple[str, ...] = ("none",)
    reads_code = False  # reads programs (code tasks) rather than answers

    @abstractmethod
    def extract(self, text: object) -> Extraction: ...

    @abstractmethod
    def is_formatted(self, text: str, strict: bool = True) -> bool: ...

    def count(self, text: str, tag: str) -> int:
        """How often `tag` (one of `tags`) occurs in `text`."""
        return text.count(tag)


# The format checks read at most this many characters of a completion.
_FORMAT_CHARS = 20_000


class AnswerFormat(PromptFormat):
    """A format that reads an answer with the tag -> phrase -> lead word -> alone -> last number chain."""

    # One candidate per completion: the first rule that finds an answer gives it, and only that answer
    # meets the verifier (trying several would let a model fish for reward by writing many). The order:
    # what the model marks as its answer (tag, then phrase) over what its reply's shape says; among the
    # shapes, an opening verdict over the whole reply ("No, it does not follow." is "No", not a
    # sentence answer), and both over the last number ("False, as 3 needs 4" is "False"). The whole
    # reply and the last number cannot disagree on numbers: `alone` leaves a lone number, prose with a
    # number in it and working that ends in a number to `last_number`, so numeric replies keep the
    # reading and the rule they had (tests/test_extraction.py pins them).
    chain = (
        ("tag", answers.tag),
        ("phrase", answers.phrase),
        ("lead_word", answers.lead_word),
        ("alone", answers.alone),
        ("last_number", answers.last_number),
    )
    rules = (*(rule for rule, _ in chain), "none")

    def extract(self, text: object) -> Extraction:
        text = as_text(text)[: answers.MAX_CHARS]
        for rule, read in self.chain:
            found = read(text)
            if found:
                return Extraction(found, rule)
        return Extraction(None, "none")


class Plain(AnswerFormat):
    name = "plain"

    def is_formatted(self, text: str, strict: bool = True) -> bool:
        return self.extract(text[:_FORMAT_CHARS]).rule in ("tag", "phrase")


_TAG_SOFT = re.compile(r"\[ANSWER\][:\s]*\S", re.IGNORECASE)
# Every pattern here runs in linear time: nested lazy/greedy quantifiers that can retry the same text
# (`.*?\S.*?`, `[^\n]*\s*`) made a completion of a few thousand characters take seconds, and longer
# ones hours.
# The answer on the tag's line, or (multi-line answers: grids, boards) the block below a bare tag line.
_TAG_STRICT = re.compile(
    r"(?:\A|\n)[ \t]*\[ANSWER\][: \t]*(?:\S[^\n]*(?:\n\s*)?|\r?\n\s*\S.*)\Z", re.IGNORECASE | re.DOTALL
)


class AnswerTag(AnswerFormat):
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
# The answer may hold code (`a < b`), but no other think/answer tag.
_TAGS = r"</?answer>|</?think>"
_ANSWER_BODY = r"(?:(?!" + _TAGS + r").)"
# Some non-space text, of which at most one character may start a tag (as `body*? \S body*` allows).
_THINK_STRICT = re.compile(
    r"\A\s*<think>(?:(?!<think>).)*?</think>\s*<answer>"
    r"(?:\s*(?!"
    + _TAGS
    + r")\S"
    + _ANSWER_BODY
    + r"*|"
    + _ANSWER_BODY
    + r"*(?="
    + _TAGS
    + r")<"
    + _ANSWER_BODY
    + r"*)"
    r"</answer>\s*\Z",
    re.DOTALL,
)


class Think(AnswerFormat):
    name = "think"
    system_prompt = (
        "First think about the problem step by step inside <think> </think> tags, then give "
        "the final answer inside <answer> </answer> tags, e.g. "
        "<think>reasoning here</think><answer>42</answer>"
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
_FENCE_CLOSED = re.compile(r"```[\w+#-]*[^\n]*\n.*?```", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*([\w+#-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CODE_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|\Z)", re.DOTALL | re.IGNORECASE)
_CODE_START = re.compile(r"^(?:def |class |import |from |async def |@)", re.MULTILINE)
_CODE_CHARS = 50_000


class Code(PromptFormat):
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
        found = [m.group(1) for m in _CODE_ANSWER.finditer(text) if m.group(1).strip()]
        if found:
            inner = found[-1]
            fenced = _FENCE.findall(inner)
            return Extraction((fenced[-1][1] if fenced else inner).strip("\n"), "answer_tag")
        blocks = [body for _, body in _FENCE.findall(text) if body.strip()]
        if blocks:
            with_def = [b for b in blocks if re.search(r"^\s*def ", b, re.MULTILINE)]
            return Extraction((with_def or blocks)[-1].strip("\n"), "fenced")
        start = _CODE_START.search(text)
        if start:
            return Extraction(text[start.start() :].strip("\n"), "raw")
        return Extraction(None, "none")

    def is_formatted(self, text: str, strict: bool = True) -> bool:
        blocks = len(_FENCE_CLOSED.findall(text[:_FORMAT_CHARS]))
        return blocks == 1 if strict else blocks >= 1


FORMATS: dict[str, PromptFormat] = {
    f.name: f
    for f in (
        Plain(),
        AnswerTag(),
        Think(),
        Code(),
    )
}


def get_format(name: str) -> PromptFormat:
    if name not in FORMATS:
        raise ConfigError(f"dataset.prompt_format '{name}' is not one of: {', '.join(FORMATS)}")
    return FORMATS[name]


def reader(prompt_format: str, code_task: bool) -> PromptFormat:
    """The format that reads a completion in a run with `prompt_format`: that format when it reads what the
    task asks for (a program or an answer), else `code` for a code task (whatever the prompt asks, e.g. the
    code preset's `think`) and `plain`'s chain for any other task."""
    fmt = get_format(prompt_format)
    if fmt.reads_code == code_task:
        return fmt
    return FORMATS["code"] if code_task else FORMATS["plain"]


def rule_names() -> list[str]:
    """Every registered format's extraction rules, each once, in registry order; "none" (every chain's
    last resort) last."""
    found = dict.fromkeys(rule for fmt in FORMATS.values() for rule in fmt.rules if rule != "none")
    return [*found, "none"]


def format_ok(text: str, prompt_format: str, strict: bool = True) -> bool:
    """The format check by name, for callers with no format at hand."""
    return get_format(prompt_format).is_formatted(text, strict)
