import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_common.answers import normalize_number
from grpo_common.formats import Extraction, get_format

PLAIN = get_format("plain")  # the chain the answer formats share


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
        ("No, because all cats are mammals", "No", "lead_word"),
        ("no digits at all", "no digits at all", "alone"),  # one line is an answer, scored as any
        ("Some thoughts.\nno digits at all", None, "none"),  # prose on several lines is not
        ("", None, "none"),
        ("[ANSWER]", None, "none"),
    ],
)
def test_extraction_chain(text, answer, rule):
    got = PLAIN.extract(text)
    assert (got.answer, got.rule) == (answer, rule)


def test_tag_beats_phrase_and_phrase_beats_last_number():
    assert PLAIN.extract("the answer is 3, [ANSWER] 4, and 5").answer == "4"
    assert PLAIN.extract("so 2 + 2 = 4 (checked 17 times)").answer == "4"


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
    assert PLAIN.extract(text) == Extraction(answer, "tag")


def test_huge_inputs_stay_fast():
    """No regex backtracks over a long completion: each takes ~5 ms here, a quadratic one minutes. CPU time,
    not wall time, so a loaded machine (CI: two workers beside pip) cannot fail it."""
    import time

    for text in ("<answer>" * 100_000, "[ANSWER]\n" * 100_000, "1," * 100_000, "answer is " * 100_000):
        start = time.thread_time()
        PLAIN.extract(text)
        assert time.thread_time() - start < 2.0


def test_non_string_input_is_scored_not_raised():
    assert PLAIN.extract(None).rule == "none"
    assert PLAIN.extract(12).answer == "12"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_extraction_never_raises(text):
    got = PLAIN.extract(text)
    assert got.rule in PLAIN.rules
    assert (got.answer is None) == (got.rule == "none")


# Numbers keep their reading: typical completions of the default run (basic_arithmetic, answer_tag), most
# of them written by the embedded 135M model in earlier evals, pinned to the answer and rule they had
# before word answers got their own rules. A new rule must never take one of these from its old rule.
NUMERIC_PINS = [
    ("49 + 90 = 139", "139", "phrase"),
    ("21 + 85 = 106.", "106", "phrase"),
    ("12 + 5 = 17", "17", "phrase"),
    ("17", "17", "last_number"),
    ("17.", "17", "last_number"),
    ("**17**", "17", "last_number"),
    ("$17", "17", "last_number"),
    (" 17 \n", "17", "last_number"),
    ("17\n17", "17", "last_number"),
    ("12 + 5\n17", "17", "last_number"),
    ("[ANSWER] 17", "17", "tag"),
    ("Some working.\n[ANSWER] 17", "17", "tag"),
    ("The sum is 17.", "17", "last_number"),
    ("The answer is 1.", "1", "phrase"),
    ("The answer is: 17", "17", "phrase"),
    ("Answer: 17", "17", "last_number"),
    ("The answer is 17 apples.", "17", "phrase"),
    ("The answer is 17, which is the sum.", "17", "phrase"),
    ("The answer is **17**.", "17", "phrase"),
    ("The answer is:\n17", "17", "phrase"),
    ("10 + 0 = 10\n\nThe answer is 10.", "10", "phrase"),
    ("2 + 0 = 2\n\nThe answer is correct.", "correct", "phrase"),
    ("To calculate 71 + 74, we need to add the numbers 71 and 74.\n\nThe answer is 14", "14", "phrase"),
    ("To calculate 7 + 4, we simply add them together: 7 + 4 = 11.", "11", "phrase"),
    (
        "To calculate 52 + 15, we need to add 52 and 15. This is a classic example of how to add",
        "15",
        "last_number",
    ),
    ("To calculate 37 + 69, we need to add 37 and 69, which is 195.\n\nThis", "195", "last_number"),
    ("To calculate 6 + 1, we simply add them together.", "1", "last_number"),
    ("To calculate 9 + 9, we simply add them together. 9 + 9 equals 18.", "18", "last_number"),
    (
        "To calculate 8 + 10, we need to add the numbers themselves, which is 18. So, 8 + 10 =",
        "10",
        "last_number",
    ),
    ("To calculate 91 + 92, we need to add the numbers 91 and 92, which is 182.\n", "182", "last_number"),
    ("The answer to this problem is 10.", "10", "last_number"),
    ("15 + 96 = 15 + 16 = 21.", "21", "phrase"),
    ("96 + 75 = 16*2 = 14*2 = 14*2 = 16*2 = ", "16", "phrase"),
    ("10 + 0 = 10\n\nThe", "10", "phrase"),
    ("339 is 339.", "339", "last_number"),
    ("5749 is 57 * 4321.", "4321", "last_number"),
    ("9327 is 9327 reversed.", "9327", "last_number"),
    ("8652 is 8652 + 2, so the answer is 8653.", "8653", "phrase"),
    ("3541 is 3541 * 100 = 3541 in reverse.", "3541", "phrase"),
    ("5101 is 5 * 100 + 1 * 10 + 1 * 10 + 1 * 1", "1", "last_number"),
    ("3435 is 3 * 43 + 3 * 35 + 3 * 21. \nThe answer is ", "21", "last_number"),
    ("12 + 5 = 17\n[ANSWER] 17", "17", "tag"),
    ("[ANSWER] 17.", "17", "tag"),
    ("[ANSWER] 1,000", "1000", "tag"),
    ("The total is 1,000 dollars.", "1000", "last_number"),
    ("-5", "-5", "last_number"),
    ("12 - 17 = -5", "-5", "phrase"),
    ("3.5", "3.5", "last_number"),
    ("The answer is 3.5.", "3.5", "phrase"),
    ("x = 17", "17", "phrase"),
    ("", None, "none"),
    ("\n\n\n\n", None, "none"),
]


