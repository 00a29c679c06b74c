"""airbench94: Keller Jordan's CIFAR-10 network that reaches 94% in seconds, as a reference model.

Source: K. Jordan, "94% on CIFAR-10 in 3.29 Seconds on a Single GPU", arXiv:2404.00498 (2024);
code: https://github.com/KellerJordan/cifar10-airbench (``airbench94.py``, kept as
``legacy/airbench94.py``; the repository was first published as KellerJordan/airbench).

The network, as in that file: a 2x2 patch-whitening convolution (24 = 2 * 3 * 2 * 2 filters,
frozen weights, a trainable bias), GELU, three conv groups (widths 64 / 256 / 256) of
``conv3x3 -> maxpool2 -> BatchNorm -> GELU -> conv3x3 -> BatchNorm -> GELU``, a 3x3 max-pool,
a bias-free linear head and the logits scaled by 1/9. Its BatchNorms have eps 1e-12, running
statistics updated with PyTorch momentum 0.4 (their "momentum 0.6" is the decay) and frozen unit
scales (only the shifts train); every 3x3 conv starts as a Dirac (identity) kernel on its first
``in_channels`` filters. Inputs are normalised by the CIFAR-10 mean and std inside the module,
as their loader does, so the module takes miaudit's [0, 1] pixels.

The whitening layer is initialised from the training images (:meth:`Airbench94.init_whitening`,
called by :mod:`miaudit.train.airbench`): the eigen-decomposition of the (uncentred) covariance
of every 2x2 patch of the first 5,000 training images gives filters ``E / sqrt(lambda + 5e-4)``
and their negatives, so the first 12 channels whiten the patches.

Deviations: float32 weights throughout (theirs are fp16 with fp32 BatchNorms, channels-last;
miaudit's ``precision: bf16`` recipe runs the forward under bf16 autocast instead). The head
takes ``width * h * w`` features, which is their ``width`` on 32x32 (and 28x28) images.

Test-time augmentation (their ``infer`` at ``tta_level=2``): the six views are miaudit queries
(:data:`TTA_QUERIES`, made by :mod:`miaudit.signals.query`) and :func:`tta_logits` weighs their
logits as ``infer`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from miaudit.errors import ConfigError
from miaudit.models.cnn import image_shape

ARCH = "airbench94"
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
WHITEN_KERNEL = 2
WHITEN_EPS = 5e-4  # added to the eigenvalues before the inverse square root (theirs)
WHITEN_IMAGES = 5000  # the training images whose patches set the whitening filters (theirs)
# Their tta_level=2 views and weights: half on the image (mirrored or not, equally), half on
# the two one-pixel diagonal translations (reflect padding), each mirrored or not.
TTA_QUERIES: dict[str, float] = {
    "plain": 0.25, "mirror": 0.25,
    "translate-dr": 0.125, "mirror-translate-dr": 0.125,
    "translate-ul": 0.125, "mirror-translate-ul": 0.125,
}


class BatchNorm(nn.BatchNorm2d):
    """airbench's BatchNorm: eps 1e-12, PyTorch momentum ``1 - momentum``, scale frozen at 1."""

    def __init__(self, num_features: int, momentum: float, eps: float = 1e-12) -> None:
        super().__init__(num_features, eps=eps, momentum=1 - momentum)
        self.weight.requires_grad = False  # only the shift (bias) trains, as theirs


class Conv(nn.Conv2d):
    """A conv whose first ``in_channels`` filters start as the identity (Dirac), bias zero."""

    def __init__(self, channels_in: int, channels_out: int, kernel_size: int = 3,
                 padding: int | str = "same", bias: bool = False) -> None:  # fmt: skip
        super().__init__(channels_in, channels_out, kernel_size=kernel_size, padding=padding,
                         bias=bias)  # fmt: skip

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.bias is not None:
            self.bias.data.zero_()
        w = self.weight.data
        torch.nn.init.dirac_(w[: w.size(1)])


class ConvGroup(nn.Module):
    """conv -> maxpool 2 -> BN -> GELU -> conv -> BN -> GELU."""

    def __init__(self, channels_in: int, channels_out: int, batchnorm_momentum: float) -> None:
        super().__init__()
        self.conv1 = Conv(channels_in, channels_out)
        self.pool = nn.MaxPool2d(2)
        self.norm1 = BatchNorm(channels_out, batchnorm_momentum)
        self.conv2 = Conv(channels_out, channels_out)
        self.norm2 = BatchNorm(channels_out, batchnorm_momentum)
        self.activ = nn.GELU()

    def forward(self, x: Tensor) -> Tensor:
        x = self.activ(self.norm1(self.pool(self.conv1(x))))
        return self.activ(self.norm2(self.conv2(x)))


