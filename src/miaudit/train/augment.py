"""Batched data augmentation for image recipes: crop, mirror, cutout and AutoAugment (CIFAR-10).

A recipe's ``augment`` is a list of steps, each a name or a mapping with ``name`` and
parameters, applied in order to every training batch::

    ["crop", "mirror"]
    [{"name": "cutout", "size": 8}, "autoaugment"]

Every step works on a whole batch ``[B, C, H, W]`` at once (index arithmetic and masks, no
per-image Python loop) on the batch's device, and is deterministic given a
``torch.Generator``: ``crop``, ``mirror`` and ``cutout`` draw from it directly (on the
generator's device, then move the draws to the batch's); ``autoaugment`` draws each image's
sub-policy from it, and seeds torch's global RNG (which kornia uses) with one draw from it
inside :func:`torch.random.fork_rng`, so the caller's global RNG stream is left untouched.

Steps:

* ``crop`` (``padding=4``): zero-pad by ``padding`` on every side, then crop a random
  window of the original size (a shift of up to ``padding`` pixels in each direction).
* ``mirror`` (``p=0.5``): flip each image left-right with probability ``p``.
* ``cutout`` (``size=8``, ``p=1.0``): with probability ``p``, zero a ``size`` x ``size``
  square (all channels) centred at a uniformly random pixel; it may run over the border, where
  it is clipped. ``size`` is pixels (int) or a fraction of ``min(H, W)`` (float in (0, 1]).
* ``translate`` (``padding=2``): airbench94's random translation (Jordan 2024): reflect-pad
  by ``padding`` on every side, then crop a random window of the original size.
* ``alternating-flip``: airbench94's flip: each image is flipped in the first epoch with
  probability 1/2 and in every later epoch exactly when it was not in the one before. It needs
  each row's identity across epochs, so only the airbench94 trainer (its batches,
  :mod:`miaudit.train.airbench`) applies it; other recipes are refused when training starts.
* ``autoaugment``: the AutoAugment CIFAR-10 policy (Cubuk et al. 2019, all 25 sub-policies)
  from kornia, one sub-policy drawn per image. It expects pixels in [0, 1] and 1 or 3
  channels (1-channel images are repeated to 3 channels and averaged back).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from miaudit.errors import ConfigError

if TYPE_CHECKING:  # torch is imported where a step is built or draws: checking a recipe's
    import torch  # augment (parse_augmentation) loads no torch

Augmentation = Callable[["torch.Tensor", "torch.Generator"], "torch.Tensor"]

# name -> {parameter: default}
AUGMENTATIONS: dict[str, dict[str, Any]] = {
    "crop": {"padding": 4},
    "mirror": {"p": 0.5},
    "cutout": {"size": 8, "p": 1.0},
    "autoaugment": {},
    "translate": {"padding": 2},
    "alternating-flip": {},
}
# Steps that need each row's identity across epochs, so no batch function can apply them: the
# airbench94 trainer's batches do (miaudit.train.airbench).
ROW_STEPS = ("alternating-flip",)


def augment_seed(seed: int) -> int:
    """Seed of a model's augmentation generator, independent of its init and shuffle seeds."""
    return int(np.random.SeedSequence([int(seed), 0xA06]).generate_state(1, dtype=np.uint64)[0])


def parse_augmentation(spec: Any) -> list[tuple[str, dict[str, Any]]]:
    """``spec`` as ``[(name, params with defaults filled in), ...]``, checked; else ConfigError."""
    if isinstance(spec, (str, Mapping)) or not isinstance(spec, Sequence):
        raise ConfigError(
            f"augment must be a list of steps (names or mappings with 'name'), got {spec!r}; "
            f"e.g. ['crop', 'mirror']. Valid names: {', '.join(AUGMENTATIONS)}."
        )
    steps = []
    for item in spec:
        if isinstance(item, str):
            name, given = item, {}
        elif isinstance(item, Mapping) and "name" in item:
            name = item["name"]
            given = {k: v for k, v in item.items() if k != "name"}
        else:
            raise ConfigError(
                f"augment step {item!r} must be a name or a mapping with a 'name' key."
            )
        if name not in AUGMENTATIONS:
            raise ConfigError(
                f"unknown augmentation {name!r}; valid ones: {', '.join(AUGMENTATIONS)}."
            )
        defaults = AUGMENTATIONS[name]
        for key in given:
            if key not in defaults:
                valid = ", ".join(defaults) or "none"
                raise ConfigError(
                    f"unknown parameter {key!r} for augmentation {name!r}; valid: {valid}."
                )
        params = {**defaults, **given}
        _check_params(name, params)
        if "p" in params:
            params["p"] = float(params["p"])  # p=1 and p=1.0: one recipe key
        steps.append((name, params))
    return steps


