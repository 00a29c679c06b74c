"""Result types shared by the pipeline, the `attack` command, the report and the Python API.

The report only reads these; it never recomputes an attack. An attack's metrics travel as the
dict :func:`miaudit.metrics.evaluate` returns (``AttackOutcome.metrics``, written to
metrics.json as is); :class:`AttackMetrics` is the same content typed
(``AttackOutcome.summary``), and :meth:`AuditResult.to_frame` lays every attack's figures out
as one long table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pandas is imported only by to_frame: `import miaudit` stays cheap
    import pandas as pd


def _rate_key(value: float) -> str:
    """The metrics dict's key for a rate (as :func:`miaudit.metrics._key` writes it)."""
    return repr(float(value))


def _ci(value: Any) -> tuple[float, float] | None:
    return None if value is None else (float(value[0]), float(value[1]))


@dataclass(frozen=True)
class TPRAtFPR:
    """The true-positive rate at one false-positive rate, with its bootstrap interval and
    the support it rests on (``expected_false_positives`` = non-members x FPR)."""

    fpr: float
    tpr: float
    ci_low: float | None = None  # None: no bootstrap (n_bootstrap 0)
    ci_high: float | None = None
    expected_false_positives: float | None = None
    n_nonmembers: int | None = None
    warning: str | None = None  # set when fewer than ten false positives are expected

    @property
    def indicative(self) -> bool:
        """The figure rests on fewer than ten expected false positives: treat as indicative."""
        return self.warning is not None

    @property
    def ci(self) -> tuple[float, float] | None:
        if self.ci_low is None or self.ci_high is None:
            return None
        return (self.ci_low, self.ci_high)


@dataclass(frozen=True)
class PrecisionAtRecall:
    recall: float
    precision: float


@dataclass(frozen=True)
class AttackMetrics:
    """One attack's metrics, typed: the content of :func:`miaudit.metrics.evaluate`'s dict.

    ``from_dict(d).to_dict() == d`` for every dict ``evaluate`` returns (same keys, order and
    values), so the typed form and metrics.json never disagree. Dicts missing some keys (older
    or hand-made ones) load with those fields None or empty.
    """

    auc: float
    auc_ci: tuple[float, float] | None
    tpr: tuple[TPRAtFPR, ...]  # in the order the FPRs were asked for
    n_members: int | None = None
    n_nonmembers: int | None = None
    n_unscorable: int | None = None
    precision_at_recall: tuple[PrecisionAtRecall, ...] = ()
    balanced_accuracy: float | None = None  # at `threshold`, chosen on public data only
    threshold: float | None = None

    @classmethod
    def from_dict(cls, metrics: dict[str, Any]) -> AttackMetrics:
        ci = metrics.get("tpr_at_fpr_ci") or {}
        support = metrics.get("fpr_support") or {}
        tpr = []
        for key, value in (metrics.get("tpr_at_fpr") or {}).items():
            low_high = _ci(ci.get(key))
            where = support.get(key) or {}
            efp = where.get("expected_false_positives")
            n0 = where.get("n_nonmembers")
            tpr.append(TPRAtFPR(
                fpr=float(key), tpr=float(value),
                ci_low=None if low_high is None else low_high[0],
                ci_high=None if low_high is None else low_high[1],
                expected_false_positives=None if efp is None else float(efp),
                n_nonmembers=None if n0 is None else int(n0),
                warning=where.get("warning"),
            ))
        bal, threshold = metrics.get("balanced_accuracy"), metrics.get("threshold")
        return cls(
            auc=float(metrics["auc"]),
            auc_ci=_ci(metrics.get("auc_ci")),
            tpr=tuple(tpr),
            n_members=metrics.get("n_members"),
            n_nonmembers=metrics.get("n_nonmembers"),
            n_unscorable=metrics.get("n_unscorable"),
            precision_at_recall=tuple(
                PrecisionAtRecall(float(k), float(v))
                for k, v in (metrics.get("precision_at_recall") or {}).items()
            ),
            balanced_accuracy=None if bal is None else float(bal),
            threshold=None if threshold is None else float(threshold),
        )

    def to_dict(self) -> dict[str, Any]:
        """The dict :func:`miaudit.metrics.evaluate` returns (JSON-serialisable)."""
        return {
            "auc": self.auc,
            "auc_ci": None if self.auc_ci is None else list(self.auc_ci),
            "tpr_at_fpr": {_rate_key(t.fpr): t.tpr for t in self.tpr},
            "tpr_at_fpr_ci": {_rate_key(t.fpr): None if t.ci is None else list(t.ci)
                              for t in self.tpr},
            "fpr_support": {
                _rate_key(t.fpr): {"n_nonmembers": t.n_nonmembers,
                                   "expected_false_positives": t.expected_false_positives,
                                   "warning": t.warning}
                for t in self.tpr
            },
            "n_members": self.n_members,
            "n_nonmembers": self.n_nonmembers,
            "n_unscorable": self.n_unscorable,
            "precision_at_recall": {_rate_key(p.recall): p.precision
                                    for p in self.precision_at_recall},
            "balanced_accuracy": self.balanced_accuracy,
            "threshold": self.threshold,
        }

    def tpr_at(self, fpr: float) -> TPRAtFPR:
        """The figure at FPR ``fpr`` (KeyError naming the reported FPRs if there is none)."""
        for item in self.tpr:
            if item.fpr == float(fpr):
                return item
        raise KeyError(f"no TPR at FPR {fpr!r}; reported: {[t.fpr for t in self.tpr]}")


