"""`miaudit study generalization`: "Generalization and Membership Inference Attack: a
Practical Perspective".

Four parts, one table (``results.csv``), one row per (cell, attacked model, attack):

- ``augmentation`` (§IV-A1): one bank per augmentation technique of the paper's table.
- ``early-stopping`` (§IV-A2): one training run of the base recipe kept at several epochs; a
  bank per checkpoint (references at the same checkpoint).
- ``knowledge`` (§IV-B): targets trained with a technique, attacked with references trained
  the same way ("target recipe") and without it ("plain": :meth:`Recipe.plain`). Computed in
  the technique's augmentation cell (``plain_references``): a cell of its own would have to
  wait for that cell's models, and the sweep has no order between running cells (two cells
  training the same AutoAugment models side by side cost 20 minutes here).
- ``many-model`` (§IV-C): recipes drawn at random from a grid of knobs (epochs, width, learning
  rate, batch size, weight decay, label smoothing, dropout, augmentation); every recipe trains
  the same M models on the same M fixed training sets (exact halves of one pool), and each
  model is attacked with the other M-1 as its LiRA references (online, leave-one-out).
  Training-set size is not a knob: the paper holds the training set fixed.

Banks: :mod:`miaudit.studies.generalization.halves_banks` (why not ``pipeline.build_bank``: exact
halves, fixed training sets, mixed banks). Summary: :mod:`.report`. The
paper's numbers: :mod:`.paper`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from miaudit.studies.generalization.paper import AUGMENTATION_STEPS
from miaudit.studies.registry import Study, register_study
from miaudit.studies.sweep import Cell, StudyError

STUDY = "generalization"
PARTS = ("augmentation", "early-stopping", "many-model", "knowledge")
# Keys of a cell's params that decide its pool (see bank.make_pool).
POOL_KEYS = ("dataset", "pool", "models", "seed", "queries", "device")
RECIPE_KNOBS = ("epochs", "lr", "batch_size", "weight_decay", "label_smoothing", "optimizer")
ARCH_KNOBS = ("hidden", "dropout", "width")


def _recipe_with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    recipe = copy.deepcopy(base)
    arch = dict(recipe.get("arch_params") or {})
    for key, value in changes.items():
        if key in ARCH_KNOBS:
            arch[key] = value
        elif key == "augment":
            recipe["augment"] = list(value)
        else:
            recipe[key] = value
    if arch:
        recipe["arch_params"] = arch
    return recipe


def technique_recipe(config: dict[str, Any], technique: str) -> dict[str, Any]:
    """The base recipe with the augmentation steps of one of the paper's techniques."""
    if technique not in AUGMENTATION_STEPS:
        raise StudyError(f"unknown augmentation technique {technique!r}; the paper's are: "
                         f"{', '.join(AUGMENTATION_STEPS)}.")
    return _recipe_with(config["base_recipe"], augment=AUGMENTATION_STEPS[technique])


def sample_recipes(config: dict[str, Any]) -> list[dict[str, Any]]:
    """``many_model.recipes`` distinct recipes: each knob drawn uniformly from its list (a
    value listed twice is drawn twice as often), seeded by ``many_model.seed``."""
    spec = config["many_model"]
    knobs: dict[str, list[Any]] = spec["knobs"]
    unknown = [k for k in knobs if k not in (*RECIPE_KNOBS, *ARCH_KNOBS, "augment")]
    if unknown:
        raise StudyError(f"many_model.knobs: unknown knob(s) {unknown}; use "
                         f"{', '.join((*RECIPE_KNOBS, *ARCH_KNOBS, 'augment'))}.")
    if any(not isinstance(v, list) or not v for v in knobs.values()):
        raise StudyError("many_model.knobs: every knob needs a non-empty list of values.")
    rng = np.random.default_rng([int(spec["seed"]), 5])
    names = sorted(knobs)
    space = int(np.prod([len({json.dumps(v) for v in knobs[k]}) for k in names]))
    want = int(spec["recipes"])
    if want > space:
        raise StudyError(f"many_model.recipes = {want}, but the knobs allow only {space} "
                         "distinct recipes; add values or ask for fewer.")
    seen: set[str] = set()
    recipes: list[dict[str, Any]] = []
    while len(recipes) < want:
        draw = {k: knobs[k][int(rng.integers(len(knobs[k])))] for k in names}
        recipe = _recipe_with(spec["base_recipe"], **draw)
        key = json.dumps(recipe, sort_keys=True)
        if key not in seen:
            seen.add(key)
            recipes.append(recipe)
    return recipes


