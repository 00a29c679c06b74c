"""Result types shared by the pipeline, the `attack` command, the report and the Python API.

The report only reads these; it never recomputes an attack. An :class:`AttackOutcome` is built
once, frozen, with its metrics typed (:class:`AttackMetrics`, from the dict
:func:`miaudit.metrics.evaluate` returns plus the privacy bounds) and its cost
(:class:`AttackCost`); metrics.json is written from them (:meth:`AttackOutcome.metrics_entry`,
read back by :func:`read_metrics_entry`), and :meth:`AuditResult.to_frame` lays every attack's
figures out as one long table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from miaudit.records.columns import AUC, COUNT_COLUMNS, ci_columns, tpr_column
from miaudit.records.privacy import (
    EPSILON_KEYS,
    EPSILON_TYPES,
    OneRunEpsilon,
    ThresholdEpsilon,
    ThresholdGaussianDP,
)
from miaudit.records.run_meta import RunMeta

if TYPE_CHECKING:  # pandas is imported only by to_frame: `import miaudit` stays cheap
    import pandas as pd

# an attack's privacy bound as its metrics hold it (miaudit.records.privacy)
BoundRecord = ThresholdEpsilon | ThresholdGaussianDP | OneRunEpsilon


def rate_key(value: float | str) -> str:
    """The metrics dict's key for a rate (as :func:`miaudit.metrics._key` writes it):
    0.001 -> '0.001'."""
    return repr(float(value))


def _ci(value: Any) -> tuple[float, float] | None:
    return None if value is None else (float(value[0]), float(value[1]))


@dataclass(frozen=True)
class TPRAtFPR:
    """The true-positive rate at one false-positive rate, with its (bootstrap) interval and
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
    """One attack's metrics, typed: the content of :func:`miaudit.metrics.evaluate`'s dict
    and the privacy bounds the pipeline adds (:meth:`with_bounds`).

    ``from_dict(d).to_dict() == d`` for every dict ``evaluate`` returns, bounds included (same
    keys, order and values): metrics.json is ``to_dict()``, and reads back equal. Dicts missing
    some keys (older or hand-made ones) load with those fields None or empty.
    """

    auc: float | None  # None: the dict has none (an attack that was not evaluated)
    auc_ci: tuple[float, float] | None
    tpr: tuple[TPRAtFPR, ...]  # in the order the FPRs were asked for
    n_members: int | None = None
    n_nonmembers: int | None = None
    n_unscorable: int | None = None
    precision_at_recall: tuple[PrecisionAtRecall, ...] = ()
    balanced_accuracy: float | None = None  # at `threshold`, chosen on public data only
    threshold: float | None = None
    # ε and μ-GDP lower bounds (miaudit.records.privacy; None: the dict has none, e.g. from
    # evaluate)
    epsilon_lower_bound: ThresholdEpsilon | None = None
    gaussian_dp_lower_bound: ThresholdGaussianDP | None = None
    canary_epsilon_lower_bound: ThresholdEpsilon | None = None
    canary_gaussian_dp_lower_bound: ThresholdGaussianDP | None = None
    one_run: OneRunEpsilon | None = None

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
        auc = metrics.get("auc")
        # each key its own type (EPSILON_TYPES): the fields' types, key by key
        bounds: dict[str, Any] = {key: EPSILON_TYPES[key].from_dict(metrics[key])
                                  for key in EPSILON_KEYS if metrics.get(key) is not None}
        return cls(
            auc=None if auc is None else float(auc),
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
            **bounds,
        )

    def to_dict(self) -> dict[str, Any]:
        """The dict :func:`miaudit.metrics.evaluate` returns (JSON-serialisable)."""
        return {
            "auc": self.auc,
            "auc_ci": None if self.auc_ci is None else list(self.auc_ci),
            "tpr_at_fpr": {rate_key(t.fpr): t.tpr for t in self.tpr},
            "tpr_at_fpr_ci": {rate_key(t.fpr): None if t.ci is None else list(t.ci)
                              for t in self.tpr},
            "fpr_support": {
                rate_key(t.fpr): {"n_nonmembers": t.n_nonmembers,
                                   "expected_false_positives": t.expected_false_positives,
                                   "warning": t.warning}
                for t in self.tpr
            },
            "n_members": self.n_members,
            "n_nonmembers": self.n_nonmembers,
            "n_unscorable": self.n_unscorable,
            "precision_at_recall": {rate_key(p.recall): p.precision
                                    for p in self.precision_at_recall},
            "balanced_accuracy": self.balanced_accuracy,
            "threshold": self.threshold,
            **{key: getattr(self, key).to_dict() for key in EPSILON_KEYS
               if getattr(self, key) is not None},
        }

    def with_bounds(self, bounds: Mapping[str, BoundRecord]) -> AttackMetrics:
        """These metrics with the privacy bounds ``bounds`` (keyed by
        :data:`~miaudit.records.privacy.EPSILON_KEYS`), as a new record."""
        unknown = sorted(set(bounds) - set(EPSILON_KEYS))
        if unknown:
            raise KeyError(f"not privacy bounds: {unknown}; known: {list(EPSILON_KEYS)}")
        changes: dict[str, Any] = dict(bounds)
        return dataclasses.replace(self, **changes)

    def tpr_at(self, fpr: float | str) -> TPRAtFPR:
        """The figure at FPR ``fpr`` (a rate or the metrics dict's key, '0.001'), with its
        interval and support; KeyError naming the reported FPRs if there is none."""
        found = self.find_tpr(fpr)
        if found is None:
            raise KeyError(f"no TPR at FPR {fpr!r}; reported: {[t.fpr for t in self.tpr]}")
        return found

    def find_tpr(self, fpr: float | str | None) -> TPRAtFPR | None:
        """:meth:`tpr_at`, or None when the attack reports no TPR at ``fpr`` (or it is None)."""
        if fpr is None:
            return None
        return next((item for item in self.tpr if item.fpr == float(fpr)), None)

    @property
    def fprs(self) -> tuple[float, ...]:
        """The FPRs the attack reports a TPR at, in the order they were asked for."""
        return tuple(t.fpr for t in self.tpr)

    def counts(self) -> dict[str, int | None]:
        """The sample counts under their column names (:data:`COUNT_COLUMNS`)."""
        return {name: getattr(self, name) for name in COUNT_COLUMNS}

    def auc_columns(self, ci: bool = False) -> dict[str, Any]:
        """``{"auc": ...}``, with ``auc_lo`` / ``auc_hi`` (None without a bootstrap) if ``ci``."""
        row: dict[str, Any] = {AUC: self.auc}
        if ci:
            row.update(zip(ci_columns(AUC), self.auc_ci or (None, None), strict=True))
        return row

    def tpr_columns(self, fprs: Iterable[float], ci: bool = False) -> dict[str, Any]:
        """The TPR at each of ``fprs`` under :func:`~miaudit.records.columns.tpr_column`'s
        name (``tpr@0.001``), each followed by its interval's ``_lo`` / ``_hi`` columns if
        ``ci`` (KeyError for an FPR the attack does not report)."""
        row: dict[str, Any] = {}
        for fpr in fprs:
            figure, column = self.tpr_at(fpr), tpr_column(float(fpr))
            row[column] = figure.tpr
            if ci:
                row.update(zip(ci_columns(column), figure.ci or (None, None), strict=True))
        return row


