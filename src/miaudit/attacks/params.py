"""Declared attack parameters: each attack states its parameters' types, defaults, valid values
and meanings (`Param`), so that a misspelt name or an impossible value is refused before any
model trains (`miaudit.attacks.registry.check_params`), and `miaudit attacks NAME` can print them.

From an attack's declarations, `params_model` builds the pydantic model that validates its
parameters (``extra="forbid"``; each parameter a field with its type, bounds, choices, default
and meaning as description). Its value rules are those of YAML and the Python API: a bool is
not a number, an int is a float (and stays an int), a float is finite unless its upper bound
is a closed ``inf``, a numpy scalar or a tuple counts as the Python number or list. A value
passes through as given, so the attack receives exactly what the caller wrote. `refusal` words
pydantic's error as our message (the parameter, what a valid value is, what it does).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WrapValidator,
    create_model,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ValidatorFunctionWrapHandler

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

    def annotation(self) -> Any:
        """The field's type for pydantic: the Python type, its choices as a ``Literal``,
        ``| None`` when nullable, held to the value rules above (``Annotated``)."""
        kind: Any
        if self.type == "list[int]":
            kind = list[Annotated[int, Field(**self._limits())]]  # each element's bounds
        elif self.type == "list[attack]":
            kind = list[Annotated[str, AfterValidator(_registered)]]
        elif self.choices is not None:
            kind = Literal.__getitem__(self.choices)
        else:
            kind = {"bool": bool, "int": int, "float": float, "str": str}[self.type]
        return Annotated[kind | None if self.nullable else kind, WrapValidator(_as_given)]

    def field(self) -> FieldInfo:
        """The field's default, description (`meaning`) and bounds (``ge``, ``lt``, ...)."""
        limits = self._limits() if self.type in ("int", "float") else {}
        if self.type == "float":
            limits["allow_inf_nan"] = self._allows_inf()  # NaN is refused by _as_given
        info: FieldInfo = Field(self.default, alias=self.name, title=self.name,
                                description=self.meaning, **limits)
        return info

    def _limits(self) -> dict[str, Any]:
        """``ge``/``gt``/``le``/``lt`` of the finite bounds (a closed ``inf`` high bound:
        inf is allowed, `field`'s ``allow_inf_nan``)."""
        limits: dict[str, Any] = {}
        if self.low is not None and math.isfinite(self.low):
            limits["gt" if self.low_open else "ge"] = self.low
        if self.high is not None and math.isfinite(self.high):
            limits["lt" if self.high_open else "le"] = self.high
        return limits

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


def params_model(attack: str, params: Sequence[Param]) -> type[BaseModel]:
    """The pydantic model of `attack`'s parameters: one field per `Param` (keyed by its name:
    an alias where the name is one pydantic keeps for itself), no other key
    (``extra="forbid"``). Validate with ``context={"attacks": names}``, the attacks a
    "list[attack]" may name; the validated values are the values as given."""
    title = "".join(w.capitalize() for w in re.split(r"[^0-9A-Za-z]+", attack)) + "Params"
    fields: dict[str, Any] = {
        (p.name if _plain_name(p.name) else f"param_{i}"): (p.annotation(), p.field())
        for i, p in enumerate(params)}
    # strict: pydantic's own coercions (a "2" or a 2.0 for an integer) are not ours
    config = ConfigDict(extra="forbid", strict=True, title=f"attack_params.{attack}")
    model: type[BaseModel] = create_model(title, __config__=config, **fields)
    return model


def _plain_name(name: str) -> bool:
    """Whether `name` can name a pydantic field as it is (not private, nor BaseModel's)."""
    return not (name.startswith(("_", "model_")) or hasattr(BaseModel, name))


def _plain(value: Any) -> Any:
    """`value` as the Python value pydantic's strict types know: a numpy scalar (the Python
    API may give one) as the Python bool, int or float; a tuple as a list."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _as_given(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Validate the plain form of `value` (its type, bounds, choices), and keep `value`:
    an int given for a float stays an int, a tuple a tuple."""
    plain = _plain(value)
    handler(plain)
    if isinstance(plain, float) and math.isnan(plain):  # allow_inf_nan lets it through
        raise PydanticCustomError("nan", "NaN")
    return value


def _registered(name: str, info: ValidationInfo) -> str:
    """An element of a "list[attack]": one of the context's attacks."""
    if name not in (info.context or {}).get("attacks", ()):
        raise PydanticCustomError("unregistered_attack", "{name} is not a registered attack",
                                  {"name": name})
    return name


# pydantic's errors of a value of the right type outside the bounds
_BOUNDS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}
_NOT = {"bool": "not a boolean", "int": "not an integer", "float": "not a number",
        "str": "not a string"}


def problem(param: Param, error: ErrorDetails, value: Any) -> str:
    """Why `value`, as given, is not valid for `param`, from pydantic's `error` about it:
    "out of bounds", "NaN", "its element 0 is out of bounds", ..."""
    if value is None:
        return "null is not allowed"
    index = next((p for p in error["loc"][1:] if isinstance(p, int)), None)
    if param.type.startswith("list"):
        if index is None:
            return "not a list"
        item = list(value)[index]
        if param.type == "list[attack]":
            return f"{item!r} is not a registered attack"
        return f"its element {item!r} is " + (
            "out of bounds" if error["type"] in _BOUNDS else "not an integer")
    if error["type"] in _BOUNDS:
        return "out of bounds"
    if error["type"] in ("nan", "finite_number"):
        return "NaN" if value != value else "infinite"
    if error["type"] == "literal_error" and isinstance(value, str):
        return "not one of the choices"
    return _NOT[param.type]


def refusal(attack: str, params: Sequence[Param], exc: ValidationError,
            given: Mapping[Any, Any]) -> str:
    """pydantic's error about the first refused key of `given` (in its order) for `attack`,
    in words: an unknown name with the closest declared one and all of them; a refused value
    with what a valid one is, and what the parameter does."""
    order = list(given)

    def place(error: ErrorDetails) -> int:
        key = error["loc"][0] if error["loc"] else None
        return order.index(key) if key in order else len(order)

    error = min(exc.errors(include_url=False), key=place)
    key = error["loc"][0]
    declared = {p.name: p for p in params}
    param = declared.get(key) if isinstance(key, str) else None
    if param is None or error["type"] in ("extra_forbidden", "invalid_key"):
        listing = (f"its parameters are {', '.join(declared)} (`miaudit attacks {attack}` "
                   "describes them)" if declared else "it takes no parameters")
        close = difflib.get_close_matches(str(key), list(declared), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else "."
        return (f"attack '{attack}' has no parameter '{key}'{hint} "
                f"{listing[0].upper()}{listing[1:]}.")
    value = given[key]
    text = (" (YAML reads 1e-5 as text: write 1.0e-5)"
            if isinstance(value, str) and param.type in ("int", "float")
            else f" ({problem(param, error, value)})" if param.type.startswith("list") else "")
    return (f"attack '{attack}': parameter '{key}' must be {param.requirement()}; "
            f"got {value!r}{text}. {key}: {param.meaning} (default {show(param.default)}).")


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
