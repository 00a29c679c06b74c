"""The results table: one row per attack, strongest first, shared by the terminal and the HTML
report. The order and the ★ come from :mod:`miaudit.verdict.strength`, the same ranking the
verdict line and `miaudit audit`'s release statement use. The terminal's form of it, fitted to
the terminal's width, is :mod:`miaudit.report.terminal`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from miaudit.formatting import fmt_auc, fmt_ci, pct_ci
from miaudit.privacy.sections import (
    bound_cell,
    column_support,
    epsilon_legend,
    missing_notes,
    table_columns,
)
from miaudit.records.outcomes import AuditResult, rate_key
from miaudit.records.run_meta import ModelCounts
from miaudit.verdict.split_check import is_model_free
from miaudit.verdict.strength import MIN_EXPECTED_FP, expected_false_positives, n_nonmembers, ranked

# the models' training seconds as recorded when they were trained, also when this run loaded
# them from the cache (then the footnote of :func:`cache_note` says so)
TRAIN_LABEL = "train s (orig.)"
# cost fields (miaudit.records.outcomes.AttackCost) and their column headers, in display order
COST_COLUMNS = (
    ("models", "models"),
    ("queries_per_sample", "queries"),
    ("train_seconds", TRAIN_LABEL),
    ("score_seconds", "score s"),
)
LOW_SUPPORT_MARK = "*"
STRONGEST_MARK = "★"


@dataclass
class Table:
    """Header, text cells and footnotes of the results table."""

    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)  # warnings: low support, unscorable, skipped
    subheader: list[str] = field(default_factory=list)  # per column: what a figure rests on
    legend: list[str] = field(default_factory=list)  # what the order, ★ and columns mean
    strongest: int | None = None  # row of the strongest attack (the first), None if none


def _fmt_cost(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key.endswith(" s") or key == TRAIN_LABEL:  # seconds
        return f"{float(value):.1f}"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{int(value):,}" if isinstance(value, (int, float)) else str(value)


def fpr_label(key: str) -> str:
    """'0.001' -> 'TPR@0.1%'."""
    return f"TPR@{float(key) * 100:g}%"


def reported_fprs(result: AuditResult) -> list[str]:
    """FPR keys reported by any attack, in first-seen order."""
    keys: list[str] = []
    for outcome in result.outcomes:
        for fpr in outcome.metrics.fprs:
            if rate_key(fpr) not in keys:
                keys.append(rate_key(fpr))
    return keys


def _support_cell(result: AuditResult, key: str) -> str:
    """'10 exp. FP' under a TPR column: the false positives its figure rests on."""
    expected = expected_false_positives(result, key)
    low = expected < MIN_EXPECTED_FP * (1 - 1e-12)
    return f"{expected:.3g} exp. FP" + (LOW_SUPPORT_MARK if low else "")


def _order_legend(result: AuditResult, key: str | None) -> list[str]:
    if key is None:
        return ["Order: by AUC (no attack reports a TPR at a low FPR)."]
    n0 = n_nonmembers(result)
    good = expected_false_positives(result, key) >= MIN_EXPECTED_FP * (1 - 1e-12)
    why = (f"the lowest FPR resting on >= {MIN_EXPECTED_FP} expected false positives"
           if good else f"no FPR rests on >= {MIN_EXPECTED_FP} expected false positives, so "
           "the best-supported one")
    return [
        f"{STRONGEST_MARK} strongest; attacks sorted strongest first by {fpr_label(key)} ({why}),"
        " then AUC.",
        f"exp. FP: expected false positives, the {n0:,} non-members times the FPR; a TPR resting"
        f" on fewer than {MIN_EXPECTED_FP} is marked {LOW_SUPPORT_MARK} (indicative).",
    ]


def cache_note(meta: Mapping[str, Any]) -> str | None:
    """Footnote when this run loaded its models from the cache (their training seconds are
    then the original training's, not this run's); None when every model was trained here.
    The counts are the run's record's (:class:`~miaudit.records.run_meta.ModelCounts`)."""
    counts = ModelCounts.of_meta(meta)
    if counts is None or not counts.from_cache:
        return None
    cached, trained = counts.from_cache, counts.trained
    note = (f"{TRAIN_LABEL}: {cached:,} of {cached + trained:,} {counts.counted} were loaded "
            "from the model cache, not trained in this run; the column gives the seconds their "
            "original training took")
    original = meta.get("train_seconds_original")
    if original is not None:
        note += f" ({float(original):.1f} s in all)"
    wall = meta.get("train_wall_seconds")
    if wall is not None:
        note += f"; this run spent {float(wall):.1f} s training and loading"
    return note + "."


MODEL_FREE_MARK = "°"


def build_table(result: AuditResult) -> Table:
    """Rows of text cells, strongest attack first, plus the legend and footnotes."""
    fprs = sorted(reported_fprs(result), key=float)
    order, key = ranked(result)
    costs = [
        (key_, label)
        for key_, label in COST_COLUMNS
        if any(getattr(o.cost, key_) is not None for o in result.outcomes)
    ]
    epsilons = table_columns(result)
    header = ["attack", "AUC [CI]"]
    header += [f"{fpr_label(k)} [CI]" for k in fprs]
    header += ["bal.acc"] + [label for _, label in epsilons] + [label for _, label in costs]
    subheader = ["", "", *(_support_cell(result, k) for k in fprs), ""]
    subheader += [column_support(result, k) for k, _ in epsilons] + [""] * len(costs)
    rows: list[list[str]] = []
    warnings: list[str] = []
    unscorable: list[str] = []
    for i, outcome in enumerate(order):
        met = outcome.metrics
        free = is_model_free(outcome)
        name = (f"{outcome.name} {MODEL_FREE_MARK}" if free else
                f"{outcome.name} {STRONGEST_MARK}" if i == 0 and key else outcome.name)
        row = [name, fmt_auc(met.auc) + fmt_ci(met.auc_ci, fmt_auc)]
        for k in fprs:
            figure = met.find_tpr(k)
            cell = "-" if figure is None else pct_ci(figure.tpr, figure.ci)
            warning = None if figure is None else figure.warning
            if warning:
                cell += LOW_SUPPORT_MARK
                if warning not in warnings:
                    warnings.append(warning)
            row.append(cell)
        bal = met.balanced_accuracy
        row.append("-" if bal is None else f"{bal:.3f}")
        row += [bound_cell(outcome, k) for k, _ in epsilons]
        row += [_fmt_cost(label, getattr(outcome.cost, key_)) for key_, label in costs]
        rows.append(row)
        n_bad = met.n_unscorable or 0
        if n_bad:
            total = (met.n_members or 0) + (met.n_nonmembers or 0)
            unscorable.append(
                f"{outcome.name}: {n_bad:,} of {total:,} samples unscorable (ranked lowest)"
            )
    skipped = (result.meta or {}).get("skipped") or {}
    if isinstance(skipped, dict):
        unscorable += [f"{name}: skipped ({reason})" for name, reason in skipped.items()]
    legend = _order_legend(result, key) if result.outcomes else []
    # The legend's "exp. FP" line already explains the low-support mark: repeat the warnings
    # only when there is no such line.
    shown = [] if key is not None and result.outcomes else warnings
    notes = [f"{LOW_SUPPORT_MARK} {w}" for w in shown] + unscorable + missing_notes(result)
    if epsilons:
        legend.append(epsilon_legend([label for _, label in epsilons]))
    if any(is_model_free(o) for o in result.outcomes):
        legend.append(f"{MODEL_FREE_MARK} model-free: reads no model, so it measures the split "
                      "(members told from non-members by the data alone), never the model: "
                      "it is not ranked, bounds no ε and refutes no claim.")
    cached = cache_note(result.meta or {}) if any(lab == TRAIN_LABEL for _, lab in costs) else None
    legend += [cached] if cached else []
    return Table(header=header, rows=rows, notes=notes, legend=legend,
                 subheader=subheader if fprs else [],
                 strongest=0 if key and rows and not is_model_free(order[0]) else None)
