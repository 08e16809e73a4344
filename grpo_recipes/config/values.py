"""What a knob accepts (its kind, range or choices) and how a value is shown: the vocabulary of the knob
declarations (knobs.py). Import-light. Types are exact: no silent coercion of 1.5 to an int, of `maybe` to a
bool, or of `abc` to a number."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from grpo_common.errors import is_int, is_number

# kind -> (how it is described, whether a value is of it)
KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "int": ("an integer", is_int),
    "float": ("a number", is_number),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "name": (
        "a non-empty name without '/' (a directory name)",
        lambda v: isinstance(v, str) and v.strip() not in ("", ".", "..") and not {"/", "\\"} & set(v),
    ),
    "path": ("a non-empty path", lambda v: isinstance(v, str) and bool(v.strip())),
    "list": ("a list", lambda v: isinstance(v, (list, tuple))),
    "dict": ("a mapping", lambda v: isinstance(v, Mapping)),
    "str_or_list": (
        "a string or a list of strings",
        lambda v: isinstance(v, str) or (isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)),
    ),
    "any": ("any value", lambda v: True),
}


@dataclass(frozen=True)
class Value:
    """What one key accepts: a kind, an optional range or set of choices, and whether null is allowed."""

    kind: str  # a key of KINDS
    low: float | None = None  # inclusive
    high: float | None = None  # inclusive
    above: float | None = None  # exclusive
    below: float | None = None  # exclusive
    choices: tuple | None = None
    optional: bool = False
    item: Value | None = None  # lists: what each element accepts

    def describe(self) -> str:
        if self.choices is not None:
            text = "one of: " + ", ".join(show(c) for c in self.choices)
        else:
            text = KINDS[self.kind][0]
            bounds = [
                f">= {_num(self.low)}" if self.low is not None else "",
                f"> {_num(self.above)}" if self.above is not None else "",
                f"<= {_num(self.high)}" if self.high is not None else "",
                f"< {_num(self.below)}" if self.below is not None else "",
            ]
            text += " " + " and ".join(b for b in bounds if b) if any(bounds) else ""
            if self.item is not None:
                text += f" of items each {self.item.describe()}"
        return text + (", or null" if self.optional else "")

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if self.choices is not None:
            return any(value == c and type(value) is type(c) for c in self.choices)
        if not KINDS[self.kind][1](value):
            return False
        if self.kind in ("int", "float"):
            return (
                (self.low is None or value >= self.low)
                and (self.high is None or value <= self.high)
                and (self.above is None or value > self.above)
                and (self.below is None or value < self.below)
            )
        if self.item is not None:
            return all(self.item.accepts(v) for v in value)
        return True


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def show(value: Any) -> str:
    """A value as the user would type it on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return repr(value) if value == "" or value.strip() != value else value
    return str(value)


# Int(low, high=.., above=.., below=.., optional=..): Value's fields after its kind
Int, Float = functools.partial(Value, "int"), functools.partial(Value, "float")


def Choice(*choices, optional=False) -> Value:
    return Value("any", choices=choices, optional=optional)


BOOL, STR, OPT_STR = Value("bool"), Value("str"), Value("str", optional=True)
OPT_BOOL = Value("bool", optional=True)
COUNT, STEPS = Int(1), Int(0)  # a positive count; a step number or a count that may be zero
PROB = Float(0, high=1)


def lookup(cfg: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    """(found, value) of a dotted key in a nested mapping."""
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


TRL_DEFAULT = object()  # a GRPOConfig field the recipe only range-checks: TRL's default, not in the config


def knob(default: Any, accepts: Value, doc: str, *, resume: bool = False) -> Any:
    """One knob: `resume=True` when a resume may change it (it does not change what the run learns)."""
    meta = {"accepts": accepts, "doc": doc, "resume": resume}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)