def normalize_augmentation(spec: Any) -> list[dict[str, Any]]:
    """``spec`` checked and spelled out: ``[{"name": ..., every parameter}, ...]``."""
    return [{"name": name, **params} for name, params in parse_augmentation(spec)]


def _check_params(name: str, params: dict[str, Any]) -> None:
    def number(key: str) -> float:
        value = params[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name}.{key} must be a number, got {value!r}.")
        return float(value)

    if "p" in params and not 0.0 <= number("p") <= 1.0:
        raise ConfigError(f"{name}.p must lie in [0, 1], got {params['p']!r}.")
    if name in ("crop", "translate"):
        pad = params["padding"]
        if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
            raise ConfigError(f"{name}.padding must be an integer >= 0, got {pad!r}.")
    if name == "cutout":
        size = params["size"]
        ok_int = isinstance(size, int) and not isinstance(size, bool) and size >= 1
        ok_frac = isinstance(size, float) and 0.0 < size <= 1.0
        if not (ok_int or ok_frac):
            raise ConfigError(
                f"cutout.size must be an integer >= 1 (pixels) or a float in (0, 1] "
                f"(fraction of the image side), got {size!r}."
            )


def build_augmentation(
    spec: Any, input_shape: Sequence[int] | None = None
) -> Augmentation | None:
    """A function ``(batch [B, C, H, W], generator) -> augmented batch`` applying ``spec`` in
    order; ``None`` for an empty spec. ``input_shape`` (one sample's shape), when given, must be
    an image ``(C, H, W)``: tabular data cannot be augmented (ConfigError)."""
    steps = parse_augmentation(spec)
    if not steps:
        return None
    if input_shape is not None:
        _check_image_shape(tuple(input_shape), steps)
    fns = [_STEPS[name](**params) for name, params in steps]

    def augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if x.dim() != 4:
            raise ConfigError(
                f"augmentation needs image batches [B, C, H, W], got shape {tuple(x.shape)}."
            )
        for fn in fns:
            x = fn(x, generator)
        return x

    return augment


def _check_image_shape(shape: tuple[int, ...], steps: list[tuple[str, dict[str, Any]]]) -> None:
    if len(shape) != 3:
        raise ConfigError(
            f"augment {[n for n, _ in steps]} needs image data (C, H, W) per sample, got "
            f"shape {shape} (tabular?); use augment=[] for this dataset."
        )
    if any(name == "autoaugment" for name, _ in steps) and shape[0] not in (1, 3):
        raise ConfigError(f"autoaugment needs 1 or 3 channels, got {shape[0]}.")
    pads = [p["padding"] for name, p in steps if name == "translate"]
    if pads and max(pads) >= min(shape[1:]):  # reflect padding needs a pad under the side
        raise ConfigError(f"translate.padding must be below the image side {min(shape[1:])}.")


class StackedGenerators:
    """K models' generators for one batch of K equal slices, model after model (stacked
    training): each draw of ``n`` values is ``n / K`` from each generator, concatenated, so
    every model draws what it would draw alone. Only the steps that draw through
    :func:`_uniform`/:func:`_randint` take it (not ``autoaugment``)."""

    def __init__(self, generators: Sequence[torch.Generator]) -> None:
        self.generators = list(generators)
        self.device = self.generators[0].device

    def draw(self, fn: Callable[[torch.Generator, int], torch.Tensor], n: int) -> torch.Tensor:
        import torch

        per = n // len(self.generators)
        return torch.cat([fn(g, per) for g in self.generators])


def _uniform(generator: torch.Generator | StackedGenerators, n: int, device: torch.device
             ) -> torch.Tensor:  # fmt: skip
    import torch

    if isinstance(generator, StackedGenerators):
        return generator.draw(lambda g, m: _uniform(g, m, g.device), n).to(device)
    return torch.rand(n, generator=generator, device=generator.device).to(device)


def _randint(generator: torch.Generator | StackedGenerators, high: int, n: int,
             device: torch.device) -> torch.Tensor:  # fmt: skip
    import torch

    if isinstance(generator, StackedGenerators):
        return generator.draw(lambda g, m: _randint(g, high, m, g.device), n).to(device)
    return torch.randint(high, (n,), generator=generator, device=generator.device).to(device)


