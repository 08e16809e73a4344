"""Numbers as written: how the extraction spells one, and whether an answer matches a gold one. Two
comparisons, apart on purpose:

Spelling (`normalize_number`, `same_number`): '1,000' -> '1000', '$12' -> '12', '12.0' -> '12'; other
digits stay ('2.50' != '2.5', '0028' != '28'). TaskSet.score gives a verifier the reference's spelling
only for the same spelling, as some verifiers compare spellings (advanced_geometry wants '0.480').

Value (`parse_number`, `match_answer`: qa_file's verifier, 1.0 or 0.0, never raises):
- A gold answer that reads as a number is compared as a number. Accepted spellings, on both
  sides: surrounding spaces, thousands commas ("1,000"), a currency sign ("$1000", "-$5"),
  trailing zeros ("1000.00"), a trailing full stop, scientific notation ("1e3"), a fraction of
  integers ("3/4" == 0.75), Unicode minus signs ("\u22125" == -5), \\boxed{..}, $..$, **..**.
- "%" is a unit mark and is dropped on both sides: "50%" == "50" (but "0.5" != "50%": no x100).
- An integer gold answer must be matched exactly (1000 == "1000.0" == "1e3", 1000 != 1000.4);
  any other is matched within `rel_tol` of the gold value.
- Words after a number do not count: "1000 dollars" != 1000 (the prompt asks for the number).
- Any other gold answer is compared as text, ignoring case, runs of whitespace and the same
  surrounding decoration ("Paris" == " paris. ").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

# ---------------------------------------------------------------------------------------------
# Spelling

# A number as the extraction writes it: thousands commas only in groups of three ("1,000", not "1,2").
_PLAIN = re.compile(r"([-+]?)\$?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?")


def is_number(text: str) -> bool:
    """'1,000', '-$12', '2.50': a number as a sign, a dollar sign, digits and decimals write it."""
    return bool(_PLAIN.fullmatch(text.strip()))


def normalize_number(text: str) -> str:
    """A number's spelling: '1,000' -> '1000', '$12' -> '12', '12.0' -> '12', '+5' -> '5', '-0' -> '0'.

    Anything that is not a number is only stripped ('1,2,3', '$x' and 'a, b' keep their commas and
    signs). Decimals that are not whole keep their digits ('2.50' stays '2.50'): some verifiers
    compare the reference's exact spelling (advanced_geometry's '0.480')."""
    s = text.strip()
    m = _PLAIN.fullmatch(s)
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
    return is_number(a) and is_number(b) and normalize_number(a) == normalize_number(b)


# ---------------------------------------------------------------------------------------------
# Value

# Unicode minus signs and spaces, written plainly.
_MINUS_SIGNS = str.maketrans(
    dict.fromkeys("\u2212\u2012\u2013\ufe63\uff0d", "-") | dict.fromkeys("\u00a0\u2009\u202f", " ")
)
_WRAPPERS = [
    re.compile(p, re.DOTALL)
    for p in (
        r"\\boxed\{(.*)\}",
        r"\\text\{(.*)\}",
        r"\$\$(.*)\$\$",
        r"\$(.*)\$",
        r"\\\((.*)\\\)",
        r"\*\*(.*)\*\*",
        r"`(.*)`",
        r'"(.*)"',
        r"'(.*)'",
    )
]
_NUMBER = re.compile(
    r"(?P<sign1>[-+]?)\s*(?P<currency>[$€£¥₹]?)\s*(?P<sign2>[-+]?)\s*"
    r"(?P<body>\d{1,3}(?:,\d{3})+(?:\.\d+)?"  # 1,000 / 1,000.50
    r"|\d+/\d+"  # 3/4
    r"|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"  # 1000 / 1000.00 / 1000. / .5 / 1e3
    r"\s*(?P<percent>%?)"
)
_MAX_EXPONENT = 400  # "1e999999" is not turned into a million-digit integer
_MAX_CHARS = 1_000  # longer answers are compared as text


def _clean(text: Any) -> str:
    """Collapse whitespace, unify minus signs, drop \\boxed{}, $..$, **..**, quotes and a final full stop."""
    s = " ".join(str(text).translate(_MINUS_SIGNS).replace("\\%", "%").replace("\\$", "$").split())
    for _ in range(4):
        before = s
        s = s.rstrip(".").strip()
        for pattern in _WRAPPERS:
            m = pattern.fullmatch(s)
            if m:
                s = m.group(1).strip()
        if s == before:
            break
    return s


@dataclass(frozen=True)
class Number:
    value: Fraction
    plain: bool  # written as a plain decimal (no %, fraction or exponent)
    decimal: str  # "1000", "-5", "1000.5": the plain spelling, for the stored answer


def parse_number(text: Any) -> Number | None:
    """'1,000', '$1000', '1000.00', '1e3', '3/4', '50%', '\u22125' -> their value; anything else -> None."""
    s = _clean(text)
    if len(s) > _MAX_CHARS:
        return None
    m = _NUMBER.fullmatch(s)
    if not m or (m["sign1"] and m["sign2"]):
        return None
    negative = (m["sign1"] or m["sign2"]) == "-"
    body = m["body"].replace(",", "")
    if "/" in body:
        num, den = body.split("/")
        if int(den) == 0:
            return None
        value = Fraction(int(num), int(den))
    else:
        try:
            dec = Decimal(body)
        except InvalidOperation:
            return None
        if abs(dec.adjusted()) > _MAX_EXPONENT:
            return None
        value = Fraction(dec)
    value = -value if negative else value
    plain = "/" not in body and "e" not in body.lower() and not m["percent"]
    decimal = ""
    if plain:
        decimal = format(Decimal(body), "f")  # '007' -> '7', '.5' -> '0.5', '1000.' -> '1000'
        if "." in decimal:
            decimal = decimal.rstrip("0").rstrip(".")
        decimal = "0" if value == 0 else ("-" if negative else "") + decimal
    return Number(value, plain, decimal)


def canonical_answer(text: Any) -> str:
    """A gold answer as stored: a plain decimal written plainly ('1,000' -> '1000'), else cleaned text."""
    number = parse_number(text)
    return number.decimal if number is not None and number.plain else _clean(text)


def match_answer(answer: Any, gold: Any, rel_tol: float = 1e-6) -> float:
    """1.0 when `answer` matches `gold` under the rules in the module docstring, else 0.0; never raises."""
    try:
        if answer is None or gold is None:
            return 0.0
        expected = parse_number(gold)
        if expected is None:
            return float(_clean(answer).casefold() == _clean(gold).casefold() != "")
        given = parse_number(answer)
        if given is None:
            return 0.0
        a, b = given.value, expected.value
        if a == b:
            return 1.0
        if b.denominator == 1:  # an integer gold answer is matched exactly
            return 0.0
        return float(abs(a - b) <= Fraction(rel_tol) * max(abs(a), abs(b)))
    except Exception:  # noqa: BLE001 - model text is arbitrary; a verifier must not crash training
        return 0.0
