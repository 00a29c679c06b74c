"""The training loop: one resident tensor per dataset, index-sliced batches, no DataLoader.

Speed matters (audits train hundreds of reference models), so the loop keeps the training rows
as a single tensor on the device, draws one ``randperm`` per epoch from a local generator and
slices batches by index. The only host-device syncs are one per epoch (the mean loss).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.progress import progress_bar
from miaudit.threads import cpu_threads
from miaudit.train.augment import Augmentation, augment_seed, build_augmentation
from miaudit.train.checkpoints import CheckpointSpec
from miaudit.train.recipe import Recipe
from miaudit.train.rows import (  # noqa: F401  (re-exported: trainer.check_indices, ...)
    ArrayLike,
    as_device_tensor,
    check_indices,
    gather_rows,
    infer_num_classes,
    training_rows,
)

log = logging.getLogger(__name__)


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
    privacy: dict | None = None
    # A checkpoint of a longer run: the optimizer steps it had taken (None: the final model).
    step: int | None = None
    # Weights kept during training: {step: state dict on the CPU} (see checkpoints.py) ...
    snapshots: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict, repr=False)
    # ... and, once the cache has made them models, {label (e.g. "epoch5"): model}.
    checkpoints: dict[str, TrainedModel] = field(default_factory=dict, repr=False)


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
    """
    if recipe.schedule == "constant" or total_steps <= 0:
        return recipe.lr
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
    for lo in range(0, len(order), recipe.batch_size):
        batch = order[lo : lo + recipe.batch_size]
        lr = lr_at(recipe, step, total_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        xb = x.index_select(0, batch)
        if augment is not None:
            xb = augment(xb, aug_generator)
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
        from miaudit.train import dp  # imports this module

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


# Thread and process use on CPU, measured on this project's 2-core AMD EPYC (AVX2, torch 2.13 +
# MKL) while other jobs shared it (load average 1.5-4); the issue-7 MLP 40 -> 128 tanh -> 100,
# batch 256; samples/s per CPU-second on one core unless noted (bench/README.md, "Training
# speed (issue 7)", has the commands and runs):
#   train_model (autograd, one model), 1 thread     150-250k (the machine's load moves it)
#   stacked (written-out backward), 1 thread        K=1 220-265k, K=2 ~275k, K=4 ~305k,
#                                                   K=5-12 295-335k, K=16-24 ~310k
#   2 intra-op threads, stacked K=10 (wall)         533k with a free second core (1 thread:
#                                                   299k), but 33k (20-107k) beside two busy
#                                                   processes (1 thread: 171k): spinning OpenMP
#                                                   threads wait for a core another job holds
#                                                   (one model there: 3k, vs 91k on 1 thread)
#   2 worker processes, 1 thread each, K=5 each     573-589k at load 1.6-1.9, 273-335k at
#                                                   load 2.7-3.6: they share, never collapse
# So on CPU: 1 intra-op thread per process, up to MAX_STACK models per stacked group, and one
# worker process per core once the work outweighs starting them (see parallel.py).
MAX_STACK = 10


def train_models(
    recipe: Recipe,
    features: ArrayLike,
    labels: ArrayLike,
    index_sets: Sequence[ArrayLike],
    seeds: Sequence[int],
    device: str | torch.device = "cpu",
    num_classes: int | None = None,
    progress: bool = True,
    *,
    num_threads: int | None = None,
    workers: int | None = None,
    max_stack: int = MAX_STACK,
    checkpoints: CheckpointSpec | None = None,
    on_model: ModelCallback | None = None,
) -> list[TrainedModel]:
    """Train one model per (index set, seed) pair: the same models as ``train_model`` calls.

    Jobs with training sets of equal size are trained stacked, up to ``max_stack`` at a time,
    when the architecture allows it (``mlp``; see :mod:`miaudit.train.stacked`); the rest one
    by one. On CPU the groups fan out over ``workers`` processes (``None``:
    ``parallel.default_workers``: one per usable core for a large job, else 1 = this
    process), each with ``num_threads`` intra-op threads (``None``: 1 on CPU, which measures
    fastest, see ``MAX_STACK``; unchanged on a GPU). ``max_stack=1`` trains one model at a
    time (still with the stacked path's written-out backward where it applies).
    ``checkpoints`` as for ``train_model`` (each model's ``snapshots``).

    ``on_model(j, model)`` (optional) runs in this process the moment job ``j``'s model is
    complete: a stacked group's models when the group finishes (before the next group starts
    in this process), a worker's as its result arrives. The cache stores each model there, so
    an interrupted run keeps every model that finished.

    Progress (``progress``, see :mod:`miaudit.progress`): a bar of models done when there is
    more than one group, and in this process each group's epochs.
    """
    from miaudit.train import parallel, stacked  # both import this module

    if len(index_sets) != len(seeds):
        raise ConfigError(f"got {len(index_sets)} index sets but {len(seeds)} seeds; pair them.")
    device = torch.device(device)
    on_cpu = device.type == "cpu"
    x = as_device_tensor(features, device, torch.float32)
    y = as_device_tensor(labels, device, torch.int64)
    n_classes = infer_num_classes(y) if num_classes is None else int(num_classes)
    sizes = [len(check_indices(i, len(x))) for i in index_sets]
    threads = (1 if on_cpu else None) if num_threads is None else int(num_threads)
    if workers is None:
        workers = parallel.default_workers(sum(sizes) * recipe.epochs, len(seeds)) if on_cpu else 1
    if int(workers) < 1:
        raise ConfigError(f"workers must be >= 1 or None, got {workers}.")
    workers = int(workers) if on_cpu else 1
    groups = stacked.plan_groups(sizes, stacked.can_stack(recipe), max_stack, workers)
    results: list[TrainedModel | None] = [None] * len(seeds)
    # One group shows its own epoch bar; a models-done bar over it would say nothing more.
    bar = progress_bar(len(seeds), f"training {len(seeds)} models", "model",
                       enabled=progress and len(groups) > 1)  # fmt: skip

    def group_done(group: Sequence[int], models: Sequence[TrainedModel]) -> None:
        for j, model in zip(group, models, strict=True):
            results[j] = model
            if on_model is not None:
                on_model(j, model)
        bar.update(len(group))

    with bar:
        if workers > 1 and len(groups) > 1:
            try:
                parallel.train_groups_in_workers(
                    recipe, x, y, index_sets, seeds, groups, n_classes,
                    min(workers, len(groups)), threads or 1, on_group=group_done,
                    checkpoints=checkpoints,
                )  # fmt: skip
            except BrokenProcessPool as exc:
                log.warning("worker processes failed (%s); training in this process", exc)
        # Groups the workers finished are kept (and were handed to on_model): train the rest.
        todo = [g for g in groups if any(results[j] is None for j in g)]
        if todo:
            stacked.train_groups(
                recipe, x, y, index_sets, seeds, todo, device, n_classes,
                progress=progress, num_threads=threads, on_group=group_done,
                checkpoints=checkpoints,
            )  # fmt: skip
    assert all(m is not None for m in results)
    return results  # type: ignore[return-value]


def predict_logits(
    module: nn.Module,
    features: ArrayLike,
    batch_size: int = 1024,
    device: str | torch.device = "cpu",
) -> np.ndarray:
    """Logits float32 [N, C] of ``module`` (moved to ``device``) in eval mode, batched."""
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}.")
    device = torch.device(device)
    was_training = module.training
    module.to(device).eval()
    data = features if isinstance(features, torch.Tensor) else torch.as_tensor(features)
    outs = []
    try:
        with torch.no_grad():
            for lo in range(0, max(len(data), 1), batch_size):
                xb = data[lo : lo + batch_size].to(device=device, dtype=torch.float32)
                outs.append(module(xb).float().cpu())
    finally:
        module.train(was_training)
    return torch.cat(outs).numpy().astype(np.float32, copy=False)
