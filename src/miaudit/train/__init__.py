"""Training: recipes, the fast training loop, and the content-addressed model cache.

The names below are loaded on first use (PEP 562), so that importing a torch-free module of
the package (:mod:`miaudit.train.recipe`, which checking a config needs) loads no torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from miaudit.runtime.lazy import lazy_exports

if TYPE_CHECKING:
    from miaudit.train.checkpoints import CheckpointSpec, checkpoint_key
    from miaudit.train.model_cache import CacheStats, ModelCache, indices_digest, key_for
    from miaudit.train.recipe import Recipe
    from miaudit.train.trainer import (
        EpochInfo,
        TrainedModel,
        lr_at,
        predict_logits,
        train_model,
        train_models,
    )

# public name -> the module that defines it
_HOMES = {
    "CheckpointSpec": "checkpoints", "checkpoint_key": "checkpoints",
    "CacheStats": "model_cache", "ModelCache": "model_cache", "indices_digest": "model_cache",
    "key_for": "model_cache", "Recipe": "recipe", "EpochInfo": "trainer",
    "TrainedModel": "trainer", "lr_at": "trainer", "predict_logits": "trainer",
    "train_model": "trainer", "train_models": "trainer",
}


__getattr__ = lazy_exports(__name__, globals(),
                           {name: f"{__name__}.{home}" for name, home in _HOMES.items()})


__all__ = [
    "CacheStats",
    "CheckpointSpec",
    "EpochInfo",
    "ModelCache",
    "Recipe",
    "TrainedModel",
    "checkpoint_key",
    "indices_digest",
    "key_for",
    "lr_at",
    "predict_logits",
    "train_model",
    "train_models",
]
