"""The split check's record, typed (docs/algorithms.md §20): what
:func:`miaudit.verdict.split_check.split_check` found, or why it did not run, and each
model-free measurement of the split the verdict weighs.

``AuditResult.meta["checks"]["split"]`` holds a :data:`SplitRecord` (or None: not run);
summary.json holds its ``to_dict()``, the same keys, order and values the check has always
written. :func:`split_record` reads one back from such a dict (a summary.json, a hand-made
record), so readers go through the record whichever form meta holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from miaudit.records.outcomes import AttackMetrics, TPRAtFPR


def _ci(value: Any) -> tuple[float, float] | None:
    return None if value is None else (float(value[0]), float(value[1]))


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class SplitHalf:
    """One held-out half: its AUC (scored by the classifier fitted on the other half) with
    its DeLong interval, its counts and the one-sided p-value of AUC > 0.5."""

    auc: float | None
    auc_ci: tuple[float, float] | None
    n_members: int | None
    n_nonmembers: int | None
    p_value: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"auc": self.auc, "auc_ci": None if self.auc_ci is None else list(self.auc_ci),
                "n_members": self.n_members, "n_nonmembers": self.n_nonmembers,
                "p_value": self.p_value}

    @classmethod
    def from_dict(cls, half: Mapping[str, Any]) -> SplitHalf:
        return cls(auc=_float(half.get("auc")), auc_ci=_ci(half.get("auc_ci")),
                   n_members=_int(half.get("n_members")),
                   n_nonmembers=_int(half.get("n_nonmembers")),
                   p_value=_float(half.get("p_value")))


@dataclass(frozen=True)
class SplitCheck:
    """The split check that ran: a ``classifier`` on ``features`` (in words), cross-fitted on
    ``folds`` halves of ``rows`` audit rows (a seeded subsample of ``subsampled_from``, or
    None: all of them); the pooled out-of-fold ``metrics`` (no AUC interval: see
    :mod:`miaudit.verdict.split_check`), each half's figures, the ``confidence`` of their
    intervals, the Bonferroni-corrected one-sided ``p_value`` and ``shifted``: whether it is
    below ``shift_p_value``. ``seconds``: what the check took (None when a record does not
    say)."""

    classifier: str
    features: str
    folds: int
    rows: int
    subsampled_from: int | None
    metrics: AttackMetrics
    halves: tuple[SplitHalf, ...]
    confidence: float
    p_value: float
    shift_p_value: float
    shifted: bool
    seconds: float | None = None

    @property
    def auc(self) -> float | None:
        """The pooled out-of-fold AUC."""
        return self.metrics.auc

    def to_dict(self) -> dict[str, Any]:
        """The record as summary.json holds it."""
        return {
            "classifier": self.classifier, "features": self.features, "folds": self.folds,
            "rows": self.rows, "subsampled_from": self.subsampled_from,
            "metrics": self.metrics.to_dict(), "halves": [h.to_dict() for h in self.halves],
            "confidence": self.confidence, "p_value": self.p_value,
            "shift_p_value": self.shift_p_value, "shifted": self.shifted,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> SplitCheck:
        """:meth:`to_dict` typed again (a record missing ``seconds`` or a half's counts, e.g. a
        hand-made one, loads with them None)."""
        return cls(
            classifier=str(record["classifier"]), features=str(record["features"]),
            folds=int(record["folds"]), rows=int(record["rows"]),
            subsampled_from=_int(record.get("subsampled_from")),
            metrics=AttackMetrics.from_dict(dict(record["metrics"])),
            halves=tuple(SplitHalf.from_dict(h) for h in record.get("halves") or ()),
            confidence=float(record["confidence"]), p_value=float(record["p_value"]),
            shift_p_value=float(record["shift_p_value"]), shifted=bool(record["shifted"]),
            seconds=_float(record.get("seconds")),
        )


@dataclass(frozen=True)
class SplitSkipped:
    """The split check could not run, and why (too few members or non-members, no features)."""

    skipped: str

    def to_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped}


SplitRecord = SplitCheck | SplitSkipped


def split_record(value: Any) -> SplitRecord | None:
    """The split check's record as meta holds it (a record, or its dict read back from
    summary.json), typed; None when the check did not run."""
    if value is None or isinstance(value, (SplitCheck, SplitSkipped)):
        return value
    if isinstance(value, Mapping):
        if "skipped" in value:
            return SplitSkipped(str(value["skipped"]))
        return SplitCheck.from_dict(value)
    raise TypeError(f"the split check's record must be a SplitCheck, a SplitSkipped, their "
                    f"dict or None; got {type(value).__name__}")


@dataclass(frozen=True)
class ModelFreeEvidence:
    """One model-free measurement of the split: ``source`` (the split check, or a model-free
    attack, in words), its AUC, the one-sided p-value of AUC > 0.5 (None: no test),
    ``shifted`` (clearly above chance) and its TPRs at the reported FPRs."""

    source: str
    auc: float | None
    p_value: float | None
    shifted: bool
    tpr: Sequence[TPRAtFPR] = ()

    def tpr_at(self, fpr: float) -> float:
        """The TPR at FPR ``fpr``; NaN when it reports none there."""
        return next((t.tpr for t in self.tpr if t.fpr == float(fpr)), math.nan)
