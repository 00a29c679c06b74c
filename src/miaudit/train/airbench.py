"""The airbench94 trainer: Keller Jordan's CIFAR-10 training method in miaudit's training loop.

Source: K. Jordan, "94% on CIFAR-10 in 3.29 Seconds on a Single GPU", arXiv:2404.00498 (2024);
https://github.com/KellerJordan/cifar10-airbench, ``airbench94.py`` (now
``legacy/airbench94.py``). The network is :mod:`miaudit.models.airbench`.

What the recipe says (:func:`airbench94_recipe`, :data:`AIRBENCH94_RECIPE`) and the engine runs:
SGD with Nesterov momentum 0.85, their learning rate and weight decay "per 1024 examples"
(11.5 and 0.0153) turned into PyTorch's for miaudit's mean loss (below), the triangular
schedule (``common.lr_at``), batch size 1024, 9.9 epochs (``epochs: 10, epoch_fraction:
0.9``), label smoothing 0.2, and the augmentation ``[alternating-flip, translate]``.

What this trainer adds, as their file does:

* the whitening layer set from the first 5,000 training rows (``Airbench94.init_whitening``);
* two parameter groups: BatchNorm shifts at 64x the learning rate and 1/64 the weight decay
  (so their decay is the others'), everything else trainable at the recipe's; the frozen
  whitening filters and BatchNorm scales are in none;
* the whitening bias trained for the first 3 epochs only;
* only whole batches (their loader drops the last, short one), the last epoch cut at
  ``epoch_fraction``;
* the alternating flip (:class:`AirbenchBatches`): a random half of the rows flipped in the
  first epoch, and every row flipped in each odd epoch exactly when it is not in the even ones
  (the ``translate`` step runs on each batch after it; shifts are symmetric, so the order is
  theirs in distribution);
* lookahead (:class:`Lookahead`): every 5 steps an exponential average of the whole state dict
  (BatchNorm statistics included) moves toward the weights with decay ``0.95**5 * (t / T)**3``
  and the weights are reset to it; at the last step the weights become the average.

Their loss is summed over the batch; miaudit's is the mean, so the learning rate here is theirs
times the batch size, and the weight decay theirs divided by it: the same steps exactly.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.models.airbench import ARCH, WHITEN_IMAGES, Airbench94
from miaudit.runtime.devices import autocast, check_precision
from miaudit.runtime.progress import progress_bar
from miaudit.runtime.threads import cpu_threads
from miaudit.train.augment import ROW_STEPS
from miaudit.train.checkpoints import CheckpointSpec
from miaudit.train.common import (
    EpochCallback,
    EpochInfo,
    TrainedModel,
    derive_seeds,
    isolated_rng,
    make_optimizer,
    snapshot,
)
from miaudit.train.engine import Batch, LoopResult, augmenter, run_epoch
from miaudit.train.recipe import Recipe
from miaudit.train.rows import ArrayLike, training_rows

# Their hyperparameters (hyp['opt'] and hyp['aug'] of airbench94.py).
HYP: dict[str, Any] = {
    "train_epochs": 9.9,
    "batch_size": 1024,
    "lr": 11.5,  # per 1024 examples
    "momentum": 0.85,
    "weight_decay": 0.0153,  # per 1024 examples, decoupled from the learning rate
    "bias_scaler": 64.0,  # learning rate (not weight decay) multiplier of BatchNorm shifts
    "label_smoothing": 0.2,
    "whiten_bias_epochs": 3,  # epochs the whitening bias trains before it is frozen
    "translate": 2,
}
LOOKAHEAD_EVERY = 5  # steps between lookahead updates
LOOKAHEAD_DECAY = 0.95**5  # the average's decay at the end of training (scaled by (t / T)^3)


def airbench94_recipe(batch_size: int = HYP["batch_size"], **changes: Any) -> Recipe:
    """airbench94's recipe for miaudit's mean loss, at ``batch_size`` (theirs: 1024), with
    ``changes`` to any field. Their SGD learning rate is ``lr / kilostep_scale`` on a summed
    loss (``kilostep_scale = 1024 * (1 + 1 / (1 - momentum))``) and their PyTorch weight decay
    ``weight_decay * batch_size / lr``: on the mean, the first times the batch size and the
    second over it (rounded to 12 decimals, so a config can spell them: lr 1.5 at 1024)."""
    momentum = HYP["momentum"]
    kilostep_scale = 1024 * (1 + 1 / (1 - momentum))
    epochs = math.ceil(HYP["train_epochs"])
    fields: dict[str, Any] = {
        "architecture": ARCH,
        "optimizer": "sgd",
        "lr": round(HYP["lr"] / kilostep_scale * batch_size, 12),
        "momentum": momentum,
        "nesterov": True,
        "weight_decay": round(HYP["weight_decay"] / HYP["lr"], 12),
        "schedule": "triangular",
        "epochs": epochs,
        "epoch_fraction": round(HYP["train_epochs"] - (epochs - 1), 10),
        "batch_size": batch_size,
        "augment": ["alternating-flip", {"name": "translate", "padding": HYP["translate"]}],
        "label_smoothing": HYP["label_smoothing"],
    }
    return Recipe.from_dict({**fields, **changes})


# The recipe at their batch size, as a run config's recipe mapping.
AIRBENCH94_RECIPE: dict[str, Any] = airbench94_recipe().to_dict()


def airbench_steps(recipe: Recipe, n_train: int) -> tuple[int, int]:
    """Whole batches per epoch over ``n_train`` rows, and the run's steps (the last epoch cut at
    ``epoch_fraction``): their ``ceil(len(loader) * train_epochs)``."""
    per_epoch = int(n_train) // recipe.batch_size
    if per_epoch < 1:
        raise ConfigError(f"{ARCH} trains on whole batches only: {n_train} training rows are "
                          f"fewer than batch_size {recipe.batch_size}; lower the batch size.")
    return per_epoch, math.ceil(per_epoch * (recipe.epochs - 1 + recipe.epoch_fraction))


class AirbenchBatches:
    """Their loader's epochs: a fresh order of the rows each epoch (the model's shuffle
    generator), whole batches only, stopping at ``total`` steps, and with a ``flip_seed`` their
    alternating flip: row ``i`` is mirrored in epoch ``e`` iff ``first[i] XOR (e odd)``, with
    ``first`` a fair coin per row drawn once from ``flip_seed``."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, total: int,
                 shuffle_seed: int, flip_seed: int | None) -> None:  # fmt: skip
        self.x, self.y, self.batch_size, self.total = x, y, batch_size, total
        self.per_epoch = len(x) // batch_size
        self.shuffler = torch.Generator(device="cpu").manual_seed(int(shuffle_seed))
        self.first: torch.Tensor | None = None
        if flip_seed is not None:  # their batch_flip_lr on the whole set, once
            g = torch.Generator(device="cpu").manual_seed(int(flip_seed))
            self.first = (torch.rand(len(x), generator=g) < 0.5).to(x.device)
        self.epoch = self.steps = 0

    def __iter__(self) -> Iterator[Batch]:
        order = torch.randperm(len(self.x), generator=self.shuffler).to(self.x.device)
        flips = None if self.first is None else self.first ^ bool(self.epoch % 2)
        self.epoch += 1
        for i in range(min(self.per_epoch, self.total - self.steps)):
            batch = order[i * self.batch_size : (i + 1) * self.batch_size]
            xb = self.x.index_select(0, batch)
            if flips is not None:
                xb = torch.where(flips[batch].view(-1, 1, 1, 1), xb.flip(-1), xb)
            self.steps += 1
            yield xb, self.y.index_select(0, batch)


