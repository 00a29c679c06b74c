"""Every field of a config dataclass checked against its type annotation
(:func:`check_field_types`), so that a value of the wrong type is a ConfigError naming its
dotted key when the config is checked, never a TypeError when the run reads it; and a field
added later is checked without code of its own.

It runs after the configs' own checks (:mod:`miaudit.config.run`,
:mod:`miaudit.external.audit_config`), which say more (the range, what the value means): it is
the backstop for the fields they leave alone. What it holds every value to, as YAML gives
values: a bool is not a number, an int is a float, a number is finite, a string is not empty,
a list holds values of its element type. A field annotated ``Any`` is not checked.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import types
import typing
from collections.abc import Mapping
from typing import Any

import numpy as np

from miaudit.errors import ConfigError


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:  # a dataclass type (hashable)
    return typing.get_type_hints(cls)


def _members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))  # numpy's too


def _fits(value: Any, t: Any) -> bool:
    """Whether ``value`` is a valid value of the one type ``t``."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if t is Any:
        return True
    if t is type(None):
        return value is None
    if t is bool:
        return _is_bool(value)
    if t is int:  # numpy's too
        return isinstance(value, numbers.Integral) and not _is_bool(value)
    if t is float:  # any finite real number (an int too: YAML's 1 for 1.0)
        if isinstance(value, numbers.Integral):
            return not _is_bool(value)
        return isinstance(value, numbers.Real) and math.isfinite(value)
    if t is str:
        return isinstance(value, str) and value != ""
    if origin in (list, tuple):  # the Python API may give a tuple for a list
        return (isinstance(value, (list, tuple))
                and all(_fits(v, args[0] if args else Any) for v in value))
    if origin is dict or t is dict:
        return isinstance(value, Mapping)
    if dataclasses.is_dataclass(t):
        return isinstance(value, typing.cast(type, t))
    return True  # a type no config uses yet: its own check decides


_WORDS = {bool: "true or false", int: "an integer", float: "a finite number",
          str: "a non-empty string", type(None): "null (left out: the default)"}


def _words(t: Any) -> str:
    origin, args = typing.get_origin(t), typing.get_args(t)
    if t in _WORDS:
        return _WORDS[t]
    if origin in (list, tuple):
        inner = _words(args[0]) if args and args[0] is not Any else "values"
        return f"a list of {inner.removeprefix('a ').removeprefix('an ')}" + (
            "s" if args and args[0] in (int, float, str) else "")
    if origin is dict or t is dict:
        return "a mapping"
    return getattr(t, "__name__", str(t))


def describe(annotation: Any) -> str:
    """What a valid value of ``annotation`` is, in words: "a finite integer or null"."""
    return " or ".join(_words(t) for t in _members(annotation))


def _plain(value: Any, t: Any) -> Any:
    """A numpy scalar (the Python API may give one) as the Python number or bool of type
    ``t``, which the saved config's YAML can hold; anything else as it is."""
    if t in (bool, int, float) and type(value) not in (bool, int, float):
        return t(value)
    return value


def check_field_types(obj: Any, where: str = "") -> None:
    """ConfigError naming ``{where}{field}`` and what it must be, for the first field of the
    config dataclass ``obj`` (nested sections walked) whose value its annotation does not
    admit. A numpy scalar that fits becomes a Python one (config.yaml is written with
    yaml.safe_dump, which refuses numpy's)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        annotation = _hints(obj.__class__)[f.name]
        key = f"{where}{f.name}"
        if dataclasses.is_dataclass(annotation) and dataclasses.is_dataclass(value):
            check_field_types(value, f"{key}.")
            continue
        fitting = [t for t in _members(annotation) if _fits(value, t)]
        if not fitting:
            raise ConfigError(f"{key} must be {describe(annotation)}; got {value!r}.")
        whole = int in fitting and isinstance(value, numbers.Integral)  # float | int: an int
        plain = _plain(value, int if whole else fitting[0])
        if plain is not value:
            setattr(obj, f.name, plain)
