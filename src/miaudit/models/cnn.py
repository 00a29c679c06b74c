"""Small image CNNs: the MNIST net of Leino & Fredrikson and the 4-layer CIFAR net of Watson."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from miaudit.errors import ConfigError


def image_shape(input_shape: tuple[int, ...], arch: str) -> tuple[int, int, int]:
    """Channels-first ``(C, H, W)`` from ``(H, W)`` or ``(C, H, W)``; a clear error otherwise."""
    if len(input_shape) == 2:
        return (1, *input_shape)
    if len(input_shape) == 3:
        c, h, w = input_shape
        if c not in (1, 3, 4) and w in (1, 3, 4):
            raise ConfigError(
                f"{arch} expects channels-first images (C, H, W), got {input_shape} which looks "
                f"channels-last; transpose the features to (N, {w}, {c}, {h})."
            )
        return (c, h, w)
    raise ConfigError(
        f"{arch} needs image inputs of shape (H, W) or (C, H, W), got {input_shape}; "
        "use the 'mlp' architecture for tabular data."
    )


class _Unsqueeze(nn.Module):
    """Add the channel axis to (N, H, W) batches so 2-D image features work unchanged."""

    def forward(self, x: Tensor) -> Tensor:
        return x.unsqueeze(1) if x.dim() == 3 else x


def _conv_out(size: int, kernel: int, padding: int) -> int:
    return size + 2 * padding - kernel + 1


class MnistCNN(nn.Module):
    """conv20(k5) relu maxpool dropout conv50(k5) relu maxpool dropout fc500 relu dropout fc."""

    def __init__(
        self,
        shape: tuple[int, int, int],
        num_classes: int,
        padding: int,
        conv_dropout: float,
        fc_dropout: float,
    ) -> None:
        super().__init__()
        c, h, w = shape
        for _ in range(2):
            h, w = _conv_out(h, 5, padding) // 2, _conv_out(w, 5, padding) // 2
        if h < 1 or w < 1:
            raise ConfigError(
                f"mnist-cnn with padding={padding} cannot take {shape[1]}x{shape[2]} images; "
                "use padding=2 (or leave padding unset)."
            )
        self.features = nn.Sequential(
            _Unsqueeze(),
            nn.Conv2d(c, 20, 5, padding=padding),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(conv_dropout),
            nn.Conv2d(20, 50, 5, padding=padding),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(conv_dropout),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(
            nn.Linear(50 * h * w, 500),
            nn.ReLU(),
            nn.Dropout(fc_dropout),
            nn.Linear(500, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))


def check_rate(name: str, value: float) -> float:
    """A dropout rate as a float in [0, 1); ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number in [0, 1), got {value!r}.")
    value = float(value)
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"{name} must be in [0, 1), got {value}.")
    return value


# architecture 'mnist-cnn': declared in miaudit.models.architectures
def mnist_cnn(
    input_shape: tuple[int, ...],
    num_classes: int,
    padding: int | None = None,
    conv_dropout: float = 0.25,
    fc_dropout: float = 0.5,
) -> nn.Module:
    """Leino & Fredrikson's MNIST CNN.

    ``padding=None`` keeps the original unpadded convolutions when the image is large enough
    (28x28 -> 4x4x50 features) and switches to padding 2 for small images (8x8 digits).
    """
    shape = image_shape(input_shape, "mnist-cnn")
    if padding is None:
        padding = 0 if min(shape[1:]) >= 16 else 2
    return MnistCNN(
        shape,
        num_classes,
        int(padding),
        check_rate("conv_dropout", conv_dropout),
        check_rate("fc_dropout", fc_dropout),
    )


class CifarCNN(nn.Module):
    """Conv(k3, same padding) -> ReLU -> AvgPool(2) blocks, then (dropout and) one linear
    layer."""

    def __init__(
        self,
        shape: tuple[int, int, int],
        num_classes: int,
        channels: Sequence[int],
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        c, h, w = shape
        layers: list[nn.Module] = [_Unsqueeze()]
        for out in channels:
            layers += [nn.Conv2d(c, out, 3, padding=1), nn.ReLU()]
            if h >= 2 and w >= 2:  # guard small inputs: never pool a 1-pixel map away
                layers.append(nn.AvgPool2d(2))
                h, w = h // 2, w // 2
            c = out
        layers.append(nn.Flatten())
        self.features = nn.Sequential(*layers)
        # Identity at 0: exactly the dropout-free network.
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.head = nn.Linear(c * h * w, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.drop(self.features(x)))


# architecture 'cifar-cnn': declared in miaudit.models.architectures
def cifar_cnn(
    input_shape: tuple[int, ...],
    num_classes: int,
    channels: Sequence[int] = (32, 64, 64, 128),
    dropout: float = 0.0,
) -> nn.Module:
    """Watson et al.'s CIFAR CNN: 4 conv layers (32/64/64/128), ReLU and 2x2 average pooling;
    ``dropout`` (default 0: none) drops features before the linear head while training."""
    shape = image_shape(input_shape, "cifar-cnn")
    widths = [int(ch) for ch in channels]
    if not widths or any(ch < 1 for ch in widths):
        raise ConfigError(f"cifar-cnn channels must be positive integers, got {channels!r}.")
    return CifarCNN(shape, num_classes, widths, check_rate("dropout", dropout))
