"""The work of one calibration-study cell: build its bank with the pipeline, evaluate it.

Every function takes the cell's parameters and returns JSON-able result rows, each with a
``section`` saying which table or figure it feeds (model, main, ratio, pr, roc, size, refs, dp).
"""

from __future__ import annotations

from typing import Any

from miaudit.config import config_from_dict
from miaudit.pipeline import BuiltBank, build_bank, model_accuracies
from miaudit.studies.calibration.evaluation import (
    Scored,
    pr_rows,
    ratio_rows,
    roc_rows,
    score_attack,
    summary,
)
from miaudit.studies.calibration.settings import CURVE_ATTACKS, FORGETTING_THRESHOLD, SCORES


def _build(params: dict[str, Any]) -> BuiltBank:
    import torch

    cfg = config_from_dict(params["run"])
    torch.manual_seed(cfg.seed)  # as pipeline.run does
    return build_bank(cfg, progress=False)


def _model_row(built: BuiltBank) -> dict[str, Any]:
    target = built.design.target
    acc = model_accuracies(built.bank)[target]
    privacy = getattr(built.models[target], "privacy", None)
    row = {"section": "model", "train_acc": acc["train_acc"], "test_acc": acc["test_acc"],
           "n_train": acc["n_train"], "models_trained": built.trained,
           "train_seconds": round(float(built.models[target].train_seconds), 2)}
    if privacy:
        row["epsilon_spent"] = privacy.get("epsilon_spent", privacy.get("epsilon"))
        row["noise_multiplier"] = privacy.get("noise_multiplier")
    return row


def _references(built: BuiltBank) -> list[int]:
    return [m for m in range(built.bank.n_models) if m != built.design.target]


def _calibrated(built: BuiltBank, name: str, k: int) -> Scored:
    """``name`` with the first ``k`` references; the threshold from a shadow calibrated by
    ``k`` references too (so it needs k + 1 references; none if the bank has fewer)."""
    refs = _references(built)
    threshold_refs = refs[: k + 1] if len(refs) > k else None
    return score_attack(built.bank, built.design.target, name, refs[:k], threshold_refs)


def _forgetting(built: BuiltBank, name: str, k: int) -> Scored:
    """``name`` calibrated by the first ``k`` forgetting copies (bank: target, copies)."""
    bank = built.forgetting_bank
    assert bank is not None, "the cell's run config has no forgetting copies"
    return score_attack(bank, 0, name, list(range(1, k + 1)),
                        fixed_threshold=FORGETTING_THRESHOLD)


def _original(built: BuiltBank, name: str) -> Scored:
    # the score ignores references; a reference plays target on public data for the threshold
    return score_attack(built.bank, built.design.target, name, _references(built)[:1],
                        _references(built)[:1])


def _curves(scored: Scored, attack: str, ratio: float = 1.0) -> list[dict[str, Any]]:
    rows = [{"section": "roc", "attack": attack, **p}
            for p in roc_rows(scored.scores, scored.members)]
    rows += [{"section": "pr", "attack": attack, "ratio": ratio, **p}
             for p in pr_rows(scored.scores, scored.members)]
    return rows


def main_rows(params: dict[str, Any]) -> list[dict[str, Any]]:
    """Tables 1-3 (one reference / one forgetting copy), fig. 4 ratios, fig. 2 curves."""
    built = _build(params)
    rows = [_model_row(built)]
    scored: dict[str, Scored] = {}
    for score, original, calibrated in SCORES:
        if original in ("gradient-norm",) and "grad_norm" not in built.bank.channels:
            continue
        variants = [("orig", original, _original(built, original))]
        if calibrated:
            variants.append(("cal", calibrated, _calibrated(built, calibrated, 1)))
            variants.append(("cal-f", f"{calibrated}.forgetting",
                             _forgetting(built, calibrated, 1)))
        for method, attack, result in variants:
            scored[attack] = result
            rows.append({"section": "main", "score": score, "method": method, "attack": attack,
                         "threshold_from": _threshold_source(method, result),
                         **summary(result)})
    for attack in CURVE_ATTACKS:
        rows += [r for r in _curves(scored[attack], attack) if r["section"] == "roc"]
        for ratio in params["ratios"]:
            by_ratio = ratio_rows(scored[attack], float(ratio), int(params["run"]["seed"]))
            rows += [{"section": "pr", "attack": attack, "ratio": float(ratio), **p}
                     for p in by_ratio.pop("pr")]
            rows.append({"section": "ratio", "attack": attack, "ratio": float(ratio),
                         **by_ratio})
    return rows


def _threshold_source(method: str, result: Scored) -> str:
    if method == "cal-f":
        return f"fixed {FORGETTING_THRESHOLD:g} (paper's default)"
    return "public shadow" if result.threshold is not None else "none"


def size_rows(params: dict[str, Any]) -> list[dict[str, Any]]:
    """Fig. 3: gap, loss and calibrated loss against one training-set size."""
    built = _build(params)
    rows = [_model_row(built)]
    for attack, result in (("correctness", _original(built, "correctness")),
                           ("loss", _original(built, "loss")),
                           ("calibrated-loss", _calibrated(built, "calibrated-loss", 1))):
        rows.append({"section": "size", "attack": attack, **summary(result)})
    return rows


def refs_rows(params: dict[str, Any]) -> list[dict[str, Any]]:
    """Fig. 5: calibrated loss with k reference models (trained from scratch on random halves
    of the public pool) and with k forgetting copies, for each k in ``counts``."""
    built = _build(params)
    rows = [_model_row(built)]
    for k in params["counts"]:
        for method, result in (("cal", _calibrated(built, "calibrated-loss", int(k))),
                               ("cal-f", _forgetting(built, "calibrated-loss", int(k)))):
            rows.append({"section": "refs", "method": method, "k": int(k),
                         "threshold_from": _threshold_source(method, result),
                         **summary(result)})
    return rows


def dp_rows(params: dict[str, Any]) -> list[dict[str, Any]]:
    """Fig. 6: loss and calibrated loss against a DP-SGD target: summary and curves."""
    built = _build(params)
    rows = [_model_row(built)]
    for attack in CURVE_ATTACKS:
        result = (_original(built, attack) if attack == "loss"
                  else _calibrated(built, attack, 1))
        rows.append({"section": "dp", "attack": attack, **summary(result)})
        rows += _curves(result, attack)
    return rows
