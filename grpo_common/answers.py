"""Reading an answer out of text: the readers the answer formats chain (grpo_common/formats.py). Numbers
are spelled as grpo_common/numbers.py writes them.

A tag's answer is taken as written (lists like "1, 2, 3", sentences, JSON, `a < b`), with only
decoration removed: markdown/`\\boxed{}` wrappers, a trailing full stop after a single-token
answer ("42." -> "42"), and number spelling ("1,000" -> "1000"). On the `[ANSWER]` line an
explanation after the answer is dropped: "42. Because ..." -> "42", "Yes, because ..." -> "Yes".
A multi-line answer (grid, board, list of moves) goes on the lines after a bare `[ANSWER]` line:

    ...reasoning...
    [ANSWER]
    1 2 3
    4 5 6

Without a tag, "the answer is X" reads X the same way (lists, expressions, sentences, a grid on the
lines below), less the sentence's full stop. A reply that is nothing but an answer is read whole
(`alone`): one line ("Paris", "2, 3, 5, 7", "6*6 - 3 - 9", "Riley is a knave, and Zoey is a knight.")
or a block of lines with no prose in it (grids, boards, a list of moves). A yes/no/true/false that
opens the reply is its answer ("No, because ..." -> "No"). Numbers keep their reading: a lone
number, prose with a number in it ("The sum is 17.") and working that ends in a number are left to
`last_number`, so no new reader takes a number from the rule that read it before.

Each reader returns the answer it found, or None; none raises, whatever the text.
"""

from __future__ import annotations

import re

from grpo_common.numbers import is_number, normalize_number, same_number

# A number as written in text: thousands commas only in groups of three ("1,000", not "1,2").
_NUMBER = r"[-+]?\$?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
# The tag, then the rest of its line (one-line answer; empty: the answer is on the lines below).
_TAG_LINE = re.compile(r"\[ANSWER\][: \t]*([^\n]*)", re.IGNORECASE)
# Content up to the closing tag, never across another opening tag (linear on unclosed tags).
_TAG_XML = re.compile(r"<answer>((?:[^<]|<(?!/?answer>))*)</answer>", re.IGNORECASE)
_NEXT_TAG = re.compile(r"\[ANSWER\]|<answer>", re.IGNORECASE)
_ANSWER_IS = re.compile(r"answer\s+is\s*:?\s*([^\n]*)", re.IGNORECASE)
# "= x" is an equation's result, not an item of a list of assignments ("E=8,G=0,X=3": cryptarithm).
_EQUALS = re.compile(r"(?<!,[A-Za-z])(?<!, [A-Za-z])=\s*(" + _NUMBER + r")(?![\d.]*[,;]\s*[A-Za-z]=)")
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
# After "the answer is": a number followed by words or a bracket is that number ("17 apples", "17, which
# is", "17 (12 + 5)"); followed by anything else it is part of the answer ("10.0 + 6.0i", "04:04").
_NUMBER_THEN_WORDS = re.compile(r"(" + _NUMBER + r")(?=[.,;:!?]*\s+[^\W\d_]|\s*\()")
# A one-word answer that opens a reply: a verdict before a break, or any word before its reason.
_BREAK = r"(?=\s*(?:[.,;:!?]|[-\u2013\u2014]|\n|\Z))"
_DECOR = r"[*_`]*"  # markdown; quotes are part of an answer ('"NO"' in codeio)
_LEAD_VERDICT = re.compile(r"\A\s*" + _DECOR + r"(yes|no|true|false)\b" + _DECOR + _BREAK, re.IGNORECASE)
_LEAD_EXPLAINED = re.compile(
    r"\A\s*" + _DECOR + r"([^\W\d_]+)" + _DECOR + r"\s*[,;:]?\s*(?:[-\u2013\u2014]\s*)?(?:because|since)\b",
    re.IGNORECASE,
)
# Prose: a word of two or more letters, not part of a token with digits (0x17a, E3, 6.0i), not a
# function's name (sqrt(2)) nor a LaTeX command (\\dfrac); quoted strings are data, not prose
# ('["fill B", "pour B->A"]').
_WORD = re.compile(r"(?<![\w\\])[^\W\d_]{2,}(?![\w(])")
_QUOTED = re.compile(r"\"[^\"\n]*\"|(?<![^\W\d_])'[^'\n]*'")
_LITERALS = {"true", "false", "none", "null", "nan", "inf", "oo", "pi"}
_LABEL = re.compile(r"\A\s*(?:final\s+)?answer\s*:", re.IGNORECASE)
_DIGIT = re.compile(r"\d")
_DIGITS = re.compile(r"\d+")
# Only the first characters are searched: a huge completion cannot make extraction slow.
MAX_CHARS = 20_000


