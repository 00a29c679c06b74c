"""The results table: one row per attack, shared by the terminal and the HTML report."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from miaudit.results import AuditResult

# cost keys (accepted spellings) and their column headers, in display order
COST_COLUMNS = (
    (("models_trained", "models"), "models"),
    (("queries_per_sample",), "queries"),
    (("train_seconds",), "train s"),
    (("score_seconds",), "score s"),
)
LOW_SUPPORT_MARK = "*"


@dataclass
class Table:
    """Header, text cells and footnotes of the results table."""

    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


def fmt_pct(value: float | None) -> str:
    """A rate as a percentage: 2 decimals below 1%, 1 decimal above; '-' when missing."""
    if value is None or not math.isfinite(value):
        return "-"
    pct = 100 * value
    return f"{pct:.2f}" if abs(pct) < 1 else f"{pct:.1f}"


def _fmt_ci(ci: Any, fmt) -> str:
    if not ci or len(ci) != 2 or ci[0] is None:
        return ""
    return f" [{fmt(ci[0])}, {fmt(ci[1])}]"


def _fmt_auc(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _cost(cost: dict[str, Any], keys: tuple[str, ...]) -> Any:
    """The first of ``keys`` present in ``cost`` (None if none is)."""
    return next((cost[k] for k in keys if cost.get(k) is not None), None)


def _fmt_cost(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key.endswith(" s"):
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
        for key in outcome.metrics.get("tpr_at_fpr", {}):
            if key not in keys:
                keys.append(key)
    return keys


def build_table(result: AuditResult) -> Table:
    """Rows of text cells plus footnotes (low-support warnings, unscorable counts)."""
    fprs = reported_fprs(result)
    costs = [
        (key, label)
        for key, label in COST_COLUMNS
        if any(_cost(o.cost, key) is not None for o in result.outcomes)
    ]
    header = ["attack", "AUC [CI]"]
    header += [f"{fpr_label(k)} [CI]" for k in fprs]
    header += ["bal.acc"] + [label for _, label in costs]
    rows: list[list[str]] = []
    warnings: list[str] = []
    unscorable: list[str] = []
    for outcome in result.outcomes:
        met = outcome.metrics
        row = [outcome.name, _fmt_auc(met.get("auc")) + _fmt_ci(met.get("auc_ci"), _fmt_auc)]
        for key in fprs:
            cell = fmt_pct(met.get("tpr_at_fpr", {}).get(key))
            cell += "%" if cell != "-" else ""
            cell += _fmt_ci(met.get("tpr_at_fpr_ci", {}).get(key), fmt_pct)
            warning = (met.get("fpr_support", {}).get(key) or {}).get("warning")
            if warning:
                cell += LOW_SUPPORT_MARK
                if warning not in warnings:
                    warnings.append(warning)
            row.append(cell)
        bal = met.get("balanced_accuracy")
        row.append("-" if bal is None else f"{bal:.3f}")
        row += [_fmt_cost(label, _cost(outcome.cost, key)) for key, label in costs]
        rows.append(row)
        n_bad = met.get("n_unscorable") or 0
        if n_bad:
            total = (met.get("n_members") or 0) + (met.get("n_nonmembers") or 0)
            unscorable.append(
                f"{outcome.name}: {n_bad:,} of {total:,} samples unscorable (ranked lowest)"
            )
    skipped = (result.meta or {}).get("skipped") or {}
    if isinstance(skipped, dict):
        unscorable += [f"{name}: skipped ({reason})" for name, reason in skipped.items()]
    notes = [f"{LOW_SUPPORT_MARK} {w}" for w in warnings] + unscorable
    return Table(header=header, rows=rows, notes=notes)


def format_table(result: AuditResult) -> str:
    """Fixed-width results table for the terminal, with footnotes below it.

    Columns: attack | AUC [CI] | TPR@f [CI] for each reported FPR | bal.acc | cost columns
    (models, queries, train s, score s) when any attack reports them.
    """
    table = build_table(result)
    widths = [max(len(cell) for cell in col) for col in zip(table.header, *table.rows, strict=True)]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()

    out = [line(table.header), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in table.rows]
    if table.notes:
        out.append("")
        out += table.notes
    return "\n".join(out) + "\n"
