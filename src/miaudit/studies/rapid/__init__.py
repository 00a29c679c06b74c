"""`miaudit study rapid`: RAPID (He et al., "Is Difficulty Calibration All We Need?", CCS
2024) against LiRA-offline, RMIA, Watson's calibrated loss and Yeom's loss, with the paper's
ablations and cost.

One cell = one (dataset, repetition, DP setting): it trains (or loads) a target and the largest
number of reference models asked for, queries them once with every query of the setup, and then
scores every attack on sub-banks of that one bank:

* the main setting: ``main_references`` references, all queries (the paper: 4 references,
  8 queries);
* the number-of-references ablation: the first R references (offline design: reference m trains
  on the same rows whatever the total, so R references are a prefix of the bank), all queries;
* the number-of-queries ablation (images only): the first Q queries of the setup's list
  (plain, mirror, then crop-flips), ``main_references`` references. An image setup queries
  what its recipe trains with (:func:`miaudit.signals.query.training_queries`), as the paper
  does: a query the model never trained on is not the paper's augmented query;
* DP-SGD cells: the target and its references trained with ``dp: {epsilon: E}`` (the attacker
  mimics the target's training), main setting only.

A setup may name its ``dataset`` (default: the setup's own name) and its ``design`` (default
``offline``). The paper config holds one ``online`` setup, ``cifar10-lira``
(:mod:`miaudit.studies.rapid.lira`): CIFAR-10 with 64 airbench94 reference models, scored
online and offline beside the figures of the LiRA authors' code; it runs alone with
``miaudit study rapid --size paper --config docs/studies/rapid/lira-cell.yaml`` on a GPU (no
GPU figure recorded yet). ``miaudit study rapid`` prints the expected time of the cells still
to run before the first one starts, from a few training steps timed on the device
(:mod:`miaudit.studies.estimate`; ``--quiet``: no estimate).

Rows carry the attack's cost (models it uses, queries per sample, training seconds of those
models, scoring seconds; RAPID's includes its scorer's 150 epochs: the study runs the paper's
recipe, `attacks.rapid.PAPER_RECIPE`). Tables, figures and the paper's figures beside ours:
:mod:`miaudit.studies.rapid.report`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from miaudit.attacks.rapid import PAPER_RECIPE
from miaudit.signals.query import augmented_queries, training_queries
from miaudit.studies.rapid.lira import LIRA_SETUP
from miaudit.studies.rapid.report import FPRS, summarize
from miaudit.studies.registry import Study, register_study
from miaudit.studies.sweep import Cell

ATTACKS = ["rapid", "lira-offline", "lira-offline-fixed-variance", "rmia", "calibrated-loss",
           "loss"]
# The paper's augmented queries: 8 (plain, its mirror, 6 random crop+flip draws), those of a
# recipe trained with crop (4-pixel padding) + mirror.
IMAGE_QUERIES = augmented_queries(8)
# The CPU Fashion-MNIST recipe's augmentation: mirror and 1-pixel shifts. Chosen on target
# accuracy alone, on the development seeds 100-101 (never a reported repetition), before any
# attack ran on it; docs/studies/rapid/recipe.md has the measurement and the rule.
FASHION_AUGMENT: list[dict[str, Any] | str] = [{"name": "crop", "padding": 1}, "mirror"]

_TABULAR_MLP = {"architecture": "mlp", "arch_params": {"hidden": 256}, "optimizer": "sgd",
                "lr": 0.1, "epochs": 40, "batch_size": 64}
# Equal train-set sizes for target and references: the target trains on half the audit pool,
# each reference on half the public pool (offline design).
_SPLIT = {"audit": 2000, "public": 2000, "population": 1000}

SETUPS: dict[str, dict[str, Any]] = {
    "fashion-mnist": {
        "split": dict(_SPLIT),
        # Mirror + 1-pixel shifts, 45 epochs: with 4-pixel crops this small CNN underfits
        # 1,000 samples (train/test accuracy 0.82/0.76 after 40 epochs); with 1-pixel ones it
        # matches mirror alone (docs/studies/rapid/recipe.md). Its 8 queries replay that
        # augmentation: plain, mirror and 6 draws of a 1-pixel shift + random mirror. (Until
        # 2026-11-26: mirror only, 30 epochs, queried with 4-pixel crop-flips it never saw.)
        "recipe": {"architecture": "mnist-cnn", "optimizer": "sgd", "lr": 0.05, "epochs": 45,
                   "batch_size": 64, "augment": FASHION_AUGMENT},
        "queries": training_queries(FASHION_AUGMENT, 8),
    },
    "purchase-celeba": {"split": dict(_SPLIT), "recipe": dict(_TABULAR_MLP),
                        "queries": ["plain"]},
    "texas-health": {"split": dict(_SPLIT), "recipe": dict(_TABULAR_MLP), "queries": ["plain"]},
    # Not in the default list: a seconds-sized setup for checks (`datasets: [digits]`); it
    # trains with mirror so that its two queries replay training.
    "digits": {"split": {"audit": 400, "public": 400, "population": 200},
               "recipe": {"architecture": "mlp", "arch_params": {"hidden": 32}, "lr": 0.1,
                          "epochs": 10, "batch_size": 32, "augment": ["mirror"]},
               "queries": training_queries(["mirror"], 2)},
}


def run_config(params: dict[str, Any]) -> dict[str, Any]:
    """The pipeline config of one cell (every reference it will need, every query)."""
    setup = params["setup"]
    recipe = dict(setup["recipe"])
    if params.get("epsilon") is not None:
        recipe["dp"] = {"epsilon": params["epsilon"]}
        recipe.pop("augment", None)  # the DP-SGD trainer does not augment (Recipe refuses both)
    return {
        "name": f"rapid-{params['dataset']}",
        "seed": int(params["rep"]),
        "dataset": {"name": setup.get("dataset", params["dataset"])},
        "split": dict(setup["split"]),
        "design": setup.get("design", "offline"),
        "models": 1 + max(params["references"]),
        "recipe": recipe,
        "signals": {"queries": list(setup["queries"])},
        "attacks": list(params["attacks"]),
        "attack_params": {name: dict(value) for name, value in
                          (params.get("attack_params") or {}).items() if name in params["attacks"]},
        "metrics": {"bootstrap": int(params["bootstrap"])},
        "device": params.get("device", "cpu"),
    }


def cell_runs(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The one run whose bank a cell builds (``Study.run_configs``: the time estimate)."""
    return [run_config(params)]


