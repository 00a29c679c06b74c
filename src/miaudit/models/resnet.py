"""CIFAR-style ResNet-18 (3x3 stem, no max-pool, BasicBlocks [2, 2, 2, 2])."""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F

from miaudit.errors import ConfigError
from miaudit.models.cnn import _Unsqueeze, image_shape


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity (or 1x1 projection) shortcut."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet for small images; global average pooling makes it size-agnostic."""

    def __init__(
        self, in_channels: int, num_classes: int, blocks: tuple[int, ...], width: int
    ) -> None:
        super().__init__()
        self.prep = _Unsqueeze()
        self.conv1 = nn.Conv2d(in_channels, width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        stages = []
        in_planes = width
        for i, count in enumerate(blocks):
            planes = width * 2**i
            layers = []
            for j in range(count):
                layers.append(BasicBlock(in_planes, planes, 2 if (i > 0 and j == 0) else 1))
                in_planes = planes
            stages.append(nn.Sequential(*layers))
        self.layers = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.linear = nn.Linear(in_planes, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(self.prep(x))))
        out = self.pool(self.layers(out)).flatten(1)
        return self.linear(out)


# architecture 'resnet18': declared in miaudit.models.architectures
def resnet18(input_shape: tuple[int, ...], num_classes: int, width: int = 64) -> nn.Module:
    """CIFAR ResNet-18 (He et al., 2016): 64-128-256-512 channels for the default width."""
    channels = image_shape(input_shape, "resnet18")[0]
    if int(width) < 1:
        raise ConfigError(f"resnet18 width must be a positive integer, got {width!r}.")
    return ResNet(channels, num_classes, (2, 2, 2, 2), int(width))
