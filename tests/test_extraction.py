import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_common.answers import normalize_number
from grpo_common.formats import RULES, Extraction, extract_answer


@pytest.mark.parametrize(
    "text,answer,rule",
    [
        ("12 + 35 = 47\n[ANSWER] 47", "47", "tag"),
        ("[ANSWER] 3\nwait\n[ANSWER] 5", "5", "tag"),  # last tag wins
        ("<think>7 + 5 = 12</think><answer> 12 </answer>", "12", "tag"),
        ("[ANSWER] $1,200.00", "1200", "tag"),
        ("[answer]: Yes", "Yes", "tag"),
        ("So the answer is 42.", "42", "phrase"),
        ("The answer is 1,000.", "1000", "phrase"),
        ("the answer is **12**", "12", "phrase"),
        ("The answer is Yes.", "Yes", "phrase"),
        ("4 + 5 = 9", "9", "phrase"),
        ("x = 5 and then y = 7 so", "7", "phrase"),  # last phrase wins
        ("The answer is 3. Check: 1 + 2 = 3", "3", "phrase"),
        ("I think 3 apples and 4 pears", "4", "last_number"),
        ("-12 degrees", "-12", "last_number"),
        ("no digits at all", None, "none"),
        ("", None, "none"),
        ("[ANSWER]", None, "none"),
    ],
)
def test_extraction_chain(text, answer, rule):
    got = extract_answer(text)
    assert (got.answer, got.rule) == (answer, rule)


def test_tag_beats_phrase_and_phrase_beats_last_number():
    assert extract_answer("the answer is 3, [ANSWER] 4, and 5").answer == "4"
    assert extract_answer("so 2 + 2 = 4 (checked 17 times)").answer == "4"


# Whole numbers lose ".0"; other decimals keep their digits ("2.50"): some verifiers compare the
# reference's exact spelling (advanced_geometry's "0.480"). Text that is not a number is only stripped.
@pytest.mark.parametrize(
    "raw,norm",
    [
        ("1,000", "1000"),
        ("1000.0", "1000"),
        ("$1000", "1000"),
        ("+5", "5"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("-$1,200.50", "-1200.50"),
        ("2.50", "2.50"),
        (" Yes ", "Yes"),
        ("1, 2, 3", "1, 2, 3"),
        ("1,2", "1,2"),
        ("C=1,D=9", "C=1,D=9"),
        ("$x", "$x"),
        ("0028", "0028"),
    ],
)
def test_normalize_number(raw, norm):
    assert normalize_number(raw) == norm


@pytest.mark.parametrize(
    "text,answer",
    [
        ("[ANSWER] 1, 2, 3", "1, 2, 3"),  # a list stays whole on the tag line
        ("[ANSWER] owns, progress, constitution", "owns, progress, constitution"),
        ("[ANSWER] CITY,CITE,CUTE", "CITY,CITE,CUTE"),
        ("[ANSWER] ['-81.68', '-49.7']", "['-81.68', '-49.7']"),
        ("[ANSWER] (-0.636, -3.091)", "(-0.636, -3.091)"),
        ("[ANSWER] Riley is a knave, and Zoey is a knight.", "Riley is a knave, and Zoey is a knight."),
        ('[ANSWER] "Fake tweet."', '"Fake tweet."'),  # quotes are part of the answer
        ("[ANSWER] 42. Because 6 * 7 = 42", "42"),  # an explanation after it is dropped
        ("[ANSWER] Yes, because all cats are mammals", "Yes"),
        ("[ANSWER] 12, so she has 12 left", "12"),
        ("[ANSWER] Smith, as he hurried away, sat down.", "Smith, as he hurried away, sat down."),
        ("[ANSWER] Yes. I checked it twice!", "Yes"),
        ("[ANSWER] not a picture of life; it lacks truth.", "not a picture of life; it lacks truth."),
        ("**[ANSWER] 42**", "42"),
        ("[ANSWER] \\boxed{12}.", "12"),
        ("x\n[ANSWER]\n1 2\n3 4\n", "1 2\n3 4"),  # multi-line: the block below a bare tag
        ("x\n[ANSWER]\n1 2\n[ANSWER] 7", "7"),
        ("<think>a < b</think><answer>\n2 < 3\n1 > 0\n</answer>", "2 < 3\n1 > 0"),
        ("<answer>-0.7757, 0.0, 1.9717</answer>", "-0.7757, 0.0, 1.9717"),
    ],
)
def test_tag_answers_are_taken_as_written(text, answer):
    assert extract_answer(text) == Extraction(answer, "tag")


def test_huge_inputs_stay_fast():
    import time

    for text in ("<answer>" * 100_000, "[ANSWER]\n" * 100_000, "1," * 100_000, "answer is " * 100_000):
        start = time.perf_counter()
        extract_answer(text)
        assert time.perf_counter() - start < 0.5


def test_non_string_input_is_scored_not_raised():
    assert extract_answer(None).rule == "none"
    assert extract_answer(12).answer == "12"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_extraction_never_raises(text):
    got = extract_answer(text)
    assert got.rule in RULES
    assert (got.answer is None) == (got.rule == "none")
