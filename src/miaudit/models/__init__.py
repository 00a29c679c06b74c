"""Model architectures, by name: ``build_model("mlp", (40,), 100, hidden=128)``."""

from miaudit.models import cnn, hf, mlp, resnet, text, user  # noqa: F401  (modules register their factories)
from miaudit.models.registry import (
    build_model,
    check_model_params,
    list_models,
    model_params,
    register_model,
)

__all__ = ["build_model", "check_model_params", "list_models", "model_params", "register_model"]