def settings(params: dict[str, Any]) -> list[tuple[int, int]]:
    """The (references, queries) pairs a cell evaluates: main, then each ablation's points."""
    n_queries = len(params["setup"]["queries"])
    main = (int(params["main_references"]), n_queries)
    pairs = [main]
    pairs += [(int(r), n_queries) for r in params["references"]]
    pairs += [(main[0], int(q)) for q in params["query_counts"] if int(q) <= n_queries]
    return list(dict.fromkeys(pairs))  # ordered, without repeats


def work(cell: Cell) -> list[dict[str, Any]]:
    """Build the cell's bank once; score every attack at each (references, queries) setting."""
    from miaudit.config import config_from_dict
    from miaudit.pipeline import build_bank, model_accuracies
    from miaudit.pipeline.evaluate import EvaluationOptions, evaluate_attacks

    params = cell.params
    cfg = config_from_dict(run_config(params))
    built = build_bank(cfg, progress=False)
    bank, target = built.bank, built.design.target
    if target != 0:
        raise ValueError("the rapid study expects the target to be model 0 (config target: 0).")
    train_seconds = [float(tm.train_seconds) for tm in built.models]
    privacy = getattr(built.models[target], "privacy", None) or {}
    accs = {m["model"]: m for m in model_accuracies(bank)}
    rows: list[dict[str, Any]] = []
    main = settings(params)[0]
    for n_refs, n_queries in settings(params):
        sub = bank.replace(logits=bank.logits[: 1 + n_refs, :, :n_queries],
                           membership=bank.membership[: 1 + n_refs], channels={})
        result = evaluate_attacks(sub, 0, cfg.attacks, EvaluationOptions(
            params=cfg.attack_params, metrics=cfg.metrics, seed=cfg.seed,
            train_seconds=train_seconds[: 1 + n_refs], thresholds=False))
        ref_test = [accs[m]["test_acc"] for m in range(1, 1 + n_refs)]
        for o in result.outcomes:
            m, cost = o.metrics, o.cost
            rows.append({
                "attack": o.name,
                "main": (n_refs, n_queries) == main,
                "n_references": n_refs,
                "n_queries": n_queries,
                "query_names": ",".join(built.queries[:n_queries]),
                **m.auc_columns(ci=True),
                **m.tpr_columns(FPRS, ci=True),
                **m.counts(),
                "cost_models": cost.models,
                "cost_queries": cost.queries_per_sample,
                "cost_train_s": cost.train_seconds,
                "cost_score_s": cost.score_seconds,
                "target_train_acc": accs[0]["train_acc"],
                "target_test_acc": accs[0]["test_acc"],
                "reference_test_acc": float(np.mean(ref_test)),
                "epsilon_spent": privacy.get("epsilon_spent"),
                "noise_multiplier": privacy.get("noise_multiplier"),
            })
    return rows


