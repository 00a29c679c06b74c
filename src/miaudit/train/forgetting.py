"""Calibration via forgetting (Watson et al., ICLR 2022, §3): reference models made by
training copies of the target further on public data only (warm start).

The copies forget the target's members at the rate any model forgets data it stops seeing,
so their scores calibrate the target's without training references from scratch. They enter
the bank as extra models that are OUT for every audit sample.
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np
import torch

from miaudit.runtime.threads import cpu_threads
from miaudit.train.common import TrainedModel, derive_seeds, make_optimizer
from miaudit.train.loop import _train_epoch
from miaudit.train.recipe import Recipe
from miaudit.train.rows import ArrayLike, training_rows


def forget(
    target: TrainedModel,
    recipe: Recipe,
    features: ArrayLike,
    labels: ArrayLike,
    public_rows: ArrayLike,
    seed: int,
    device: str | torch.device = "cpu",
) -> TrainedModel:
    """A copy of `target` trained for `recipe.epochs` more epochs on `public_rows` only.

    `recipe` gives the fine-tuning optimizer, learning rate, schedule, batch size and epochs;
    its architecture must be the target's. The copy's shuffling comes from `seed`.
    """
    if recipe.architecture != target.recipe.architecture:
        raise ValueError(
            f"forgetting recipe architecture '{recipe.architecture}' differs from the "
            f"target's '{target.recipe.architecture}'."
        )
    device = torch.device(device)
    rows = training_rows(features, labels, public_rows, device, target.num_classes)
    idx, x, y = rows.idx, rows.x, rows.y
    module = copy.deepcopy(target.module).to(device).train()
    optimizer = make_optimizer(recipe, list(module.parameters()))
    shuffler = torch.Generator(device="cpu").manual_seed(derive_seeds(seed)[1])
    steps_per_epoch = math.ceil(len(idx) / recipe.batch_size)
    total_steps = steps_per_epoch * recipe.epochs
    losses = []
    start = time.perf_counter()
    step = 0
    with cpu_threads(1 if device.type == "cpu" else None):  # as train_models, measured there
        for _ in range(recipe.epochs):
            order = torch.randperm(len(idx), generator=shuffler).to(device)
            loss, _ = _train_epoch(module, optimizer, recipe, x, y, order, step, total_steps)
            losses.append(loss)
            step += steps_per_epoch
    seconds = time.perf_counter() - start
    module.eval()
    return TrainedModel(
        module=module,
        recipe=recipe,
        seed=int(seed),
        train_seconds=seconds,
        samples_per_second=len(idx) * recipe.epochs / seconds if seconds > 0 else float("inf"),
        n_train=int(np.asarray(idx).size),
        num_classes=target.num_classes,
        input_shape=target.input_shape,
        losses=losses,
    )
