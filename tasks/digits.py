"""The two digit tasks of the Monarch RL recipe, as reasoning-gym procedural datasets.

Registering them in reasoning-gym's registry means one registry holds every task: they mix
with reasoning-gym tasks in a composite and are scored through the same `score_answer`; their
curricula (reasoning-gym's BaseCurriculum) drive `dataset.curriculum` like any other task's.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import Any

from reasoning_gym.coaching import BaseCurriculum, RangeAttributeDefinition
from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import DATASETS, register_dataset


def _as_int(answer: Any) -> int | None:
    try:
        return int(str(answer).strip().replace(",", ""))
    except (TypeError, ValueError):
        return None


class _IntegerAnswerDataset(ProceduralDataset):
    """Binary scoring on integers: '28', ' 28 ' and '0028' are all 28."""

    def score_answer(self, answer: str | None, entry: dict[str, Any]) -> float:
        value = _as_int(answer)
        return 1.0 if value is not None and value == int(entry["answer"]) else 0.0


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

    def __init__(self, config: SumDigitsConfig):
        super().__init__(config=config, seed=config.seed, size=config.size)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        rng = Random(self.seed + idx)
        c = self.config
        numbers = [
            rng.randint(c.min_value, c.max_value) for _ in range(rng.randint(c.min_numbers, c.max_numbers))
        ]
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

    def __init__(self, config: ReverseDigitsConfig):
        super().__init__(config=config, seed=config.seed, size=config.size)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        number = Random(self.seed + idx).randint(self.config.min_value, self.config.max_value)
        return {
            "question": f"What is {number} reversed?",
            "answer": str(reverse_digits(number)),
            "metadata": {"source_dataset": "reverse_digits", "source_index": idx, "number": number},
        }


# Each level's range is a (low, high) pair, taken as is by reasoning-gym's curriculum context, so a level
# is one exact range. Level 0 is within reach of a 135M model; the top level is the task's default.
class SumDigitsCurriculum(BaseCurriculum):
    """Level 0: one number of 10..99 (the `sum_digits` dataset's problems, which its worked example shows);
    level 1: two numbers of 1..99; level 3: 2-4 numbers of 10..999 (SumDigitsConfig's defaults)."""

    def __init__(self):
        super().__init__(SumDigitsCurriculum.__name__, SumDigitsConfig)
        self._define_attributes(
            RangeAttributeDefinition(
                name="num_numbers",
                levels=[(1, 1), (2, 2), (2, 3), (2, 4)],
                description="How many numbers are summed",
                lower_field_name="min_numbers",
                upper_field_name="max_numbers",
            ),
            RangeAttributeDefinition(
                name="value",
                levels=[(10, 99), (1, 99), (10, 999), (10, 999)],
                description="The range each number is drawn from",
                lower_field_name="min_value",
                upper_field_name="max_value",
            ),
        )


class ReverseDigitsCurriculum(BaseCurriculum):
    """Level 0: two-digit numbers (the `reverse_digits` dataset's problems); level 1: 2-3 digits; then a
    digit more per level, up to 6-7 digits (the config defaults)."""

    def __init__(self):
        super().__init__(ReverseDigitsCurriculum.__name__, ReverseDigitsConfig)
        self._define_attributes(
            RangeAttributeDefinition(
                name="value",
                levels=[
                    (10, 99),
                    (10, 999),
                    (100, 9_999),
                    (1_000, 99_999),
                    (10_000, 999_999),
                    (100_000, 9_999_999),
                ],
                description="The range the number is drawn from",
                lower_field_name="min_value",
                upper_field_name="max_value",
            ),
        )


def digit_sum(numbers: list[int]) -> int:
    return sum(int(d) for n in numbers for d in str(abs(n)))


def reverse_digits(number: int) -> int:
    return int(str(abs(number))[::-1])


def register() -> None:
    for name, dataset_cls, config_cls, curriculum_cls in [
        ("sum_digits", SumDigitsDataset, SumDigitsConfig, SumDigitsCurriculum),
        ("reverse_digits", ReverseDigitsDataset, ReverseDigitsConfig, ReverseDigitsCurriculum),
    ]:
        if name not in DATASETS:
            register_dataset(name, dataset_cls, config_cls, curriculum_cls)
