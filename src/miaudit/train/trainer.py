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
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool

import torch

from miaudit.errors import ConfigError
from miaudit.runtime.devices import check_precision
from miaudit.runtime.progress import progress_bar
from miaudit.runtime.threads import cpu_threads  # noqa: F401  (re-exported)
from miaudit.train import cluster, parallel, stacked
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
# So on CPU: 1 intra-op thread per process, up to MAX_STACK models per stacked group, and one
# worker process per core once the work outweighs starting them (see parallel.py).
MAX_STACK = 10
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
    compute: Compute | None = None,
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
    groups = stacked.plan_groups(sizes, stacked.can_stack(recipe), max_stack, workers)
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
        groups = stacked.plan_groups(sizes, stacked.can_stack(recipe), max_stack, slots)
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