class Airbench94(nn.Module):
    """The airbench94 network; ``whiten`` is the data-initialised first layer."""

    def __init__(self, shape: tuple[int, int, int], num_classes: int, widths: Sequence[int],
                 batchnorm_momentum: float, scaling_factor: float,
                 mean: Sequence[float], std: Sequence[float]) -> None:  # fmt: skip
        super().__init__()
        c, h, w = shape
        # Not persistent: rebuilt from the recipe, never stored or averaged by lookahead.
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, c, 1, 1),
                             persistent=False)  # fmt: skip
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, c, 1, 1),
                             persistent=False)  # fmt: skip
        whiten_width = 2 * c * WHITEN_KERNEL**2
        self.whiten = Conv(c, whiten_width, WHITEN_KERNEL, padding=0, bias=True)
        self.whiten.weight.requires_grad = False  # frozen: set from the data, never trained
        self.activ = nn.GELU()
        w1, w2, w3 = widths
        self.layers = nn.Sequential(
            ConvGroup(whiten_width, w1, batchnorm_momentum),
            ConvGroup(w1, w2, batchnorm_momentum),
            ConvGroup(w2, w3, batchnorm_momentum),
            nn.MaxPool2d(3),
            nn.Flatten(),
        )
        h, w = h - WHITEN_KERNEL + 1, w - WHITEN_KERNEL + 1
        for _ in range(3):
            h, w = h // 2, w // 2
        h, w = h // 3, w // 3
        if h < 1 or w < 1:
            raise ConfigError(f"{ARCH} needs images of at least 25x25 pixels (its whitening "
                              f"layer and four poolings), got {shape[1]}x{shape[2]}.")
        self.head = nn.Linear(w3 * h * w, num_classes, bias=False)
        self.scaling_factor = float(scaling_factor)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 3:  # (N, H, W) grey images: add the channel axis
            x = x.unsqueeze(1)
        x = self.activ(self.whiten((x - self.mean) / self.std))
        return self.head(self.layers(x)) * self.scaling_factor

    @torch.no_grad()
    def init_whitening(self, images: Tensor, eps: float = WHITEN_EPS) -> None:
        """Set the whitening filters from ``images`` [N, C, H, W] (miaudit's pixels; normalised
        here as the forward pass does): eigenvectors of the patch covariance over the square root
        of their eigenvalues (plus ``eps``), largest first, then the same filters negated."""
        images = images.unsqueeze(1) if images.dim() == 3 else images
        x = ((images.float().to(self.mean.device) - self.mean) / self.std)
        eigenvalues, eigenvectors = whitening_parameters(patches(x, WHITEN_KERNEL))
        scaled = eigenvectors / torch.sqrt(eigenvalues + eps)
        self.whiten.weight.data[:] = torch.cat((scaled, -scaled)).to(self.whiten.weight.dtype)


def patches(x: Tensor, size: int) -> Tensor:
    """Every ``size`` x ``size`` patch (stride 1) of ``x`` [N, C, H, W] as [P, C, size, size]."""
    c = x.shape[1]
    return x.unfold(2, size, 1).unfold(3, size, 1).transpose(1, 3).reshape(-1, c, size, size)


def whitening_parameters(patch: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues [D, 1, 1, 1] and eigenvectors [D, C, h, w] of the patches' (uncentred)
    covariance, largest eigenvalue first. The covariance is float32, as theirs; its
    decomposition float64 (a small matrix: exact and alike on every device)."""
    n, c, h, w = patch.shape
    flat = patch.reshape(n, -1).float()
    covariance = ((flat.T @ flat) / n).double()
    eigenvalues, eigenvectors = torch.linalg.eigh(covariance, UPLO="U")
    return (eigenvalues.flip(0).view(-1, 1, 1, 1).float(),
            eigenvectors.T.reshape(c * h * w, c, h, w).flip(0).float())  # fmt: skip


def tta_logits(logits: Tensor, queries: Sequence[str]) -> Tensor:
    """airbench's test-time-augmented logits from the logits of the :data:`TTA_QUERIES` views:
    ``logits`` [..., Q, C] with ``queries`` naming its Q axis (others are ignored)."""
    missing = [q for q in TTA_QUERIES if q not in queries]
    if missing:
        raise ConfigError(f"airbench94's test-time augmentation needs the queries {missing}.")
    index = list(queries)
    return sum(weight * logits[..., index.index(q), :] for q, weight in TTA_QUERIES.items())


def _numbers(name: str, values: Sequence[float], count: int, positive: bool
             ) -> tuple[float, ...]:  # fmt: skip
    out = tuple(float(v) for v in values)
    if len(out) != count or (positive and min(out) <= 0):
        raise ConfigError(f"{ARCH} {name} must be {count} {'positive ' if positive else ''}"
                          f"numbers, got {values!r}.")  # fmt: skip
    return out


# architecture 'airbench94': declared in miaudit.models.architectures
def airbench94(
    input_shape: tuple[int, ...],
    num_classes: int,
    widths: Sequence[int] = (64, 256, 256),
    batchnorm_momentum: float = 0.6,
    scaling_factor: float = 1 / 9,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
) -> nn.Module:
    """Jordan's airbench94 network (arXiv:2404.00498): whitening conv, conv groups of
    ``widths`` (theirs: 64/256/256), BatchNorm decay ``batchnorm_momentum`` (0.6), logits times
    ``scaling_factor`` (1/9). ``mean``/``std``: per-channel input normalisation (default
    CIFAR-10's, for 3-channel images; other channel counts must give theirs). Trained by the
    airbench94 trainer (:mod:`miaudit.train.airbench`): whitening from the data, lookahead."""
    shape = image_shape(input_shape, ARCH)
    c = shape[0]
    if (mean is None or std is None) and c != 3:
        raise ConfigError(f"{ARCH} normalises by CIFAR-10's per-channel mean and std; for "
                          f"{c}-channel images give arch_params mean and std ({c} numbers each).")
    mean = _numbers("mean", CIFAR_MEAN if mean is None else mean, c, positive=False)
    std = _numbers("std", CIFAR_STD if std is None else std, c, positive=True)
    sizes = [int(v) for v in widths]
    if len(sizes) != 3 or min(sizes) < 1:
        raise ConfigError(f"{ARCH} widths must be 3 positive integers, got {widths!r}.")
    if not 0.0 <= float(batchnorm_momentum) < 1.0:
        raise ConfigError(f"{ARCH} batchnorm_momentum must be in [0, 1), got "
                          f"{batchnorm_momentum!r}.")  # fmt: skip
    return Airbench94(shape, num_classes, sizes, float(batchnorm_momentum),
                      float(scaling_factor), mean, std)  # fmt: skip