class Lookahead:
    """Their ``LookaheadState``: an average of the state dict's floating tensors."""

    def __init__(self, module: nn.Module) -> None:
        self.average = {k: v.clone() for k, v in module.state_dict().items()}

    @torch.no_grad()
    def update(self, module: nn.Module, decay: float) -> None:
        """Move the average toward the weights (``1 - decay`` of the way), then set the
        weights to it; ``decay`` 1: the weights become the average."""
        for average, current in zip(self.average.values(), module.state_dict().values(),
                                    strict=True):  # fmt: skip
            if current.dtype in (torch.half, torch.float):
                average.lerp_(current, 1 - decay)
                current.copy_(average)


class AirbenchStrategy:
    """One module, autograd: the mean cross-entropy with the recipe's label smoothing (their
    loss, over the batch size), in the recipe's precision, then lookahead after the steps it
    falls on and the average taken at the last step. (``loop.PlainStrategy``'s step plus
    lookahead; not a subclass, so that ``loop`` can send airbench94 recipes here.)"""

    models = 1

    def __init__(self, module: nn.Module, optimizer: torch.optim.Optimizer, recipe: Recipe,
                 device: torch.device, total: int, lookahead: Lookahead) -> None:  # fmt: skip
        check_precision(recipe.precision, device)
        self.module, self.optimizer = module, optimizer
        self.smoothing = recipe.label_smoothing
        self.device, self.precision = device, recipe.precision
        self.loss_sum = torch.zeros((), device=device)  # the epoch's, on the device: no syncs
        self.count = 0
        self.total_steps, self.lookahead, self.done = total, lookahead, 0
        # their alpha_schedule (float32, as theirs)
        t = torch.arange(total + 1) / total
        self.decays = (LOOKAHEAD_DECAY * t**3).tolist()

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> None:
        with autocast(self.device, self.precision):
            loss = F.cross_entropy(self.module(xb), yb, label_smoothing=self.smoothing)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.loss_sum.add_(loss.detach(), alpha=len(xb))
        self.count += len(xb)
        self.done += 1
        if self.done % LOOKAHEAD_EVERY == 0:
            self.lookahead.update(self.module, self.decays[self.done])
        if self.done == self.total_steps:
            self.lookahead.update(self.module, decay=1.0)

    def epoch_losses(self) -> list[float]:
        loss = float(self.loss_sum) / self.count
        self.loss_sum.zero_()
        self.count = 0
        return [loss]

    def snapshots(self) -> list[dict[str, torch.Tensor]]:
        return [snapshot(self.module)]

    def resume(self) -> None:
        self.module.train()


