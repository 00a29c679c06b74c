"""Architecture registry: a name maps to a factory ``(input_shape, num_classes, **params)``.

Add an architecture by decorating its factory with :func:`register_model`; nothing else in
the code base needs to know the list of names. The built-in architectures are declared with
:func:`declare_model` instead (:mod:`miaudit.models.architectures`): their keyword parameters
and where their factory lives, so that a recipe's ``architecture`` and ``arch_params`` are
checked without importing torch (a config check needs neither); the factory's module is
imported when a model of that architecture is first built.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from miaudit.errors import ConfigError
from miaudit.registry import Registry

if TYPE_CHECKING:
    from torch import nn

ModelFactory = Callable[..., "nn.Module"]


@dataclass(frozen=True, eq=False)
class Architecture:
    """One registered architecture: its factory, or the ``"package.module:function"`` that
    defines it (imported when first built), and its keyword parameters (``None``: read from
    the factory's signature, past ``input_shape`` and ``num_classes``)."""

    name: str
    factory: ModelFactory | str
    params: tuple[str, ...] | None = None

    def load(self) -> ModelFactory:
        """The factory (its module imported on first use)."""
        if not isinstance(self.factory, str):
            return self.factory
        module, _, function = self.factory.partition(":")
        factory: ModelFactory = getattr(importlib.import_module(module), function)
        return factory

    def keyword_params(self) -> list[str]:
        """The keyword parameters the factory accepts."""
        if self.params is not None:
            return list(self.params)
        sig = inspect.signature(self.load())
        return [
            p.name
            for p in list(sig.parameters.values())[2:]
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]


_REGISTRY: Registry[Architecture] = Registry("architecture", ConfigError)


def register_model(name: str) -> Callable[[ModelFactory], ModelFactory]:
    """Decorator: register ``factory(input_shape, num_classes, **params)`` under ``name``."""

    def decorate(factory: ModelFactory) -> ModelFactory:
        current = _REGISTRY.get(name, None)
        if current is None or current.factory is not factory:  # the same factory again: kept
            _REGISTRY.register(name, Architecture(name, factory))
        return factory

    return decorate


def declare_model(name: str, factory: str, params: Sequence[str]) -> None:
    """Register architecture ``name`` without importing its factory: ``factory`` is
    ``"package.module:function"``, ``params`` its keyword parameters in signature order (a
    test checks them against the signature)."""
    if not isinstance(factory, str) or factory.count(":") != 1:
        raise ValueError(f"architecture {name!r}: factory must be 'package.module:function', "
                         f"got {factory!r}")  # fmt: skip
    _REGISTRY.register(name, Architecture(name, factory, tuple(params)))


def list_models() -> list[str]:
    """Names of every registered architecture, sorted."""
    return _REGISTRY.names()


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def model_params(name: str) -> list[str]:
    """The keyword parameters architecture ``name`` accepts."""
    return _REGISTRY.get(name).keyword_params()


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
    return _REGISTRY.get(name).load()(shape, int(num_classes), **params)
