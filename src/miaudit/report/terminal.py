"""The results table as the terminal prints it (:func:`format_table`): the verdict, privacy and
split-check lines above it, the legend and footnotes below, all fitted to the terminal's width
(columns left out or shortened in a fixed order, and named); the report files keep the whole
table (:func:`miaudit.report.table.build_table`)."""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from miaudit.privacy.sections import (
    EPSILON_LB,
    MU_LB,
    ONE_RUN_LB,
    epsilon_legend,
    privacy_line,
    privacy_section,
    recorded_audit,
    table_columns,
    white_box_lines,
)
from miaudit.records.outcomes import AuditResult
from miaudit.report.split import split_line
from miaudit.report.table import TRAIN_LABEL, Table, build_table, fpr_label
from miaudit.verdict.headline import verdict_line
from miaudit.verdict.strength import ranked

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
        out += [line for text in white_box_lines(recorded_audit(result))
                for line in _wrap(text, width)]
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
        if section.white_box_rows:
            out += [*_fixed_width(section.white_box_header, [], section.white_box_rows), ""]
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
    """Canary rows or gradient canaries: the section's details matter then."""
    audit = recorded_audit(result)
    return audit is not None and (audit.settings.canaries is not None
                                  or audit.white_box is not None)


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
