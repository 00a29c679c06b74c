"""Model architectures, by name: ``build_model("mlp", (40,), 100, hidden=128)``.

Importing the package loads no torch: the built-in architectures are declared by name
(:mod:`miaudit.models.architectures`) and each one's module is imported when a model of it is
first built; the base-model helpers of :mod:`miaudit.models.pretrained` load on first use
(PEP 562), so that a config check (``check_model_params``) stays torch-free."""

from __future__ import annotations

from typing import TYPE_CHECKING

from miaudit.models import architectures  # noqa: F401  (declares the built-in architectures)
from miaudit.models.registry import (
    build_model,
    check_model_params,
    list_models,
    model_params,
    register_model,
)
from miaudit.runtime.lazy import lazy_exports

if TYPE_CHECKING:
    from miaudit.models.pretrained import list_base_models, load_base_model, resolve_base_model

# public name -> the module that defines it (imports torch)
_HOMES = {
    "list_base_models": "pretrained", "load_base_model": "pretrained",
    "resolve_base_model": "pretrained",
}


__getattr__ = lazy_exports(__name__, globals(),
                           {name: f"{__name__}.{home}" for name, home in _HOMES.items()})


__all__ = [
    "build_model",
    "check_model_params",
    "list_base_models",
    "list_models",
    "load_base_model",
    "model_params",
    "register_model",
    "resolve_base_model",
]
