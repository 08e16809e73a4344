"""The two digit tasks of the Monarch RL recipe, as reasoning-gym procedural datasets: registered in its
registry, they mix, score and follow `dataset.curriculum` (their curricula below) like any other task."""

import re
from dataclasses import dataclass
from random import Random
from typing import Any

from reasoning_gym.coaching import BaseCurriculum, RangeAttributeDefinition
from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import register_dataset

from grpo_common.answers import match_answer

INTEGER = re.compile(r"[+-]?(\d{1,3}(,\d{3})+|\d+)")  # thousands grouped by commas, or none


class _IntegerAnswerDataset(ProceduralDataset):
    """Scored as integers: '28', ' 28 ', '0028' and '1,234' are; '28%', '56/2' or '2.8e1' (which the general
    matcher accepts) are not what these tasks ask for."""

    def __init__(self, config):
        super().__init__(config=config, seed=config.seed, size=config.size)

    def score_answer(self, answer: str | None, entry: dict[str, Any]) -> float:
        text = str(answer).strip() if answer is not None else ""
        return match_answer(text, entry["answer"]) if INTEGER.fullmatch(text) else 0.0


@dataclass
class SumDigitsConfig:
    min_numbers: int = 2
    max_numbers: int = 4
    min_value: int = 10
    max_value: int = 999
    seed: int | None = None
    size: int = 500

    def validate(self) -> None:
        assert 1 <= self.min_numbers <= self.max_numbers, "need 1 <= min_numbers <= max_numbers"
        assert 0 <= self.min_value <= self.max_value, "need 0 <= min_value <= max_value"


class SumDigitsDataset(_IntegerAnswerDataset):
    """'What is the total digit sum of [123, 45, 67]?' -> 28."""

    def __getitem__(self, idx: int) -> dict[str, Any]:
        rng = Random(self.seed + idx)
        c = self.config
        count = rng.randint(c.min_numbers, c.max_numbers)
        numbers = [rng.randint(c.min_value, c.max_value) for _ in range(count)]
        return {
            "question": f"What is the total digit sum of {numbers}?",
            "answer": str(digit_sum(numbers)),
            "metadata": {"source_dataset": "sum_digits", "source_index": idx, "numbers": numbers},
        }


@dataclass
class ReverseDigitsConfig:
    min_value: int = 100_000
    max_value: int = 9_999_999
    seed: int | None = None
    size: int = 500

    def validate(self) -> None:
        assert 0 <= self.min_value <= self.max_value, "need 0 <= min_value <= max_value"


class ReverseDigitsDataset(_IntegerAnswerDataset):
    """'What is 123456 reversed?' -> 654321; trailing zeros drop: 1200 -> 21."""

    def __getitem__(self, idx: int) -> dict[str, Any]:
        number = Random(self.seed + idx).randint(self.config.min_value, self.config.max_value)
        return {
            "question": f"What is {number} reversed?",
            "answer": str(reverse_digits(number)),
            "metadata": {"source_dataset": "reverse_digits", "source_index": idx, "number": number},
        }


def _range(name: str, levels: list, description: str, field: str = "") -> RangeAttributeDefinition:
    field = field or name  # the config's min_<field> and max_<field>
    return RangeAttributeDefinition(
        name=name,
        levels=levels,
        description=description,
        lower_field_name=f"min_{field}",
        upper_field_name=f"max_{field}",
    )


# Each level's range is a (low, high) pair, taken as is by reasoning-gym's curriculum context, so a level
# is one exact range. Level 0 (one 2-digit number) is within reach of a 135M model; the top level is the
# task's default.
class SumDigitsCurriculum(BaseCurriculum):
    def __init__(self):
        super().__init__(SumDigitsCurriculum.__name__, SumDigitsConfig)
        self._define_attributes(
            _range("num_numbers", [(1, 1), (2, 2), (2, 3), (2, 4)], "How many numbers are summed", "numbers"),
            _range("value", [(10, 99), (1, 99), (10, 999), (10, 999)], "The range each number is drawn from"),
        )


class ReverseDigitsCurriculum(BaseCurriculum):
    def __init__(self):
        super().__init__(ReverseDigitsCurriculum.__name__, ReverseDigitsConfig)
        levels = [(10, 99), (10, 999), (100, 9_999), (1_000, 99_999), (10_000, 999_999), (100_000, 9_999_999)]
        self._define_attributes(_range("value", levels, "The range the number is drawn from"))


def digit_sum(numbers: list[int]) -> int:
    return sum(int(d) for n in numbers for d in str(abs(n)))


def reverse_digits(number: int) -> int:
    return int(str(abs(number))[::-1])


register_dataset("sum_digits", SumDigitsDataset, SumDigitsConfig, SumDigitsCurriculum)
register_dataset("reverse_digits", ReverseDigitsDataset, ReverseDigitsConfig, ReverseDigitsCurriculum)