@pytest.mark.parametrize("prompt_format", ["answer_tag", "plain"])
def test_numeric_completions_keep_their_reading(prompt_format):
    from tasks import TaskSet

    taskset = TaskSet({"basic_arithmetic": {}}, prompt_format)
    readings = [taskset.extract(text, "basic_arithmetic") for text, _, _ in NUMERIC_PINS]
    assert [(text, e.answer, e.rule) for (text, _, _), e in zip(NUMERIC_PINS, readings)] == NUMERIC_PINS


MOVES = "Move disk 1 from Peg 1 to Peg 3\nMove disk 3 from Peg 2 to Peg 1"


# Word answers, lists, expressions and grids without a tag: one reading each, the first rule's.
@pytest.mark.parametrize(
    "text,answer,rule",
    [
        ("The answer is 2, 3, 5, 7.", "2, 3, 5, 7", "phrase"),  # the sentence's stop is not the answer's
        ("The answer is 10.0 + 6.0i.", "10.0 + 6.0i", "phrase"),
        ("The answer is 3.5.", "3.5", "phrase"),
        ("The answer is Zoey is a knight..", "Zoey is a knight.", "phrase"),  # a stop of its own stays
        ("The answer is No, it does not follow.", "No", "phrase"),
        ("The answer is:\n1 2\n3 4", "1 2\n3 4", "phrase"),  # a grid on the lines below
        ("The answer is 4 5\n\nLet me check 4 + 5.", "4 5", "phrase"),  # prose below is not the answer
        ("The answer is 34 days.", "34", "phrase"),  # a number before words, as '17 apples'
        ("No.", "No", "lead_word"),
        ("No, it does not logically follow from the premises.", "No", "lead_word"),
        ("**True** - since 3 < 4", "True", "lead_word"),
        ("Saturday, because 3 days after Wednesday", "Saturday", "lead_word"),
        ("No\n\nThe second premise says 2 cats ...", "No", "lead_word"),
        ("<think>all 3 are mammals</think>\nYes, it follows.", "Yes", "lead_word"),
        ("Answer: False", "False", "lead_word"),
        ("Paris.", "Paris", "alone"),
        ("Noah is a knight, and Zoey is a knave.", "Noah is a knight, and Zoey is a knave", "alone"),
        ("[6, 69, 7, 66]", "[6, 69, 7, 66]", "alone"),
        ("6*6 - 3 - 9.", "6*6 - 3 - 9", "alone"),
        ("-36*x**3 + sin(x) + C", "-36*x**3 + sin(x) + C", "alone"),  # a function is not prose
        ("$\\dfrac{2}{13}$", "$\\dfrac{2}{13}$", "alone"),
        ('{"ratio": 7.5, "ok": true}', '{"ratio": 7.5, "ok": true}', "alone"),
        ('"NO"', '"NO"', "alone"),  # quotes are the answer's own
        ("E=8,G=0,X=3", "E=8,G=0,X=3", "alone"),  # assignments, not an equation's result
        ("1 2\n3 4.", "1 2\n3 4", "alone"),
        ("```\n_ Q\nQ _\n```", "_ Q\nQ _", "alone"),
        ("Move disk 1 from Peg 1 to Peg 3\nMove disk 3 from Peg 2 to Peg 1.", MOVES, "alone"),  # one pattern
        ("Let me think.\nNo.", None, "none"),  # several lines of prose are not an answer
        ("The sum is 17.", "17", "last_number"),  # prose with a number in it
        ("Saturday is 3 days later", "3", "last_number"),
        ("12 + 5\n17", "17", "last_number"),  # working, then the result
        ("[ANSWER]\n", None, "none"),  # an empty tag is no answer, and no part of one
    ],
)
def test_word_list_expression_and_grid_answers(text, answer, rule):
    got = PLAIN.extract(text)
    assert (got.answer, got.rule) == (answer, rule)
