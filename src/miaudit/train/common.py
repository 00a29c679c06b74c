"""What every trainer shares: the trained-model record, the epoch callback, seeds and RNG
isolation, the learning-rate schedule, the optimizer, checkpoint snapshots and prediction.

The trainers build on this layer one way. ``engine`` holds the one training loop (epochs,
steps, batches, learning rate per step, augmentation, snapshots, callbacks, progress) and the
``Strategy`` protocol; each trainer is a strategy plugged into it plus a thin entry point:
``loop`` (one model by autograd, ``train_model``; a DP-SGD recipe goes to ``dp``), ``dp``
(Opacus's per-sample clipping and noise on Poisson-sampled batches) and ``stacked`` (K models
as one, a written-out backward). ``parallel`` fans stacked groups out over worker processes,
and ``trainer`` chooses among them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from miaudit.errors import ConfigError
from miaudit.runtime.devices import autocast, check_precision, to_device
from miaudit.train.recipe import Recipe
from miaudit.train.rows import ArrayLike


@dataclass
class TrainedModel:
    """A trained network (in eval mode) and how it was made."""

    module: nn.Module
    recipe: Recipe
    seed: int
    train_seconds: float
    samples_per_second: float
    n_train: int = 0
    num_classes: int = 0
    input_shape: tuple[int, ...] = ()
    losses: list[float] = field(default_factory=list)  # mean training loss of each epoch
    from_cache: bool = False
    # DP-SGD models only: epsilon_spent, delta, noise_multiplier, max_grad_norm, ... (dp.py)
    privacy: dict[str, Any] | None = None
    # A checkpoint of a longer run: the optimizer steps it had taken (None: the final model).
    step: int | None = None
    # Weights kept during training: {step: state dict on the CPU} (see checkpoints.py) ...
    snapshots: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict, repr=False)
    # ... and, once the cache has made them models, {label (e.g. "epoch5"): model}.
    checkpoints: dict[str, TrainedModel] = field(default_factory=dict, repr=False)
    # Where it trained: "local" (this machine), a Ray node id, or "cache" (loaded, not trained
    # by this run); the device it trained on ("cpu", "cuda", ...). None: not recorded.
    node: str | None = None
    device: str | None = None
    cache_key: str | None = None  # its model cache entry, once stored or loaded
    # How many models trained together with it as one stacked model (1: alone); None: not
    # trained by this process's trainer (a cache hit, a checkpoint).
    stack: int | None = None


@dataclass(frozen=True)
class EpochInfo:
    """What an ``on_epoch_end`` callback receives. ``module`` is in train mode."""

    epoch: int  # 1-based
    epochs: int
    loss: float  # mean training loss over the epoch
    lr: float  # learning rate of the epoch's last step
    module: nn.Module


EpochCallback = Callable[[EpochInfo], None]
# Job index and its finished model (train_models' on_model).
ModelCallback = Callable[[int, TrainedModel], None]


def lr_at(recipe: Recipe, step: int, total_steps: int) -> float:
    """Learning rate of optimizer step ``step`` (0-based) out of ``total_steps``.

    ``cosine`` decays per step from ``recipe.lr`` at step 0 to 0 at ``total_steps``.
    ``triangular`` is airbench94's (Jordan 2024): linear from 0.2 lr to lr over the first 23%
    of the steps, then linear down to 0.07 lr at ``total_steps``.
    """
    if recipe.schedule == "constant" or total_steps <= 0:
        return recipe.lr
    if recipe.schedule == "triangular":
        warmup = int(total_steps * 0.23)
        if step < warmup:
            frac = step / warmup
            return recipe.lr * (0.2 * (1 - frac) + 1.0 * frac)
        frac = (step - warmup) / (total_steps - warmup)
        return recipe.lr * (1.0 * (1 - frac) + 0.07 * frac)
    frac = min(max(step, 0), total_steps) / total_steps
    return recipe.lr * 0.5 * (1.0 + math.cos(math.pi * frac))


def make_optimizer(recipe: Recipe, params: Sequence[nn.Parameter]) -> torch.optim.Optimizer:
    """The recipe's optimizer. SGD with ``momentum == 0`` is plain SGD (nesterov ignored)."""
    if recipe.optimizer == "adam":
        return torch.optim.Adam(params, lr=recipe.lr, weight_decay=recipe.weight_decay)
    return torch.optim.SGD(
        params,
        lr=recipe.lr,
        momentum=recipe.momentum,
        nesterov=recipe.nesterov and recipe.momentum > 0,
        weight_decay=recipe.weight_decay,
    )


def derive_seeds(seed: int) -> tuple[int, int]:
    """Independent (init/dropout, shuffle) seeds from one user seed."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}.")
    init, shuffle = np.random.SeedSequence(int(seed)).generate_state(2, dtype=np.uint64)
    return int(init), int(shuffle)


@contextlib.contextmanager
def isolated_rng(device: torch.device, seed: int) -> Iterator[None]:
    """Seed torch's global RNGs for model init and dropout, restoring them afterwards."""
    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        yield


def snapshot(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached CPU copy of ``module``'s state dict (a checkpoint's weights)."""
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def predict_logits(
    module: nn.Module,
    features: ArrayLike,
    batch_size: int = 1024,
    device: str | torch.device = "cpu",
    precision: str = "fp32",
) -> np.ndarray:
    """Logits float32 [N, C] of ``module`` (moved to ``device``) in eval mode, batched.
    ``precision``: the model's recipe's (``bf16``: under bf16 autocast, refused where bf16
    is not native). Host batches go to a CUDA device pinned and without blocking; the logits
    of every batch stay on the device until one copy back at the end."""
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}.")
    device = torch.device(device)
    check_precision(precision, device)
    was_training = module.training
    module.to(device).eval()
    data = features if isinstance(features, torch.Tensor) else torch.as_tensor(features)
    outs = []
    try:
        with torch.no_grad():
            for lo in range(0, max(len(data), 1), batch_size):
                xb = to_device(data[lo : lo + batch_size].to(dtype=torch.float32), device)
                with autocast(device, precision):
                    outs.append(module(xb).float())
    finally:
        module.train(was_training)
    result: np.ndarray = torch.cat(outs).cpu().numpy().astype(np.float32, copy=False)
    return result
