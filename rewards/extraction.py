"""Answer extraction with a fallback chain, reporting which rule fired.

1. tag:    `[ANSWER] x` (last one) or `<answer>x</answer>` (last one)
2. phrase: "the answer is x" or "= x" (whichever comes last in the text)
3. last_number: the last number in the text
4. none:   nothing found
Never raises, whatever the text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

RULES = ("tag", "phrase", "last_number", "none")

_NUMBER = r"[-+]?\$?\d[\d,]*(?:\.\d+)?"
_TAG_LINE = re.compile(r"\[ANSWER\][:\s]*([^\n]*)", re.IGNORECASE)
_TAG_XML = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_ANSWER_IS = re.compile(r"answer\s+is\s*:?\s*([^\n]*)", re.IGNORECASE)
_EQUALS = re.compile(r"=\s*(" + _NUMBER + r")")
_LAST_NUMBER = re.compile(_NUMBER)
# Only the first bytes are searched: a huge completion cannot make extraction slow.
_MAX_CHARS = 20_000


@dataclass(frozen=True)
class Extraction:
    answer: str | None
    rule: str


def normalize_number(text: str) -> str:
    """'1,000' -> '1000', '$12' -> '12', '12.0' -> '12', '+5' -> '5'; other text is returned stripped."""
    s = text.strip().replace(",", "").replace("$", "")
    if re.fullmatch(r"[-+]?\d+(?:\.\d+)?", s):
        s = s.lstrip("+")
        if "." in s:
            s = s.rstrip("0").rstrip(".")
        if s in ("-0", ""):
            s = "0"
    return s


def _clean(text: str) -> str:
    """Strip markdown/latex decoration and a trailing full stop around a captured answer."""
    s = text.strip().strip("*`\"' ")
    s = re.sub(r"^\\boxed\{(.*)\}$", r"\1", s)
    s = s.rstrip(".").strip()
    return normalize_number(s)


def _first_clause(text: str) -> str:
    """'4, and 5' -> '4'; 'Yes. Because ...' -> 'Yes'; keeps '1,000' and '10*(8 - 5) - 6' whole."""
    return re.split(r"[,;]\s|[.!?](?:\s|$)", text.strip(), maxsplit=1)[0]


def _phrase(text: str) -> str | None:
    best_pos, best = -1, None
    for m in _ANSWER_IS.finditer(text):
        captured = m.group(1)
        number = _LAST_NUMBER.match(captured.strip().strip("*`"))
        # "the answer is 12." -> 12 ; "the answer is Yes." -> Yes (up to the end of the sentence)
        value = number.group(0) if number else _first_clause(captured)
        if _clean(value) and m.start() > best_pos:
            best_pos, best = m.start(), _clean(value)
    for m in _EQUALS.finditer(text):
        if m.start() > best_pos:
            best_pos, best = m.start(), _clean(m.group(1))
    return best


def extract_answer(text: object) -> Extraction:
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    text = text[:_MAX_CHARS]
    tags = [(m.start(), _first_clause(m.group(1))) for m in _TAG_LINE.finditer(text)]
    tags += [(m.start(), m.group(1)) for m in _TAG_XML.finditer(text)]
    tags = [(pos, _clean(v)) for pos, v in tags if _clean(v)]
    if tags:
        return Extraction(max(tags)[1], "tag")
    phrase = _phrase(text)
    if phrase:
        return Extraction(phrase, "phrase")
    numbers = _LAST_NUMBER.findall(text)
    if numbers:
        return Extraction(_clean(numbers[-1]), "last_number")
    return Extraction(None, "none")
