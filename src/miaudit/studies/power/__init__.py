"""`miaudit study power`: the power table, every attack against RMIA with few
reference models, on banks held out from development.

The question: with 4 reference models (+ 2 shadows, offline design), which attack reaches the
highest TPR at 0.1% FPR, as a multiple of RMIA's (Zarifzadeh et al., "Low-Cost High-Power
Membership Inference Attacks", ICML 2024; offline), at what AUC and what cost? RMIA is scored
twice, the two anchors (``anchors``): ``rmia`` at the library's defaults (T = 1, a = 0.3,
gamma = 2, tie-break by ratio) and ``rmia-paper`` at its paper's offline configuration as the
authors' code runs it on tabular data (T = 2, a = 0.2, gamma = 2, the paper's count;
:data:`miaudit.attacks.rmia.PAPER_OFFLINE` cites the config files). Every ratio column names
its anchor, and the goal (≥ 2× RMIA) is measured against the stronger of the two per dataset.

Setup, fixed in advance (nothing below was chosen on the evaluated targets):

- **Datasets**: ``texas-health`` and ``purchase-celeba`` (tabular, 100 classes) at the default
  size. ``fashion-mnist`` is an optional setup (``datasets: [fashion-mnist]``; offline design
  too, the RAPID study's image recipe, mirror + 1-pixel shifts, and its 8 queries, which
  replay that training augmentation: :func:`miaudit.signals.query.training_queries`): not in
  the default list because it takes about 10 minutes per target on a 2-core CPU, where the
  target trains on 2,000 members (still 10,000 non-members evaluated); ``--size paper``
  includes it with
  10,000-member targets, which are GPU-sized. ``mnist`` is the same setup on MNIST (optional).
  ``digits`` is a seconds-sized setup for tests.
- **Targets**: per dataset, separate banks with seeds 0, 1, 2, 3: one cell per (dataset,
  seed). The settings were chosen on seeds 100-101; the reported table uses 0-3, never looked
  at during development. ``seeds: [...]`` in a ``--config`` file runs other seeds (e.g. the
  development seeds); the summary says when the seeds are not the held-out ones.
- **Each bank**: ``design: offline``, ``split: {audit: 20000, public: 20000, population:
  5000}``: the target trains on a random half of the audit pool (10,000 members, 10,000
  non-members evaluated per target), each reference on its own random half of the public
  pool. ``models: 7``: the target, 4 references and 2 shadows; every attack sees all 6 other
  models (RAPID-style scorers use them as leave-one-out shadows). Tabular recipe: an MLP
  (hidden 256), SGD, lr 0.1, 40 epochs, batch 64; one plain query.
- **Attacks**: ``rmia, rmia-paper, lira-offline, lira-offline-fixed-variance, calibrated-loss,
  rapid, rapid-hybrid, qmia, qmia-label`` with their defaults (QMIA, Bertran et al., NeurIPS
  2023: one quantile regression fit on the population rows; ``qmia-label`` reads no reference
  model), plus each of ``base`` (Lassila et al., NeurIPS
  2025), ``bavaria-t``, ``bavaria-n`` (BaVarIA, 2026) and ``informia`` (Tao & Shokri, ICLR
  2026) that is registered when the study runs (``optional_attacks``; the summary lists the
  absent ones). Cells carry the resolved list, so a newly registered attack reruns the cells
  (their models come from the model cache).
- **Metrics** per attack and target: AUC, TPR at 1% and 0.1% FPR with percentile bootstrap
  CIs over samples (:func:`miaudit.metrics.evaluate`, through
  :func:`miaudit.pipeline.evaluate_attacks`), the non-member count, and the cost the pipeline
  records: models read, queries per sample, training seconds of those models, scoring seconds.
  No public-data threshold (balanced accuracy): it would fit every scorer a second time.

The summary (:mod:`miaudit.studies.power.report`) gives per dataset and attack the mean over
targets with a Student-t interval, the TPR at 0.1% FPR as a multiple of RMIA's (ratio of the
means over the same targets) and the AUC difference to RMIA (paired), the cost, a per-target
table and a figure.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from miaudit.studies.power.report import FPRS, summarize
from miaudit.studies.rapid import SETUPS as RAPID_SETUPS
from miaudit.studies.registry import Study, register_study
from miaudit.studies.sweep import Cell, StudyError

ATTACKS = ["rmia", "rmia-paper", "lira-offline", "lira-offline-fixed-variance",
           "calibrated-loss", "rapid", "rapid-hybrid", "qmia", "qmia-label"]
# The ratio columns' anchors: RMIA at the library's defaults and at its paper's configuration.
ANCHORS = ["rmia", "rmia-paper"]
# The 2025-26 low-reference attacks: scored when `miaudit.attacks` registers them.
OPTIONAL_ATTACKS = ["base", "bavaria-t", "bavaria-n", "informia"]
HELD_OUT_SEEDS = [0, 1, 2, 3]
DEVELOPMENT_SEEDS = [100, 101]

_SPLIT = {"audit": 20000, "public": 20000, "population": 5000}
_TABULAR_MLP = {"architecture": "mlp", "arch_params": {"hidden": 256}, "optimizer": "sgd",
                "lr": 0.1, "epochs": 40, "batch_size": 64}

SETUPS: dict[str, dict[str, Any]] = {
    "texas-health": {"split": dict(_SPLIT), "recipe": dict(_TABULAR_MLP),
                     "queries": ["plain"]},
    "purchase-celeba": {"split": dict(_SPLIT), "recipe": dict(_TABULAR_MLP),
                        "queries": ["plain"]},
    # Optional, CPU-sized (about 10 min per target on 2 cores): the RAPID study's image recipe
    # (Watson's MNIST CNN, mirror + 1-pixel shifts, 45 epochs) and its 8 queries, which replay
    # that augmentation (plain, mirror, 6 draws of a 1-pixel shift + random mirror). The
    # target trains on 2,000 of the 12,000 audited samples, so each target still rests on
    # 10,000 non-members. `--size paper` trains 10,000-member targets instead (GPU-sized).
    "fashion-mnist": {"split": {"audit": 12000, "members": 2000, "public": 10000,
                                "population": 5000},
                      "recipe": dict(RAPID_SETUPS["fashion-mnist"]["recipe"]),
                      "queries": list(RAPID_SETUPS["fashion-mnist"]["queries"])},
    # Optional, CPU-sized: MNIST with exactly the Fashion-MNIST setup above (same CNN, recipe,
    # split and queries; fixed before any MNIST bank was looked at).
    "mnist": {"split": {"audit": 12000, "members": 2000, "public": 10000, "population": 5000},
              "recipe": dict(RAPID_SETUPS["fashion-mnist"]["recipe"]),
              "queries": list(RAPID_SETUPS["fashion-mnist"]["queries"])},
    # Seconds-sized, for tests and checks (`datasets: [digits]`).
    "digits": {"split": {"audit": 400, "public": 400, "population": 200},
               "recipe": {"architecture": "mlp", "arch_params": {"hidden": 32}, "lr": 0.1,
                          "epochs": 10, "batch_size": 32},
               "queries": ["plain"]},
}
_SETUP_KEYS = ("split", "recipe", "queries")


def run_config(params: dict[str, Any]) -> dict[str, Any]:
    """The pipeline config of one cell: the bank of one (dataset, seed)."""
    setup = params["setup"]
    return {
        "name": f"power-{params['dataset']}",
        "seed": int(params["seed"]),
        "dataset": {"name": params["dataset"]},
        "split": dict(setup["split"]),
        "design": "offline",
        "models": int(params["models"]),
        "recipe": dict(setup["recipe"]),
        "signals": {"queries": list(setup["queries"])},
        "attacks": list(params["attacks"]),
        "attack_params": {name: dict(value) for name, value in
                          (params.get("attack_params") or {}).items()
                          if name in params["attacks"]},
        "metrics": {"fprs": list(FPRS), "bootstrap": int(params["bootstrap"]),
                    "confidence": float(params["confidence"])},
        "device": params.get("device", "cpu"),
    }


def work(cell: Cell) -> list[dict[str, Any]]:
    """Build (or load) the cell's bank and score every attack on its target: one row each."""
    from miaudit.config import config_from_dict
    from miaudit.pipeline import build_bank, model_accuracies
    from miaudit.pipeline.evaluate import EvaluationOptions, evaluate_attacks

    params = cell.params
    cfg = config_from_dict(run_config(params))
    built = build_bank(cfg, progress=False)
    bank, target = built.bank, built.design.target
    train_seconds = [float(tm.train_seconds) for tm in built.models]
    result = evaluate_attacks(bank, target, cfg.attacks, EvaluationOptions(
        params=cfg.attack_params, metrics=cfg.metrics, seed=cfg.seed,
        train_seconds=train_seconds, thresholds=False, progress=False))
    accs = {m["model"]: m for m in model_accuracies(bank)}
    ref_test = [accs[m]["test_acc"] for m in accs if m != target]
    rows: list[dict[str, Any]] = []
    for o in result.outcomes:
        m, cost = o.metrics, o.cost
        rows.append({
            "attack": o.name,
            **m.auc_columns(ci=True),
            **m.tpr_columns(FPRS, ci=True),
            **m.counts(),
            "cost_models": cost.models,
            "cost_queries": cost.queries_per_sample,
            "cost_train_s": cost.train_seconds,
            "cost_score_s": cost.score_seconds,
            "target_train_acc": accs[target]["train_acc"],
            "target_test_acc": accs[target]["test_acc"],
            "reference_test_acc": float(np.mean(ref_test)) if ref_test else None,
            "models_trained": int(built.trained),
        })
    return rows


