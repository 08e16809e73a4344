"""Reading an answer out of text: the readers the answer formats chain (formats.py; the rules are in the
README, "Rewards"), each returning the answer it found or None and never raising; how a number is spelled
once read ('1,000' -> '1000'); and matching one with a gold answer (`match_answer`)."""

import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

# A number as written in text: thousands commas only in groups of three ("1,000", not "1,2").
_NUMBER = r"[-+]?\$?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
_PLAIN = re.compile(r"([-+]?)\$?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?")
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
# Only the first characters are searched: a huge completion cannot make extraction slow.
MAX_CHARS = 20_000


def is_number(text: str) -> bool:
    """'1,000', '-$12', '2.50': a number as a sign, a dollar sign, digits and decimals write it."""
    return bool(_PLAIN.fullmatch(text.strip()))


def normalize_number(text: str) -> str:
    """'1,000' -> '1000', '$12' -> '12', '12.0' -> '12', '+5' -> '5', '-0' -> '0'; anything else stripped.
    Other decimals keep their digits: some verifiers compare spellings (advanced_geometry's '0.480')."""
    s = text.strip()
    if not (m := _PLAIN.fullmatch(s)):
        return s
    sign, whole, frac = m.groups()
    s = whole.replace(",", "") + (frac if frac and frac.strip(".0") else "")  # 12.0, 12.00 -> 12
    return "-" + s if sign == "-" and s.strip("0.") else s


def same_answer(answer: str, reference: str) -> bool:
    """The same answer spelled apart: numbers alike normalised ('0.0', '0'), or texts but for a full stop."""
    if is_number(answer) and is_number(reference):
        return normalize_number(answer) == normalize_number(reference)
    return answer != reference and _drop_stop(answer.strip()) == _drop_stop(reference.strip())


def _clean_tag(text: str) -> str:
    """A tag's answer as written, decoration off: quotes and inner punctuation are kept."""
    s = text
    for _ in range(2):  # '**\\boxed{42}.**', '**[ANSWER] 42**' (leaves '42**')
        s = s.strip().strip("*`").strip()
        if boxed := _BOXED.fullmatch(s):
            s = boxed.group(1)
        if s.endswith(".") and not re.search(r"\s", s):  # '42.', 'Yes.'; a sentence keeps its stop
            s = s.rstrip(".")
    return normalize_number(s)


def _tag_line_answer(line: str) -> str:
    """The answer on an `[ANSWER]` line, without an explanation after it."""
    s = line.strip()
    if brk := _SENTENCE_BREAK.search(s):
        s = s[: brk.start() + 1]  # the stop stays: a sentence answer keeps it, '42.' loses it in _clean_tag
    expl = _EXPLANATION.match(s)
    return (expl.group(1) or expl.group(2)) if expl else s


def _line_answer(line: str) -> str:
    """One line that is an answer: its opening word before a reason, else the line less an explanation."""
    return _clean_tag(_drop_stop(_tag_line_answer(_lead(line) or line)))


def tag(text: str) -> str | None:
    """The last tag that holds an answer."""
    found = [*_TAG_LINE.finditer(text), *_TAG_XML.finditer(text)]
    for m in sorted(found, key=lambda m: m.start(), reverse=True):
        if m.re is _TAG_XML:
            value = m.group(1)
        elif m.group(1).strip():
            value = _tag_line_answer(m.group(1))
        else:  # a bare `[ANSWER]` line: the answer is the block below it, up to the next tag
            nxt = _NEXT_TAG.search(text, m.end())
            value = text[m.end() : nxt.start() if nxt else len(text)]
        if value := _clean_tag(value):
            return value
    return None


