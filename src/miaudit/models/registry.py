"""Architecture registry: a name maps to a factory ``(input_shape, num_classes, **params)``.

Add an architecture by decorating its factory with :func:`register_model`; nothing else in
the code base needs to know the list of names.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from miaudit.errors import ConfigError
from miaudit.registry import Registry

ModelFactory = Callable[..., nn.Module]

_REGISTRY: Registry[ModelFactory] = Registry("architecture", ConfigError)


def register_model(name: str) -> Callable[[ModelFactory], ModelFactory]:
    """Decorator: register ``factory(input_shape, num_classes, **params)`` under ``name``."""
    return _REGISTRY.decorator(name)


def list_models() -> list[str]:
    """Names of every registered architecture, sorted."""
    return _REGISTRY.names()


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def _factory(name: str) -> ModelFactory:
    return _REGISTRY.get(name)


def model_params(name: str) -> list[str]:
    """The keyword parameters architecture ``name`` accepts."""
    sig = inspect.signature(_factory(name))
    return [
        p.name
        for p in list(sig.parameters.values())[2:]
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]


def check_model_params(name: str, params: Mapping[str, Any]) -> None:
    """Raise ConfigError if ``name`` is unknown or ``params`` holds a key it does not take."""
    valid = model_params(name)
    for key in params:
        if key not in valid:
            raise ConfigError(
                f"architecture {name!r} has no parameter {key!r}.{_suggest(str(key), valid)} "
                f"Valid parameters: {', '.join(valid) or '(none)'}."
            )


def build_model(
    name: str, input_shape: tuple[int, ...], num_classes: int, **params: Any
) -> nn.Module:
    """Build architecture ``name`` for inputs of shape ``input_shape`` (one sample, no batch).

    Weights are initialised from torch's global RNG; seed it (or fork it) for reproducibility.
    """
    check_model_params(name, params)
    shape = tuple(int(d) for d in input_shape)
    if not shape or any(d < 1 for d in shape):
        raise ConfigError(f"input_shape {input_shape!r} is invalid: give one sample's shape.")
    if int(num_classes) < 1:
        raise ConfigError(f"num_classes must be at least 1, got {num_classes}.")
    return _factory(name)(shape, int(num_classes), **params)
