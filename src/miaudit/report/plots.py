"""Figures of the report: log-log ROC of all attacks and per-attack score histograms.

Figures are built as ``matplotlib.figure.Figure`` objects rendered by the Agg canvas, never
through pyplot: nothing global (backend, current figure) is touched, nothing happens at
import, and it works headless.
"""

from __future__ import annotations

import io
import math

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from miaudit.metrics import roc
from miaudit.report.table import fmt_pct, fpr_label, reported_fprs
from miaudit.results import AuditResult

MIN_FPR = 1e-5
_LEGEND_INSIDE_MAX = 5
_STYLES = ("-", "--", "-.", ":")
_MEMBER_COLOR = "#d62728"
_NONMEMBER_COLOR = "#1f77b4"


def figure_png(fig: Figure, dpi: int = 120, *, tight: bool = True) -> bytes:
    """PNG bytes of a figure (rendered with the Agg canvas); ``tight`` crops the margins."""
    if fig.canvas is None or not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight" if tight else None)
    return buf.getvalue()


def roc_figure(result: AuditResult) -> Figure:
    """Log-log ROC curves (FPR 1e-5..1) of every attack, chance line, reported FPRs marked."""
    many = len(result.outcomes) > _LEGEND_INSIDE_MAX  # then the legend goes below the axes
    extra_height = 0.2 * math.ceil((len(result.outcomes) + 2) / 2) if many else 0.0
    fig = Figure(figsize=(7.5, 6.0 + extra_height), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
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
    for i, outcome in enumerate(result.outcomes):
        fpr, tpr, _ = roc(outcome.scores, members)
        met = outcome.metrics
        label = outcome.name
        if met.get("auc") is not None:
            label += f"  AUC {met['auc']:.3f}"
        first = fprs[0] if fprs else None
        if first is not None and first in met.get("tpr_at_fpr", {}):
            label += f", {fpr_label(first)} {fmt_pct(met['tpr_at_fpr'][first])}%"
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
    ax.set_xlim(MIN_FPR, 1.0)
    ax.set_ylim(MIN_FPR, 1.02)
    ax.set_xlabel("false positive rate (non-members flagged)")
    ax.set_ylabel("true positive rate (members detected)")
    ax.set_title("ROC, log-log: the low-FPR region is what matters")
    ax.grid(True, which="major", color="0.88", lw=0.6)
    if many:
        fig.legend(loc="outside lower center", ncols=2, fontsize=8)
    else:
        ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    return fig


def _hist_panel(ax, name: str, scores: np.ndarray, members: np.ndarray) -> None:
    finite = ~np.isnan(scores)
    n_nan = int((~finite).sum())
    s_in, s_out = scores[finite & members], scores[finite & ~members]
    title = name if not n_nan else f"{name}  ({n_nan:,} unscorable skipped)"
    ax.set_title(title, fontsize=9)
    ax.tick_params(labelsize=8)
    values = scores[finite]
    if values.size == 0:
        ax.text(0.5, 0.5, "no scorable samples", ha="center", va="center", transform=ax.transAxes)
        return
    distinct = np.unique(values)
    if distinct.size == 1:
        ax.set_title(f"{title}  (constant score)", fontsize=9)
    if distinct.size <= 10:  # discrete scores (e.g. correctness): bars per value
        x = np.arange(distinct.size)
        for off, part, color, lab in (
            (-0.2, s_in, _MEMBER_COLOR, "members"),
            (0.2, s_out, _NONMEMBER_COLOR, "non-members"),
        ):
            frac = np.array([(part == v).mean() if part.size else 0.0 for v in distinct])
            ax.bar(x + off, frac, width=0.4, color=color, alpha=0.7, label=lab)
        ax.set_xticks(x, [f"{v:.3g}" for v in distinct], fontsize=8)
        return
    lo, hi = np.quantile(values, [0.001, 0.999])
    if not hi > lo:
        lo, hi = float(distinct[0]), float(distinct[-1])
    edges = np.linspace(lo, hi, 51)
    for part, color, lab in (
        (s_in, _MEMBER_COLOR, "members"),
        (s_out, _NONMEMBER_COLOR, "non-members"),
    ):
        if part.size:
            ax.hist(
                np.clip(part, lo, hi),
                bins=edges,
                weights=np.full(part.size, 1 / part.size),
                histtype="stepfilled",
                alpha=0.45,
                color=color,
                label=lab,
            )
            ax.hist(
                np.clip(part, lo, hi),
                bins=edges,
                weights=np.full(part.size, 1 / part.size),
                histtype="step",
                color=color,
                lw=1,
            )


def histograms_figure(result: AuditResult) -> Figure:
    """Grid of per-attack score histograms, members vs non-members (fractions per class).

    NaN scores are skipped (and counted in the panel title); discrete scores are shown as bars
    per value; continuous scores use 50 bins over the 0.1-99.9 percentile range, with the
    outer tails clipped into the edge bins.
    """
    n = max(1, len(result.outcomes))
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(4.2 * ncols, 2.9 * nrows + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    members = np.asarray(result.members, dtype=bool)
    for ax, outcome in zip(axes.flat, result.outcomes, strict=False):
        _hist_panel(ax, outcome.name, np.asarray(outcome.scores, dtype=np.float64), members)
    for ax in list(axes.flat)[len(result.outcomes) :]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    uniq = dict(zip(labels, handles, strict=True))
    fig.suptitle(
        "Score distributions (higher = more likely member; y: fraction per class)", fontsize=10
    )
    if uniq:
        fig.legend(uniq.values(), uniq.keys(), loc="outside lower center", ncols=2, fontsize=9)
    return fig


def calibration_figure(
    result: AuditResult, before: str = "loss", after: str = "calibrated-loss"
) -> Figure | None:
    """Watson et al. (seed 001) figure 1: a score before and after difficulty calibration,
    members vs non-members. None when the result lacks either attack."""
    names = [o.name for o in result.outcomes]
    if before not in names or after not in names:
        return None
    fig = Figure(figsize=(8.4, 3.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, squeeze=False)
    members = np.asarray(result.members, dtype=bool)
    for ax, name in zip(axes.flat, (before, after), strict=True):
        scores = np.asarray(result.outcome(name).scores, dtype=np.float64)
        _hist_panel(ax, name, scores, members)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.suptitle(f"{before} before and after difficulty calibration (Watson et al., fig. 1)",
                 fontsize=10)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=9)
    return fig


def roc_png(result: AuditResult) -> bytes:
    """PNG bytes of :func:`roc_figure`."""
    return figure_png(roc_figure(result), tight=False)  # constrained layout already fits


def histograms_png(result: AuditResult) -> bytes:
    """PNG bytes of :func:`histograms_figure`."""
    return figure_png(histograms_figure(result), tight=False)