def _expected_cost(cell: Cell) -> float:
    """Rough training cost of a cell, to start the longest first (AutoAugment's kornia calls
    cost many MLP steps on CPU; recipes that do not stack ~2.5x)."""
    recipe = cell.params["recipe"]
    steps = json.dumps(recipe.get("augment", []))
    slow = (20.0 if "autoaugment" in steps
            else 2.5 if recipe.get("augment") or (recipe.get("arch_params") or {}).get("dropout")
            else 1.0)
    width = (recipe.get("arch_params") or {}).get("hidden", 256)
    result: float = float(recipe.get("epochs", 20)) * slow * (200 + width)
    return result


def make_cells(config: dict[str, Any]) -> list[Cell]:
    """The sweep, longest cells first so the workers finish together: one augmentation cell
    per technique of ``augmentation`` and of ``knowledge`` (these with ``plain_references``),
    the early-stopping cell, the many-model recipes."""
    parts = config["parts"]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise StudyError(f"parts: unknown part(s) {bad}; choose from {', '.join(PARTS)}.")
    common = {k: config[k] for k in POOL_KEYS} | {"attacks": list(config["attacks"])}
    know = list(config["knowledge"]["techniques"]) if "knowledge" in parts else []
    techniques = list(config["augmentation"]["techniques"]) if "augmentation" in parts else []
    techniques += [t for t in know if t not in techniques]
    cells = [Cell(STUDY, {**common, "part": "augmentation", "technique": t,
                          "recipe": technique_recipe(config, t), "plain_references": t in know})
             for t in techniques]
    if "early-stopping" in parts:
        cells.append(Cell(STUDY, {**common, "part": "early-stopping",
                                  "recipe": copy.deepcopy(config["base_recipe"]),
                                  "checkpoints": list(config["early_stopping"]["epochs"])}))
    if "many-model" in parts:
        cells += [Cell(STUDY, {**common, "part": "many-model", "recipe": recipe})
                  for recipe in sample_recipes(config)]
    cells.sort(key=_expected_cost, reverse=True)  # stable: equal costs keep config order
    return cells


def work(cell: Cell) -> list[dict[str, Any]]:
    """Train (or load) the cell's models, attack every model of each bank: rows of metrics."""
    from miaudit.studies.generalization import halves_banks as gb
    from miaudit.train import CheckpointSpec, Recipe

    p = cell.params
    pool = gb.make_pool(p)
    recipe = Recipe.from_dict(p["recipe"])
    attacks = p["attacks"]
    if p["part"] == "many-model":
        models = gb.train_pool(pool, recipe)
        return gb.evaluate_all(gb.make_bank(pool, gb.query_pool(pool, models)), attacks)
    if p["part"] == "augmentation":
        logits = gb.query_pool(pool, gb.train_pool(pool, recipe))
        bank = gb.make_bank(pool, logits)
        rows = gb.evaluate_all(bank, attacks, {"references": "target recipe"})
        if p["plain_references"]:  # the same targets, references trained without the technique
            plain_logits = gb.query_pool(pool, gb.train_pool(pool, recipe.plain()))
            stats = gb.model_stats(bank)
            for m in range(pool.n_models):
                mixed = gb.mixed_bank(logits, plain_logits, m, pool)
                rows += gb.attack_rows(mixed, m, attacks, stats[m], {"references": "plain"})
        return rows
    if p["part"] == "early-stopping":
        spec = CheckpointSpec(epochs=tuple(p["checkpoints"]))
        models = gb.train_pool(pool, recipe, checkpoints=spec)
        rows = []
        for label in spec.positions(recipe, models[0].n_train):
            kept = [tm.checkpoints[label] for tm in models]
            bank = gb.make_bank(pool, gb.query_pool(pool, kept))
            rows += gb.evaluate_all(bank, attacks, {"checkpoint": label,
                                                    "epoch": int(label.removeprefix("epoch"))})
        return rows
    raise StudyError(f"unknown part {p['part']!r} in {cell!r}.")


def summarize(table: pd.DataFrame, study_dir: Path) -> None:
    from miaudit.studies.generalization.report import write_summary

    write_summary(table, Path(study_dir))


