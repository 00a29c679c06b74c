"""One registry type for every registry of names in miaudit (attacks, datasets,
architectures, designs, studies, defences, canary kinds).

A :class:`Registry` maps names to entries in registration order. ``register`` (or the
``decorator`` form) refuses a name taken by another entry; ``get`` refuses an unknown name
with the registry's own error type, the closest names (did you mean ...?) and the known ones.
It is also a mutable mapping, so tests can snapshot and patch it like a dict
(``monkeypatch.setitem``, ``dict(registry)``, ``clear``/``update``): item assignment replaces
an entry without complaint, and ``get(name, default)`` behaves as ``dict.get``.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Generic, TypeVar, overload

from miaudit.errors import MiauditError

T = TypeVar("T")
F = TypeVar("F")
D = TypeVar("D")

_MISSING: Any = object()

UNKNOWN = "unknown {kind} {name!r}.{hint} Known {plural}: {known}."


class Registry(MutableMapping[str, T], Generic[T]):
    """Names -> entries of one kind (``kind``: the word messages use, e.g. "attack").

    ``error``: the exception raised for an unknown name. ``unknown``: its message, a
    ``str.format`` template with the fields ``kind``, ``plural``, ``name``, ``hint`` (" Did
    you mean 'x'?" or "") and ``known`` (the known names, comma-separated). ``suggestions``:
    how many close names the hint offers (difflib, ``cutoff``), quoted unless ``quote`` is
    False. ``ordered``: ``names()`` in alphabetical order (True) or in registration order.
    ``listed(entry)``: whether an entry is shown in messages (default: every one).
    """

    def __init__(
        self,
        kind: str,
        error: type[Exception] = MiauditError,
        *,
        plural: str | None = None,
        unknown: str = UNKNOWN,
        suggestions: int = 1,
        cutoff: float = 0.6,
        quote: bool = True,
        ordered: bool = True,
        listed: Callable[[T], bool] | None = None,
    ) -> None:
        self.kind = kind
        self.error = error
        self.plural = plural or (kind[:-1] + "ies" if kind.endswith("y") else kind + "s")
        self.unknown = unknown
        self.suggestions = suggestions
        self.cutoff = cutoff
        self.quote = quote
        self.ordered = ordered
        self.listed = listed
        self._entries: dict[str, T] = {}

    # --- registering ---------------------------------------------------------------------

    def register(self, name: str, entry: T) -> T:
        """Add ``entry`` under ``name``; a name already holding another entry is refused
        (registering the very same object again does nothing)."""
        self._check_free(name, entry)
        self._entries[name] = entry
        return entry

    def decorator(self, name: str, make: Callable[[F], T] | None = None
                  ) -> Callable[[F], F]:  # fmt: skip
        """A decorator registering what it decorates under ``name`` (``make(obj)`` when
        given: the entry built from it, e.g. a spec around a function) and returning it
        unchanged. A taken name is refused before ``make`` runs."""

        def decorate(obj: F) -> F:
            if make is None:
                self.register(name, obj)  # type: ignore[arg-type]  # F is T here
            else:
                self._check_free(name)
                self.register(name, make(obj))
            return obj

        return decorate

    def _check_free(self, name: str, entry: Any = _MISSING) -> None:
        if name in self._entries and self._entries[name] is not entry:
            raise ValueError(f"{self.kind} {name!r} is already registered")

    # --- looking up ----------------------------------------------------------------------

    @overload
    def get(self, name: str) -> T: ...

    @overload
    def get(self, name: str, default: D) -> T | D: ...

    def get(self, name: str, default: Any = _MISSING) -> Any:
        """The entry registered under ``name``. Unknown: ``default`` when given (as
        ``dict.get``), else the registry's error, naming the closest and the known names."""
        try:
            return self._entries[name]
        except KeyError:
            if default is not _MISSING:
                return default
        raise self.unknown_error(name)

    def unknown_error(self, name: Any) -> Exception:
        """The error for the unknown ``name`` (to raise), with suggestions."""
        known = self._known()
        close = difflib.get_close_matches(str(name), known, n=self.suggestions,
                                          cutoff=self.cutoff) if self.suggestions else []
        shown = [repr(c) if self.quote else c for c in close]
        hint = f" Did you mean {', '.join(shown)}?" if shown else ""
        return self.error(self.unknown.format(kind=self.kind, plural=self.plural, name=name,
                                              hint=hint, known=", ".join(known)))

    def names(self) -> list[str]:
        """Every registered name, sorted or in registration order (``ordered``)."""
        return sorted(self._entries) if self.ordered else list(self._entries)

    def _known(self) -> list[str]:
        return [n for n in self.names()
                if self.listed is None or self.listed(self._entries[n])]

    def copy(self) -> Registry[T]:
        """A registry of the same kind holding the same entries (for a test to register into
        and throw away)."""
        clone = copy.copy(self)
        clone._entries = dict(self._entries)
        return clone

    # --- the mapping protocol (registration order) ---------------------------------------

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __setitem__(self, name: str, entry: T) -> None:
        self._entries[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self)} {self.plural})"
