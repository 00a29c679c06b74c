"""Model architectures, by name: ``build_model("mlp", (40,), 100, hidden=128)``."""

from miaudit.models import (  # noqa: F401  (modules register their factories)
    airbench,
    cnn,
    hf,
    hf_lm,
    mlp,
    pretrained,
    resnet,
    text,
    user,
)
from miaudit.models.pretrained import list_base_models, load_base_model, resolve_base_model
from miaudit.models.registry import (
    build_model,
    check_model_params,
    list_models,
    model_params,
    register_model,
)

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
