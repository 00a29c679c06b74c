"""Figures of the report: log-log ROC of all attacks and per-attack histograms of the scores'
normalised ranks (members vs non-members), strongest attack first.

Figures are built as ``matplotlib.figure.Figure`` objects rendered by the Agg canvas, never
through pyplot: nothing global (backend, current figure) is touched, nothing happens at
import, and it works headless.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, StepPatch
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator

from miaudit.formatting import fmt_auc, pct
from miaudit.metrics import roc
from miaudit.records.outcomes import AuditResult
from miaudit.report.table import STRONGEST_MARK, fpr_label, reported_fprs
from miaudit.verdict.strength import ranked

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from miaudit.records.outcomes import AttackOutcome

MIN_FPR = 1e-5
_LEGEND_INSIDE_MAX = 5
# the ROC figure, inches: the axes (width, height), the margins around them (tick labels and
# axis labels; the title above) and each legend row's height (fontsize 8) below them
_ROC_AXES, _ROC_LEFT, _ROC_RIGHT, _ROC_TOP, _ROC_BELOW, _ROC_ROW_H = (
    (6.3, 5.4), 0.85, 0.35, 0.35, 0.6, 0.17)
_STYLES = ("-", "--", "-.", ":")
_REPORT_PNG_LEVEL = 1  # zlib level of roc.png and histograms.png: fast, ~20% larger files
_MEMBER_COLOR = "#d62728"
_NONMEMBER_COLOR = "#1f77b4"


def figure_png(fig: Figure, dpi: int = 120, *, tight: bool = True,
               compress_level: int = 6) -> bytes:
    """PNG bytes of a figure (rendered with the Agg canvas); ``tight`` crops the margins;
    ``compress_level``: zlib's, 0-9 (1: about a fifth larger, encoded in a third of the time)."""
    if fig.canvas is None or not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight" if tight else None,
                pil_kwargs={"compress_level": compress_level})
    return buf.getvalue()


def roc_steps(
    fpr: np.ndarray, tpr: np.ndarray, n_nonmembers: int, marks: Sequence[float] = (),
    exact: int = 100, per_decade: int = 400,
) -> tuple[np.ndarray, np.ndarray]:
    """The ROC step curve (the largest TPR at FPR <= x) read at fewer points, for drawing:
    at every false-positive count up to `exact` (the low-FPR region, where each step is one
    non-member, stays exact), at the FPRs in `marks` (the reported ones: there the curve is
    the table's figure), and on a log-spaced FPR grid of `per_decade` points a decade up to
    1, finer than the figure's pixels. 100,000 samples draw from ~2,000 points."""
    fpr = np.asarray(fpr, dtype=np.float64)
    tpr = np.asarray(tpr, dtype=np.float64)
    n0 = max(1, int(n_nonmembers))
    counts = np.arange(min(exact, n0) + 1) / n0
    low = max(counts[-1], MIN_FPR)
    grid = np.logspace(math.log10(low), 0, max(2, int(per_decade * -math.log10(low)) + 1))
    x = np.union1d(np.union1d(counts, grid), np.asarray(marks, dtype=np.float64))
    if x.size >= fpr.size:  # as few points as the ROC has: draw it as it is
        return fpr, tpr
    y = tpr[np.searchsorted(fpr, x, side="right") - 1]  # tpr rises with fpr: the last <= x
    return x, y


