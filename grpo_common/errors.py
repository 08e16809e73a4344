"""The one error type for user mistakes (caught at the entry point, printed as one line), and the exact
type checks a user's value gets: no 1.5 as an integer, no `true` as a number."""

import math
from typing import Any


class ConfigError(ValueError):
    """A bad key or value in the config or on the command line."""


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An integer is a number too (`learning_rate=1`); a bool, NaN and inf are not."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def did_you_mean(word: str, choices, cutoff: float = 0.6, first: tuple[str, ...] = ()) -> str:
    """' Did you mean: a, b?' for `first` and up to three close matches of `word` among `choices`; or ''."""
    import difflib

    close = [*first, *difflib.get_close_matches(word, list(choices), n=3, cutoff=cutoff)]
    return f" Did you mean: {', '.join(close)}?" if close else ""


def first_line(err: BaseException) -> str:
    """An error's message in one line (its type when it has none)."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
