"""Declared attack parameters: each attack states its parameters' types, defaults, valid values
and meanings (`Param`), so that a misspelt name or an impossible value is refused before any
model trains (`miaudit.attacks.registry.check_params`), and `miaudit attacks NAME` can print them.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

# The types a parameter may have; "list[attack]" is a list of registered attack names.
TYPES = ("bool", "int", "float", "str", "list[int]", "list[attack]")


@dataclass(frozen=True)
class Param:
    """One parameter of an attack.

    `type`: one of `TYPES`. `low`/`high`: bounds of a number (of each element of a
    "list[int]"), inclusive unless `low_open`/`high_open`; None: unbounded. A float must be
    finite, and never NaN, unless `high` is `math.inf` and closed (then inf is allowed).
    `choices`: the values a "str" may take. `nullable`: None (YAML null) is allowed too, with
    the meaning `meaning` gives it. `meaning`: one line, what the parameter does.
    """

    name: str
    default: Any
    type: str
    meaning: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    nullable: bool = False

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"parameter '{self.name}': type must be one of {TYPES}; "
                             f"got {self.type!r}.")
        if self.choices is not None and self.type != "str":
            raise ValueError(f"parameter '{self.name}': only a str parameter has choices.")

    def with_default(self, default: Any) -> Param:
        """The same parameter with another default (an attack's variant)."""
        return dataclasses.replace(self, default=default)

    def bounds(self) -> str:
        """The valid values in short: "[0, 1]", "> 0", "{ratio, none}", "each >= 1",
        "or null"; "" when any value of the type is valid."""
        parts = []
        if self.choices is not None:
            parts.append("{" + ", ".join(self.choices) + "}")
        interval = self._interval()
        if interval:
            parts.append(f"each {interval}" if self.type == "list[int]" else interval)
        if self.nullable:
            parts.append("or null")
        return " ".join(parts)

    def requirement(self) -> str:
        """What a valid value is, in words, for error messages."""
        interval = self._interval()
        where = f" in {interval}" if interval[:1] in ("[", "(") else f" {interval}"
        where = where if interval else ""
        kind = {
            "bool": "true or false",
            "int": f"an integer{where}",
            "float": f"a number{where}",
            "str": (f"one of {', '.join(self.choices)}" if self.choices else "a string"),
            "list[int]": "a list of integers" + (f", each{where}" if interval else ""),
            "list[attack]": "a list of attack names (see `miaudit attacks`)",
        }[self.type]
        return kind + (", or null" if self.nullable else "")

    def problem(self, value: Any, attacks: Collection[str] = ()) -> str | None:
        """Why `value` is not valid for this parameter (None: it is). `attacks`: the
        registered attack names, for a "list[attack]"."""
        if value is None:
            return None if self.nullable else "null is not allowed"
        if self.type == "bool":
            return None if isinstance(value, (bool, np.bool_)) else "not a boolean"
        if self.type == "int":
            return _integer_problem(value) or self._out_of_bounds(value)
        if self.type == "float":
            return _number_problem(value, self._allows_inf()) or self._out_of_bounds(value)
        if self.type == "str":
            if not isinstance(value, str):
                return "not a string"
            if self.choices is not None and value not in self.choices:
                return "not one of the choices"
            return None
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            return "not a list"
        if self.type == "list[int]":
            for item in value:
                bad = _integer_problem(item) or self._out_of_bounds(item)
                if bad:
                    return f"its element {item!r} is {bad}"
            return None
        for item in value:  # list[attack]
            if not isinstance(item, str) or item not in attacks:
                return f"{item!r} is not a registered attack"
        return None

    def _allows_inf(self) -> bool:
        return self.high == math.inf and not self.high_open

    def _interval(self) -> str:
        low, high = self.low, self.high
        if low is not None and high is not None:
            return (f"{'(' if self.low_open else '['}{_number(low)}, "
                    f"{_number(high)}{')' if self.high_open else ']'}")
        if low is not None:
            return f"{'>' if self.low_open else '>='} {_number(low)}"
        if high is not None:
            return f"{'<' if self.high_open else '<='} {_number(high)}"
        return ""

    def _out_of_bounds(self, value: float) -> str | None:
        low, high = self.low, self.high
        if low is not None and (value < low or (self.low_open and value == low)):
            return "out of bounds"
        if high is not None and (value > high or (self.high_open and value == high)):
            return "out of bounds"
        return None


def _integer_problem(value: Any) -> str | None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        return "not an integer"
    return None


def _number_problem(value: Any, allow_inf: bool) -> str | None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return "not a number"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value) and not allow_inf:
        return "infinite"
    return None


def _number(x: float) -> str:
    return "inf" if x == math.inf else f"{x:g}"


def show(value: Any) -> str:
    """A parameter value as it is written in a YAML config: null, true, [128, 64], 0.001."""
    if value is None:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)