def param_groups(module: Airbench94, recipe: Recipe) -> list[dict[str, Any]]:
    """Their two groups: trainable BatchNorm shifts (``norm`` in the name) at
    ``bias_scaler`` x the learning rate (the engine scales each step's by ``lr_scale``) and
    1 / ``bias_scaler`` the weight decay; the other trainable parameters at the recipe's."""
    scale = float(HYP["bias_scaler"])
    named = [(k, p) for k, p in module.named_parameters() if p.requires_grad]
    norm = [p for k, p in named if "norm" in k]
    rest = [p for k, p in named if "norm" not in k]
    return [{"params": norm, "lr": recipe.lr * scale, "lr_scale": scale,
             "weight_decay": recipe.weight_decay / scale},
            {"params": rest}]  # fmt: skip


def train_model_airbench(
    recipe: Recipe,
    features: ArrayLike,
    labels: ArrayLike,
    indices: ArrayLike,
    seed: int,
    device: str | torch.device = "cpu",
    num_classes: int | None = None,
    progress: bool = True,
    *,
    on_epoch_end: EpochCallback | None = None,
    desc: str = "training",
    num_threads: int | None = None,
    checkpoints: CheckpointSpec | None = None,
) -> TrainedModel:
    """``train_model`` for an airbench94 recipe (``miaudit.train.loop`` sends it here); the
    same arguments and result. Not with ``dp`` or checkpoints (ConfigError)."""
    if recipe.dp is not None:
        raise ConfigError(f"{ARCH} trains with its own method (whitening, lookahead), not "
                          "DP-SGD; use cifar-cnn or resnet18 for a dp recipe.")
    if checkpoints:
        raise ConfigError(f"checkpoints are not supported for {ARCH} (its epochs are whole "
                          "batches only and its last one is cut short); train without them.")
    device = torch.device(device)
    rows = training_rows(features, labels, indices, device, num_classes)
    init_seed, shuffle_seed = derive_seeds(seed)
    input_shape = tuple(int(d) for d in rows.x.shape[1:])
    n_train = len(rows.idx)
    per_epoch, total = airbench_steps(recipe, n_train)
    steps = [dict(s) for s in recipe.augment]
    flip_seed = None
    if any(s["name"] in ROW_STEPS for s in steps):
        flip_seed = int(np.random.SeedSequence([int(seed), 0xF11]).generate_state(1)[0])
    batches = AirbenchBatches(rows.x, rows.y, recipe.batch_size, total, shuffle_seed, flip_seed)
    rest = recipe.replace(augment=[s for s in steps if s["name"] not in ROW_STEPS])
    augment = augmenter(rest, input_shape, seed)
    with isolated_rng(device, init_seed), cpu_threads(num_threads):
        module = build_model(recipe.architecture, input_shape, rows.n_classes,
                             **recipe.arch_params)  # fmt: skip
        assert isinstance(module, Airbench94)
        module.to(device).train()
        optimizer = make_optimizer(recipe, param_groups(module, recipe))
        # Their order: the lookahead average starts from the weights before whitening.
        lookahead = Lookahead(module)
        module.init_whitening(rows.x[:WHITEN_IMAGES])
        strategy = AirbenchStrategy(module, optimizer, recipe, device, total, lookahead)
        result = _train(strategy, batches, recipe, per_epoch, total, device, augment,
                        on_epoch_end, progress, desc)  # fmt: skip
    model = result.model(0, module, recipe, seed, n_train, rows.n_classes, input_shape)
    # the samples it saw: whole batches over 9.9 epochs, not n_train x epochs
    seen = total * recipe.batch_size
    return dataclasses.replace(model, samples_per_second=(
        seen / model.train_seconds if model.train_seconds > 0 else float("inf")))


