"""How long a study will take on this device, measured before it starts.

A study that says which pipeline runs its cells build (``Study.run_configs``) gets an estimate
printed by ``miaudit study NAME`` before the first cell runs. It rests on a measurement, not on
a guess:

1. each cell still to run (no valid result file in the study folder) gives its run configs;
   each run's design is drawn as the pipeline draws it, and the models already in the model
   cache are left out (they will be loaded, not trained);
2. per recipe, a few training steps are timed on the device the run names, as the trainer
   will run them: a stacked group of ``trainer.stack_size`` models (1 where the recipe does
   not stack), the recipe's batch size, augmentation and architecture, on the run's own data.
   Two lengths are timed after a warm-up run that pays the one-time costs (CUDA's context,
   kernels chosen, imports), and a line through them gives the seconds per step of a group and
   the fixed seconds of starting one; the probe models are thrown away (never cached);
3. training = for every group the trainer will form, its fixed seconds + its steps (the
   recipe's epochs over the model's training rows) x the seconds per step; querying = every
   model of the bank x its rows x its queries x the measured seconds per row and query.

Cells are assumed to run one after another in one process. Scoring the attacks is not
included (a RAPID scorer, bootstrap intervals), nor loading the data or the cached models.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from miaudit.studies.cells import Cell

# The probe's shortest run is one epoch over at most PROBE_BATCHES batches; its longer run
# repeats that for enough epochs to last about PROBE_SECONDS (at least 2, at most
# PROBE_MAX_EPOCHS), so that a step of a small model is not lost in the timer's noise.
PROBE_BATCHES = 1
PROBE_SECONDS = 1.0
PROBE_MAX_EPOCHS = 20
QUERY_ROWS = 1024  # rows the query probe sends through one model under every query


@dataclass(frozen=True)
class RecipeTiming:
    """What one recipe costs on one device, as measured: ``stack`` models per trained group,
    ``step_seconds`` per optimizer step of such a group, ``start_seconds`` to start a group
    (building, moving and initialising its models), ``query_seconds`` per row and query of
    one model."""

    architecture: str
    device: str
    stack: int
    step_seconds: float
    start_seconds: float
    query_seconds: float
    probe: str  # how it was measured, in words

    def describe(self) -> str:
        start = (f"{_short(self.start_seconds)} to start a group" if self.start_seconds > 0
                 else "no measurable cost to start a group")
        return (f"{self.architecture} on {self.device}: stack {self.stack} "
                f"model{'s' * (self.stack != 1)} per group, "
                f"{_short(self.step_seconds)} per training step of a group, {start}, "
                f"{_short(self.query_seconds)} per row and query ({self.probe})")


@dataclass
class Estimate:
    """The expected seconds of the cells still to run, and what the figure rests on."""

    cells: int
    cells_done: int = 0
    models_to_train: int = 0
    models_cached: int = 0
    train_seconds: float = 0.0
    query_seconds: float = 0.0
    timings: list[RecipeTiming] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.train_seconds + self.query_seconds

    def describe(self) -> str:
        """The lines ``miaudit study`` prints before the first cell runs."""
        if self.cells == 0:
            return (f"expected time: nothing to run ({self.cells_done} cell"
                    f"{'s' * (self.cells_done != 1)} already finished).")
        lines = [
            f"expected time (an estimate, measured on this device): about "
            f"{duration(self.seconds)} for {self.cells} cell{'s' * (self.cells != 1)} "
            f"({self.cells_done} already finished): training {self.models_to_train} model"
            f"{'s' * (self.models_to_train != 1)} {duration(self.train_seconds)} "
            f"({self.models_cached} more in the model cache), querying "
            f"{duration(self.query_seconds)}; scoring the attacks not included.",
            "  it rests on: " + "; ".join(t.describe() for t in self.timings) + ".",
            "  cells one after another in one process; the probe models are not kept.",
        ]
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])


def duration(seconds: float) -> str:
    """``seconds`` in the unit a reader wants: 42 s, 3.5 min, 2.1 h, 1.5 days."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _short(seconds: float) -> str:
    """A short time: 85 µs, 17 ms, 16.8 s."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def training_steps(recipe: Any, n_train: int) -> int:
    """Optimizer steps of one model of ``recipe`` on ``n_train`` rows, as its trainer takes
    them (airbench94: whole batches, the last epoch cut at ``epoch_fraction``)."""
    from miaudit.train.checkpoints import total_steps

    if recipe.architecture == "airbench94":
        from miaudit.train.airbench import airbench_steps

        return airbench_steps(recipe, n_train)[1]
    return total_steps(recipe, n_train)


def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def measure_recipe(recipe: Any, features: np.ndarray, labels: np.ndarray, num_classes: int,
                   kind: str, queries: Sequence[str], device: str) -> RecipeTiming:
    """Time ``recipe``'s training steps and queries on ``device`` (module docstring, step 2)
    on the first rows of ``features``; nothing is cached."""
    import torch

    from miaudit.signals.query import query_logits
    from miaudit.train import trainer

    input_shape = tuple(int(d) for d in features.shape[1:])
    stack = trainer.stack_size(recipe, torch.device(device), input_shape, num_classes)
    rows = min(len(features), recipe.batch_size * PROBE_BATCHES)
    x, y = np.ascontiguousarray(features[:rows]), np.asarray(labels[:rows])
    index = np.arange(rows)

    def run(epochs: int) -> tuple[float, int, Any]:
        probe = recipe.replace(epochs=epochs, epoch_fraction=1.0)
        _synchronize(device)
        start = time.perf_counter()
        with warnings.catch_warnings():  # a DP accountant's about the probe's one batch
            warnings.simplefilter("ignore")
            models = trainer.train_models(probe, x, y, [index] * stack, list(range(stack)),
                                          device, num_classes, progress=False, workers=1,
                                          max_stack=stack)
        _synchronize(device)
        return time.perf_counter() - start, training_steps(probe, rows), models[0].module

    run(1)  # a warm-up: it pays the one-time costs (CUDA context, kernels chosen, imports)
    t1, s1, module = run(1)
    epochs = int(min(PROBE_MAX_EPOCHS, max(2, math.ceil(PROBE_SECONDS / max(t1, 1e-6)))))
    t2, s2, _ = run(epochs)
    step = (t2 - t1) / (s2 - s1)
    if step <= 0:  # the timer's noise beat the steps: the longer run's average, all in
        step, start = t2 / s2, 0.0
    else:
        start = max(0.0, t1 - step * s1)
    n_query = min(len(features), QUERY_ROWS)
    query_logits([module], features, np.arange(min(n_query, 64)), list(queries), kind, device,
                 progress=False)  # a warm-up
    _synchronize(device)
    begin = time.perf_counter()
    query_logits([module], features, np.arange(n_query), list(queries), kind, device,
                 progress=False)
    _synchronize(device)
    query = (time.perf_counter() - begin) / (n_query * max(1, len(queries)))
    probe = (f"measured: {s1} and {s2} steps on {rows} rows"
             f", after a warm-up run; {n_query} rows queried")
    name = recipe.architecture + (" DP-SGD" if recipe.dp is not None else "")
    return RecipeTiming(name, device, stack, step, start, query, probe)


class _Estimator:
    """Adds run configs to an :class:`Estimate`, measuring each recipe once per device."""

    def __init__(self, estimate: Estimate) -> None:
        self.estimate = estimate
        self.timings: dict[tuple[str, str], RecipeTiming] = {}
        self.datasets: dict[str, Any] = {}

    def _dataset(self, cfg: Any) -> Any:
        from miaudit.data import load_dataset

        key = repr((cfg.dataset.name, cfg.data_dir, sorted(cfg.dataset.options.items())))
        if key not in self.datasets:  # absent data: the loader's own error, before any work
            self.datasets[key] = load_dataset(cfg.dataset.name, cfg.data_dir,
                                              **cfg.dataset.options)
        return self.datasets[key]

    def add(self, run_config: Mapping[str, Any]) -> None:
        from miaudit.config import config_from_dict, recipe_fields, resolve_queries
        from miaudit.config.recipes import resolve_recipes
        from miaudit.protocol import make_design, make_split
        from miaudit.runtime.devices import resolve_device
        from miaudit.train import ModelCache, key_for, stacked
        from miaudit.train.model_cache import default_cache_dir

        cfg = config_from_dict(dict(run_config))
        device = resolve_device(cfg.device)
        dataset = self._dataset(cfg)
        if dataset.kind == "text":
            self.estimate.notes.append(f"{cfg.name}: text runs are not estimated (their "
                                       "tokenizers and language models are not timed).")
            return
        split = make_split(len(dataset), cfg.split.audit, cfg.split.public,
                           cfg.split.population, cfg.seed, canaries=cfg.canaries.rows)
        design = make_design(split, cfg.models, cfg.design, cfg.seed, cfg.target,
                             cfg.split.members)
        recipes = resolve_recipes(cfg)
        queries = resolve_queries(cfg.signals.queries, dataset.kind, cfg.attacks,
                                  recipe_fields(cfg)[0].get("augment"))
        cache = ModelCache(Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir())
        fingerprint = dataset.fingerprint()
        todo: dict[str, tuple[Any, list[int]]] = {}  # recipe key -> (recipe, training sizes)
        for m in range(design.n_models):
            recipe = recipes.target if m == design.target else recipes.reference
            rows = design.training_rows(m)
            # the pipeline's seed rule (pipeline.models.train_design); a target trained on
            # relabelled canaries has another key, so it counts as to train
            seed = cfg.seed * 10_000 + m
            canaried = m == design.target and (cfg.canaries.rows or cfg.canaries.white_box)
            if not canaried and cache.contains(key_for(fingerprint, rows, recipe, seed,
                                                       dataset.num_classes)):
                self.estimate.models_cached += 1
                continue
            todo.setdefault(recipe.key(), (recipe, []))[1].append(len(rows))
        for recipe, sizes in todo.values():
            timing = self._timing(recipe, dataset, queries, device)
            groups = stacked.plan_groups(sizes, stacked.stacks(recipe), timing.stack)
            for group in groups:
                steps = max(training_steps(recipe, sizes[j]) for j in group)
                self.estimate.train_seconds += timing.start_seconds + steps * timing.step_seconds
            self.estimate.models_to_train += len(sizes)
        timing = self._timing(recipes.target, dataset, queries, device)
        self.estimate.query_seconds += (design.n_models * len(split.rows) * len(queries)
                                        * timing.query_seconds)

    def _timing(self, recipe: Any, dataset: Any, queries: Sequence[str], device: str
                ) -> RecipeTiming:  # fmt: skip
        key = (recipe.key(), device)
        if key not in self.timings:
            self.timings[key] = measure_recipe(recipe, dataset.features, dataset.labels,
                                               dataset.num_classes, dataset.kind, queries,
                                               device)
            self.estimate.timings.append(self.timings[key])
        return self.timings[key]


def estimate_runs(run_configs: Iterable[Mapping[str, Any]], cells: int = 1,
                  cells_done: int = 0) -> Estimate:
    """The estimate of building the banks of ``run_configs`` (pipeline run configs) on the
    devices they name; ``cells`` and ``cells_done`` are only reported."""
    estimate = Estimate(cells=cells, cells_done=cells_done)
    estimator = _Estimator(estimate)
    for run_config in run_configs:
        estimator.add(run_config)
    return estimate


def estimate_study(name: str, size: str = "cpu",
                   overrides: str | Path | Mapping[str, Any] | None = None,
                   out: str | Path | None = None) -> Estimate | None:
    """The estimate of ``miaudit study NAME`` with these arguments, for the cells without a
    valid result file in the study folder; None when the study does not declare its cells'
    runs (``Study.run_configs``)."""
    from miaudit.studies.registry import default_study_dir, get_study, resolve_config
    from miaudit.studies.sweep import cell_path, read_cell

    study = get_study(name)
    if study.run_configs is None:
        return None
    config = resolve_config(study, size, overrides)
    study_dir = Path(out) if out else default_study_dir(name, size)
    unique: dict[str, Cell] = {c.key(): c for c in study.cells(config)}
    todo = [c for c in unique.values() if read_cell(cell_path(study_dir, c), c) is None]
    runs = [run for cell in todo for run in study.run_configs(cell.params)]
    return estimate_runs(runs, cells=len(todo), cells_done=len(unique) - len(todo))
