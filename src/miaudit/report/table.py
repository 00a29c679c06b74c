"""The results table: one row per attack, strongest first, shared by the terminal and the HTML
report. The order and the ★ come from :mod:`miaudit.report.strength`, the same ranking the
verdict line and `miaudit audit`'s release statement use."""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from miaudit.pipeline.split_check import is_model_free
from miaudit.report.formatting import fmt_auc, fmt_ci, pct_ci
from miaudit.report.privacy import (
    EPSILON_LB,
    MU_LB,
    ONE_RUN_LB,
    bound_cell,
    column_support,
    epsilon_legend,
    missing_notes,
    privacy_line,
    privacy_section,
    table_columns,
)
from miaudit.report.split import split_line
from miaudit.report.strength import MIN_EXPECTED_FP, expected_false_positives, n_nonmembers, ranked
from miaudit.report.verdict import verdict_line
from miaudit.results import AuditResult, rate_key

# the models' training seconds as recorded when they were trained, also when this run loaded
# them from the cache (then the footnote of :func:`cache_note` says so)
TRAIN_LABEL = "train s (orig.)"
# cost keys (accepted spellings) and their column headers, in display order
COST_COLUMNS = (
    (("models_trained", "models"), "models"),
    (("queries_per_sample",), "queries"),
    (("train_seconds",), TRAIN_LABEL),
    (("score_seconds",), "score s"),
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


def _cost(cost: dict[str, Any], keys: tuple[str, ...]) -> Any:
    """The first of ``keys`` present in ``cost`` (None if none is)."""
    return next((cost[k] for k in keys if cost.get(k) is not None), None)


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
        for fpr in outcome.summary.fprs:
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


def cache_note(meta: dict[str, Any]) -> str | None:
    """Footnote when this run loaded its models from the cache (their training seconds are
    then the original training's, not this run's); None when every model was trained here."""
    cached = meta.get("models_from_cache", meta.get("references_from_cache")) or 0
    if not cached:
        return None
    trained = meta.get("models_trained", meta.get("references_trained")) or 0
    what = "models" if "models_from_cache" in meta else "reference models"
    note = (f"{TRAIN_LABEL}: {cached:,} of {cached + trained:,} {what} were loaded from the "
            "model cache, not trained in this run; the column gives the seconds their original "
            "training took")
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
        if any(_cost(o.cost, key_) is not None for o in result.outcomes)
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
        met = outcome.summary
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
        row += [_fmt_cost(label, _cost(outcome.cost, key_)) for key_, label in costs]
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


# The narrowest width format_table fits to (a narrower terminal wraps the lines itself).
MIN_WIDTH = 40
CI_SUFFIX = " [CI]"
_CI_CELL = re.compile(r" \[[^\]]*\]")  # " [0.540, 0.613]" inside a cell


def terminal_width() -> int | None:
    """The width of the terminal stdout prints to (``COLUMNS`` overrides it, as in
    :func:`shutil.get_terminal_size`), at least :data:`MIN_WIDTH`; None when stdout is not a
    terminal: a pipe or a log file gets the whole table, as the report files do."""
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed stdout
        return None
    return max(MIN_WIDTH, shutil.get_terminal_size().columns) if tty else None


def format_table(
    result: AuditResult, *, verdict: bool = True,
    width: int | Literal["terminal"] | None = "terminal",
) -> str:  # fmt: skip
    """Fixed-width results table for the terminal, the verdict line above it (``verdict``)
    and its legend and footnotes below.

    Columns: attack | AUC [CI] | TPR@f [CI] for each reported FPR, with the expected false
    positives it rests on below the header | bal.acc | ε lb, μ lb (μ-GDP; not at δ = 0) and
    ε 1-run with canaries, with their confidence (and δ) below the header | cost columns
    (models, queries, train s (orig.), score s) when any attack reports them. Rows: strongest
    attack first. Below the verdict, the privacy line (the claimed ε and the best lower
    bound, then the best μ) and the split check's (:func:`miaudit.report.split.split_line`);
    with canaries, the 'Privacy audit' section at the end.

    ``width``: no line is longer (at least :data:`MIN_WIDTH`): text is wrapped and columns
    are left out or shortened in :data:`NARROWINGS` order (cost columns first) until the
    table fits, with a note naming them; the report files keep the whole table. None: every
    column, no wrapping (what a file gets). ``"terminal"`` (the default): the terminal's
    width when stdout is one, else None (:func:`terminal_width`).
    """
    if width == "terminal":
        width = terminal_width()
    if width is not None and (isinstance(width, bool) or not isinstance(width, int)
                              or width < MIN_WIDTH):
        raise ValueError(f"width must be None, 'terminal' or an integer >= {MIN_WIDTH}; "
                         f"got {width!r}.")
    table = build_table(result)
    out: list[str] = []
    if verdict:
        out += _wrap(verdict_line(result), width)
        privacy = privacy_line(result)
        out += _wrap(privacy, width) if privacy else []
        split = split_line(result, short=True)
        out += [*_wrap(split, width), ""] if split else [""]
    legend = table.legend
    fitted, left_out = _fit_results(table, ranked(result)[1], width)
    out += _fixed_width(fitted.header, fitted.subheader, fitted.rows)
    if left_out:
        legend = _legend_without(result, table, fitted.header)
    if left_out or legend or table.notes:
        out.append("")
        out += [line for text in (*_left_out_note(left_out, width), *legend, *table.notes)
                for line in _wrap(text, width)]
    section = privacy_section(result)
    if section is not None and _has_canaries(result):  # the details matter with canaries
        header, rows, dropped = _fit_privacy(section.header, section.rows, width)
        out += ["", "Privacy audit", *_fixed_width(header, [], rows), ""]
        out += [line for text in (*_left_out_note(dropped, width), *section.legend)
                for line in _wrap(text, width)]
    return "\n".join(out) + "\n"


def _wrap(text: str, width: int | None) -> list[str]:
    """``text`` as lines of at most ``width`` characters (continuations indented), or as
    one line when ``width`` is None. Hyphenated attack names are never split."""
    if width is None:
        return [text]
    return textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False) or [""]


