"""Which torch device a run uses."""

from __future__ import annotations

import torch

from miaudit.errors import ConfigError


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device '{name}' asked for, but no CUDA device is available here.")
    return name
