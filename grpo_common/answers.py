"""Reading an answer out of text: the readers the answer formats chain (grpo_common/formats.py),
and how numbers are spelled.

A tag's answer is taken as written (lists like "1, 2, 3", sentences, JSON, `a < b`), with only
decoration removed: markdown/`\\boxed{}` wrappers, a trailing full stop after a single-token
answer ("42." -> "42"), and number spelling ("1,000" -> "1000"). On the `[ANSWER]` line an
explanation after the answer is dropped: "42. Because ..." -> "42", "Yes, because ..." -> "Yes".
A multi-line answer (grid, board, list of moves) goes on the lines after a bare `[ANSWER]` line:

    ...reasoning...
    [ANSWER]
    1 2 3
    4 5 6

Each reader returns the answer it found, or None; none raises, whatever the text.
"""

from __future__ import annotations

import re

# A number as written in text: thousands commas only in groups of three ("1,000", not "1,2").
_NUMBER = r"[-+]?\$?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
_NUMERIC = re.compile(r"([-+]?)\$?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?")
# The tag, then the rest of its line (one-line answer; empty: the answer is on the lines below).
_TAG_LINE = re.compile(r"\[ANSWER\][: \t]*([^\n]*)", re.IGNORECASE)
# Content up to the closing tag, never across another opening tag (linear on unclosed tags).
_TAG_XML = re.compile(r"<answer>((?:[^<]|<(?!/?answer>))*)</answer>", re.IGNORECASE)
_NEXT_TAG = re.compile(r"\[ANSWER\]|<answer>", re.IGNORECASE)
_ANSWER_IS = re.compile(r"answer\s+is\s*:?\s*([^\n]*)", re.IGNORECASE)
_EQUALS = re.compile(r"=\s*(" + _NUMBER + r")")
_LAST_NUMBER = re.compile(_NUMBER)
# End of the answer on an `[ANSWER]` line: a sentence break followed by more text, or a comma and
# an explanation after a number ("4, and 5", "12, since ...") or a word ("Yes, because ..."); after
# a word only "because"/"since", as a sentence answer may go on "Smith, as he hurried ...". List
# commas ("of, as, by") and semicolons ("not a picture of life; it lacks truth.") do not end it.
_SENTENCE_BREAK = re.compile(r"[.!?](?=\s+\S)")
_EXPLANATION = re.compile(
    r"(" + _NUMBER + r"),\s+(?:and|because|since|so|as|which|but|given|i\.e\.|e\.g\.)\s"
    r"|(\S+),\s+(?:because|since|i\.e\.|e\.g\.)\s",
    re.IGNORECASE,
)
_BOXED = re.compile(r"\\boxed\{(.*)\}", re.DOTALL)
# Only the first characters are searched: a huge completion cannot make extraction slow.
MAX_CHARS = 20_000


def normalize_number(text: str) -> str:
    """A number's spelling: '1,000' -> '1000', '$12' -> '12', '12.0' -> '12', '+5' -> '5', '-0' -> '0'.

    Anything that is not a number is only stripped ('1,2,3', '$x' and 'a, b' keep their commas and
    signs). Decimals that are not whole keep their digits ('2.50' stays '2.50'): some verifiers
    compare the reference's exact spelling (advanced_geometry's '0.480')."""
    s = text.strip()
    m = _NUMERIC.fullmatch(s)
    if not m:
        return s
    sign, whole, frac = m.groups()
    whole = whole.replace(",", "")
    if frac and not frac.strip(".0"):  # 12.0, 12.00 -> 12
        frac = None
    s = whole + (frac or "")
    if sign == "-" and s.strip("0."):
        s = "-" + s
    return s


def same_number(a: str, b: str) -> bool:
    """Both are numbers, spelled alike once normalised: '0.0' and '0', '1,000' and '$1000'."""
    return bool(_NUMERIC.fullmatch(a.strip()) and _NUMERIC.fullmatch(b.strip())) and normalize_number(
        a
    ) == normalize_number(b)


def _clean(text: str) -> str:
    """Strip markdown/latex decoration, quotes and trailing full stops around a phrase's answer."""
    s = text.strip().strip("*`\"' ")
    s = re.sub(r"^\\boxed\{(.*)\}$", r"\1", s)
    s = s.rstrip(".").strip()
    return normalize_number(s)


def _clean_tag(text: str) -> str:
    """A tag's answer as written, decoration off: quotes and inner punctuation are kept."""
    s = text
    for _ in range(2):  # '**\\boxed{42}.**', '**[ANSWER] 42**' (leaves '42**')
        s = s.strip().strip("*`").strip()
        boxed = _BOXED.fullmatch(s)
        if boxed:
            s = boxed.group(1)
        if s.endswith(".") and not re.search(r"\s", s):  # '42.', 'Yes.'; a sentence keeps its stop
            s = s.rstrip(".")
    return normalize_number(s)


def _first_clause(text: str) -> str:
    """'4, and 5' -> '4'; 'Yes. Because ...' -> 'Yes'; keeps '1,000' and '10*(8 - 5) - 6' whole."""
    return re.split(r"[,;]\s|[.!?](?:\s|$)", text.strip(), maxsplit=1)[0]


def _tag_line_answer(line: str) -> str:
    """The answer on an `[ANSWER]` line, without an explanation after it."""
    s = line.strip()
    brk = _SENTENCE_BREAK.search(s)
    if brk:
        s = s[: brk.start() + 1]  # the stop stays: a sentence answer keeps it, '42.' loses it in _clean_tag
    expl = _EXPLANATION.match(s)
    if expl:
        s = expl.group(1) or expl.group(2)
    return s


def tag(text: str) -> str | None:
    """The last tag that holds an answer."""
    found = [(m.start(), m) for m in _TAG_LINE.finditer(text)] + [
        (m.start(), m) for m in _TAG_XML.finditer(text)
    ]
    for _, m in sorted(found, key=lambda p: p[0], reverse=True):
        if m.re is _TAG_XML:
            value = m.group(1)
        elif m.group(1).strip():
            value = _tag_line_answer(m.group(1))
        else:  # a bare `[ANSWER]` line: the answer is the block below it, up to the next tag
            nxt = _NEXT_TAG.search(text, m.end())
            value = text[m.end() : nxt.start() if nxt else len(text)]
        value = _clean_tag(value)
        if value:
            return value
    return None


def phrase(text: str) -> str | None:
    """The last "answer is x" or "= x" in the text."""
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


def last_number(text: str) -> str | None:
    """The last number in the text."""
    numbers = _LAST_NUMBER.findall(text)
    return _clean(numbers[-1]) if numbers else None
