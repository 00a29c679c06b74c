"""Your own architecture, by import path: the ``import`` model kind.

``build_model("import", (1, 28, 28), 10, path="mypkg.nets:SmallCNN", kwargs={"width": 32})``
imports ``SmallCNN`` from ``mypkg.nets`` (or from a file: ``"models/nets.py:SmallCNN"``) and
calls it with ``kwargs``; the object may be an ``nn.Module`` class or any factory returning
one. The trainer builds reference models this way, so they share the audited model's code.

The module is checked on a dummy batch of the dataset's shape: it must accept it and return
one logit per class. ``source_sha256`` (set by ``miaudit audit``) pins the source file that
defines the object, so a cached reference model is never reused after that code changed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from miaudit.errors import ConfigError


def _plain(value: Any) -> Any:
    """Frozen recipe values (read-only mappings, tuples) back to dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _import_file(path: Path) -> Any:
    """Import a .py file as a module named after its absolute path (imported once)."""
    path = path.resolve()
    name = "miaudit_user_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot import {path} as a Python module.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ConfigError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    return module


def resolve_object(spec: str) -> Any:
    """The object named by ``"package.module:Name"`` or ``"path/to/file.py:Name"``.

    ``Name`` may be dotted (``Outer.Inner``). Modules are found on ``sys.path`` plus the current
    directory. Importing runs the module's top-level code, as any import does: name only code
    you trust (a config naming code is as trusted as that code). Callers check every other
    input first (``miaudit audit``: :mod:`miaudit.external.run`), so a bad input is refused
    before the module runs; see docs/security.md.
    """
    if not isinstance(spec, str) or spec.count(":") != 1 or spec.endswith(":"):
        raise ConfigError(
            f"import path {spec!r} must look like 'package.module:Name' or "
            "'path/to/file.py:Name' (module, a colon, then the class or factory name)."
        )
    where, name = spec.split(":")
    if where.endswith(".py"):
        file = Path(where).expanduser()
        if not file.is_file():
            raise ConfigError(f"import path {spec!r}: no such file {file}.")
        module = _import_file(file)
    else:
        if os.getcwd() not in sys.path:  # like `python -m`: packages in the current directory
            sys.path.insert(1, os.getcwd())
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ConfigError(
                f"cannot import module {where!r} ({exc}); put it on PYTHONPATH, install it, "
                "or name its file instead: 'path/to/file.py:Name'."
            ) from exc
        except Exception as exc:
            raise ConfigError(
                f"importing {where!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
    obj: Any = module
    for part in name.split("."):
        if not hasattr(obj, part):
            found = sorted(k for k in vars(module) if not k.startswith("_"))[:20]
            raise ConfigError(
                f"{where!r} has no attribute {name!r}; it defines: {', '.join(found)}."
            )
        obj = getattr(obj, part)
    return obj


def source_digest(spec: str) -> str | None:
    """sha256 of the source file defining the object ``spec`` names (None if it has none)."""
    obj = resolve_object(spec)
    try:
        file = inspect.getsourcefile(obj)
        if not file:
            module = inspect.getmodule(obj)
            file = inspect.getsourcefile(module) if module is not None else None
    except TypeError:
        return None
    if not file or not Path(file).is_file():
        return None
    return hashlib.sha256(Path(file).read_bytes()).hexdigest()


def check_output_width(
    module: nn.Module, input_shape: tuple[int, ...], num_classes: int, name: str
) -> None:
    """Raise ConfigError unless ``module`` maps a batch of ``input_shape`` to
    ``[batch, num_classes]`` logits. Runs in eval mode without gradients, so no batch-norm
    statistic or random state changes; the module's train/eval mode is restored."""
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            first = next(iter(module.parameters()), None)
            x = torch.zeros((2, *input_shape), device=first.device if first is not None else "cpu")
            out = module(x)
    except Exception as exc:
        raise ConfigError(
            f"model {name} fails on a batch of inputs of shape {tuple(input_shape)} (one "
            f"sample of the audit data): {type(exc).__name__}: {exc}. Check that the data has "
            "the layout the model was trained on."
        ) from exc
    finally:
        module.train(was_training)
    if not isinstance(out, torch.Tensor):
        raise ConfigError(
            f"model {name} returns {type(out).__name__}, not a tensor of logits; wrap it so "
            "forward() returns a [batch, classes] tensor."
        )
    if out.ndim != 2 or out.shape[1] != num_classes:
        raise ConfigError(
            f"model {name} outputs shape {tuple(out.shape)} for a batch of 2 samples, but the "
            f"labels have {num_classes} classes: its output must be [batch, {num_classes}] "
            "(one logit per class). Check the model's last layer or the label column."
        )


# architecture 'import': declared in miaudit.models.architectures
def import_model(
    input_shape: tuple[int, ...],
    num_classes: int,
    path: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    source_sha256: str | None = None,
) -> nn.Module:
    """``path`` (``"pkg.mod:Name"`` or ``"file.py:Name"``) called with ``kwargs``."""
    if path is None:
        raise ConfigError("architecture 'import' needs arch_params.path = 'package.module:Name'.")
    factory = resolve_object(path)
    if not callable(factory):
        raise ConfigError(f"{path} is a {type(factory).__name__}, not a class or factory.")
    if source_sha256 is not None and source_digest(path) != source_sha256:
        raise ConfigError(
            f"the source file of {path} changed since this recipe was made (sha256 differs); "
            "rerun the audit so the recipe (and the cached models) match the current code."
        )
    try:
        module = factory(**_plain(kwargs or {}))
    except TypeError as exc:
        raise ConfigError(f"{path}(**{_plain(kwargs or {})!r}) failed: {exc}") from exc
    if not isinstance(module, nn.Module):
        raise ConfigError(f"{path} returned {type(module).__name__}, not a torch nn.Module.")
    check_output_width(module, input_shape, num_classes, path)
    return module