@dataclass(frozen=True)
class AttackCost:
    """What an attack cost: models it used (target included; 0 for a model-free attack),
    queries per sample, and seconds (scoring, choosing the public-data threshold, and the
    training of those models as recorded when they were trained). None: not recorded. The
    fields are in metrics.json's order."""

    models: int | None = None
    queries_per_sample: float | None = None
    score_seconds: float | None = None
    threshold_seconds: float | None = None
    train_seconds: float | None = None

    @classmethod
    def from_dict(cls, cost: Mapping[str, Any]) -> AttackCost:
        # "models_trained" is the spelling older results used (the table accepts both)
        models = cost.get("models", cost.get("models_trained"))
        return cls(models=models, queries_per_sample=cost.get("queries_per_sample"),
                   score_seconds=cost.get("score_seconds"),
                   threshold_seconds=cost.get("threshold_seconds"),
                   train_seconds=cost.get("train_seconds"))

    def to_dict(self) -> dict[str, Any]:
        """The recorded figures (None ones left out), as metrics.json's ``cost``."""
        values = ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))
        return {name: value for name, value in values if value is not None}


# Columns of AuditResult.to_frame, in order.
FRAME_COLUMNS = ("attack", "metric", "fpr", "recall", "value", "ci_low", "ci_high",
                 "expected_false_positives", "indicative")


@dataclass(frozen=True, eq=False)
class AttackOutcome:
    """One attack's scores on the audit samples of one target, with its metrics and cost,
    typed once when the outcome is made (:meth:`from_dicts` builds them from the dicts of
    :func:`miaudit.metrics.evaluate`); frozen: ``dataclasses.replace`` makes a changed copy."""

    name: str
    scores: np.ndarray  # float64 [n_audit]; NaN = the attack could not score that sample
    metrics: AttackMetrics
    cost: AttackCost = AttackCost()

    def __post_init__(self) -> None:
        if not isinstance(self.metrics, AttackMetrics):
            raise TypeError(f"AttackOutcome {self.name!r}: metrics must be an AttackMetrics, got "
                            f"{type(self.metrics).__name__} (AttackOutcome.from_dicts types "
                            "the dict miaudit.metrics.evaluate returns)")
        if not isinstance(self.cost, AttackCost):
            raise TypeError(f"AttackOutcome {self.name!r}: cost must be an AttackCost, got "
                            f"{type(self.cost).__name__}")

    @classmethod
    def from_dicts(cls, name: str, scores: np.ndarray, metrics: Mapping[str, Any],
                   cost: Mapping[str, Any] | None = None) -> AttackOutcome:
        """The outcome of ``metrics`` (a dict as :func:`miaudit.metrics.evaluate` returns it,
        bounds included or not) and ``cost`` (as metrics.json's ``cost``), typed here once."""
        return cls(name, scores, AttackMetrics.from_dict(dict(metrics)),
                   AttackCost.from_dict(cost or {}))

    def metrics_entry(self) -> dict[str, Any]:
        """This attack's entry of metrics.json: its metrics' dict, then ``cost`` when any was
        recorded (:func:`read_metrics_entry` reads it back)."""
        entry = self.metrics.to_dict()
        cost = self.cost.to_dict()
        if cost:
            entry["cost"] = cost
        return entry


