"""Which trainer trains a design's models: stacked groups of equal-sized jobs (``stacked``),
fanned out over worker processes on CPU (``parallel``) or over a Ray cluster (``cluster``,
when ``compute`` says so), else one by one (``loop``).

Every path runs the one training loop (:mod:`miaudit.train.engine`) with its own strategy.
Re-exports the training API (``train_model``, ``TrainedModel``, ...) so callers import one
module; the trainers themselves import only the layers below them (``common``, ``engine``,
``loop``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool

import torch

from miaudit.errors import ConfigError
from miaudit.runtime.devices import check_precision
from miaudit.runtime.progress import progress_bar
from miaudit.runtime.threads import cpu_threads  # noqa: F401  (re-exported)
from miaudit.train import cluster, parallel, stacked, stacked_func
from miaudit.train.checkpoints import CheckpointSpec
from miaudit.train.cluster import Compute
from miaudit.train.common import (  # noqa: F401  (re-exported: trainer.TrainedModel, ...)
    EpochCallback,
    EpochInfo,
    ModelCallback,
    TrainedModel,
    derive_seeds,
    isolated_rng,
    lr_at,
    make_optimizer,
    predict_logits,
    snapshot,
)
from miaudit.train.loop import train_model  # noqa: F401  (re-exported)
from miaudit.train.recipe import Recipe
from miaudit.train.rows import (  # noqa: F401  (re-exported: trainer.check_indices, ...)
    ArrayLike,
    as_device_tensor,
    check_indices,
    gather_rows,
    infer_num_classes,
    training_rows,
)

# What other modules import from here: its own names and those it re-exports.
__all__ = [
    "AUTO_STACK", "CPU_STACK", "GPU_MAX_STACK", "GPU_MEMORY_SHARE", "GPU_REMOTE_BYTES",
    "LARGE_ARCHITECTURES", "MAX_STACK", "STACK_ENV", "ArrayLike", "EpochCallback", "EpochInfo",
    "ModelCallback", "TrainedModel", "as_device_tensor", "check_indices", "cpu_threads",
    "derive_seeds", "gather_rows", "infer_num_classes", "isolated_rng", "lr_at",
    "make_optimizer", "predict_logits", "snapshot", "stack_size", "train_model",
    "train_models", "training_rows",
]

log = logging.getLogger(__name__)


# Thread and process use on CPU, measured on this project's 2-core AMD EPYC (AVX2, torch 2.13 +
# MKL) while other jobs shared it (load average 1.5-4); the training benchmark's MLP
# 40 -> 128 tanh -> 100, batch 256; samples/s per CPU-second on one core unless noted
# (bench/README.md, "Training speed", has the commands and runs):
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
# So on CPU: 1 intra-op thread per process, up to CPU_STACK models per stacked group, and one
# worker process per core once the work outweighs starting them (see parallel.py).
CPU_STACK = 10
# How many models one stacked group holds (``stack_size``), unless the caller names a number
# (``max_stack``) or the environment does (STACK_ENV, e.g. MIAUDIT_STACK=16):
# * the written-out mlp (``stacked.can_stack``) on a CPU: CPU_STACK, measured above;
# * the torch.func architectures (CNNs, ResNet, mlp with dropout) on a CPU: 1, one by one as
#   before. Not measured: a conv net's CPU step is arithmetic, not the Python overhead stacking
#   saves, and a grouped convolution is not known to beat K plain ones there; the bench
#   (bench/bench_stacked_cnn.py) measures both ways;
# * on a CUDA GPU, either path: as many as fit GPU_MEMORY_SHARE of the free memory by a rough
#   per-model estimate (``stacked_func.bytes_per_model``), at most GPU_MAX_STACK (where a
#   step's launches are amortised; unmeasured). A Ray driver cannot see its workers' GPUs:
#   for tasks given GPUs it assumes GPU_REMOTE_BYTES free (a 16 GiB card) by the same rule.
AUTO_STACK = 0  # max_stack's default: the rule above
MAX_STACK = AUTO_STACK
STACK_ENV = "MIAUDIT_STACK"
GPU_MAX_STACK = 64
GPU_MEMORY_SHARE = 0.5
GPU_REMOTE_BYTES = 16 * 2**30
# Pretrained transformers are large matrix products (SmolLM2-135M: 135M parameters): trained
# one at a time on the CPU, each takes torch's threads (every core, unless a study worker was
# given fewer) as intra-op threads; the rule above is for small models.
LARGE_ARCHITECTURES = ("hf-causal-lm", "minilm", "hf")


def _worker_count(workers: int | None, on_cpu: bool, samples: int, models: int) -> int:
    """Training processes: as asked (checked), ``parallel.default_workers`` for ``None``; 1 off
    the CPU (a GPU trains in this process)."""
    if workers is None:
        workers = parallel.default_workers(samples, models) if on_cpu else 1
    if int(workers) < 1:
        raise ConfigError(f"workers must be >= 1 or None, got {workers}.")
    return int(workers) if on_cpu else 1


def stack_size(recipe: Recipe, device: torch.device, input_shape: tuple[int, ...],
               num_classes: int, max_stack: int = AUTO_STACK, *, gpu: bool | None = None,
               ) -> int:  # fmt: skip
    """Models per stacked group for ``recipe`` on ``device`` (the rule above): ``max_stack``
    when given (>= 1), else the ``STACK_ENV`` variable's value when set, else by device.
    ``gpu``: whether the models train on a GPU (``None``: ``device`` says)."""
    if int(max_stack) != AUTO_STACK:
        if int(max_stack) < 1:
            raise ConfigError(f"max_stack must be >= 1 (0: chosen per device), got {max_stack}.")
        return int(max_stack)
    if not stacked.stacks(recipe):
        return 1
    env = os.environ.get(STACK_ENV, "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ConfigError(f"{STACK_ENV} must be a positive integer, got {env!r}.")
        return int(env)
    on_gpu = device.type == "cuda" if gpu is None else gpu
    if not on_gpu:
        return CPU_STACK if stacked.can_stack(recipe) else 1
    if device.type == "cuda" and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(device)
    else:  # a Ray driver: the GPUs are the workers'
        free = GPU_REMOTE_BYTES
    per_model = stacked_func.bytes_per_model(recipe, input_shape, num_classes)
    return max(1, min(GPU_MAX_STACK, int(free * GPU_MEMORY_SHARE) // per_model))


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
    max_stack: int = AUTO_STACK,
    checkpoints: CheckpointSpec | None = None,
    on_model: ModelCallback | None = None,
    compute: Compute | None = None,
) -> list[TrainedModel]:
    """Train one model per (index set, seed) pair: the same models as ``train_model`` calls.

    Jobs with training sets of equal size are trained stacked, up to ``max_stack`` at a time
    (``AUTO_STACK``, the default: :func:`stack_size` picks per device), when the recipe allows
    it (``mlp`` with a written-out backward, the other image/tabular architectures through
    ``torch.func``; see :mod:`miaudit.train.stacked`); the rest one by one. On CPU the
    groups fan out over ``workers`` processes (``None``:
    ``parallel.default_workers``: one per usable core for a large job, else 1 = this
    process), each with ``num_threads`` intra-op threads (``None``: 1 on CPU, which measures
    fastest, see ``CPU_STACK``; unchanged on a GPU). ``max_stack=1`` trains one model at a
    time (still with the stacked path's written-out backward where it applies).
    ``checkpoints`` as for ``train_model`` (each model's ``snapshots``).

    ``compute`` (:class:`~miaudit.train.cluster.Compute`; ``None`` or ``executor="local"``:
    this machine, as above): with ``executor="ray"`` the groups are Ray tasks instead, split
    until every task slot of the cluster has one (``workers`` is not used; ``num_threads``
    as on CPU here; the models come back to ``device``). See :mod:`miaudit.train.cluster`.

    ``on_model(j, model)`` (optional) runs in this process the moment job ``j``'s model is
    complete: a stacked group's models when the group finishes (before the next group starts
    in this process), a worker's as its result arrives. The cache stores each model there, so
    an interrupted run keeps every model that finished. Each model's ``node`` and ``device``
    say where it trained (``"local"`` here, else a Ray node id).

    Progress (``progress``, see :mod:`miaudit.runtime.progress`): a bar of models done when there is
    more than one group, and in this process each group's epochs.
    """
    if len(index_sets) != len(seeds):
        raise ConfigError(f"got {len(index_sets)} index sets but {len(seeds)} seeds; pair them.")
    device = torch.device(device)
    if compute is None or compute.executor == "local":  # a Ray task checks on its own device
        check_precision(recipe.precision, device)
    results: list[TrainedModel | None] = [None] * len(seeds)

    def group_done(group: Sequence[int], models: Sequence[TrainedModel]) -> None:
        for j, model in zip(group, models, strict=True):
            if model.node is None:  # trained in this process
                model.node, model.device = "local", device.type
            model.stack = len(group)  # training.json's stack
            results[j] = model
            if on_model is not None:
                on_model(j, model)

    jobs = (recipe, features, labels, index_sets, seeds, device, num_classes, progress,
            num_threads, max_stack, checkpoints)  # fmt: skip
    if compute is not None and compute.uses_ray:
        _train_on_ray(*jobs, compute, group_done)
    else:
        _train_here(*jobs, workers, group_done)
    assert all(m is not None for m in results)
    return results  # type: ignore[return-value]


GroupDone = Callable[[Sequence[int], Sequence[TrainedModel]], None]


def _train_here(
    recipe: Recipe, features: ArrayLike, labels: ArrayLike, index_sets: Sequence[ArrayLike],
    seeds: Sequence[int], device: torch.device, num_classes: int | None, progress: bool,
    num_threads: int | None, max_stack: int, checkpoints: CheckpointSpec | None,
    workers: int | None, group_done: GroupDone,
) -> None:  # fmt: skip
    """``train_models`` on this machine: in this process or in worker processes."""
    on_cpu = device.type == "cpu"
    x = as_device_tensor(features, device, torch.float32)
    y = as_device_tensor(labels, device, torch.int64)
    n_classes = infer_num_classes(y) if num_classes is None else int(num_classes)
    sizes = [len(check_indices(i, len(x))) for i in index_sets]
    workers = _worker_count(workers, on_cpu, sum(sizes) * recipe.epochs, len(seeds))
    stack = stack_size(recipe, device, tuple(x.shape[1:]), n_classes, max_stack)
    groups = stacked.plan_groups(sizes, stacked.stacks(recipe), stack, workers)
    threads = (1 if on_cpu else None) if num_threads is None else int(num_threads)
    if num_threads is None and on_cpu and recipe.architecture in LARGE_ARCHITECTURES:
        concurrent = workers if workers > 1 and len(groups) > 1 else 1
        # torch's own count: a study worker sharing the cores has been given fewer
        threads = max(1, torch.get_num_threads() // concurrent)
    done: set[int] = set()
    # One group shows its own epoch bar; a models-done bar over it would say nothing more.
    bar = progress_bar(len(seeds), f"training {len(seeds)} models", "model",
                       enabled=progress and len(groups) > 1)  # fmt: skip

    def finished(group: Sequence[int], models: Sequence[TrainedModel]) -> None:
        group_done(group, models)
        done.update(group)
        bar.update(len(group))

    with bar:
        if workers > 1 and len(groups) > 1:
            try:
                parallel.train_groups_in_workers(
                    recipe, x, y, index_sets, seeds, groups, n_classes,
                    min(workers, len(groups)), threads or 1, on_group=finished,
                    checkpoints=checkpoints,
                )  # fmt: skip
            except BrokenProcessPool as exc:
                log.warning("worker processes failed (%s); training in this process", exc)
        # Groups the workers finished are kept (and were handed to on_model): train the rest.
        todo = [g for g in groups if any(j not in done for j in g)]
        if todo:
            stacked.train_groups(
                recipe, x, y, index_sets, seeds, todo, device, n_classes,
                progress=progress, num_threads=threads, on_group=finished,
                checkpoints=checkpoints,
            )  # fmt: skip


def _train_on_ray(
    recipe: Recipe, features: ArrayLike, labels: ArrayLike, index_sets: Sequence[ArrayLike],
    seeds: Sequence[int], device: torch.device, num_classes: int | None, progress: bool,
    num_threads: int | None, max_stack: int, checkpoints: CheckpointSpec | None,
    compute: Compute, group_done: GroupDone,
) -> None:  # fmt: skip
    """``train_models`` as Ray tasks (:mod:`miaudit.train.cluster`): the data on the CPU here
    (it goes to the cluster once), the groups split over the cluster's task slots."""
    x = as_device_tensor(features, "cpu", torch.float32)
    y = as_device_tensor(labels, "cpu", torch.int64)
    n_classes = infer_num_classes(y) if num_classes is None else int(num_classes)
    sizes = [len(check_indices(i, len(x))) for i in index_sets]
    threads = 1 if num_threads is None else int(num_threads)
    with cluster.ray_session(compute) as ray:
        slots = cluster.task_slots(ray, compute)
        stack = stack_size(recipe, device, tuple(x.shape[1:]), n_classes, max_stack,
                           gpu=compute.gpus_per_model > 0)  # fmt: skip
        groups = stacked.plan_groups(sizes, stacked.stacks(recipe), stack, slots)
        bar = progress_bar(len(seeds), f"training {len(seeds)} models on Ray", "model",
                           enabled=progress)  # fmt: skip

        def finished(group: Sequence[int], models: Sequence[TrainedModel]) -> None:
            group_done(group, models)
            bar.update(len(group))

        with bar:
            cluster.train_groups_on_ray(
                ray, recipe, x, y, index_sets, seeds, groups, n_classes, compute,
                num_threads=threads, device=device, on_group=finished, checkpoints=checkpoints,
            )  # fmt: skip
