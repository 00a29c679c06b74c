"""The training loop: one resident tensor per dataset, index-sliced batches, no DataLoader.

Speed matters (audits train hundreds of reference models), so the loop keeps the training rows
as a single tensor on the device, draws one ``randperm`` per epoch from a local generator and
slices batches by index. The only host-device syncs are one per epoch (the mean loss).
"""

from __future__ import annotations

import math
import time

import torch
from torch import nn
from torch.nn import functional as F

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.models.text import CAUSAL_LM_ARCHITECTURES
from miaudit.runtime.progress import progress_bar
from miaudit.runtime.threads import cpu_threads
from miaudit.train import dp
from miaudit.train.augment import Augmentation, augment_seed, build_augmentation
from miaudit.train.checkpoints import CheckpointSpec
from miaudit.train.common import (
    EpochCallback,
    EpochInfo,
    TrainedModel,
    derive_seeds,
    isolated_rng,
    lr_at,
    make_optimizer,
    snapshot,
)
from miaudit.train.recipe import Recipe
from miaudit.train.rows import ArrayLike, training_rows


def is_causal_lm(module: nn.Module) -> bool:
    """Whether ``module`` is a causal language model (``causal_lm = True`` on its class, as
    :class:`miaudit.models.text.CausalLM`): it trains on the next-token loss, not on labels."""
    return bool(getattr(module, "causal_lm", False))


def _lm_loss(module: nn.Module, xb: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of a causal LM on float token ids ``xb`` [B, T]
    (:func:`miaudit.models.text.next_token_loss`; imported here, not at module import)."""
    from miaudit.models.text import next_token_loss, token_ids

    return next_token_loss(module(xb), token_ids(xb), module.pad_id)


def _train_epoch(
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    recipe: Recipe,
    x: torch.Tensor,
    y: torch.Tensor,
    order: torch.Tensor,
    step: int,
    total_steps: int,
    augment: Augmentation | None = None,
    aug_generator: torch.Generator | None = None,
    keep: set[int] | None = None,
    snapshots: dict[int, dict[str, torch.Tensor]] | None = None,
) -> tuple[float, float]:
    """One pass over ``order``; returns the mean loss and the last step's learning rate.

    ``augment`` (optional) transforms each batch before the forward pass, drawing from
    ``aug_generator``. After each optimizer step whose 1-based count is in ``keep``, the
    weights are copied into ``snapshots[count]``.
    """
    total = torch.zeros((), device=x.device)
    lr = recipe.lr
    causal = is_causal_lm(module)
    for lo in range(0, len(order), recipe.batch_size):
        batch = order[lo : lo + recipe.batch_size]
        lr = lr_at(recipe, step, total_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        xb = x.index_select(0, batch)
        if augment is not None:
            xb = augment(xb, aug_generator)
        if causal:  # next-token loss over non-pad targets; labels are unused
            loss = _lm_loss(module, xb)
        else:
            loss = F.cross_entropy(
                module(xb), y.index_select(0, batch), label_smoothing=recipe.label_smoothing
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total.add_(loss.detach(), alpha=len(batch))
        step += 1
        if keep and step in keep and snapshots is not None:
            snapshots[step] = snapshot(module)
    return float(total) / len(order), lr  # float(): the one host-device sync per epoch


def train_model(
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
    """Train ``recipe`` on rows ``indices`` of ``features``/``labels``; same seed, same weights.

    ``features`` is float [N, ...], ``labels`` int [N] (numpy or torch, any device).
    ``num_classes`` defaults to ``labels.max() + 1`` over all rows, so models trained on
    different subsets of one dataset share an output size. Row order in ``indices`` is
    irrelevant. ``on_epoch_end`` (optional) runs after each epoch, e.g. to evaluate.
    ``num_threads`` sets torch's CPU threads for this call only (``None``: unchanged); small
    models on a busy machine train several times faster with 1. ``checkpoints`` (optional)
    names epochs/steps whose weights are kept in the result's ``snapshots`` ``{step: state}``.
    A recipe with ``dp`` set trains with DP-SGD (:func:`miaudit.train.dp.train_model_dp`).
    """
    if recipe.dp is not None:
        if recipe.architecture in CAUSAL_LM_ARCHITECTURES:
            raise ConfigError(
                f"recipe.dp (DP-SGD) is not supported for the causal LM "
                f"'{recipe.architecture}': Opacus computes per-sample gradients of a "
                "classification loss on labels, not of a next-token loss over padded "
                "sequences; train it without dp."
            )
        with cpu_threads(num_threads):
            return dp.train_model_dp(
                recipe, features, labels, indices, seed, device, num_classes, progress,
                on_epoch_end=on_epoch_end, desc=desc, checkpoints=checkpoints,
            )  # fmt: skip
    device = torch.device(device)
    rows = training_rows(features, labels, indices, device, num_classes)
    idx, x, y, n_classes = rows.idx, rows.x, rows.y, rows.n_classes
    init_seed, shuffle_seed = derive_seeds(seed)
    input_shape = tuple(int(d) for d in x.shape[1:])
    n = len(idx)
    steps_per_epoch = math.ceil(n / recipe.batch_size)
    total_steps = steps_per_epoch * recipe.epochs
    shuffler = torch.Generator(device="cpu").manual_seed(shuffle_seed)
    augment = build_augmentation(recipe.augment, input_shape)
    aug_generator = torch.Generator(device="cpu").manual_seed(augment_seed(seed))
    keep = checkpoints.keep_steps(recipe, n) if checkpoints else set()
    snapshots: dict[int, dict[str, torch.Tensor]] = {}

    losses: list[float] = []
    start = time.perf_counter()
    with isolated_rng(device, init_seed), cpu_threads(num_threads):
        module = build_model(recipe.architecture, input_shape, n_classes, **recipe.arch_params)
        module.to(device).train()
        optimizer = make_optimizer(recipe, list(module.parameters()))
        bar = progress_bar(recipe.epochs, desc, "epoch", enabled=progress)
        step = 0
        with bar:
            for epoch in range(recipe.epochs):
                order = torch.randperm(n, generator=shuffler).to(device, non_blocking=True)
                loss, lr = _train_epoch(
                    module, optimizer, recipe, x, y, order, step, total_steps,
                    augment, aug_generator, keep, snapshots,
                )  # fmt: skip
                step += steps_per_epoch
                losses.append(loss)
                bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.3g}")
                bar.update(1)
                if on_epoch_end is not None:
                    on_epoch_end(EpochInfo(epoch + 1, recipe.epochs, loss, lr, module))
                    module.train()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    module.eval()
    return TrainedModel(
        module=module,
        recipe=recipe,
        seed=int(seed),
        train_seconds=seconds,
        samples_per_second=n * recipe.epochs / seconds if seconds > 0 else float("inf"),
        n_train=n,
        num_classes=n_classes,
        input_shape=input_shape,
        losses=losses,
        snapshots=snapshots,
    )