def roc_figure(result: AuditResult) -> Figure:
    """Log-log ROC curves (FPR 1e-5..1) of every attack, chance line, reported FPRs marked."""
    many = len(result.outcomes) > _LEGEND_INSIDE_MAX  # then the legend goes below the axes
    # Fixed margins in inches, not the constrained layout (measuring the log axes' ticks took
    # longer than drawing the figure): the axes keep 6.3 x 5.4 in, the legend rows go below.
    legend_h = _ROC_ROW_H * math.ceil((len(result.outcomes) + 2) / 2) + 0.2 if many else 0.0
    width, height = _ROC_LEFT + _ROC_AXES[0] + _ROC_RIGHT, (
        _ROC_TOP + _ROC_AXES[1] + _ROC_BELOW + legend_h)
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    ax = fig.add_axes((_ROC_LEFT / width, (_ROC_BELOW + legend_h) / height,
                       _ROC_AXES[0] / width, _ROC_AXES[1] / height))
    members = np.asarray(result.members, dtype=bool)
    n0 = int((~members).sum())
    fprs = reported_fprs(result)
    grid = np.logspace(math.log10(MIN_FPR), 0, 200)
    ax.plot(grid, grid, color="0.55", lw=1, ls=":", label="chance")
    if n0 and 10 / n0 > MIN_FPR:
        ax.axvspan(
            MIN_FPR,
            min(1.0, 10 / n0),
            color="0.92",
            zorder=0,
            label=f"< 10 expected false positives (n={n0:,} non-members)",
        )
    for key in fprs:
        ax.axvline(float(key), color="0.4", lw=0.8, ls="--", zorder=1)
        ax.annotate(
            f"{float(key) * 100:g}% FPR",
            (float(key), 1.0),
            xytext=(3, -12),
            textcoords="offset points",
            fontsize=8,
            color="0.3",
        )
    cycle_len = 10
    order, rank_key = ranked(result)  # legend in the table's order, quoting its FPR
    for i, outcome in enumerate(order):
        fpr, tpr = roc_steps(*roc(outcome.scores, members)[:2], n0, [float(k) for k in fprs])
        figure = outcome.metrics.find_tpr(rank_key)
        label = _panel_title(outcome, i == 0 and rank_key is not None).replace("   ", "  ")
        if rank_key is not None and figure is not None:
            label += f", {fpr_label(rank_key)} {pct(figure.tpr)}"
        # steps: between ROC points the achievable TPR is the previous point's (the same
        # convention as the reported TPR@FPR; no interpolation towards the next point)
        ax.plot(
            fpr,
            tpr,
            lw=1.6,
            color=f"C{i % cycle_len}",
            drawstyle="steps-post",
            ls=_STYLES[(i // cycle_len) % len(_STYLES)],
            label=label,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # minor ticks at 2 and 5 of each decade, not all 8
        axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(_power_of_ten))
    ax.set_xlim(MIN_FPR, 1.0)
    ax.set_ylim(MIN_FPR, 1.02)
    ax.set_xlabel("false positive rate (non-members flagged)")
    ax.set_ylabel("true positive rate (members detected)")
    # title and axis labels at fixed places: placing them measures every tick label again
    ax.set_title("ROC, log-log: the low-FPR region is what matters", y=1.0, pad=6)
    ax.xaxis.set_label_coords(0.5, -0.3 / _ROC_AXES[1])
    ax.yaxis.set_label_coords(-0.62 / _ROC_AXES[0], 0.5)
    ax.grid(True, which="major", color="0.88", lw=0.6)
    if many:
        fig.legend(loc="lower center", bbox_to_anchor=(0.5, 0.06 / height), ncols=2, fontsize=8)
    else:
        ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    return fig


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _power_of_ten(value: float, _pos: object = None) -> str:
    """A log axis's tick label as plain text, 10⁻³ (matplotlib's default, $10^{-3}$, goes
    through its TeX parser: a tenth of the ROC figure's time)."""
    exponent = math.log10(value) if value > 0 else math.nan
    if not math.isfinite(exponent) or abs(exponent - round(exponent)) > 1e-9:
        return f"{value:g}"
    return "10" + str(round(exponent)).translate(_SUPERSCRIPT)


def normalised_ranks(scores: np.ndarray) -> np.ndarray:
    """Each score's rank among the scorable (non-NaN) scores, scaled into (0, 1): the
    mid-rank minus one half over their count, so n untied scores give 0.5/n .. 1 - 0.5/n.

    Tied scores share their mid-rank (an attack that cannot tell samples apart shows them at
    one place); +-inf are the extremes; NaN (unscorable) stays NaN.
    """
    return _ranks_and_ties(scores)[0]


def _ranks_and_ties(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`normalised_ranks` and how many scorable samples share each distinct score."""
    scores = np.asarray(scores, dtype=np.float64)
    out = np.full(scores.shape, np.nan)
    valid = ~np.isnan(scores)
    values = scores[valid]
    if values.size == 0:
        return out, np.zeros(0, dtype=np.int64)
    order = np.argsort(values)  # ties share a rank: their order among themselves is moot
    ordered = values[order]
    below = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    counts = np.diff(np.append(below, values.size))  # how many share each distinct value
    mid = below + (counts + 1) / 2  # 1-based mid-rank of each distinct value
    ranks = np.empty(values.size)
    ranks[order] = np.repeat((mid - 0.5) / values.size, counts)
    out[valid] = ranks
    return out, counts


_RANK_BINS = 20  # ~5% of the samples per bin: smooth at a few hundred per group
# the histogram grid, inches: each panel's size and the margins around its axes (a title of up
# to two lines above; tick labels and the x label below; the y label left), and the band at
# the top that holds the title and the one legend of all panels
_PANEL_W, _PANEL_H, _SUPTITLE_H = 4.4, 3.0, 0.75
_LEFT, _RIGHT, _ABOVE, _BELOW = 0.62, 0.13, 0.5, 0.45
_GROUPS = (("members", _MEMBER_COLOR), ("non-members", _NONMEMBER_COLOR))
_FLAT: dict[str, Any] = {"color": "0.45", "lw": 0.8, "ls": "--"}


def rank_histogram(ranks: np.ndarray) -> np.ndarray:
    """Share of `ranks` (normalised, in (0, 1)) in each of the `_RANK_BINS` equal bins."""
    counts = np.histogram(ranks, bins=_RANK_BINS, range=(0.0, 1.0))[0]
    return counts / max(1, ranks.size)


def _hist_panel(ax: Axes, title: str, scores: np.ndarray, members: np.ndarray,
                legend: bool = True) -> None:
    """Members vs non-members over the scores' normalised ranks (share of each group per
    bin), each group one filled step patch with its outline (`Axes.stairs` of precomputed
    `np.histogram` counts: two artists, not one patch per bar). Raw scores are unreadable in
    one layout for every attack (heavy tails, negative, huge or tied values); ranks keep their
    order, which is all a threshold attack uses. `legend`: one on the panel (a grid of panels
    shares the figure's instead)."""
    scores = np.asarray(scores, dtype=np.float64)
    n_nan = int(np.isnan(scores).sum())
    ranks, counts = _ranks_and_ties(scores)
    finite = ~np.isnan(ranks)
    notes = []
    if n_nan:
        notes.append(f"{n_nan:,} unscorable, not shown")
    if 0 < counts.size <= 10:
        notes.append(f"{counts.size} distinct score{'s' if counts.size > 1 else ''}: "
                     "ties share a rank")
    elif counts.size and counts.max() >= 0.05 * finite.sum():  # a spike: say what it is
        notes.append(f"{counts.max() / finite.sum():.0%} of samples tie at one score")
    # padded above the legend row that sits on the axes (see below)
    ax.set_title(title + ("\n" + "; ".join(notes) if notes else ""), fontsize=9,
                 pad=15 if legend else 4, y=1.0)  # y: placed as given, no tick measuring
    ax.tick_params(labelsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("rank among audit samples (0 lowest score, 1 highest)", fontsize=8)
    ax.set_ylabel("share of group per bin", fontsize=8)
    if not finite.any():
        ax.text(0.5, 0.5, "no scorable samples", ha="center", va="center", transform=ax.transAxes)
        return
    edges = np.linspace(0, 1, _RANK_BINS + 1)
    ax.axhline(1 / _RANK_BINS, label="no leak (flat)", **_FLAT)
    top = 1 / _RANK_BINS
    for group, (label, color) in zip((members, ~members), _GROUPS, strict=True):
        part = ranks[finite & group]
        if part.size:
            share = rank_histogram(part)
            top = max(top, float(share.max()))
            # added as an artist with the limits set below: autoscaling walks every segment
            ax.add_artist(StepPatch(share, edges, fill=True, facecolor=to_rgba(color, 0.35),
                                    edgecolor=color, lw=1.2, label=label))
    ax.set_ylim(0, 1.05 * top)
    if legend:  # one row between the title and the axes: the legend never hides a bar
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=3, fontsize=7,
                  frameon=False, borderaxespad=0.1, handlelength=1.5, columnspacing=1.0)


def _panel_title(outcome: AttackOutcome, mark: bool) -> str:
    auc = outcome.metrics.auc
    title = f"{outcome.name} {STRONGEST_MARK}" if mark else outcome.name
    return title + (f"   AUC {fmt_auc(auc)}" if auc is not None else "")


def histograms_figure(result: AuditResult) -> Figure:
    """Grid of per-attack histograms of normalised score ranks, members vs non-members,
    strongest attack first (the table's order); see :func:`_hist_panel`."""
    order, key = ranked(result)
    n = max(1, len(order))
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    width, height = _PANEL_W * ncols, _PANEL_H * nrows + _SUPTITLE_H
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    # Fixed margins in inches, not the constrained layout: measuring every tick label of 16+
    # panels took longer than drawing them; these fit the panels' titles, legends and labels.
    axes_w = _PANEL_W - _LEFT - _RIGHT
    axes_h = _PANEL_H - _ABOVE - _BELOW
    members = np.asarray(result.members, dtype=bool)
    for i, outcome in enumerate(order):  # one axes per attack (no hidden spares)
        row, col = divmod(i, ncols)
        ax = fig.add_axes(((col * _PANEL_W + _LEFT) / width,
                           (height - _SUPTITLE_H - (row + 1) * _PANEL_H + _BELOW) / height,
                           axes_w / width, axes_h / height))
        _hist_panel(ax, _panel_title(outcome, i == 0 and key is not None),
                    np.asarray(outcome.scores, dtype=np.float64), members, legend=False)
        # axis labels at fixed places: matplotlib otherwise measures every tick label of
        # every panel again to place them (a third of the drawing time); few ticks (each is
        # four artists); one label per column and per row, not per panel
        ax.xaxis.set_label_coords(0.5, -0.24 / axes_h)
        ax.yaxis.set_label_coords(-0.45 / axes_w, 0.5)
        ax.xaxis.set_major_locator(FixedLocator([0.0, 0.5, 1.0]))
        ax.yaxis.set_major_locator(MaxNLocator(4))
        if i + ncols < len(order):  # another panel below this one
            ax.set_xlabel("")
        if col:
            ax.set_ylabel("")
    fig.suptitle("Where each attack ranks members and non-members (a leak piles members up "
                 "on the right)", fontsize=10, y=1 - 0.12 / height, va="top")
    # one legend for every panel, under the title
    handles = [Line2D([], [], **_FLAT), *(Patch(facecolor=to_rgba(color, 0.35), edgecolor=color,
                                                lw=1.2) for _, color in _GROUPS)]
    fig.legend(handles, ["no leak (flat)", *(label for label, _ in _GROUPS)], loc="upper center",
               bbox_to_anchor=(0.5, 1 - 0.38 / height), ncols=3, fontsize=9, frameon=False)
    return fig


def calibration_figure(
    result: AuditResult, before: str = "loss", after: str = "calibrated-loss"
) -> Figure | None:
    """Watson et al. (ICLR 2022) figure 1: a score before and after difficulty calibration,
    members vs non-members (normalised ranks, as the histograms). None when the result lacks
    either attack."""
    names = [o.name for o in result.outcomes]
    if before not in names or after not in names:
        return None
    fig = Figure(figsize=(8.8, 3.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, squeeze=False)
    members = np.asarray(result.members, dtype=bool)
    for ax, name, when in zip(axes.flat, (before, after), ("before", "after"), strict=True):
        outcome = result.outcome(name)
        _hist_panel(ax, f"{when}: {_panel_title(outcome, False)}",
                    np.asarray(outcome.scores, dtype=np.float64), members)
    fig.suptitle(f"{before} before and after difficulty calibration (Watson et al., fig. 1)",
                 fontsize=10)
    return fig


def roc_png(result: AuditResult) -> bytes:
    """PNG bytes of :func:`roc_figure` (its fixed margins already fit)."""
    return figure_png(roc_figure(result), tight=False, compress_level=_REPORT_PNG_LEVEL)


def histograms_png(result: AuditResult) -> bytes:
    """PNG bytes of :func:`histograms_figure`, at 100 dpi: 16 panels make a 1320 x 1900 px
    image, every label still 10-12 px high."""
    return figure_png(histograms_figure(result), dpi=100, tight=False,
                      compress_level=_REPORT_PNG_LEVEL)