def same_answer(answer: str, reference: str) -> bool:
    """The same answer spelled apart: numbers alike once normalised, or texts alike but for a final full
    stop (the extraction drops a sentence's stop: 'Zoey is a knight' for the reference 'Zoey is a
    knight.')."""
    return same_number(answer, reference) or (
        answer != reference and _drop_stop(answer.strip()) == _drop_stop(reference.strip())
    )


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


def _phrase_answer(line: str, rest: str | None) -> str:
    """X in "the answer is X": its line, or (`rest`: the text from X on, given for the last phrase only)
    the lines below too when they are nothing but the answer (a grid). '17 apples' -> '17'."""
    s = line.strip().strip("*`")
    number = _NUMBER_THEN_WORDS.match(s)
    if number:
        return _clean(number.group(1))
    whole = alone(rest) if rest is not None else None
    return whole or _clean_tag(_drop_stop(_tag_line_answer(_lead_or_line(s))))


def phrase(text: str) -> str | None:
    """The last "answer is x" or "= x" in the text."""
    best_pos, best = -1, None
    said = list(_ANSWER_IS.finditer(text))
    for i, m in enumerate(said):
        # Only the last phrase may run over several lines: an earlier one has a later phrase below it.
        value = _phrase_answer(m.group(1), text[m.start(1) :] if i == len(said) - 1 else None)
        if value and m.start() > best_pos:
            best_pos, best = m.start(), value
    for m in _EQUALS.finditer(text):
        if m.start() > best_pos:
            best_pos, best = m.start(), _clean(m.group(1))
    return best


def _after_reasoning(text: str) -> str:
    """The reply after its last `</think>` (the reasoning is not the answer), without an 'Answer:' label."""
    end = text.rfind("</think>")
    return _LABEL.sub("", text[end + len("</think>") :] if end >= 0 else text, count=1)


def _lead(text: str) -> str | None:
    """'No, because ...' -> 'No'; 'True - since ...' -> 'True'; 'Saturday, because ...' -> 'Saturday'."""
    m = _LEAD_VERDICT.match(text) or _LEAD_EXPLAINED.match(text)
    return m.group(1) if m else None


def _lead_or_line(line: str) -> str:
    return _lead(line) or line


def lead_word(text: str) -> str | None:
    """A one-word answer that opens the reply: yes/no/true/false before a break, or any word before
    'because'/'since'."""
    return _lead(_after_reasoning(text))


def _prose_with_number(text: str) -> bool:
    """'The sum is 17', '12 + 5 is 17', 'Move disk 1 from Peg 3': a number among words (quoted strings,
    function names and literals such as None or pi are not words: '{"ratio": 7.7}', 'sin(2*x) + C')."""
    return bool(_DIGIT.search(text)) and _has_words(text)


def _has_words(text: str) -> bool:
    return any(w.lower() not in _LITERALS for w in _WORD.findall(_QUOTED.sub(" ", text)))


def _is_block(lines: list[str]) -> bool:
    """Lines that are an answer: no prose (grids, boards), or one pattern (a list of moves: 'Move disk 1
    from Peg 3 to Peg 2'); not working that ends in a lone number ('12 + 5' then '17'), nor sentences."""
    lines = [ln for ln in lines if ln.strip()]
    if is_number(lines[-1]) or any(ln.rstrip().endswith(".") for ln in lines[:-1]):
        return False  # a sentence's stop ends the answer before the last line
    if not any(_has_words(ln) for ln in lines):
        return True
    patterns = {_DIGITS.sub("#", ln.strip()) for ln in lines}
    return len(patterns) == 1 and len(set(lines)) > 1 and bool(_DIGIT.search(lines[0]))


def _drop_stop(text: str) -> str:
    """The sentence's full stop, once: 'Paris.' -> 'Paris', 'is a knave..' -> 'is a knave.', '3.5' kept."""
    return text.rstrip().removesuffix(".")


def alone(text: str) -> str | None:
    """The whole reply, when it is nothing but an answer: one line (an explanation after it dropped as on
    a tag line) or a block of lines; its full stop dropped. A lone number is `last_number`'s reading."""
    s = _after_reasoning(text).strip()
    if not s or _NEXT_TAG.search(s):  # an empty tag is no answer, and no part of one
        return None
    lines = s.splitlines()
    if len(lines) == 1:
        if _prose_with_number(s):
            return None
        value = _clean_tag(_drop_stop(_tag_line_answer(_lead_or_line(s))))
    elif _is_block(_drop_stop(s).splitlines()):
        value = _clean_tag(_drop_stop(s))
    else:
        return None
    return None if not value or is_number(value) else value


def last_number(text: str) -> str | None:
    """The last number in the text."""
    numbers = _LAST_NUMBER.findall(text)
    return _clean(numbers[-1]) if numbers else None
