"""The base of every configuration section (:class:`Spec`, a pydantic model) and the value
rules its fields are held to (:func:`typed`).

A Spec validates on construction, from YAML, from the command line and from Python alike,
and on assignment (``cfg.x = y``). Whatever is wrong is a :class:`~miaudit.errors.ConfigError`
naming the dotted key, never pydantic's ``ValidationError``: an unknown key with the closest
valid one and all of them (as the configs always said it), a value of the wrong type or out
of range with what a valid value is (:attr:`FieldInfo.description` says what it means; the
field's ``must`` text says what it must be). A check of ours raises its own ConfigError,
which passes through pydantic untouched.

What every value is held to, as YAML gives values (:func:`typed`): a bool is not a number, an
int is a float (and stays an int, so the saved YAML is as given), a number is finite, a string
is not empty, a list holds values of its element type; a numpy scalar (the Python API may give
one) becomes the Python number or bool, which the saved YAML can hold.
"""

from __future__ import annotations

import copy
import difflib
import math
import numbers
import types
import typing
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, WrapValidator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from typing_extensions import Self

from miaudit.errors import ConfigError

# The prefix of the tags of our discriminated unions: pydantic puts the tag into an error's
# location, which messages leave out (the user wrote no such key).
TAG = "<"


def members(annotation: Any) -> tuple[Any, ...]:
    """The members of a union annotation (``X | None``), or the annotation alone."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))  # numpy's too


def fits(value: Any, t: Any) -> bool:
    """Whether ``value`` is a valid value of the one type ``t`` (the rules above)."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if t is Any:
        return True
    if t is type(None):
        return value is None
    if origin is Literal:
        return isinstance(value, str) and value in args
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
                and all(fits(v, args[0] if args else Any) for v in value))
    if origin is dict or t is dict:
        return isinstance(value, Mapping)
    return True  # a type no config uses yet: its own check decides


_WORDS = {bool: "true or false", int: "an integer", float: "a finite number",
          str: "a non-empty string", type(None): "null (left out: the default)"}


def _words(t: Any) -> str:
    origin, args = typing.get_origin(t), typing.get_args(t)
    if t in _WORDS:
        return _WORDS[t]
    if origin is Literal:
        return f"one of {', '.join(map(str, args))}"
    if origin in (list, tuple):
        inner = _words(args[0]) if args and args[0] is not Any else "values"
        return f"a list of {inner.removeprefix('a ').removeprefix('an ')}" + (
            "s" if args and args[0] in (int, float, str) else "")
    if origin is dict or t is dict:
        return "a mapping"
    return getattr(t, "__name__", str(t))


def describe(annotation: Any) -> str:
    """What a valid value of ``annotation`` is, in words: "an integer or null"."""
    return " or ".join(_words(t) for t in members(annotation))


def _plain(value: Any, t: Any) -> Any:
    """A numpy scalar as the Python number or bool of type ``t``; anything else as it is."""
    if t in (bool, int, float) and type(value) not in (bool, int, float):
        return t(value)
    return value


# pydantic's errors of a constraint (a bound, a choice): the value has the right type
_CONSTRAINTS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal",
                "literal_error", "too_short", "too_long"}


def typed(annotation: Any) -> Any:
    """``annotation`` held to the rules above (the field's bounds and choices, given as
    ``Field(ge=..)`` or a ``Literal``, checked after them): ``Annotated[annotation, ...]``."""
    kinds = members(annotation)

    def check(value: Any, handler: Any) -> Any:
        fitting = [t for t in kinds if fits(value, t)]
        if not fitting:
            raise PydanticCustomError("config_type", "must be {what}", {"what": describe(
                annotation)})
        whole = int in fitting and isinstance(value, numbers.Integral)  # float | int: an int
        plain = _plain(value, int if whole else fitting[0])
        try:
            handler(plain)  # the bounds (ge, lt, ...) and choices of the field
        except ValidationError as exc:
            if any(e["type"] in _CONSTRAINTS for e in exc.errors()):
                raise
        return plain

    return Annotated[annotation, WrapValidator(check)]


# ``Typed[X]`` in an annotation: :func:`typed` (X) to pydantic, plain X to the type checker
_V = TypeVar("_V")
if TYPE_CHECKING:
    _T = TypeVar("_T")
    Typed = Annotated[_T, "checked"]
else:
    class _Typed:
        def __getitem__(self, annotation: Any) -> Any:
            return typed(annotation)

    Typed = _Typed()