@dataclass(frozen=True)
class AttackCost:
    """What an attack cost: models it used (target included), queries per sample, and
    seconds (training of those models as recorded when they were trained, scoring, and
    choosing the public-data threshold). None: not recorded."""

    models: int | None = None
    queries_per_sample: float | None = None
    train_seconds: float | None = None
    score_seconds: float | None = None
    threshold_seconds: float | None = None

    @classmethod
    def from_dict(cls, cost: dict[str, Any]) -> AttackCost:
        # "models_trained" is the spelling older results used (the table accepts both)
        models = cost.get("models", cost.get("models_trained"))
        return cls(models=models, queries_per_sample=cost.get("queries_per_sample"),
                   train_seconds=cost.get("train_seconds"),
                   score_seconds=cost.get("score_seconds"),
                   threshold_seconds=cost.get("threshold_seconds"))

# Columns of AuditResult.to_frame, in order.
FRAME_COLUMNS = ("attack", "metric", "fpr", "recall", "value", "ci_low", "ci_high",
                 "expected_false_positives", "indicative")


@dataclass
class AttackOutcome:
    """One attack's scores on the audit samples of one target, with metrics and cost."""

    name: str
    scores: np.ndarray  # float64 [n_audit]; NaN = the attack could not score that sample
    metrics: dict[str, Any]  # as returned by miaudit.metrics.evaluate
    cost: dict[str, Any] = field(default_factory=dict)  # models_trained, queries_per_sample,
    # train_seconds, score_seconds

    @property
    def summary(self) -> AttackMetrics:
        """``metrics`` typed (the dict stays what the report and metrics.json read)."""
        return AttackMetrics.from_dict(self.metrics)

    @property
    def cost_summary(self) -> AttackCost:
        """``cost`` typed."""
        return AttackCost.from_dict(self.cost)


@dataclass
class AuditResult:
    """Everything a report shows for one target model."""

    indices: np.ndarray  # int64 [n_audit]: positions of the audit samples in the bank
    members: np.ndarray  # bool [n_audit]: membership in the target (ground truth)
    outcomes: list[AttackOutcome]
    meta: dict[str, Any] = field(default_factory=dict)  # dataset, target, model accuracies,
    # config, seed, warnings: free-form, JSON-serialisable
    rows: np.ndarray | None = None  # int64 [n_audit]: the dataset row of each audit sample;
    # None when unknown (a bare bank: `miaudit attack`), then reports show bank positions
    out: Path | None = None  # the run directory, when the run wrote one (the Python API)

    def outcome(self, name: str) -> AttackOutcome:
        for item in self.outcomes:
            if item.name == name:
                return item
        raise KeyError(name)

    def to_frame(self) -> pd.DataFrame:
        """Every attack's figures as one long-format table, one row per (attack, metric[, rate]).

        Columns: ``attack``; ``metric``; ``fpr`` (for ``tpr``, else NaN); ``recall`` (for
        ``precision``, else NaN); ``value``; ``ci_low`` / ``ci_high`` (the bootstrap interval
        of ``auc`` and ``tpr``; NaN elsewhere or without a bootstrap);
        ``expected_false_positives`` (non-members x FPR, for ``tpr``); ``indicative`` (for
        ``tpr``: True when that figure rests on fewer than ten expected false positives; NA
        elsewhere). Metrics, per attack in this order: ``auc``; ``tpr`` at each FPR;
        ``balanced_accuracy`` and ``threshold`` (NaN when no public-data threshold could be
        chosen); ``precision`` at each recall; ``n_members``, ``n_nonmembers``,
        ``n_unscorable``; then the recorded cost as ``cost.models``,
        ``cost.queries_per_sample``, ``cost.train_seconds``, ``cost.score_seconds``,
        ``cost.threshold_seconds``. Values are the metrics dict's own numbers (missing ones
        NaN). Attacks keep the result's order (:func:`miaudit.strongest` / :func:`miaudit.ranked`
        order them as the report does).

        ``result.to_frame().query("metric == 'tpr' and fpr == 0.001")`` is the TPR at 0.1% FPR
        of every attack.
        """
        import pandas as pd

        nan = float("nan")

        def num(value: Any) -> float:
            return nan if value is None else float(value)

        rows: list[tuple[Any, ...]] = []

        def add(attack: str, metric: str, value: Any, *, fpr: float = nan, recall: float = nan,
                ci: tuple[float, float] | None = None, efp: Any = None,
                indicative: Any = pd.NA) -> None:
            rows.append((attack, metric, fpr, recall, num(value),
                         nan if ci is None else ci[0], nan if ci is None else ci[1],
                         num(efp), indicative))

        for outcome in self.outcomes:
            m, name = outcome.summary, outcome.name
            add(name, "auc", m.auc, ci=m.auc_ci)
            for t in m.tpr:
                add(name, "tpr", t.tpr, fpr=t.fpr, ci=t.ci, efp=t.expected_false_positives,
                    indicative=t.indicative)
            add(name, "balanced_accuracy", m.balanced_accuracy)
            add(name, "threshold", m.threshold)
            for p in m.precision_at_recall:
                add(name, "precision", p.precision, recall=p.recall)
            for count in ("n_members", "n_nonmembers", "n_unscorable"):
                add(name, count, getattr(m, count))
            cost = outcome.cost_summary
            for key in ("models", "queries_per_sample", "train_seconds", "score_seconds",
                        "threshold_seconds"):
                if getattr(cost, key) is not None:
                    add(name, f"cost.{key}", getattr(cost, key))
        frame = pd.DataFrame(rows, columns=list(FRAME_COLUMNS))
        frame["indicative"] = frame["indicative"].astype("boolean")
        return frame