def cells(config: dict[str, Any]) -> list[Cell]:
    """Every (dataset, repetition) cell, then the DP-SGD cells."""
    from miaudit.studies.sweep import StudyError

    setups = {**config["setups"], **config["extra_setups"]}
    unknown = [d for d in [*config["datasets"], *config["dp"]["datasets"]] if d not in setups]
    if unknown:
        raise StudyError(f"datasets {unknown} have no entry under setups (known: "
                         f"{', '.join(setups)}); add one with split, recipe and queries.")
    main = int(config["main_references"])
    if main < 2 or min(config["references"]) < 2:
        raise StudyError("RAPID needs at least 2 references (they double as its shadow models, "
                         "leave-one-out): use main_references and references >= 2.")
    attack_params = {
        # The study reproduces the paper: its scorer recipe (150 fixed epochs), not the
        # library's faster default (docs/algorithms.md §8).
        "rapid": {**PAPER_RECIPE, "hidden": list(PAPER_RECIPE["hidden"]),
                  "max_train_samples": int(config["rapid_max_train_samples"])},
        **{name: {"equal_counts": bool(config["lira_equal_counts"])} for name in _LIRA_OFFLINE},
    }
    for name, extra in config["attack_params"].items():  # free per-attack overrides
        attack_params[name] = {**attack_params.get(name, {}), **extra}
    common = {"attacks": list(config["attacks"]), "attack_params": attack_params,
              "main_references": main, "bootstrap": int(config["bootstrap"]),
              "device": config["device"]}
    out = []
    for rep in range(int(config["repetitions"])):
        for name in config["datasets"]:
            out.append(Cell("rapid", {
                "dataset": name, "rep": rep, "epsilon": None, "setup": setups[name],
                "references": sorted({main, *map(int, config["references"])}),
                "query_counts": list(config["query_counts"]), **common}))
    for epsilon in config["dp"]["epsilons"]:
        for rep in range(int(config["dp"]["repetitions"])):
            for name in config["dp"]["datasets"]:
                out.append(Cell("rapid", {
                    "dataset": name, "rep": rep, "epsilon": float(epsilon),
                    "setup": setups[name], "references": [main], "query_counts": [], **common}))
    return out


# Offline design: every audit sample has all R references OUT, so LiRA's equal-count rule is
# not needed. With it (the attack's default) the rule takes k = 1 from public samples that only
# one reference left out, and every audit sample is scored against its first reference alone,
# whatever R (measured: identical scores for R = 2, 4, 8). Reported upstream.
_LIRA_OFFLINE = ("lira-offline", "lira-offline-fixed-variance")

_CPU = {
    "datasets": ["fashion-mnist", "purchase-celeba", "texas-health"],
    "setups": SETUPS,
    "extra_setups": {},  # more datasets: {name: {split: ..., recipe: ..., queries: [...]}}
    "repetitions": 2,
    "attacks": ATTACKS,
    # The scorer's 150 epochs cost ~1 s per 100 shadow rows here; 4,000 rows (1,000 per shadow
    # at 4 references) keep a cell within minutes. The paper config keeps the attack's 20,000.
    "rapid_max_train_samples": 4000,
    "lira_equal_counts": False,
    "attack_params": {},  # extra per-attack parameters, e.g. {rapid: {epochs: 50}}
    "main_references": 4,  # the paper's default
    "references": [2, 4, 8],
    "query_counts": [1, 2, 4, 8],
    "dp": {"datasets": ["purchase-celeba"], "epsilons": [10, 100], "repetitions": 2},
    "bootstrap": 200,
    "device": "cpu",
}

_PAPER_SETUPS = {
    **SETUPS,
    "cifar10": {"split": {"audit": 20000, "public": 20000, "population": 10000},
                "recipe": {"architecture": "resnet18", "optimizer": "sgd", "lr": 0.1,
                           "weight_decay": 5e-4, "epochs": 100, "batch_size": 256,
                           "augment": ["crop", "mirror"]},
                "queries": list(IMAGE_QUERIES)},
    "fashion-mnist": {**SETUPS["fashion-mnist"],
                      "split": {"audit": 10000, "public": 10000, "population": 5000},
                      "recipe": {**SETUPS["fashion-mnist"]["recipe"], "epochs": 60,
                                 "augment": ["crop", "mirror"]},
                      "queries": training_queries(["crop", "mirror"], 8)},
    "purchase-celeba": {**SETUPS["purchase-celeba"],
                        "split": {"audit": 20000, "public": 20000, "population": 10000}},
    "texas-health": {**SETUPS["texas-health"],
                     "split": {"audit": 20000, "public": 20000, "population": 10000}},
    # Not in the paper's datasets: the LiRA cell, run alone (docs/studies/rapid/lira-cell.yaml)
    "cifar10-lira": LIRA_SETUP,
}

_PAPER = {
    **_CPU,
    "datasets": ["cifar10", "fashion-mnist", "purchase-celeba", "texas-health"],
    "setups": _PAPER_SETUPS,
    "rapid_max_train_samples": 20000,
    "repetitions": 5,
    "references": [2, 4, 8, 16, 32],
    "dp": {"datasets": ["purchase-celeba", "fashion-mnist"], "epsilons": [1, 8, 100],
           "repetitions": 3},
    "device": "auto",
}


STUDY_RAPID = register_study(Study(
    name="rapid",
    description="RAPID (He et al., CCS 2024) vs LiRA-offline, RMIA, "
    "Watson, Yeom: TPR@0.1% FPR, AUC, #queries, #references, DP-SGD, cost",
    configs={"cpu": _CPU, "paper": _PAPER},
    cells=cells,
    work=work,
    summarize=summarize,
    run_configs=cell_runs,
))