def phrase(text: str) -> str | None:
    """The last "answer is x" or "= x"; x as on a tag line ('17 apples' -> '17'). Only the last "answer is"
    may run over several lines (a grid below it): an earlier one has a later phrase below it."""
    best_pos, best = -1, None
    said = list(_ANSWER_IS.finditer(text))
    for i, m in enumerate(said):
        s = m.group(1).strip().strip("*`")
        if number := _NUMBER_THEN_WORDS.match(s):
            value = normalize_number(number.group(1))
        else:
            value = (alone(text[m.start(1) :]) if i == len(said) - 1 else None) or _line_answer(s)
        if value and m.start() > best_pos:
            best_pos, best = m.start(), value
    for m in _EQUALS.finditer(text):
        if m.start() > best_pos:
            best_pos, best = m.start(), normalize_number(m.group(1))
    return best


def _after_reasoning(text: str) -> str:
    """The reply after its last `</think>` (the reasoning is not the answer), without an 'Answer:' label."""
    end = text.rfind("</think>")
    return _LABEL.sub("", text[end + len("</think>") :] if end >= 0 else text, count=1)


def _lead(text: str) -> str | None:
    """'No, because ...' -> 'No'; 'True - since ...' -> 'True'; 'Saturday, because ...' -> 'Saturday'."""
    m = _LEAD_VERDICT.match(text) or _LEAD_EXPLAINED.match(text)
    return m.group(1) if m else None


def lead_word(text: str) -> str | None:
    """A one-word answer that opens the reply: yes/no/true/false, or any word before 'because'/'since'."""
    return _lead(_after_reasoning(text))


def _has_words(text: str) -> bool:
    """Prose: quoted strings, function names and literals such as None or pi are not words."""
    return any(w.lower() not in _LITERALS for w in _WORD.findall(_QUOTED.sub(" ", text)))


def _is_block(lines: list[str]) -> bool:
    """Lines that are an answer: no prose (grids, boards), or one pattern (a list of moves: 'Move disk 1
    from Peg 3 to Peg 2'); not working that ends in a lone number ('12 + 5' then '17'), nor sentences."""
    lines = [ln for ln in lines if ln.strip()]
    if is_number(lines[-1]) or any(ln.rstrip().endswith(".") for ln in lines[:-1]):
        return False  # a sentence's stop ends the answer before the last line
    if not any(_has_words(ln) for ln in lines):
        return True
    patterns = {re.sub(r"\d+", "#", ln.strip()) for ln in lines}
    return len(patterns) == 1 and len(set(lines)) > 1 and bool(re.search(r"\d", lines[0]))


def _drop_stop(text: str) -> str:
    """The sentence's full stop, once: 'Paris.' -> 'Paris', 'is a knave..' -> 'is a knave.', '3.5' kept."""
    return text.rstrip().removesuffix(".")


def alone(text: str) -> str | None:
    """The whole reply when it is nothing but an answer: one line (less an explanation) or a block of lines,
    without its full stop. A lone number and prose with a number in it ('The sum is 17.') are left to
    `last_number`, so numeric replies keep the rule that read them."""
    s = _after_reasoning(text).strip()
    if not s or _NEXT_TAG.search(s):  # an empty tag is no answer, and no part of one
        return None
    if len(s.splitlines()) == 1:
        if re.search(r"\d", s) and _has_words(s):
            return None
        value = _line_answer(s)
    elif _is_block(_drop_stop(s).splitlines()):
        value = _clean_tag(_drop_stop(s))
    else:
        return None
    return None if not value or is_number(value) else value


def last_number(text: str) -> str | None:
    numbers = _LAST_NUMBER.findall(text)
    return normalize_number(numbers[-1]) if numbers else None


