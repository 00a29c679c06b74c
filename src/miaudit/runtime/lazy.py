"""Names a package re-exports but loads on first use (PEP 562), so importing the package stays
cheap (no torch for a config check, no pipeline for ``import miaudit``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, namespace: dict[str, Any],
                 homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package`` for the names of ``homes`` (name -> the module
    it is defined in): imported on first access and kept in ``namespace`` (the package's
    globals), so later lookups skip this function; any other name is an AttributeError."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value  # once
        return value

    return __getattr__
