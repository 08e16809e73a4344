"""`dataset.few_shot`: worked examples as earlier chat turns, in every prompt the run builds (train, the
fixed eval, the curriculum's rows), and a bad example refused with a message naming it."""

import pytest

from grpo_common.errors import ConfigError
from grpo_recipes.config.checks import check_config
from grpo_recipes.train.curriculum import build_curriculum_datasets
from grpo_recipes.train.data import build_datasets, few_shot
from tests.conftest import declared
from tests.test_config import composed

SHOT = {
    "question": "What is 47 reversed?",
    "completion": "The digits are 4 and 7. Backwards: 74.\n[ANSWER] 74",
}


def _dataset(**extra):
    return declared(
        "dataset",
        **{
            "tasks": {"reverse_digits": {"config": {"min_value": 10, "max_value": 99}}},
            "system_prompt": "Reverse the number.",
            "train_size": 20,
            "few_shot": [SHOT],
            **extra,
        },
    )


def _expected_start():
    return [
        {"role": "system", "content": "Reverse the number."},
        {"role": "user", "content": SHOT["question"]},
        {"role": "assistant", "content": SHOT["completion"]},
    ]


def test_train_and_eval_prompts_show_the_example_before_the_question():
    _, train, eval_rows = build_datasets(_dataset(), {"size": 4, "seed": 7})
    for row in [*eval_rows, *train]:
        assert row["prompt"][:3] == _expected_start()
        assert row["prompt"][3] == {"role": "user", "content": row["question"]}
        assert len(row["prompt"]) == 4


def test_curriculum_rows_show_the_example_too():
    dataset = _dataset(curriculum={"start_level": 0, "raise_at": 0.7, "lower_at": 0.3, "window": 8})
    _, train, eval_rows, _ = build_curriculum_datasets(dataset, {"size": 4, "seed": 7})
    assert train[0]["prompt"][:3] == _expected_start() and eval_rows[0]["prompt"][:3] == _expected_start()


def test_no_examples_and_no_system_prompt_leave_the_question_alone():
    _, train, _ = build_datasets(
        _dataset(few_shot=[], system_prompt="", prompt_format="plain"), {"size": 2, "seed": 7}
    )
    assert train[0]["prompt"] == [{"role": "user", "content": train[0]["question"]}]


def test_a_chatml_template_renders_the_example_as_an_earlier_assistant_turn(tiny):
    _, tokenizer = tiny  # ChatML, the embedded SmolLM2's template family
    _, _, rows = build_datasets(_dataset(), {"size": 1, "seed": 7})
    text = tokenizer.apply_chat_template(rows[0]["prompt"], tokenize=False, add_generation_prompt=True)
    example = (
        f"<|im_start|>user\n{SHOT['question']}<|im_end|>\n"
        f"<|im_start|>assistant\n{SHOT['completion']}<|im_end|>"
    )
    assert example in text
    assert text.index(example) < text.index(rows[0]["question"])
    assert text.endswith("<|im_start|>assistant\n")  # the model answers the last question


@pytest.mark.parametrize(
    "bad",
    [
        [{"question": "q"}],
        [{"question": "q", "completion": ""}],
        [{"question": "q", "completion": "a", "answer": "a"}],
        ["What is 47 reversed? 74"],
    ],
)
def test_a_bad_example_is_refused_by_index(bad):
    with pytest.raises(
        ConfigError, match=r"^dataset\.few_shot\[0\]=.*\{question: \.\.\., completion: \.\.\.\}"
    ):
        few_shot({"few_shot": bad})
    cfg = composed("dataset=reverse_digits")
    cfg["dataset"]["few_shot"] = bad
    with pytest.raises(ConfigError, match=r"dataset\.few_shot\[0\]"):
        check_config(cfg)


def test_the_reverse_preset_ships_one_example_and_its_source_setting_none():
    assert len(few_shot(composed("experiment=digits", "dataset=reverse_digits")["dataset"])) == 1
    assert few_shot(composed("experiment=digits_source", "dataset=reverse_digits_source")["dataset"]) == []
