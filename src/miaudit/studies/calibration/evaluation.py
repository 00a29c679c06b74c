"""Evaluation helpers for studies: attacks on one bank with a chosen set of reference models,
thresholds from a public-data shadow, curves on fixed grids, and member:non-member ratios.

These compose the pipeline's own pieces (``TargetView``, ``run_attack``,
``pipeline.public_threshold``, ``miaudit.metrics``); nothing here scores or trains anything
itself. Thresholds are only ever chosen on public samples through a shadow target, never on
the evaluated samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from miaudit import metrics
from miaudit.attacks import TargetView, run_attack
from miaudit.pipeline.evaluate import public_threshold
from miaudit.records.outcomes import AttackMetrics
from miaudit.signals import SignalBank

# log-spaced FPRs for ROC curves (the low-FPR end matters) and linear recalls for PR curves
FPR_GRID = tuple(float(f) for f in np.round(np.logspace(-3, 0, 25), 6))
RECALL_GRID = tuple(float(r) for r in np.round(np.linspace(0.02, 1.0, 50), 4))


def view_with(bank: SignalBank, target: int, references: Sequence[int]) -> TargetView:
    """The bank as seen attacking ``target`` with exactly ``references`` (bank indices, in
    that order) as its reference models."""
    ids = np.asarray(list(references), dtype=int)
    return TargetView(bank, target, ids)


@dataclass
class Scored:
    """An attack's scores on the audit samples, the truth, and the shadow's public scores."""

    name: str
    scores: np.ndarray  # float64 [n_audit]
    members: np.ndarray  # bool [n_audit]
    threshold: float | None  # chosen on public data (None: no shadow could be simulated)
    shadow_scores: np.ndarray | None = None  # the shadow target's scores on public samples
    shadow_members: np.ndarray | None = None  # the shadow's (known) membership there


def score_attack(
    bank: SignalBank,
    target: int,
    name: str,
    references: Sequence[int],
    threshold_references: Sequence[int] | None = None,
    params: dict[str, Any] | None = None,
    fixed_threshold: float | None = None,
) -> Scored:
    """Score ``name`` for ``target`` with ``references``; the accuracy threshold comes from
    ``pipeline.public_threshold`` on a view with ``threshold_references`` (its first one plays
    the target on public data, the rest are that shadow's references), or is ``fixed``."""
    params = params or {}
    scores = run_attack(name, view_with(bank, target, references), **params).scores
    members = bank.membership[target][bank.audit]
    threshold, shadow_scores, shadow_members = fixed_threshold, None, None
    if threshold_references:
        view = view_with(bank, target, threshold_references)
        threshold = public_threshold(name, view, params)
        assert bank.audit is not None and bank.population is not None  # set by SignalBank
        public = ~bank.audit & ~bank.population & view.reference_available[0]
        shadow = view.as_shadow(0)
        known = view.reference_membership[0][public]
        if threshold is not None and known.any() and not known.all():
            shadow_scores = run_attack(name, shadow, **params).scores[public]
            finite = ~np.isnan(shadow_scores)
            shadow_scores, shadow_members = shadow_scores[finite], known[finite]
    return Scored(name, scores[bank.audit], members, threshold, shadow_scores, shadow_members)


def summary(scored: Scored, fprs: Sequence[float] = (0.001, 0.01)) -> dict[str, Any]:
    """AUC, balanced accuracy at the public threshold, TPR at ``fprs`` and sample counts."""
    result = metrics.evaluate(scored.scores, scored.members, fprs=list(fprs), n_bootstrap=0,
                              threshold=scored.threshold, recalls=[0.1, 0.5])
    met = AttackMetrics.from_dict(result)
    return {**met.auc_columns(), "acc": met.balanced_accuracy, "threshold": scored.threshold,
            **met.counts(), **met.tpr_columns(fprs),
            **{f"precision_at_{p.recall:g}": p.precision for p in met.precision_at_recall}}


def roc_rows(scores: np.ndarray, members: np.ndarray, grid: Sequence[float] = FPR_GRID
             ) -> list[dict[str, float]]:
    """TPR at each FPR of ``grid`` (largest TPR with FPR <= f, no interpolation)."""
    fpr, tpr, _ = metrics.roc(scores, members)
    return [{"fpr": f, "tpr": metrics.tpr_at_fpr(fpr, tpr, f)} for f in grid]


def pr_rows(scores: np.ndarray, members: np.ndarray, grid: Sequence[float] = RECALL_GRID
            ) -> list[dict[str, float]]:
    """Precision at each recall of ``grid`` (the operating point reaching that recall)."""
    return [{"recall": r, "precision": metrics.precision_at_recall(scores, members, r)}
            for r in grid]


def subsample_members(members: np.ndarray, ratio: float, rng: np.random.Generator
                      ) -> np.ndarray:
    """Mask keeping every non-member and ``round(ratio * n_nonmembers)`` random members
    (all of them if there are fewer): a member:non-member ratio of ``ratio``."""
    keep = ~members
    idx = np.flatnonzero(members)
    n = min(idx.size, max(1, int(round(ratio * int((~members).sum())))))
    keep[rng.choice(idx, size=n, replace=False)] = True
    return keep


def ratio_rows(scored: Scored, ratio: float, seed: int) -> dict[str, Any]:
    """Accuracy of ``scored`` when members are ``ratio`` times the non-members, with the
    accuracy-maximising threshold chosen on the shadow's public samples subsampled to the same
    ratio (Watson et al. fig. 4), plus the PR curve and the subsampled counts."""
    rng = np.random.default_rng([seed, int(round(ratio * 1e6))])
    keep = subsample_members(scored.members, ratio, rng)
    s, m = scored.scores[keep], scored.members[keep]
    out: dict[str, Any] = {"n_members": int(m.sum()), "n_nonmembers": int((~m).sum()),
                           "acc": None, "threshold": None}
    if scored.shadow_scores is not None:
        assert scored.shadow_members is not None  # they come with the shadow's scores
        shadow_keep = subsample_members(scored.shadow_members, ratio, rng)
        tau = metrics.best_accuracy_threshold(scored.shadow_scores[shadow_keep],
                                              scored.shadow_members[shadow_keep])
        with np.errstate(invalid="ignore"):
            predicted = s >= tau
        out.update(acc=float((predicted == m).mean()), threshold=tau)
    out["auc"] = metrics.auc(s, m)
    out["pr"] = pr_rows(s, m)
    return out