# How the terminal table narrows, step by step until it fits (the report files keep every
# column): each step drops or shortens (leaves out the CI of) the columns whose header it
# matches, given the header of the TPR column the attacks are ranked by. Cost columns go
# first (they say what an attack took, not what it found), then the secondary figures; the
# attack, its AUC and the ranking TPR stay to the last.
Matcher = Callable[[str, str | None], bool]


def _is(label: str) -> Matcher:
    return lambda header, ranking: header == label


def _tpr(header: str) -> bool:
    return header.startswith("TPR@")


NARROWINGS: tuple[tuple[str, Matcher], ...] = (
    ("drop", _is("score s")),
    ("drop", _is(TRAIN_LABEL)),
    ("drop", _is("queries")),
    ("drop", _is("models")),
    ("drop", _is("bal.acc")),
    ("drop", _is(MU_LB)),
    ("shorten", _is("AUC" + CI_SUFFIX)),
    ("shorten", lambda header, ranking: _tpr(header) and header.endswith(CI_SUFFIX)),
    ("drop", lambda header, ranking: _tpr(header) and header.removesuffix(CI_SUFFIX) != ranking),
    ("drop", _is(ONE_RUN_LB)),
    ("drop", _is(EPSILON_LB)),
)


def _drop(table: Table, columns: list[int]) -> Table:
    def keep(cells: list[str]) -> list[str]:
        return [c for i, c in enumerate(cells) if i not in columns]

    return replace(table, header=keep(table.header),
                   subheader=keep(table.subheader) if table.subheader else [],
                   rows=[keep(r) for r in table.rows])


def _shorten(table: Table, columns: list[int]) -> Table:
    def cut(cells: list[str], header: bool = False) -> list[str]:
        return [(c.removesuffix(CI_SUFFIX) if header else _CI_CELL.sub("", c))
                if i in columns else c for i, c in enumerate(cells)]

    return replace(table, header=cut(table.header, header=True),
                   rows=[cut(r) for r in table.rows])


_ACTIONS: dict[str, Callable[[Table, list[int]], Table]] = {"drop": _drop, "shorten": _shorten}


def _table_width(header: list[str], subheader: list[str], rows: list[list[str]]) -> int:
    lines = [header, *([subheader] if subheader else []), *rows]
    widths = [max(len(cell) for cell in col) for col in zip(*lines, strict=True)]
    return sum(widths) + 2 * (len(widths) - 1)


