"""Training: recipes, the fast training loop, and the content-addressed model cache."""

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
