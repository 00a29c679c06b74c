"""Tabular multi-layer perceptron (Watson et al.: one hidden layer of 2 x features units)."""

from __future__ import annotations

import math

from torch import Tensor, nn

from miaudit.errors import ConfigError
from miaudit.models.registry import register_model

_ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}


class MLP(nn.Module):
    """flatten -> linear(hidden) -> activation -> linear(classes)."""

    def __init__(self, in_features: int, hidden: int, num_classes: int, activation: str) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        self.hidden = nn.Linear(in_features, hidden)
        self.act = _ACTIVATIONS[activation]()
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.act(self.hidden(self.flatten(x))))


@register_model("mlp")
def mlp(
    input_shape: tuple[int, ...],
    num_classes: int,
    hidden: int | None = None,
    activation: str = "relu",
) -> nn.Module:
    """One hidden layer; ``hidden`` defaults to twice the number of input features."""
    in_features = math.prod(input_shape)
    if activation not in _ACTIVATIONS:
        raise ConfigError(
            f"mlp activation {activation!r} is unknown; use one of {', '.join(_ACTIVATIONS)}."
        )
    width = 2 * in_features if hidden is None else int(hidden)
    if width < 1:
        raise ConfigError(f"mlp hidden must be a positive number of units, got {hidden!r}.")
    return MLP(in_features, width, num_classes, activation)
