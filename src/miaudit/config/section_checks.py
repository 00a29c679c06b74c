"""The run config's checks of a section by another module's rule (forgetting by the recipe's),
called by :func:`miaudit.config.run.check_run` with the built config."""

from __future__ import annotations

import numbers
from typing import Any

from miaudit.errors import ConfigError


def whole(value: Any) -> bool:
    """An integer (numpy's too, as the Python API may give), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_forgetting(cfg: Any) -> None:
    """``forgetting``: a count of copies >= 0 (its section's own rule), and the copies'
    training, epochs (always given) and, when set, lr and batch_size, by the recipe's rule
    (miaudit.train.recipe's check_trainable)."""
    from miaudit.train.recipe import check_trainable

    forgetting = cfg.forgetting
    if not whole(forgetting.models) or forgetting.models < 0:
        raise ConfigError(f"forgetting.models must be an integer >= 0 (0: off); got "
                          f"{forgetting.models!r}.")
    fields = {"lr": forgetting.lr, "batch_size": forgetting.batch_size}  # None: the target's
    check_trainable({"epochs": forgetting.epochs,
                     **{k: v for k, v in fields.items() if v is not None}}, "forgetting")
