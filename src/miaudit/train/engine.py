"""The one training loop, and the strategies that plug into it.

Every trainer runs :func:`train_loop`: ``loop`` (one model, autograd), ``dp`` (one model,
DP-SGD through Opacus) and ``stacked`` (K models as one, a written-out backward). The loop owns
what they share: the epochs and their steps, each epoch's batches (``batches``, re-iterated
every epoch: :class:`ShuffledBatches` by default, DP-SGD's Poisson-sampled loader instead), the
learning rate of every optimizer step (``common.lr_at``), batch augmentation, checkpoint
snapshots at the kept steps, the epoch callback, the progress bar and the timing. A
:class:`Strategy` holds what differs: how a batch becomes an optimizer step (forward, loss,
backward, step), how an epoch's loss is reduced, how weights are copied for a snapshot.

Speed matters (audits train hundreds of reference models), so the default batching keeps the
training rows as one tensor on the device (copied there once per run, by the trainer's entry
point), draws one ``randperm`` per model per epoch from that model's own generator (on the
CPU, so CPU and GPU runs shuffle alike) and slices batches by index on the device: no
``DataLoader``. The epoch's order is the one host-to-device copy per epoch, from pinned memory
without blocking on CUDA (:func:`miaudit.runtime.devices.to_device`).

Host-device syncs on CUDA: none per step in the plain and stacked strategies (their losses
add up on the device; DP-SGD's too, though Opacus's own step may sync). What remains, because
a recorded value or the host needs it: each epoch's mean loss (one ``float`` per epoch, for
``losses`` and the progress bar), the weights copied to the CPU at a checkpoint step, the
label-range checks when the rows first go to the device (``rows``, ``stacked``), and one
``torch.cuda.synchronize`` at the end of the run (its ``seconds``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from miaudit.errors import ConfigError
from miaudit.runtime.devices import to_device
from miaudit.runtime.malloc import keep_freed_memory
from miaudit.runtime.progress import progress_bar
from miaudit.train.augment import augment_seed, build_augmentation
from miaudit.train.checkpoints import CheckpointSpec, steps_per_epoch
from miaudit.train.common import EpochCallback, EpochInfo, TrainedModel, lr_at
from miaudit.train.recipe import Recipe

Batch = tuple[torch.Tensor, torch.Tensor]  # features, labels of one step (all models' rows)
State = dict[str, torch.Tensor]
BatchAugment = Callable[[torch.Tensor], torch.Tensor]


class Strategy(Protocol):
    """How one training run turns batches into optimizer steps: one model or several."""

    # The optimizer the loop sets the learning rate of before every step.
    optimizer: torch.optim.Optimizer
    # The model an epoch callback sees (None: the strategy takes no callbacks).
    module: nn.Module | None
    # How many models one step trains (``losses`` and ``snapshots`` have one entry each).
    models: int

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> None:
        """Forward, loss, backward and optimizer step on one batch; add its loss to the epoch's."""
        ...

    def epoch_losses(self) -> list[float]:
        """Each model's mean loss over the epoch just run; the next epoch's starts at zero."""
        ...

    def snapshots(self) -> list[State]:
        """Each model's weights now, as detached CPU copies (a checkpoint)."""
        ...

    def resume(self) -> None:
        """Back to train mode after an epoch callback (which may have switched to eval)."""
        ...


def index_batches(x: torch.Tensor, y: torch.Tensor, rows: torch.Tensor, batch_size: int
                  ) -> Iterator[Batch]:  # fmt: skip
    """Batches of ``batch_size`` rows along the last axis of ``rows`` ([n], or [K, n] for K
    models side by side: a batch then holds each model's slice, model after model)."""
    for lo in range(0, rows.shape[-1], batch_size):
        batch = rows[..., lo : lo + batch_size].reshape(-1)
        yield x.index_select(0, batch), y.index_select(0, batch)


