import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewards.extraction import RULES, extract_answer, normalize_number


@pytest.mark.parametrize("text,answer,rule", [
    ("12 + 35 = 47\n[ANSWER] 47", "47", "tag"),
    ("[ANSWER] 3\nwait\n[ANSWER] 5", "5", "tag"),                     # last tag wins
    ("<think>7 + 5 = 12</think><answer> 12 </answer>", "12", "tag"),
    ("[ANSWER] $1,200.00", "1200", "tag"),
    ("[answer]: Yes", "Yes", "tag"),
    ("So the answer is 42.", "42", "phrase"),
    ("The answer is 1,000.", "1000", "phrase"),
    ("the answer is **12**", "12", "phrase"),
    ("The answer is Yes.", "Yes", "phrase"),
    ("4 + 5 = 9", "9", "phrase"),
    ("x = 5 and then y = 7 so", "7", "phrase"),                       # last phrase wins
    ("The answer is 3. Check: 1 + 2 = 3", "3", "phrase"),
    ("I think 3 apples and 4 pears", "4", "last_number"),
    ("-12 degrees", "-12", "last_number"),
    ("no digits at all", None, "none"),
    ("", None, "none"),
    ("[ANSWER]", None, "none"),
])
def test_extraction_chain(text, answer, rule):
    got = extract_answer(text)
    assert (got.answer, got.rule) == (answer, rule)


def test_tag_beats_phrase_and_phrase_beats_last_number():
    assert extract_answer("the answer is 3, [ANSWER] 4, and 5").answer == "4"
    assert extract_answer("so 2 + 2 = 4 (checked 17 times)").answer == "4"


@pytest.mark.parametrize("raw,norm", [("1,000", "1000"), ("1000.0", "1000"), ("$1000", "1000"),
                                      ("+5", "5"), ("-0", "0"), ("2.50", "2.5"), (" Yes ", "Yes")])
def test_normalize_number(raw, norm):
    assert normalize_number(raw) == norm


def test_non_string_input_is_scored_not_raised():
    assert extract_answer(None).rule == "none"
    assert extract_answer(12).answer == "12"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_extraction_never_raises(text):
    got = extract_answer(text)
    assert got.rule in RULES
    assert (got.answer is None) == (got.rule == "none")
