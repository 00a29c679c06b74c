"""Calibration via forgetting (Watson et al., ICLR 2022, §3): reference models made by
training copies of the target further on public data only (warm start).

The copies forget the target's members at the rate any model forgets data it stops seeing,
so their scores calibrate the target's without training references from scratch. They enter
the bank as extra models that are OUT for every audit sample.
"""

from __future__ import annotations

import copy

import torch

from miaudit.runtime.threads import cpu_threads
from miaudit.train.common import TrainedModel, derive_seeds, make_optimizer
from miaudit.train.engine import ShuffledBatches, train_loop
from miaudit.train.loop import PlainStrategy
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
    module = copy.deepcopy(target.module).to(device).train()
    optimizer = make_optimizer(recipe, list(module.parameters()))
    # one model's rows, shuffled by its own generator: the loop every trainer uses
    batches = ShuffledBatches(rows.x, rows.y, [derive_seeds(seed)[1]], recipe.batch_size)
    with cpu_threads(1 if device.type == "cpu" else None):  # as train_models, measured there
        result = train_loop(PlainStrategy(module, optimizer, recipe, device), batches, recipe,
                            len(rows.idx), device)
    return result.model(0, module, recipe, seed, len(rows.idx), target.num_classes,
                        target.input_shape)
