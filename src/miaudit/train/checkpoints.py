"""Checkpoints: models kept at chosen epochs or optimizer steps of one training run.

"Generalization and Membership Inference Attack: a Practical Perspective" (§IV-A2) attacks a
model at several points of its training to show how leakage grows as it fits its members. A
checkpoint belongs to its run: epoch 5 of a 30-epoch cosine run has seen learning rates a
5-epoch run never sees, so it is cached under the run's own key plus its position
(:func:`checkpoint_key`), never under the key of a shorter recipe. One training pass yields the
final model and every checkpoint; nothing trains twice.

Positions are counted in optimizer steps: epoch ``e`` is step ``e * steps_per_epoch`` (the last
step of that epoch), so ``epochs: [5]`` and the equivalent ``steps:`` entry share one entry.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from miaudit.errors import ConfigError
from miaudit.train.recipe import Recipe


def _positive_ints(values: Any, name: str) -> tuple[int, ...]:
    if values is None:
        return ()
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ConfigError(
            f"checkpoints.{name} must be a list of positive integers, got {values!r}."
        )
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or int(v) < 1:
            raise ConfigError(
                f"checkpoints.{name} must hold positive integers, got {v!r} in {list(values)!r}."
            )
        out.append(int(v))
    return tuple(sorted(set(out)))


@dataclass(frozen=True)
class CheckpointSpec:
    """Which checkpoints to keep: after these epochs and/or these optimizer steps (1-based)."""

    epochs: tuple[int, ...] = ()
    steps: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "epochs", _positive_ints(self.epochs, "epochs"))
        object.__setattr__(self, "steps", _positive_ints(self.steps, "steps"))

    def __bool__(self) -> bool:
        return bool(self.epochs or self.steps)

    def to_dict(self) -> dict[str, list[int]]:
        return {"epochs": list(self.epochs), "steps": list(self.steps)}

    def positions(self, recipe: Recipe, n_train: int) -> dict[str, int]:
        """``{label: step}`` for a run of ``recipe`` on ``n_train`` rows, in training order;
        labels are ``epoch<E>`` and ``step<S>``. ConfigError if a position lies past the end."""
        per_epoch = steps_per_epoch(recipe, n_train)
        total = per_epoch * recipe.epochs
        for e in self.epochs:
            if e > recipe.epochs:
                raise ConfigError(
                    f"checkpoint epoch {e} is past the end of training (epochs={recipe.epochs}); "
                    "list epochs between 1 and the recipe's epochs."
                )
        for s in self.steps:
            if s > total:
                raise ConfigError(
                    f"checkpoint step {s} is past the end of training ({total} steps: "
                    f"{recipe.epochs} epochs of {per_epoch}); list steps between 1 and {total}."
                )
        found = {f"epoch{e}": e * per_epoch for e in self.epochs}
        found.update({f"step{s}": s for s in self.steps})
        return dict(sorted(found.items(), key=lambda kv: (kv[1], kv[0])))

    def keep_steps(self, recipe: Recipe, n_train: int) -> set[int]:
        """The optimizer steps after which a training run must snapshot its weights."""
        return set(self.positions(recipe, n_train).values())


def steps_per_epoch(recipe: Recipe, n_train: int) -> int:
    """Optimizer steps in one epoch over ``n_train`` rows (the last batch may be short; DP-SGD's
    Poisson sampling takes as many steps, at rate ``1 / steps_per_epoch``)."""
    return math.ceil(int(n_train) / recipe.batch_size)


def total_steps(recipe: Recipe, n_train: int) -> int:
    return steps_per_epoch(recipe, n_train) * recipe.epochs


def checkpoint_key(run_key: str, step: int) -> str:
    """Cache key of the checkpoint after optimizer step ``step`` of the run cached under
    ``run_key`` (the final model keeps ``run_key`` itself)."""
    return hashlib.sha256(f"checkpoint|{run_key}|step={int(step)}".encode()).hexdigest()