def bounds(info: FieldInfo) -> str:
    """A field's bounds in words (" >= 0", " in (0, 1)"), from its ``Field(ge=..)``."""
    low = high = None
    for m in info.metadata:  # annotated_types' Ge, Gt, Le, Lt (pydantic's)
        for name, side, bracket in (("ge", "low", "["), ("gt", "low", "("),
                                    ("le", "high", "]"), ("lt", "high", ")")):
            if type(m).__name__.lower() == name:
                bound = (bracket, getattr(m, name))
                low, high = (bound, high) if side == "low" else (low, bound)
    if low and high:
        return f" in {low[0]}{low[1]}, {high[1]}{high[0]}"
    if low:
        return f" {'>=' if low[0] == '[' else '>'} {low[1]}"
    if high:
        return f" {'<=' if high[0] == ']' else '<'} {high[1]}"
    return ""


def must(info: FieldInfo) -> str:
    """What a field's value must be, for messages and the reference docs: the field's own
    words (``json_schema_extra={"must": ...}``), else its type and bounds in words, with its
    ``why`` (what the value means) in brackets."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if extra.get("must"):
        return str(extra["must"])
    why = f" ({extra['why']})" if extra.get("why") else ""
    kinds = [t for t in members(info.annotation) if t is not type(None)]
    nullable = len(kinds) < len(members(info.annotation))
    if bounds(info) and nullable:  # the bounds are the number's: "an integer >= 2 or null"
        return f"be {' or '.join(map(_words, kinds))}{bounds(info)}{why} or null"
    return f"be {describe(info.annotation)}{bounds(info)}{why}"


# While a Spec is built: the document's name and the root's place for messages (None: the
# root class's own), and whether a Spec is being built already (a nested section).
_BUILDING: ContextVar[tuple[str | None, str | None, bool]] = ContextVar(
    "spec_building", default=(None, None, False))


class Spec(BaseModel):
    """A configuration section: validated on construction and assignment; every error a
    ConfigError naming the dotted key (:func:`config_error`)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True,
                              arbitrary_types_allowed=True, revalidate_instances="never",
                              protected_namespaces=())

    # The section's dotted place in its config (messages of a section built alone)
    key: ClassVar[str] = ""
    # The document, in messages ("the config", "the audit config")
    what: ClassVar[str] = "the config"
    # Keys renamed in this release, old dotted key -> new (the root's): a misspelt old key
    # is pointed at the new one
    renamed: ClassVar[Mapping[str, str]] = {}

    def __init__(self, /, **data: Any) -> None:
        # pydantic builds a nested section with its class's __init__ too: its errors go up,
        # as pydantic's, to the outermost Spec, which names the whole dotted key
        naming = _BUILDING.get()
        token = _BUILDING.set((None, None, True))
        try:
            super().__init__(**data)
        except ValidationError as exc:
            if naming[2]:
                raise
            raise config_error(exc, type(self), naming[0], naming[1]) from None
        finally:
            _BUILDING.reset(token)

    def __setattr__(self, name: str, value: Any) -> None:
        before = self.__dict__.copy()
        try:
            super().__setattr__(name, value)
        except (ValidationError, ConfigError) as exc:
            # pydantic keeps a value its model validators then refuse: put the valid one back
            object.__setattr__(self, "__dict__", before)
            if isinstance(exc, ConfigError):  # a check of ours, raised as it is
                raise
            raise config_error(exc, type(self)) from None

    @classmethod
    def build(cls, data: Any, what: str | None = None, where: str | None = None) -> Self:
        """The validated section of a mapping (a YAML document's, the flags'); ``what`` and
        ``where`` name the document and the section's place in messages."""
        token = _BUILDING.set((what, where, False))
        try:
            return cls.model_validate(data)  # (through __init__, which names the document)
        except ValidationError as exc:  # (a mapping not given: no __init__)
            raise config_error(exc, cls, what, where) from None
        finally:
            _BUILDING.reset(token)

    @classmethod
    def renaming(cls, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` with the old spellings of renamed keys moved to their new ones (a root
        config's: :data:`miaudit.config.run.RUN_RENAMED`); as given here."""
        return data

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        """An unknown key: the closest valid one and all of them (:func:`config_error`)."""
        if isinstance(data, dict):
            data = cls.renaming(data)
            valid = list(cls.model_fields)
            for key in data:
                if key not in valid:
                    raise PydanticCustomError("unknown_key", "unknown key {key}",
                                              {"key": str(key), "valid": valid})
        return data

    def to_dict(self) -> dict[str, Any]:
        """The section as plain values, nested sections as mappings, in field order (as
        ``dataclasses.asdict`` gave it: lists, mappings and other values copied)."""
        return {name: _plain_copy(getattr(self, name)) for name in type(self).model_fields}

    def replace(self, **changes: Any) -> Self:
        """A validated copy with ``changes`` (``dataclasses.replace`` of a dataclass)."""
        return type(self)(**{**{n: getattr(self, n) for n in type(self).model_fields},
                             **changes})


def _plain_copy(value: Any) -> Any:
    if isinstance(value, Spec):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain_copy(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain_copy(k), _plain_copy(v)) for k, v in value.items())
    return copy.deepcopy(value)


# --- ValidationError -> ConfigError ---------------------------------------------------------

def _field_at(cls: type[Spec], loc: tuple[Any, ...]) -> FieldInfo | None:
    """The FieldInfo at ``loc`` (tags left out) under the Spec class ``cls``."""
    info = None
    at: type[Spec] | None = cls
    for part in loc:
        if at is None or not isinstance(part, str) or part not in at.model_fields:
            return None
        info = at.model_fields[part]
        at = next((t for t in _spec_types(info.annotation)), None)
    return info


def _spec_types(annotation: Any) -> list[type[Spec]]:
    """The Spec classes an annotation names (a section, a union of variants)."""
    out = []
    for t in members(annotation):
        if typing.get_origin(t) is Annotated:
            t = typing.get_args(t)[0]
        if isinstance(t, type) and issubclass(t, Spec):
            out.append(t)
    return out


def config_error(exc: ValidationError, cls: type[Spec], what: str | None = None,
                 where: str | None = None) -> ConfigError:
    """pydantic's first error as our ConfigError, naming the dotted key (``where``: the
    place of ``cls``, default its :attr:`Spec.key`)."""
    error = exc.errors(include_url=False)[0]
    what = what or cls.what
    place = cls.key if where is None else where
    loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith(TAG)))
    key = ".".join([place] * bool(place) + [str(p) for p in loc])
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if error["type"] == "unknown_key":
        return ConfigError(_unknown(key, ctx["key"], ctx["valid"], what, cls.renamed))
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        return ConfigError(f"'{key or what}' must be a mapping; got {type(value).__name__}.")
    if error["type"] == "extra_forbidden":  # (the before-validator answers first)
        return ConfigError(_unknown(key.rpartition(".")[0], str(loc[-1]), [], what, {}))
    info = _field_at(cls, loc)
    if info is not None:
        return ConfigError(f"{key} must {must(info)}; got {value!r}.")
    return ConfigError(f"{key or what}: {error['msg']}; got {value!r}.")


def _unknown(where: str, key: str, valid: list[str], what: str,
             renamed: Mapping[str, str]) -> str:
    """An unknown key's message: the closest valid key (or the new spelling of a misspelt
    old one) and every valid key of its place."""
    old = {k.rpartition(".")[2]: new for k, new in renamed.items()
           if k.rpartition(".")[0] == where}
    close = difflib.get_close_matches(key, [*valid, *old], n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    if close and close[0] in old:
        hint = (f" Did you mean '{old[close[0]]}' (formerly "
                f"'{where + '.' if where else ''}{close[0]}')?")
    return (f"unknown key '{where + '.' if where else ''}{key}' in {what}.{hint} "
            f"Valid keys{' of ' + where if where else ''}: {', '.join(valid)}.")


def real(value: Any, name: str) -> float:
    """``value`` as a float: ConfigError naming ``name`` for anything but a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        # YAML 1.1 reads 1e-5 (no dot) as a string
        hint = " (YAML reads 1e-5 as text: write 1.0e-5)" if isinstance(value, str) else ""
        raise ConfigError(f"{name} must be a number; got {value!r}{hint}.")
    return float(value)


def check_delta(value: Any, name: str) -> float:
    """δ of an ε lower bound: a number in [0, 1)."""
    if not 0.0 <= real(value, name) < 1.0:
        raise ConfigError(f"{name} must lie in [0, 1) (the δ of the (ε, δ)-DP claim audited, "
                          f"e.g. 1e-5; 0 for pure ε-DP); got {value!r}.")
    return float(value)


def check_alpha(value: Any, name: str) -> float:
    """α of an ε lower bound (it holds with probability 1 - α): a number in (0, 1)."""
    if not 0.0 < real(value, name) < 1.0:
        raise ConfigError(f"{name} must lie in (0, 1): one minus the bounds' confidence "
                          f"(0.05 for 95 %); got {value!r}.")
    return float(value)


def required(value: _V | None, key: str) -> _V:
    """``value`` of the config key ``key``, which the checks made sure is given where it is
    read (a ConfigError naming the key if a config built in Python left it out)."""
    if value is None:
        raise ConfigError(f"{key} is not set, but this step reads it: give {key}.")
    return value


def suggest(word: str, choices: Sequence[str]) -> str:
    """" Did you mean 'x'?" for the closest of ``choices``, or nothing."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" Did you mean '{close[0]}'?" if close else ""


# The value types of the configs' fields (:func:`typed`), by annotation.
Bool = Typed[bool]
Int = Typed[int]
Float = Typed[float]
Str = Typed[str]
OptInt = Typed[int | None]
OptFloat = Typed[float | None]
OptStr = Typed[str | None]
Names = Typed[list[str]]
Dict = Typed[dict[str, Any]]