_TECHNIQUES = list(AUGMENTATION_STEPS)
_KNOWLEDGE = ["CIFAR-Policy", "All Techniques"]
# On CPU, AutoAugment (kornia, one call per sub-policy drawn in a batch) costs ~0.55 ms of CPU
# per 28x28 image at batch 128, several times the MLP step it feeds: its two rows would more
# than double the cpu size's compute (EXPERIMENTS.md). The cpu size leaves them out (add them
# with docs/studies/generalization/with-autoaugment.yaml); its knowledge part contrasts a
# single technique with the combination of every cheap one, as the paper contrasts its policy
# with all techniques.
_CPU_TECHNIQUES = [t for t in _TECHNIQUES if "autoaugment" not in AUGMENTATION_STEPS[t]]
_CPU_KNOWLEDGE = ["Crop", "Crop + Cutout + Mirror"]
# Fashion-MNIST, one-hidden-layer MLP: every recipe of the many-model study stacks (trains
# its M models at once) unless it uses dropout or augmentation, which train one at a time.
_CPU_BASE = {"architecture": "mlp", "arch_params": {"hidden": 256}, "optimizer": "sgd",
             "lr": 0.1, "epochs": 60, "batch_size": 128}
_PAPER_BASE = {"architecture": "resnet18", "optimizer": "sgd", "lr": 0.1, "epochs": 100,
               "batch_size": 256, "weight_decay": 0.0005}


CONFIGS = {
    "cpu": {
        "dataset": "fashion-mnist", "pool": 4000, "models": 8, "seed": 0,
        "queries": ["plain", "mirror"], "device": "cpu",
        "attacks": ["lira-online-fixed-variance", "lira-offline-fixed-variance", "loss"],
        "headline_attack": "lira-online-fixed-variance",
        "parts": list(PARTS),
        "base_recipe": _CPU_BASE,
        "augmentation": {"techniques": _CPU_TECHNIQUES},
        "early_stopping": {"epochs": [2, 5, 10, 20, 40, 60]},
        "knowledge": {"techniques": _CPU_KNOWLEDGE},
        "many_model": {
            "recipes": 64, "seed": 0,
            "base_recipe": {"architecture": "mlp", "optimizer": "sgd"},
            "knobs": {
                "epochs": [2, 4, 8, 16, 32, 64],
                "hidden": [32, 64, 128, 256],
                "lr": [0.02, 0.05, 0.1, 0.2],
                "batch_size": [64, 128, 256],
                "weight_decay": [0.0, 0.0, 0.0001, 0.0005, 0.002],
                "label_smoothing": [0.0, 0.0, 0.1, 0.2],
                "dropout": [0.0, 0.0, 0.0, 0.3],
                "augment": [[], [], [], [], [], [], ["mirror"], ["crop"],
                            ["crop", "mirror"], ["cutout"]],
            },
        },
    },
    "paper": {
        "dataset": "cifar10", "pool": 60000, "models": 16, "seed": 0,
        "queries": ["plain", "mirror"], "device": "auto",
        "attacks": ["lira-online", "lira-online-fixed-variance",
                    "lira-offline-fixed-variance", "loss"],
        "headline_attack": "lira-online",
        "parts": list(PARTS),
        "base_recipe": _PAPER_BASE,
        "augmentation": {"techniques": _TECHNIQUES},
        "early_stopping": {"epochs": [5, 10, 20, 40, 70, 100]},
        "knowledge": {"techniques": _KNOWLEDGE},
        "many_model": {
            "recipes": 64, "seed": 0,
            "base_recipe": {"architecture": "resnet18", "optimizer": "sgd",
                            "batch_size": 256},
            "knobs": {
                "epochs": [10, 20, 40, 80, 160],
                "lr": [0.02, 0.05, 0.1, 0.2],
                "weight_decay": [0.0, 0.0001, 0.0005, 0.002],
                "label_smoothing": [0.0, 0.0, 0.1, 0.2],
                "width": [32, 64],
                "augment": [[], [], ["mirror"], ["crop"], ["crop", "mirror"],
                            ["cutout"], ["crop", "mirror", "cutout"], ["autoaugment"]],
            },
        },
    },
}

STUDY_GENERALIZATION = register_study(Study(
    name=STUDY,
    description="\"Generalization and Membership Inference Attack: a Practical "
    "Perspective\": augmentation, early stopping, attacker knowledge, and "
    "TPR@0.1% FPR against the generalization gap of many models",
    configs=CONFIGS,
    cells=make_cells,
    work=work,
    summarize=summarize,
))