# `match_answer` (qa_file's and the digit tasks' verifier): a number gold answer as a number, within `rel_tol`
# unless an integer ("$1,000.00" == "1000", "3/4" == "0.75", "50%" == "50", but "1000 dollars" != 1000), any
# other as text ignoring case, whitespace and decoration ("Paris" == " paris. "). Unicode minus signs and
# spaces are written plainly.
_MINUS_SIGNS = str.maketrans(
    dict.fromkeys("\u2212\u2012\u2013\ufe63\uff0d", "-") | dict.fromkeys("\u00a0\u2009\u202f", " ")
)
_WRAPPED = (r"\\boxed\{(.*)\}", r"\\text\{(.*)\}", r"\$\$(.*)\$\$", r"\$(.*)\$", r"\\\((.*)\\\)")
_WRAPPERS = [re.compile(p, re.DOTALL) for p in (*_WRAPPED, r"\*\*(.*)\*\*", r"`(.*)`", r'"(.*)"', r"'(.*)'")]
_VALUE = re.compile(
    r"(?P<sign1>[-+]?)\s*(?P<currency>[$€£¥₹]?)\s*(?P<sign2>[-+]?)\s*"
    r"(?P<body>\d{1,3}(?:,\d{3})+(?:\.\d+)?"  # 1,000 / 1,000.50
    r"|\d+/\d+"  # 3/4
    r"|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"  # 1000 / 1000.00 / 1000. / .5 / 1e3
    r"\s*(?P<percent>%?)"  # a unit mark, dropped on both sides: "50%" == "50" (no x100)
)
_MAX_EXPONENT = 400  # "1e999999" is not turned into a million-digit integer
_VALUE_CHARS = 1_000  # longer answers are compared as text


def _plain(text: Any) -> str:
    """Collapse whitespace, unify minus signs, drop \\boxed{}, $..$, **..**, quotes and a final full stop."""
    s = " ".join(str(text).translate(_MINUS_SIGNS).replace("\\%", "%").replace("\\$", "$").split())
    for _ in range(4):
        before = s
        s = s.rstrip(".").strip()
        for pattern in _WRAPPERS:
            if m := pattern.fullmatch(s):
                s = m.group(1).strip()
        if s == before:
            break
    return s


def _value(text: Any) -> tuple[Fraction, str | None] | None:
    """'1,000', '1e3', '3/4', '50%'... -> (value, its plain decimal spelling, None for a fraction, exponent or
    percentage); anything else -> None."""
    s = _plain(text)
    m = _VALUE.fullmatch(s) if len(s) <= _VALUE_CHARS else None
    if not m or (m["sign1"] and m["sign2"]):
        return None
    negative = (m["sign1"] or m["sign2"]) == "-"
    body = m["body"].replace(",", "")
    if "/" in body:
        num, den = map(int, body.split("/"))
        return (Fraction(-num if negative else num, den), None) if den else None
    dec = Decimal(body)
    if abs(dec.adjusted()) > _MAX_EXPONENT:
        return None
    value = -Fraction(dec) if negative else Fraction(dec)
    if "e" in body.lower() or m["percent"]:
        return value, None
    decimal = format(dec, "f")  # '007' -> '7', '.5' -> '0.5', '1000.' -> '1000'
    if "." in decimal:
        decimal = decimal.rstrip("0").rstrip(".")
    return value, "0" if value == 0 else ("-" if negative else "") + decimal


def canonical_answer(text: Any) -> str:
    """A gold answer as stored: a plain decimal written plainly ('1,000' -> '1000'), else cleaned text."""
    decimal = (_value(text) or (None, None))[1]
    return decimal if decimal is not None else _plain(text)


def match_answer(answer: Any, gold: Any, rel_tol: float = 1e-6) -> float:
    """1.0 when `answer` matches `gold` (above), else 0.0; never raises."""
    try:
        if answer is None or gold is None:
            return 0.0
        expected = _value(gold)
        if expected is None:
            return float(_plain(answer).casefold() == _plain(gold).casefold() != "")
        given = _value(answer)
        if given is None:
            return 0.0
        a, b = given[0], expected[0]
        if a == b or b.denominator == 1:  # an integer gold answer is matched exactly
            return float(a == b)
        return float(abs(a - b) <= Fraction(rel_tol) * max(abs(a), abs(b)))
    except Exception:  # noqa: BLE001 - model text is arbitrary; a verifier must not crash training
        return 0.0