def _fit_results(table: Table, key: str | None, width: int | None) -> tuple[Table, list[str]]:
    """The results table narrowed by :data:`NARROWINGS` until it is at most ``width`` wide,
    and what was left out (the columns dropped, then 'the CIs of ...'); as a last resort the
    attack names are cut. Unchanged when ``width`` is None or the table fits."""
    ranking = None if key is None else fpr_label(key)
    position = [h.removesuffix(CI_SUFFIX) for h in table.header].index  # the note's order
    dropped: list[str] = []
    shortened: list[str] = []
    for action, matches in NARROWINGS:
        if width is None or _table_width(table.header, table.subheader, table.rows) <= width:
            break
        columns = [i for i, h in enumerate(table.header) if i and matches(h, ranking)]
        if columns:
            names = [table.header[i].removesuffix(CI_SUFFIX) for i in columns]
            (dropped if action == "drop" else shortened).extend(names)
            table = _ACTIONS[action](table, columns)
    shortened = [name for name in shortened if name not in dropped]  # shortened, then dropped
    dropped.sort(key=position)
    shortened.sort(key=position)
    left_out = [*dropped, *([f"the CIs of {', '.join(shortened)}"] if shortened else [])]
    excess = 0 if width is None else (
        _table_width(table.header, table.subheader, table.rows) - width)
    if excess > 0:
        size = max(len(r[0]) for r in table.rows) - excess
        table = replace(table, rows=[[_cut(r[0], size), *r[1:]] for r in table.rows])
        left_out.append("the end of long attack names")
    return table, left_out


def _cut(text: str, size: int) -> str:
    size = max(size, 8)
    return text if len(text) <= size else text[: size - 1] + "…"


# The privacy audit section's columns, least needed first: the one-run bookkeeping (m, k₊, k₋,
# r, v, α, δ; in the report files) goes before any bound, the bounds themselves last.
PRIVACY_NARROWING = ("δ", "α", "v", "r", "k₋", "k₊", "m", "ε est. (μ)", "FN / n₁", "FP / n₀",
                     "μ lb (canaries)", "μ lb (audit)", "ε lb (canaries)")


def _fit_privacy(header: list[str], rows: list[list[str]], width: int | None
                 ) -> tuple[list[str], list[list[str]], list[str]]:  # fmt: skip
    """The privacy audit section's table with columns left out in :data:`PRIVACY_NARROWING`
    order (then from the right, the attack and one bound kept) until it fits ``width``."""
    dropped: list[str] = []
    position = header.index  # the note's order
    order = [h for h in PRIVACY_NARROWING if h in header[1:]]
    while width is not None and len(header) > 2 and _table_width(header, [], rows) > width:
        name = order.pop(0) if order else header[-1]
        i = header.index(name, 1)
        dropped.append(name)
        header = [h for j, h in enumerate(header) if j != i]
        rows = [[c for j, c in enumerate(r) if j != i] for r in rows]
    return header, rows, sorted(dropped, key=position)


def _left_out_note(left_out: list[str], width: int | None) -> list[str]:
    if not left_out:
        return []
    return [f"Left out to fit {width} columns: {', '.join(left_out)}; the full table is in "
            "the report files (report.html)."]


def _legend_without(result: AuditResult, table: Table, kept: list[str]) -> list[str]:
    """The table's legend less what only explains columns left out (the ε/μ line says only
    what is shown; the cached-training note goes with its column)."""
    shown = {h.removesuffix(CI_SUFFIX) for h in kept}
    labels = [label for _, label in table_columns(result)]
    full = epsilon_legend(labels) if labels else None
    out = []
    for line in table.legend:
        if line == full:
            kept_labels = [label for label in labels if label in shown]
            out += [epsilon_legend(kept_labels)] if kept_labels else []
        elif not (line.startswith(f"{TRAIN_LABEL}:") and TRAIN_LABEL not in shown):
            out.append(line)
    return out


def _has_canaries(result: AuditResult) -> bool:
    return bool(((result.meta or {}).get("privacy_audit") or {}).get("canaries"))


def _fixed_width(header: list[str], subheader: list[str], rows: list[list[str]]) -> list[str]:
    """The header, subheader, a rule and the rows, each column as wide as its widest cell."""
    lines = [header, *([subheader] if subheader else []), *rows]
    widths = [max(len(cell) for cell in col) for col in zip(*lines, strict=True)]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()

    out = [line(header)]
    out += [line(subheader)] if subheader else []
    out += ["  ".join("-" * w for w in widths)]
    return out + [line(r) for r in rows]
