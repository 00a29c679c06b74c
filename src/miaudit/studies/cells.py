"""A study's unit of work: the :class:`Cell` (study name + JSON-able parameters, keyed by a hash
of its content), what a study's work function is (:data:`Work`), and :class:`StudyError`.

The sweep (``sweep``) and the executors that run cells (``executors``) both build on this.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from miaudit.errors import ConfigError, MiauditError
from miaudit.train.recipe import _freeze, _thaw

Work = Callable[["Cell"], list[dict[str, Any]]]


class StudyError(MiauditError):
    """A study or sweep is misconfigured, or some of its cells failed."""


def canonical(value: Any, where: str) -> Any:
    """Plain JSON-ready copy of ``value`` (the recipe's freezing rules: numbers, strings,
    booleans, None, lists and string-keyed mappings; no NaN), or StudyError."""
    try:
        return _thaw(_freeze(value, where))
    except ConfigError as exc:
        raise StudyError(str(exc)) from exc


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, init=False)
class Cell:
    """One unit of a study's sweep: the study's name and JSON-able parameters."""

    study: str
    _params: str  # canonical JSON: makes the cell hashable, picklable and immutable

    def __init__(self, study: str, params: Mapping[str, Any]) -> None:
        if not isinstance(study, str) or not study:
            raise StudyError(f"a cell's study must be a non-empty name, got {study!r}.")
        if not isinstance(params, Mapping):
            raise StudyError(f"a cell's params must be a mapping, got {type(params).__name__}.")
        object.__setattr__(self, "study", study)
        object.__setattr__(self, "_params", _dumps(canonical(params, "params")))

    @property
    def params(self) -> dict[str, Any]:
        """A fresh (mutable) copy of the parameters."""
        result: dict[str, Any] = json.loads(self._params)
        return result

    def key(self) -> str:
        """sha256 of the canonical JSON of study and parameters."""
        text = _dumps({"study": self.study, "params": json.loads(self._params)})
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def __repr__(self) -> str:
        return f"Cell({self.study!r}, {self._params})"