def _crop(padding: int) -> Augmentation:
    import torch

    def crop(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        b, _, h, w = x.shape
        dy = _randint(generator, 2 * padding + 1, b, x.device) - padding
        dx = _randint(generator, 2 * padding + 1, b, x.device) - padding
        # out[i, :, r, c] = x[i, :, r + dy_i, c + dx_i], zero where that falls outside.
        rows = torch.arange(h, device=x.device)[None, :] + dy[:, None]  # [B, H]
        cols = torch.arange(w, device=x.device)[None, :] + dx[:, None]  # [B, W]
        inside = ((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < w))[:, None, :]
        batch = torch.arange(b, device=x.device)[:, None, None]
        gathered = x[batch, :, rows.clamp(0, h - 1)[:, :, None], cols.clamp(0, w - 1)[:, None, :]]
        out = gathered * inside[..., None].to(x.dtype)  # [B, H, W, C]
        return out.permute(0, 3, 1, 2).contiguous()

    return crop


def _translate(padding: int) -> Augmentation:
    import torch

    def translate(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        b, _, h, w = x.shape
        padded = torch.nn.functional.pad(x, (padding,) * 4, mode="reflect")
        dy = _randint(generator, 2 * padding + 1, b, x.device)
        dx = _randint(generator, 2 * padding + 1, b, x.device)
        # out[i, :, r, c] = padded[i, :, r + dy_i, c + dx_i]: a window of the original size
        rows = torch.arange(h, device=x.device)[None, :] + dy[:, None]  # [B, H]
        cols = torch.arange(w, device=x.device)[None, :] + dx[:, None]  # [B, W]
        batch = torch.arange(b, device=x.device)[:, None, None]
        out = padded[batch, :, rows[:, :, None], cols[:, None, :]]  # [B, H, W, C]
        return out.permute(0, 3, 1, 2).contiguous()

    return translate


def _row_step() -> Augmentation:
    raise ConfigError(
        "augmentation 'alternating-flip' flips each row by epoch, which only the airbench94 "
        "trainer's batches can do; use 'mirror' with other architectures."
    )


def _mirror(p: float) -> Augmentation:
    import torch

    def mirror(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        flip = _uniform(generator, len(x), x.device) < p
        return torch.where(flip[:, None, None, None], x.flip(-1), x)

    return mirror


def _cutout(size: int | float, p: float) -> Augmentation:
    import torch

    def cutout(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        b, _, h, w = x.shape
        side = size if isinstance(size, int) else max(1, round(size * min(h, w)))
        cy = _randint(generator, h, b, x.device)
        cx = _randint(generator, w, b, x.device)
        apply = _uniform(generator, b, x.device) < p
        y0, x0 = cy - side // 2, cx - side // 2
        r = torch.arange(h, device=x.device)[None, :]
        c = torch.arange(w, device=x.device)[None, :]
        in_r = (r >= y0[:, None]) & (r < (y0 + side)[:, None])  # [B, H]
        in_c = (c >= x0[:, None]) & (c < (x0 + side)[:, None])  # [B, W]
        hole = in_r[:, :, None] & in_c[:, None, :] & apply[:, None, None]  # [B, H, W]
        return x.masked_fill(hole[:, None], 0.0)

    return cutout


@functools.cache
def _cifar10_subpolicies() -> tuple[torch.nn.Module, ...]:
    """kornia's AutoAugment CIFAR-10 sub-policies (kornia is imported on first use: slow)."""
    from kornia.augmentation.auto import AutoAugment

    return tuple(AutoAugment(policy="cifar10").children())


def _autoaugment() -> Augmentation:
    import torch

    def autoaugment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        subpolicies = _cifar10_subpolicies()
        channels = x.shape[1]
        if channels not in (1, 3):
            raise ConfigError(f"autoaugment needs 1 or 3 channels, got {channels}.")
        img = x.expand(-1, 3, -1, -1) if channels == 1 else x
        which = _randint(generator, len(subpolicies), len(x), torch.device("cpu"))
        seed = int(torch.randint(2**62, (1,), generator=generator, device=generator.device))
        out = img.clone()
        cuda = [x.device.index or 0] if x.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda), torch.no_grad():
            torch.manual_seed(seed)
            # One kornia call per sub-policy drawn (at most 25), on the images that drew it.
            for k in torch.unique(which).tolist():
                rows = torch.nonzero(which == k).flatten().to(x.device)
                out[rows] = subpolicies[k](img.index_select(0, rows)).to(x.dtype)
        out = out.clamp_(0.0, 1.0)
        return out.mean(dim=1, keepdim=True) if channels == 1 else out

    return autoaugment


_STEPS: dict[str, Callable[..., Augmentation]] = {
    "crop": _crop,
    "mirror": _mirror,
    "cutout": _cutout,
    "autoaugment": _autoaugment,
    "translate": _translate,
    "alternating-flip": _row_step,
}