def resolve_attacks(config: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The attacks to score (the configured ones, then each optional one registered now) and
    the optional ones absent from ``miaudit.attacks``. Unknown configured names fail."""
    from miaudit.attacks import get_attack, list_attacks
    from miaudit.errors import AttackError

    attacks = [str(a) for a in config["attacks"]]
    for name in attacks:
        try:
            get_attack(name)
        except AttackError as exc:
            raise StudyError(f"power study, attacks: {exc}") from exc
    known = {spec.name for spec in list_attacks()}
    optional = [str(a) for a in config["optional_attacks"] if str(a) not in attacks]
    present = [a for a in optional if a in known]
    return list(dict.fromkeys(attacks + present)), [a for a in optional if a not in known]


def _check_seeds(seeds: Any) -> list[int]:
    if not isinstance(seeds, list) or not seeds:
        raise StudyError(f"seeds must be a non-empty list of integers, got {seeds!r}.")
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise StudyError(f"seeds must be integers >= 0, got {seeds!r}.")
    if len(set(seeds)) != len(seeds):
        raise StudyError(f"seeds repeat a value: {seeds!r}; each seed is one target.")
    return [int(s) for s in seeds]


def cells(config: dict[str, Any]) -> list[Cell]:
    """One cell per (dataset, seed), datasets in config order."""
    setups = {**config["setups"], **config["extra_setups"]}
    datasets = list(config["datasets"])
    if not datasets:
        raise StudyError("datasets is empty: name at least one (e.g. texas-health).")
    unknown = [d for d in datasets if d not in setups]
    if unknown:
        raise StudyError(f"datasets {unknown} have no entry under setups (known: "
                         f"{', '.join(setups)}); add one under extra_setups with split, recipe "
                         "and queries.")
    for name in datasets:
        missing = [k for k in _SETUP_KEYS if k not in (setups[name] or {})]
        if missing:
            raise StudyError(f"setup {name!r} lacks {', '.join(missing)} (a setup needs "
                             f"{', '.join(_SETUP_KEYS)}).")
    seeds = _check_seeds(config["seeds"])
    models = config["models"]
    if not isinstance(models, int) or isinstance(models, bool) or models < 3:
        raise StudyError(f"models must be an integer >= 3 (the target and at least 2 "
                         f"references, which RAPID's scorers need), got {models!r}.")
    attacks, _ = resolve_attacks(config)
    anchors = config["anchors"]
    if not isinstance(anchors, list) or not anchors:
        raise StudyError(f"anchors must be a non-empty list of attacks, got {anchors!r}.")
    for anchor in anchors:
        if anchor not in attacks:
            raise StudyError(f"the anchor {anchor!r} must be among the attacks "
                             f"({', '.join(attacks)}): the table gives every attack as a "
                             "multiple of it.")
    extra = [name for name in config["attack_params"] if name not in attacks]
    if extra:
        raise StudyError(f"attack_params names attacks the study does not score: {extra}.")
    common = {"models": models, "attacks": attacks,
              "attack_params": {k: dict(v) for k, v in config["attack_params"].items()},
              "bootstrap": int(config["bootstrap"]), "confidence": float(config["confidence"]),
              "device": config["device"]}
    return [Cell("power", {"dataset": name, "seed": seed, "setup": setups[name], **common})
            for name in datasets for seed in seeds]


_CPU: dict[str, Any] = {
    "datasets": ["texas-health", "purchase-celeba"],
    "setups": SETUPS,
    "extra_setups": {},  # more datasets: {name: {split: ..., recipe: ..., queries: [...]}}
    "seeds": HELD_OUT_SEEDS,  # development used DEVELOPMENT_SEEDS (100, 101)
    "models": 7,  # target + 4 references + 2 shadows
    "attacks": ATTACKS,
    "optional_attacks": OPTIONAL_ATTACKS,
    # the ratio columns' anchors; the first is the per-target table's, the figure's and the
    # "AUC −" column's; the goal is measured against the stronger one per dataset
    "anchors": ANCHORS,
    "attack_params": {},  # per-attack overrides, e.g. {rapid: {epochs: 50}}; default: none
    "bootstrap": 200,
    "confidence": 0.95,
    "device": "cpu",
}

_PAPER_SETUPS = {
    **SETUPS,
    "fashion-mnist": {**SETUPS["fashion-mnist"], "split": dict(_SPLIT)},  # 10,000 members
    "mnist": {**SETUPS["mnist"], "split": dict(_SPLIT)},
}

_PAPER: dict[str, Any] = {
    **_CPU,
    "datasets": ["texas-health", "purchase-celeba", "fashion-mnist"],
    "setups": _PAPER_SETUPS,
    "device": "auto",
}


STUDY_POWER = register_study(Study(
    name="power",
    description="the power table: each attack's TPR@0.1% FPR as "
    "a multiple of RMIA's, 4 references + 2 shadows, held-out targets, with cost",
    configs={"cpu": _CPU, "paper": _PAPER},
    cells=cells,
    work=work,
    summarize=summarize,
))