def _train(strategy: AirbenchStrategy, batches: AirbenchBatches, recipe: Recipe,
           per_epoch: int, total: int, device: torch.device, augment: Any,
           on_epoch_end: EpochCallback | None, progress: bool, desc: str,
           ) -> LoopResult:  # fmt: skip
    """The engine's epochs (``run_epoch``: the learning rate of every step, augmentation) over
    ``total`` steps, freezing the whitening bias after ``whiten_bias_epochs``."""
    module = strategy.module
    assert isinstance(module, Airbench94)
    epochs = math.ceil(total / per_epoch)
    result = LoopResult([[]], [{}], 0.0, 0)
    start = time.perf_counter()
    with progress_bar(epochs, desc, "epoch", enabled=progress) as bar:
        for epoch in range(epochs):
            module.whiten.bias.requires_grad = epoch < HYP["whiten_bias_epochs"]
            result.steps, lr = run_epoch(strategy, batches, recipe, result.steps, total,
                                         augment=augment)  # fmt: skip
            loss = strategy.epoch_losses()[0]
            result.losses[0].append(loss)
            bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.3g}", refresh=False)
            bar.update(1)
            if on_epoch_end is not None:
                on_epoch_end(EpochInfo(epoch + 1, epochs, loss, lr, module))
                strategy.resume()
    module.whiten.bias.requires_grad = True  # as built: a cached copy loads the same module
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    result.seconds = time.perf_counter() - start
    return result
