"""Fan training out over worker processes, each with one intra-op thread.

A small model cannot keep two cores busy from one process: its matrices are too small for
intra-op threads to pay, and on a shared machine spinning OpenMP threads collapse (see the
numbers in :mod:`miaudit.train.trainer`). Separate processes, each training its own stacked
group with one thread, use every core. Workers are started with ``spawn`` (never ``fork``: a
forked child of a process that has used OpenMP can deadlock), receive the data once, and send
back state dicts as numpy arrays; the parent rebuilds ordinary modules from them, so the
models are exactly those an in-process run would train.

The group task (:func:`group_task`, :func:`train_group`) and the rebuild (:func:`rebuild`) are
shared with the Ray path (:mod:`miaudit.train.cluster`), which ships the same task to a
cluster's workers: one worker-side training code for both.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from miaudit.models import build_model
from miaudit.runtime import progress
from miaudit.train.checkpoints import CheckpointSpec
from miaudit.train.common import TrainedModel, isolated_rng
from miaudit.train.recipe import Recipe
from miaudit.train.stacked import train_groups

# Spawning a worker costs about 2-4 s (importing torch), so fan out only when the work is
# worth it: with ~200k samples/s per core, 5M samples take ~25 s on one core and ~13 s + start
# on two.
MIN_SAMPLES_FOR_WORKERS = 5_000_000
# Set (to any value) in processes that are themselves one of many parallel workers, e.g. a
# study's sweep workers: the trainer then never starts processes of its own, which would
# oversubscribe the cores, and no progress bars are drawn. Inherited by every child process.
NESTED_ENV = progress.NESTED_ENV


def default_workers(samples: int, models: int) -> int:
    """Training processes when the caller names none: one per usable core for at least
    `MIN_SAMPLES_FOR_WORKERS` samples × epochs in all, else 1 (this process); 1 inside a
    process marked with `NESTED_ENV`."""
    if os.environ.get(NESTED_ENV) or samples < MIN_SAMPLES_FOR_WORKERS:
        return 1
    return max(1, min(usable_cpus(), models))


_DATA: dict[str, Any] = {}  # each worker's copy of the features and labels


def usable_cpus() -> int:
    """Cores this process may run on (its affinity mask where the OS reports one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _init_worker(features: np.ndarray, labels: np.ndarray, num_threads: int) -> None:
    torch.set_num_threads(num_threads)
    _DATA["x"] = torch.from_numpy(features)
    _DATA["y"] = torch.from_numpy(labels)


def group_task(
    recipe: Recipe,
    index_sets: Sequence[Any],
    seeds: Sequence[int],
    group: Sequence[int],
    num_classes: int,
    checkpoints: CheckpointSpec | None,
    num_threads: int | None = None,
) -> dict[str, Any]:
    """One group of jobs (indices into ``index_sets``/``seeds``) as plain data for a worker:
    what :func:`train_group` trains. ``num_threads``: intra-op threads for a worker that has
    not set them (``None``: leave them as they are)."""
    return {
        "recipe": recipe.to_dict(),
        "index_sets": [np.asarray(index_sets[j]) for j in group],
        "seeds": [int(seeds[j]) for j in group],
        "num_classes": int(num_classes),
        "checkpoints": checkpoints.to_dict() if checkpoints else None,
        "num_threads": num_threads,
    }


def train_group(
    task: Mapping[str, Any],
    features: torch.Tensor,
    labels: torch.Tensor,
    device: str | torch.device = "cpu",
) -> list[TrainedModel]:
    """Train one :func:`group_task` in this (worker) process, stacked where the recipe
    stacks: the models an in-process ``train_models`` call trains for those jobs."""
    checkpoints = task["checkpoints"]
    return train_groups(
        Recipe.from_dict(task["recipe"]),
        features,
        labels,
        task["index_sets"],
        task["seeds"],
        [list(range(len(task["seeds"])))],
        device,
        task["num_classes"],
        num_threads=task.get("num_threads"),
        checkpoints=CheckpointSpec(**checkpoints) if checkpoints else None,
    )


def _train_group(task: dict[str, Any]) -> list[dict[str, Any]]:
    """Train one group in a pool worker; the models as plain data (numpy state dicts)."""
    models = train_group(task, _DATA["x"], _DATA["y"])  # threads: set by the initializer
    return [_to_plain(m) for m in models]


def model_fields(model: TrainedModel) -> dict[str, Any]:
    """What a worker sends back of a model besides its weights (plain data)."""
    return {
        "seed": model.seed,
        "train_seconds": model.train_seconds,
        "samples_per_second": model.samples_per_second,
        "n_train": model.n_train,
        "num_classes": model.num_classes,
        "input_shape": list(model.input_shape),
        "losses": list(model.losses),
        "privacy": model.privacy,  # DP-SGD models: their accounting
    }


def _to_plain(model: TrainedModel) -> dict[str, Any]:
    return {
        **model_fields(model),
        "state": {k: v.detach().cpu().numpy() for k, v in model.module.state_dict().items()},
        "snapshots": {
            step: {k: v.numpy() for k, v in state.items()}
            for step, state in model.snapshots.items()
        },
    }


def rebuild(
    fields: Mapping[str, Any],
    state: Mapping[str, torch.Tensor],
    snapshots: Mapping[int, Mapping[str, torch.Tensor]],
    recipe: Recipe,
    device: torch.device,
    *,
    node: str = "local",
    trained_on: str = "cpu",
) -> TrainedModel:
    """A worker's model (:func:`model_fields`, its state dict and snapshots) as an ordinary
    module on ``device``, as ``build_model`` makes it; ``node``/``trained_on``: where it
    trained (``TrainedModel.node``/``device``)."""
    with isolated_rng(torch.device("cpu"), 0):  # leave the caller's RNG alone
        module = build_model(
            recipe.architecture, tuple(fields["input_shape"]), fields["num_classes"],
            **recipe.arch_params,
        )  # fmt: skip
    module.load_state_dict(dict(state))
    return TrainedModel(
        module=module.to(device).eval(),
        recipe=recipe,
        seed=fields["seed"],
        train_seconds=fields["train_seconds"],
        samples_per_second=fields["samples_per_second"],
        n_train=fields["n_train"],
        num_classes=fields["num_classes"],
        input_shape=tuple(fields["input_shape"]),
        losses=list(fields["losses"]),
        privacy=fields.get("privacy"),
        snapshots={int(step): dict(s) for step, s in snapshots.items()},
        node=node,
        device=trained_on,
    )


def _from_plain(plain: dict[str, Any], recipe: Recipe, device: torch.device) -> TrainedModel:
    def tensors(state: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(v) for k, v in state.items()}

    snapshots = {step: tensors(state) for step, state in plain["snapshots"].items()}
    return rebuild(plain, tensors(plain["state"]), snapshots, recipe, device)


def train_groups_in_workers(
    recipe: Recipe,
    features: torch.Tensor,
    labels: torch.Tensor,
    index_sets: Sequence[np.ndarray],
    seeds: Sequence[int],
    groups: Sequence[Sequence[int]],
    num_classes: int,
    workers: int,
    num_threads: int = 1,
    on_group: Callable[[list[int], list[TrainedModel]], None] | None = None,
    checkpoints: CheckpointSpec | None = None,
) -> list[TrainedModel]:
    """Train each group of jobs (indices into ``index_sets``/``seeds``) in a pool of
    ``workers`` spawned processes; models in job order, on the CPU.

    ``on_group(group, models)`` runs in this process as each group's result arrives (e.g. to
    cache the models before the other groups finish).

    Raises ``concurrent.futures.process.BrokenProcessPool`` if the workers cannot start
    (e.g. a ``__main__`` script without an ``if __name__ == "__main__":`` guard).
    """
    x = np.ascontiguousarray(features.detach().cpu().numpy())
    y = np.ascontiguousarray(labels.detach().cpu().numpy())
    results: list[TrainedModel | None] = [None] * len(seeds)
    context = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_init_worker,
        initargs=(x, y, num_threads),
    ) as pool:
        futures = {
            pool.submit(
                _train_group,
                group_task(recipe, index_sets, seeds, group, num_classes, checkpoints),
            ): group
            for group in groups
        }
        for future in cf.as_completed(futures):
            group = futures[future]
            models = [_from_plain(p, recipe, torch.device("cpu")) for p in future.result()]
            for j, model in zip(group, models, strict=True):
                results[j] = model
            if on_group is not None:
                on_group(list(group), models)
    assert all(m is not None for m in results)
    return results  # type: ignore[return-value]