def read_metrics_entry(entry: Mapping[str, Any]) -> tuple[AttackMetrics, AttackCost]:
    """One attack's entry of metrics.json (:meth:`AttackOutcome.metrics_entry`) typed again."""
    metrics = {key: value for key, value in entry.items() if key != "cost"}
    return AttackMetrics.from_dict(metrics), AttackCost.from_dict(entry.get("cost") or {})


@dataclass
class AuditResult:
    """Everything a report shows for one target model."""

    indices: np.ndarray  # int64 [n_audit]: positions of the audit samples in the bank
    members: np.ndarray  # bool [n_audit]: membership in the target (ground truth)
    outcomes: list[AttackOutcome]
    meta: dict[str, Any] = field(default_factory=dict)  # dataset, target, model accuracies,
    # config, seed, warnings: free-form, JSON-serialisable, but for the typed records
    # "privacy_audit" (miaudit.privacy.audit_record.PrivacyAudit) and, from `miaudit run` and
    # `miaudit audit`, "verdict" (miaudit.verdict.records.ReleaseVerdict): summary.json holds
    # their to_dict()
    rows: np.ndarray | None = None  # int64 [n_audit]: the dataset row of each audit sample;
    # None when unknown (a bare bank: `miaudit attack`), then reports show bank positions
    out: Path | None = None  # the run directory, when the run wrote one (the Python API)
    # what `miaudit run` / `miaudit audit` recorded about itself, typed; `meta` holds it as
    # summary.json does (RunMeta.to_dict). None for a bare bank's result (`miaudit attack`)
    run_meta: RunMeta | None = None

    def outcome(self, name: str) -> AttackOutcome:
        for item in self.outcomes:
            if item.name == name:
                return item
        raise KeyError(name)

    def to_frame(self) -> pd.DataFrame:
        """Every attack's figures as one long-format table, one row per (attack, metric[, rate]).

        Columns: ``attack``; ``metric``; ``fpr`` (for ``tpr``, else NaN); ``recall`` (for
        ``precision``, else NaN); ``value``; ``ci_low`` / ``ci_high`` (the interval of
        ``auc``, DeLong's, and of ``tpr``, a bootstrap's; NaN elsewhere or with
        ``n_bootstrap`` 0);
        ``expected_false_positives`` (non-members x FPR, for ``tpr``); ``indicative`` (for
        ``tpr``: True when that figure rests on fewer than ten expected false positives; NA
        elsewhere). Metrics, per attack in this order: ``auc``; ``tpr`` at each FPR;
        ``balanced_accuracy`` and ``threshold`` (NaN when no public-data threshold could be
        chosen); ``precision`` at each recall; ``n_members``, ``n_nonmembers``,
        ``n_unscorable``; the privacy lower bounds the run computed, each as the figure the
        report shows (``epsilon_lower_bound``: ε; ``gaussian_dp_lower_bound``: μ, its ε
        estimate in metrics.json; with canaries ``canary_epsilon_lower_bound``,
        ``canary_gaussian_dp_lower_bound`` and ``one_run``; NaN when that attack has none,
        the reason in metrics.json); then the recorded cost as ``cost.models``,
        ``cost.queries_per_sample``, ``cost.train_seconds``, ``cost.score_seconds``,
        ``cost.threshold_seconds``. Values are the metrics' own numbers, as metrics.json holds
        them (missing ones NaN). Attacks keep the result's order (:func:`miaudit.strongest` /
        :func:`miaudit.ranked` order them as the report does).

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
            m, name = outcome.metrics, outcome.name
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
            for key in EPSILON_KEYS:
                if getattr(m, key) is not None:
                    add(name, key, getattr(m, key).value)  # ε, or μ for a Gaussian-DP bound
            cost = outcome.cost
            for key in ("models", "queries_per_sample", "train_seconds", "score_seconds",
                        "threshold_seconds"):
                if getattr(cost, key) is not None:
                    add(name, f"cost.{key}", getattr(cost, key))
        frame = pd.DataFrame(rows, columns=list(FRAME_COLUMNS))
        frame["indicative"] = frame["indicative"].astype("boolean")
        return frame
