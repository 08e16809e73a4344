"""The two digit tasks of the Monarch RL recipe, as reasoning-gym procedural datasets.

Registering them in reasoning-gym's registry means one registry holds every task: they mix
with reasoning-gym tasks in a composite and are scored through the same `score_answer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import Any

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


def digit_sum(numbers: list[int]) -> int:
    return sum(int(d) for n in numbers for d in str(abs(n)))


def reverse_digits(number: int) -> int:
    return int(str(abs(number))[::-1])


def register() -> None:
    for name, dataset_cls, config_cls in [
        ("sum_digits", SumDigitsDataset, SumDigitsConfig),
        ("reverse_digits", ReverseDigitsDataset, ReverseDigitsConfig),
    ]:
        if name not in DATASETS:
            register_dataset(name, dataset_cls, config_cls)
