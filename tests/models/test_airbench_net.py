"""The airbench94 network (Jordan 2024, KellerJordan/cifar10-airbench airbench94.py): its
shapes and parameters, its layers' settings, the whitening initialisation and the test-time
views."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from miaudit.errors import ConfigError
from miaudit.models import build_model, list_models
from miaudit.models.airbench import (
    CIFAR_MEAN,
    CIFAR_STD,
    TTA_QUERIES,
    WHITEN_EPS,
    BatchNorm,
    patches,
    tta_logits,
)
from miaudit.signals.query import query_logits


def published_parameter_count(channels: int = 3, widths: tuple[int, ...] = (64, 256, 256),
                              classes: int = 10) -> int:  # fmt: skip
    """airbench94's make_net() counted layer by layer: a 2x2 whitening conv with bias (2 * C *
    4 filters), three groups of two bias-free 3x3 convs each followed by a BatchNorm (scale and
    shift), a bias-free linear head."""
    whiten = 2 * channels * 4
    total = whiten * channels * 2 * 2 + whiten
    c = whiten
    for w in widths:
        total += w * c * 9 + 2 * w + w * w * 9 + 2 * w
        c = w
    return total + c * classes


def test_registered_with_the_published_shapes_and_parameter_count():
    assert "airbench94" in list_models()
    model = build_model("airbench94", (3, 32, 32), 10).eval()
    with torch.no_grad():
        assert model(torch.rand(4, 3, 32, 32)).shape == (4, 10)
    count = sum(p.numel() for p in model.parameters())
    assert count == published_parameter_count() == 1_972_792  # the paper's "1.97M"
    assert model.whiten.weight.shape == (24, 3, 2, 2) and model.whiten.bias.shape == (24,)
    convs = [m for m in model.layers.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [64, 64, 256, 256, 256, 256]
    assert model.head.in_features == 256 and model.head.bias is None


def test_layer_settings_are_theirs():
    model = build_model("airbench94", (3, 32, 32), 10)
    norms = [m for m in model.modules() if isinstance(m, BatchNorm)]
    assert len(norms) == 6
    for bn in norms:  # their BatchNorm(momentum=0.6): PyTorch momentum 0.4, eps 1e-12
        assert bn.momentum == pytest.approx(0.4) and bn.eps == 1e-12
        assert not bn.weight.requires_grad and bn.bias.requires_grad
    assert not model.whiten.weight.requires_grad and model.whiten.bias.requires_grad
    assert isinstance(model.activ, nn.GELU)
    assert model.scaling_factor == pytest.approx(1 / 9)
    pools = [m for m in model.modules() if isinstance(m, nn.MaxPool2d)]
    assert [p.kernel_size for p in pools] == [2, 2, 2, 3]
    # Dirac start: the first in_channels filters of each 3x3 conv pass their channel through
    conv = model.layers[0].conv1
    x = torch.randn(1, 24, 8, 8)
    assert torch.allclose(F.conv2d(x, conv.weight[:24], padding=1), x, atol=1e-6)


def test_logits_are_the_head_over_nine():
    model = build_model("airbench94", (3, 32, 32), 10).eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        features = model.layers(model.activ(model.whiten((x - model.mean) / model.std)))
        assert torch.allclose(model(x), model.head(features) / 9, atol=1e-6)


def test_other_shapes_and_bad_parameters():
    model = build_model("airbench94", (28, 28), 4, mean=[0.5], std=[0.25]).eval()
    with torch.no_grad():
        assert model(torch.rand(2, 28, 28)).shape == (2, 4)
    with pytest.raises(ConfigError, match="25x25"):
        build_model("airbench94", (3, 16, 16), 10)
    with pytest.raises(ConfigError, match="mean and std"):
        build_model("airbench94", (1, 32, 32), 10)
    with pytest.raises(ConfigError, match="widths"):
        build_model("airbench94", (3, 32, 32), 10, widths=[64, 256])
    with pytest.raises(ConfigError, match="std"):
        build_model("airbench94", (3, 32, 32), 10, std=[0.2, 0.0, 0.2])


def _correlated_images(n: int = 64, seed: int = 0) -> torch.Tensor:
    """Pixels in [0, 1] whose neighbours and channels are correlated (smoothed noise plus a
    shared grey level), so the patch covariance is far from the identity."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 33, 33, generator=g)
    x = (x[..., 1:, 1:] + x[..., :-1, :-1] + x[..., 1:, :-1]) / 3
    return (0.6 * x + 0.4 * x.mean(1, keepdim=True)).clamp(0, 1)


def test_whitening_filters_whiten_the_training_patches():
    images = _correlated_images()
    model = build_model("airbench94", (3, 32, 32), 10)
    model.init_whitening(images)
    w = model.whiten.weight.detach()
    assert torch.equal(w[12:], -w[:12])  # the filters and their negatives
    x = (images - torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1)) / torch.tensor(CIFAR_STD).view(
        1, 3, 1, 1)
    raw = patches(x, 2).reshape(-1, 12).double()
    assert (raw.T @ raw / len(raw) - torch.eye(12, dtype=torch.float64)).abs().max() > 0.5
    # the conv itself (no bias) over every 2x2 patch: covariance = lambda / (lambda + eps) ~ I
    out = F.conv2d(x, w[:12]).permute(0, 2, 3, 1).reshape(-1, 12).double()
    cov = out.T @ out / len(out)
    eigenvalues = torch.linalg.eigvalsh(raw.T @ raw / len(raw)).flip(0)
    expected = torch.diag(eigenvalues / (eigenvalues + WHITEN_EPS))
    assert torch.allclose(cov, expected, atol=1e-4)
    assert torch.allclose(cov, torch.eye(12, dtype=torch.float64), atol=0.02)


def _their_tta(net: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """airbench94.py's infer_mirror_translate (tta_level=2), on one batch."""

    def infer_mirror(x: torch.Tensor) -> torch.Tensor:
        return 0.5 * net(x) + 0.5 * net(x.flip(-1))

    logits = infer_mirror(inputs)
    padded = F.pad(inputs, (1,) * 4, "reflect")
    translated = [padded[:, :, 0:32, 0:32], padded[:, :, 2:34, 2:34]]
    logits_translate = torch.stack([infer_mirror(t) for t in translated]).mean(0)
    return 0.5 * logits + 0.5 * logits_translate


def test_queries_give_their_test_time_augmentation():
    """miaudit's translate/mirror queries are airbench's six TTA views: weighted as their
    infer does, the query logits are their test-time-augmented logits."""
    torch.manual_seed(0)
    model = build_model("airbench94", (3, 32, 32), 10)
    model.init_whitening(_correlated_images(16))
    model.eval()
    x = _correlated_images(12, seed=1).numpy()
    queries = list(TTA_QUERIES)
    logits = query_logits([model], x, np.arange(len(x)), queries, "image", progress=False)
    ours = tta_logits(torch.from_numpy(logits[0]), queries)
    with torch.no_grad():
        theirs = _their_tta(model, torch.from_numpy(x))
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert not torch.allclose(torch.from_numpy(logits[0, :, 0]), theirs, atol=1e-3)
    with pytest.raises(ConfigError, match="translate-ul"):
        tta_logits(torch.from_numpy(logits[0][:, :2]), queries[:2])
