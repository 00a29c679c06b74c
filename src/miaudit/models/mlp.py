"""Tabular multi-layer perceptron (Watson et al.: one hidden layer of 2 x features units)."""

from __future__ import annotations

import math

from torch import Tensor, nn

from miaudit.errors import ConfigError
from miaudit.models.cnn import check_rate

_ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}


class MLP(nn.Module):
    """flatten -> linear(hidden) -> activation -> dropout -> linear(classes)."""

    def __init__(
        self,
        in_features: int,
        hidden: int,
        num_classes: int,
        activation: str,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        self.hidden = nn.Linear(in_features, hidden)
        self.act = _ACTIVATIONS[activation]()
        # Identity at 0: the network (and its forward pass) is exactly the dropout-free MLP.
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.drop(self.act(self.hidden(self.flatten(x)))))


# architecture 'mlp': declared in miaudit.models.architectures
def mlp(
    input_shape: tuple[int, ...],
    num_classes: int,
    hidden: int | None = None,
    activation: str = "relu",
    dropout: float = 0.0,
) -> nn.Module:
    """One hidden layer; ``hidden`` defaults to twice the number of input features.

    ``dropout`` is the drop rate applied to the hidden activations while training (0: none).
    """
    in_features = math.prod(input_shape)
    if activation not in _ACTIVATIONS:
        raise ConfigError(
            f"mlp activation {activation!r} is unknown; use one of {', '.join(_ACTIVATIONS)}."
        )
    width = 2 * in_features if hidden is None else int(hidden)
    if width < 1:
        raise ConfigError(f"mlp hidden must be a positive number of units, got {hidden!r}.")
    return MLP(in_features, width, num_classes, activation, check_rate("dropout", dropout))
