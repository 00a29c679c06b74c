"""`miaudit study dp-audit`: does a DP-SGD claim hold? Empirical ε lower bounds of a
Fashion-MNIST MLP (the DP table's recipe, EXPERIMENTS.md) trained at claimed ε ∈ {1, 4, 10,
100} and without DP, audited with m canaries of each kind (docs/algorithms.md §16).

One cell = (ε or no DP, canary kind, repetition): a run with ``canaries: {count: m, kind: K}``,
the offline design, a target and R references trained with the target's recipe (DP included:
the attacker mimics the target's training). The references never see a canary, so the two
kinds of one (ε, repetition) share them through the model cache; the split and the canaries'
inclusion depend on the seed only, so every ε audits the same rows. Each cell scores every
attack once and records, per attack, the three bounds the pipeline computes (the threshold
bound on the audit samples and on the canaries, each with its counts, α and δ; the one-run
bound with m, k₊, k₋, r, v, α, δ and every (k₊, k₋) candidate's correct guesses), and per cell
the claimed ε (the accountant's), the Bonferroni best of all bounds (``privacy_audit``), the
target's accuracy and the wall times. The rows copy the pipeline's records; the report's
best of each kind over attacks is recounted from these counts at α / K (Bonferroni, as
``privacy_audit`` does), never a plain max. Tables, figure and Privacy Meter's published
one-run numbers beside ours: :mod:`miaudit.studies.dp_audit.report`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from miaudit.errors import ConfigError
from miaudit.privacy.audit_record import PrivacyAudit
from miaudit.studies.dp_audit.report import FPRS, summarize
from miaudit.studies.registry import Study, register_study
from miaudit.studies.sweep import Cell, StudyError

STUDY = "dp-audit"
ATTACKS = ["loss", "calibrated-loss", "lira-offline-fixed-variance", "rmia"]
# (k₊, k₋) candidates as fractions of m, fixed before any inclusion is seen; each is evaluated
# at α / 3 (Bonferroni) and the best kept. Larger r raises the ceiling of an all-right audit
# (m = 1,000: about ε 4.6 at r = 500), smaller r helps a weak attack whose top guesses alone
# are right.
GUESSES = [{"k_plus": f, "k_minus": f} for f in (0.05, 0.1, 0.25)]

_SPEC_KEYS = ("dataset", "split", "recipe")
SETUPS: dict[str, dict[str, Any]] = {
    # examples/fashion-mnist-dp.yaml's recipe. The pools (6,000 of 70,000 rows) leave room for
    # the canaries: the target trains on 1,000 audit rows plus the canaries it includes.
    "fashion-mnist": {
        "dataset": {"name": "fashion-mnist"},
        "split": {"audit": 2000, "public": 2000, "population": 1000},
        "recipe": {"architecture": "mlp", "arch_params": {"hidden": 256}, "optimizer": "sgd",
                   "lr": 0.1, "epochs": 30, "batch_size": 64},
    },
    # Not in the default configs: a seconds-sized setup for checks (`setup: digits`,
    # `canaries` <= 397, the rows the pools leave free). 30 epochs of Adam memorise
    # mislabelled canaries (3 epochs do not: every non-DP one-run bound was 0 on 200 canaries).
    "digits": {
        "dataset": {"name": "digits"},
        "split": {"audit": 600, "public": 600, "population": 200},
        "recipe": {"architecture": "mlp", "arch_params": {"hidden": 64}, "optimizer": "adam",
                   "lr": 0.01, "epochs": 30, "batch_size": 32},
    },
}


def no_dp(value: Any) -> bool:
    """``epsilons`` entries meaning "no DP": null or the word none."""
    return value is None or (isinstance(value, str) and value.strip().lower() in ("none", "inf"))


def run_config(params: dict[str, Any]) -> dict[str, Any]:
    """The pipeline config of one cell: target + references, canaries, DP or not."""
    spec = params["spec"]
    recipe = dict(spec["recipe"])
    if params["epsilon"] is not None:
        # δ spelled out: the same recipe key as the default, and the bounds audit this δ
        recipe["dp"] = {"epsilon": float(params["epsilon"]), "delta": float(params["delta"])}
        recipe.pop("augment", None)  # the DP-SGD trainer does not augment
    attacks = list(params["attacks"])
    return {
        "name": f"{STUDY}-{params['setup']}",
        "seed": int(params["rep"]),
        "dataset": dict(spec["dataset"]),
        "split": dict(spec["split"]),
        "design": "offline",  # canaries need it: references never train on them
        "models": 1 + int(params["references"]),
        "recipe": recipe,
        "reference_recipe": params["reference_recipe"],
        "signals": {"queries": ["plain"]},
        "attacks": attacks,
        "attack_params": {name: dict(value) for name, value in params["attack_params"].items()
                          if name in attacks},
        "metrics": {"fprs": list(FPRS), "bootstrap": int(params["bootstrap"]),
                    "epsilon_delta": float(params["delta"]),
                    "epsilon_alpha": float(params["alpha"])},
        "canaries": {"count": int(params["m"]), "kind": params["kind"],
                     "guesses": params["guesses"], "alpha": float(params["alpha"])},
        "device": params["device"],
    }


def _threshold_columns(prefix: str, record: Any) -> dict[str, Any]:
    """A threshold bound's ε, the counts it rests on (the half that did not choose τ) and its
    α and δ: all a recount at a stricter α needs (the report's Bonferroni best)."""
    b = None if record is None else record.bound
    return {
        prefix: None if record is None else record.epsilon,
        f"{prefix}_fp": None if b is None else b.fp,
        f"{prefix}_n0": None if b is None else b.n_nonmembers,
        f"{prefix}_fn": None if b is None else b.fn,
        f"{prefix}_n1": None if b is None else b.n_members,
        f"{prefix}_alpha": None if b is None else b.alpha,
        f"{prefix}_delta": None if b is None else b.delta,
        f"{prefix}_reason": None if record is None else record.reason,
    }


def _one_run_columns(record: Any) -> dict[str, Any]:
    """The one-run bound of the best (k₊, k₋) candidate with m, r, v, α, δ."""
    b = None if record is None else record.bound
    get = (lambda name: None) if b is None else (lambda name: getattr(b, name))
    return {
        "eps_one_run": None if record is None else record.epsilon,
        "one_run_m": get("m"), "one_run_k_plus": get("k_plus"),
        "one_run_k_minus": get("k_minus"), "one_run_r": get("guesses"),
        "one_run_v": get("correct"),
        "one_run_alpha": get("alpha"),  # per candidate: family α / candidates
        "one_run_family_alpha": None if b is None else record.family_alpha,
        "one_run_delta": get("delta"), "one_run_method": get("method"),
        "one_run_candidates": None if b is None else len(record.candidates),
        # every candidate's [k₊, k₋, v] (v null: it cannot certify ε > 0), so that the report
        # recounts each at α / K as privacy_audit does, not only the reported one
        "one_run_guesses": None if b is None else json.dumps(
            [[c.k_plus, c.k_minus, c.correct] for c in record.candidates]),
        "canaries_included": None if b is None else record.included,
        "one_run_reason": None if record is None else record.reason,
    }


def _cell_columns(audit: PrivacyAudit, accs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per cell: the claim, the Bonferroni best of all bounds, the models' accuracy."""
    claim, best = audit.settings.claimed, audit.best
    refs = [a["test_acc"] for a in accs[1:] if a["test_acc"] is not None]
    return {
        "claimed_epsilon": None if claim is None else claim.epsilon,
        "claimed_delta": None if claim is None else claim.delta,
        "accountant": None if claim is None else claim.accountant,
        "bound_delta": audit.settings.delta, "bound_alpha": audit.settings.alpha,
        "best_epsilon": None if best is None else best.epsilon,
        "best_attack": None if best is None else best.attack,
        "best_bound": None if best is None else best.kind,
        "best_method": None if best is None else best.bound.method,
        "bounds_compared": audit.bounds_compared,
        "refutes_claim": audit.refutes_claim,
        "target_train_acc": accs[0]["train_acc"], "target_test_acc": accs[0]["test_acc"],
        "reference_test_acc": sum(refs) / len(refs) if refs else None,
    }


def work(cell: Cell) -> list[dict[str, Any]]:
    """Train or load the cell's models, score every attack once, copy out every bound."""
    from miaudit.config import config_from_dict
    from miaudit.pipeline import build_bank
    from miaudit.pipeline.evaluate import EvaluationOptions, evaluate_attacks

    params = cell.params
    cfg = config_from_dict(run_config(params))
    start = time.perf_counter()
    built = build_bank(cfg, progress=False)
    if built.design.target != 0:
        raise StudyError("the dp-audit study expects the target to be model 0.")
    target = built.models[0]
    result = evaluate_attacks(built.bank, 0, cfg.attacks, EvaluationOptions(
        params=cfg.attack_params, metrics=cfg.metrics, seed=cfg.seed,
        train_seconds=[tm.train_seconds for tm in built.models], thresholds=False,
        progress=False, target_privacy=target.privacy, canaries=cfg.canaries,
        membership="miaudit"))
    audit = result.meta["privacy_audit"]
    per_cell = {
        **_cell_columns(audit, result.meta["models"]),  # canaries left out of accuracy
        "noise_multiplier": (target.privacy or {}).get("noise_multiplier"),
        "target_train_s": float(target.train_seconds),
        "models_trained": built.trained, "models_from_cache": built.reused,
        "train_wall_s": built.info.train_wall_seconds, "query_s": built.info.query_seconds,
        "cell_wall_s": time.perf_counter() - start,
    }
    rows = []
    for o in result.outcomes:
        m = o.metrics
        rows.append({
            "attack": o.name,
            **m.auc_columns(), **m.tpr_columns(FPRS), **m.counts(),
            **_threshold_columns("eps_audit", m.epsilon_lower_bound),
            **_threshold_columns("eps_canary", m.canary_epsilon_lower_bound),
            **_one_run_columns(m.one_run),
            **per_cell,
        })
    return rows


def _check_cell(params: dict[str, Any]) -> None:
    """The pipeline's own checks of a cell's run config (canary kind, guesses, whether the
    canaries could ever certify ε > 0), before any cell trains."""
    from miaudit.config import config_from_dict
    from miaudit.pipeline.canaries import check_canaries

    try:
        check_canaries(config_from_dict(run_config(params)))
    except ConfigError as exc:
        eps = "no DP" if params["epsilon"] is None else f"ε {params['epsilon']:g}"
        raise StudyError(f"dp-audit cell ({eps}, canaries {params['kind']!r}): {exc}") from exc


def cells(config: dict[str, Any]) -> list[Cell]:
    """One cell per (repetition, canary kind, ε); no DP written as null (or none)."""
    setups = {**config["setups"], **config["extra_setups"]}
    name = config["setup"]
    if name not in setups:
        raise StudyError(f"setup {name!r} has no entry under setups (known: "
                         f"{', '.join(setups)}); add one under extra_setups with "
                         f"{', '.join(_SPEC_KEYS)}.")
    missing = [k for k in _SPEC_KEYS if k not in setups[name]]
    if missing:
        raise StudyError(f"setup {name!r} lacks {', '.join(missing)}.")
    epsilons = [None if no_dp(e) else float(e) for e in config["epsilons"]]
    if not epsilons or not config["kinds"]:
        raise StudyError("epsilons and kinds must each list at least one entry.")
    if int(config["references"]) < 1:
        raise StudyError("references must be >= 1: the reference attacks need one.")
    # Offline design: every audit sample has every reference OUT; LiRA's equal-count rule
    # would score each against its first reference alone (see the rapid study).
    attack_params = {"lira-offline": {"equal_counts": False},
                     "lira-offline-fixed-variance": {"equal_counts": False}}
    for attack, extra in config["attack_params"].items():
        attack_params[attack] = {**attack_params.get(attack, {}), **extra}
    common = {"setup": name, "spec": setups[name], "m": int(config["canaries"]),
              "guesses": config["guesses"], "references": int(config["references"]),
              "reference_recipe": config["reference_recipe"],
              "attacks": list(config["attacks"]), "attack_params": attack_params,
              "alpha": float(config["alpha"]), "delta": float(config["delta"]),
              "bootstrap": int(config["bootstrap"]), "device": config["device"]}
    # kinds outermost: parallel workers start on different ε, so the second kind of an ε
    # usually finds its references in the cache instead of training them twice at once
    out = [Cell(STUDY, {"epsilon": eps, "kind": kind, "rep": rep, **common})
           for rep in range(int(config["repetitions"]))
           for kind in config["kinds"] for eps in epsilons]
    for cell in out[: len(epsilons) * len(config["kinds"])]:  # reps differ only in the seed
        _check_cell(cell.params)
    return out


_CPU = {
    "setup": "fashion-mnist",
    "setups": SETUPS,
    "extra_setups": {},  # {name: {dataset, split, recipe}}
    "epsilons": [1, 4, 10, 100, None],  # None (null): no DP
    "kinds": ["mislabelled", "natural"],
    "canaries": 1000,  # m, of each kind
    "guesses": GUESSES,  # canaries.guesses; null: a tenth of m each way
    "repetitions": 1,
    "references": 2,
    "reference_recipe": "target",  # the target's recipe, DP included
    "attacks": ATTACKS,
    "attack_params": {},  # extra per-attack parameters
    "alpha": 0.05,
    "delta": 1.0e-5,  # DP-SGD's δ and every bound's
    "bootstrap": 100,
    "device": "cpu",
}

_PAPER = {
    **_CPU,
    "setups": {**SETUPS, "fashion-mnist": {
        **SETUPS["fashion-mnist"],
        # 30,000 of 70,000 rows; the target trains on 5,000 audit rows + ~2,500 canaries
        "split": {"audit": 10000, "public": 10000, "population": 5000}}},
    "canaries": 5000,
    "repetitions": 3,
    "references": 8,
    "bootstrap": 200,
    "device": "auto",
}


STUDY_DP_AUDIT = register_study(Study(
    name=STUDY,
    description="empirical ε of DP-SGD (Fashion-MNIST MLP, ε 1-100 and no "
    "DP): threshold and one-run bounds with canaries vs the claim",
    configs={"cpu": _CPU, "paper": _PAPER},
    cells=cells,
    work=work,
    summarize=summarize,
))
