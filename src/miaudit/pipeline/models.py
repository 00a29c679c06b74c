"""The models of an audit: the design's models trained or loaded (with their checkpoints)
from the run's recipes (resolved once, by its plan: :func:`miaudit.config.run.resolve_recipes`),
and the calibration-via-forgetting copies of the target."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from miaudit.config import RunConfig, compute_section
from miaudit.config.recipes import Recipes as Recipes  # the run's recipes: resolved by its plan
from miaudit.config.recipes import resolve_recipes as resolve_recipes
from miaudit.data import Dataset
from miaudit.data.dataset import require_labels
from miaudit.errors import ConfigError
from miaudit.protocol import Design
from miaudit.train import CheckpointSpec, ModelCache, TrainedModel, key_for
from miaudit.train.cluster import Compute
from miaudit.train.forgetting import forget
from miaudit.train.gradient_canaries import GradientCanaries, GradientCanaryRecord
from miaudit.train.model_cache import forgetting_key


def check_labels(recipes: Recipes, dataset: Dataset) -> None:
    """Texts without labels (:attr:`miaudit.data.Dataset.labelled`) train causal LMs only: a
    DataError, the loader's own message for the missing label column, when the target's or
    the references' recipe is a classifier (text-cnn, minilm, ...)."""
    if dataset.labelled:
        return
    from miaudit.models.text import CAUSAL_LM_ARCHITECTURES

    for where, recipe in (("recipe", recipes.target), ("reference_recipe", recipes.reference)):
        if recipe.architecture not in CAUSAL_LM_ARCHITECTURES:
            require_labels(dataset, f"{where}.architecture {recipe.architecture!r} (a "
                                    "classifier)")


def checkpoint_spec(cfg: RunConfig) -> CheckpointSpec | None:
    """The config's checkpoints, or None when it keeps none."""
    spec = CheckpointSpec(tuple(cfg.checkpoints.epochs), tuple(cfg.checkpoints.steps))
    return spec or None


def run_compute(cfg: RunConfig) -> Compute:
    """Where the config's models train (its ``compute`` section, checked)."""
    compute: Compute = compute_section(cfg.compute).to_compute()
    return compute


def train_design(
    cfg: RunConfig, recipes: Recipes, dataset: Dataset, design: Design, cache: ModelCache,
    device: str, progress: bool, target_dataset: Dataset | None = None,
) -> tuple[list[TrainedModel], GradientCanaryRecord | None]:  # fmt: skip
    """Every model of the design, from the cache or trained (models sharing a recipe and a
    dataset train together, stacked where the trainer can), each with its checkpoints when the
    config keeps some (target and references at the same positions). `target_dataset`: what
    the target trains on when it differs from `dataset` (canaries' labels; its fingerprint
    makes the target's cache key). The misses train where ``cfg.compute`` says (this machine,
    or a Ray cluster: the same weights, see :mod:`miaudit.train.cluster`).

    With gradient canaries (``canaries.kind: gradient``) the target trains on this machine
    with them (:meth:`ModelCache.get_or_train_with_canaries`, its own cache key) and their
    record comes back second (None otherwise); the references are as without them."""
    check_labels(recipes, dataset)  # a classifier on texts without labels: before training
    spec = checkpoint_spec(cfg)
    compute = run_compute(cfg)
    seeds = [cfg.seed * 10_000 + m for m in range(design.n_models)]
    models: list[TrainedModel | None] = [None] * design.n_models
    others = [m for m in range(design.n_models) if m != design.target]
    target_data = target_dataset or dataset
    record = None
    if cfg.canaries.white_box:
        models[design.target], record = cache.get_or_train_with_canaries(
            target_data.fingerprint(), design.training_rows(design.target), recipes.target,
            seeds[design.target], gradient_canaries(cfg), device,
            features=target_data.features, labels=target_data.labels,
            num_classes=target_data.num_classes, progress=progress,
        )  # fmt: skip
        plan = [(recipes.reference, dataset, others)]
    elif recipes.target == recipes.reference and target_data is dataset:
        # one call: all models can train stacked together
        plan = [(recipes.target, dataset, [design.target, *others])]
    else:
        plan = [(recipes.target, target_data, [design.target]),
                (recipes.reference, dataset, others)]
    for recipe, data, members in plan:
        if not members:
            continue
        trained = cache.get_or_train_many(
            data.fingerprint(),
            [(design.training_rows(m), seeds[m]) for m in members],
            recipe,
            device,
            features=data.features,
            labels=data.labels,
            num_classes=data.num_classes,
            progress=progress,
            checkpoints=spec,
            compute=compute,
        )
        for m, model in zip(members, trained, strict=True):
            models[m] = model
    return [m for m in models if m is not None], record


def gradient_canaries(cfg: RunConfig) -> GradientCanaries:
    """The run's white-box gradient canaries (``canaries.kind: gradient``), seeded by the
    run's seed (their inclusion, coordinates or directions, and per-step sampling)."""
    c = cfg.canaries
    return GradientCanaries(c.count, kind=c.direction, seed=cfg.seed,
                            coordinates=c.coordinates, probe_rows=c.probe_rows)


def forgetting_models(
    cfg: RunConfig, dataset: Dataset, design: Design, target: TrainedModel, cache: ModelCache,
    device: str,
) -> list[TrainedModel]:  # fmt: skip
    """Calibration-via-forgetting copies of the target, fine-tuned on the public pool (on
    this machine, whatever ``cfg.compute`` says: each copy starts from the target's weights,
    which a Ray task of :mod:`miaudit.train.cluster` does not carry)."""
    if cfg.forgetting.models == 0:
        return []
    if design.split.public.size == 0:
        raise ConfigError("forgetting needs a public pool: give split.public some samples.")
    changes: dict[str, Any] = {"epochs": cfg.forgetting.epochs}
    if cfg.forgetting.lr is not None:
        changes["lr"] = cfg.forgetting.lr
    if cfg.forgetting.batch_size is not None:
        changes["batch_size"] = cfg.forgetting.batch_size
    recipe = target.recipe.replace(**changes)
    rows = np.sort(design.split.public)
    target_key = key_for(dataset.fingerprint(), design.training_rows(design.target),
                         target.recipe, target.seed, dataset.num_classes)  # fmt: skip
    if cfg.canaries.white_box and target.cache_key:  # a copy of the canary-trained target
        target_key = target.cache_key
    copies = []
    for k in range(cfg.forgetting.models):
        seed = cfg.seed * 10_000 + 5_000 + k
        key = forgetting_key(target_key, dataset.fingerprint(), rows, recipe, seed)
        copies.append(cache.get_or_make(
            key,
            functools.partial(forget, target, recipe, dataset.features, dataset.labels, rows,
                              seed, device),
            recipe=recipe, seed=seed, input_shape=target.input_shape,
            num_classes=dataset.num_classes, device=device,
            dataset_fingerprint=dataset.fingerprint(), indices=rows,
        ))  # fmt: skip
    return copies