class ShuffledBatches:
    """Each epoch (each iteration) a fresh order of every model's rows, cut into batches.

    Model ``k`` draws its ``randperm`` from a generator seeded with ``seeds[k]``. Without
    ``members`` the rows are those of ``x``/``y`` (one model's training rows); with
    ``members`` ([K, n] row ids into ``x``/``y``, on the CPU) model ``k`` trains on
    ``members[k]``, so K models share one copy of the data.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, seeds: Sequence[int], batch_size: int,
                 members: torch.Tensor | None = None) -> None:  # fmt: skip
        self.x, self.y, self.batch_size, self.members = x, y, batch_size, members
        self.n = len(x) if members is None else int(members.shape[1])
        self.shufflers = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]

    def __iter__(self) -> Iterator[Batch]:
        order = torch.stack([torch.randperm(self.n, generator=g) for g in self.shufflers])
        if self.members is not None:
            order = self.members.gather(1, order)
        rows = to_device(order, self.x.device)  # pinned, not blocking, on CUDA
        return index_batches(self.x, self.y, rows, self.batch_size)


def augmenter(recipe: Recipe, input_shape: Sequence[int], seed: int) -> BatchAugment | None:
    """The recipe's batch augmentation with its own generator (seeded from the model's seed,
    independent of init and shuffling); None without augmentation."""
    augment = build_augmentation(recipe.augment, input_shape)
    if augment is None:
        return None
    generator = torch.Generator(device="cpu").manual_seed(augment_seed(seed))
    return lambda xb: augment(xb, generator)


def run_epoch(
    strategy: Strategy,
    batches: Iterable[Batch],
    recipe: Recipe,
    step: int,
    total_steps: int,
    *,
    augment: BatchAugment | None = None,
    keep: Iterable[int] = (),
    snapshots: Sequence[dict[int, State]] = (),
) -> tuple[int, float]:
    """One pass over ``batches``, from optimizer step ``step`` (0-based) of ``total_steps``;
    returns the step count after it and the last step's learning rate.

    After each step whose 1-based count is in ``keep``, model ``k``'s weights are copied into
    ``snapshots[k][count]``."""
    lr = recipe.lr
    for xb, yb in batches:
        lr = lr_at(recipe, step, total_steps)
        for group in strategy.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)  # a group may scale it (airbench94)
        strategy.step(xb if augment is None else augment(xb), yb)
        step += 1
        if step in keep:
            for k, state in enumerate(strategy.snapshots()):
                snapshots[k][step] = state
    return step, lr


@dataclass
class LoopResult:
    """What a run of the loop leaves besides the trained weights (in the strategy's models)."""

    losses: list[list[float]]  # per model, the mean loss of each epoch
    snapshots: list[dict[int, State]]  # per model, {step: weights}
    seconds: float  # the whole run, all models together
    steps: int  # optimizer steps taken

    def model(self, k: int, module: nn.Module, recipe: Recipe, seed: int, n_train: int,
              num_classes: int, input_shape: tuple[int, ...], privacy: dict[str, Any] | None = None,
              ) -> TrainedModel:  # fmt: skip
        """Model ``k`` of the run as a :class:`TrainedModel` (``module`` in eval mode). Its
        ``train_seconds`` is its share of the run's, so ``samples_per_second`` is the run's."""
        share = self.seconds / len(self.losses)
        return TrainedModel(
            module=module.eval(),
            recipe=recipe,
            seed=int(seed),
            train_seconds=share,
            samples_per_second=n_train * recipe.epochs / share if share > 0 else float("inf"),
            n_train=n_train,
            num_classes=num_classes,
            input_shape=input_shape,
            losses=self.losses[k],
            privacy=privacy,
            snapshots=self.snapshots[k],
        )


def train_loop(
    strategy: Strategy,
    batches: Iterable[Batch],
    recipe: Recipe,
    n_train: int,
    device: torch.device,
    *,
    checkpoints: CheckpointSpec | None = None,
    augment: BatchAugment | None = None,
    on_epoch_end: EpochCallback | None = None,
    progress: bool = False,
    desc: str = "training",
) -> LoopResult:
    """Train ``strategy``'s models for ``recipe.epochs`` epochs over ``batches`` (each model on
    ``n_train`` rows, which fixes the steps per epoch and so the schedule and checkpoints).

    ``checkpoints``: the steps whose weights are kept (``snapshots``); ``augment``: applied to
    every batch; ``on_epoch_end``: called after each epoch with model 0's loss (the strategy
    must have a ``module``); ``progress``: a bar over the epochs (``desc``)."""
    if on_epoch_end is not None and strategy.module is None:
        raise ConfigError("epoch callbacks need a trainer of one model (not stacked).")
    keep = checkpoints.keep_steps(recipe, n_train) if checkpoints else set()
    total_steps = steps_per_epoch(recipe, n_train) * recipe.epochs
    result = LoopResult([[] for _ in range(strategy.models)],
                        [{} for _ in range(strategy.models)], 0.0, 0)  # fmt: skip
    start = time.perf_counter()
    # keep_freed_memory: every step allocates the same large activations (a causal LM's loss
    # chunks, 128 MiB, are past glibc's mmap threshold: fresh zeroed pages each time without
    # it); a LoRA epoch of SmolLM2 on 2 cores: 25.3-26.1 s -> 23.6-24.0 s on 48 texts
    with keep_freed_memory(), progress_bar(recipe.epochs, desc, "epoch",
                                           enabled=progress) as bar:  # fmt: skip
        for epoch in range(recipe.epochs):
            result.steps, lr = run_epoch(
                strategy, batches, recipe, result.steps, total_steps,
                augment=augment, keep=keep, snapshots=result.snapshots,
            )  # fmt: skip
            losses = strategy.epoch_losses()
            for k, loss in enumerate(losses):
                result.losses[k].append(loss)
            bar.set_postfix(loss=f"{sum(losses) / len(losses):.4f}", lr=f"{lr:.3g}",
                            refresh=False)  # fmt: skip
            bar.update(1)
            if on_epoch_end is not None:
                on_epoch_end(EpochInfo(epoch + 1, recipe.epochs, losses[0], lr, strategy.module))
                strategy.resume()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    result.seconds = time.perf_counter() - start
    return result
