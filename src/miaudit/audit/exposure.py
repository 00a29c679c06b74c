"""The most exposed training samples: members ranked by the strongest attack's score.

For each member the ranking also gives the false-positive rate an attacker would accept to
flag it: the fraction of non-members scoring at least as high (a member above every
non-member is flagged at FPR 0, i.e. with no false alarm among the non-members measured).
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from miaudit.audit.data import AuditData
from miaudit.results import AuditResult

COLUMNS = ("rank", "row", "label", "predicted", "score", "flagged_at_fpr", "nonmembers_above")


def rank_exposed(
    result: AuditResult, attack: str, data: AuditData, top: int, predicted: np.ndarray
) -> list[dict[str, Any]]:
    """The `top` members with the highest score under `attack` (ties: lower row first).

    `row` is the sample's row in the user's data; `predicted` [n_audit] is the target's
    predicted class (query 0). Members the attack could not score (NaN) are not ranked.
    """
    scores = np.asarray(result.outcome(attack).scores, dtype=np.float64)
    members = np.asarray(result.members, dtype=bool)
    nonmember = np.sort(scores[~members & ~np.isnan(scores)])
    candidates = np.flatnonzero(members & ~np.isnan(scores))
    order = candidates[np.lexsort((data.audit_rows[candidates], -scores[candidates]))][:top]
    n0 = int((~members).sum())  # NaN non-members are never flagged but count in the FPR
    rows = []
    for rank, i in enumerate(order, start=1):
        above = int(nonmember.size - np.searchsorted(nonmember, scores[i], side="left"))
        rows.append({
            "rank": rank,
            "bank_index": int(result.indices[i]),
            "row": int(data.audit_rows[i]),
            "label": int(data.labels[result.indices[i]]),
            "predicted": int(predicted[i]),
            "score": float(scores[i]),
            "flagged_at_fpr": above / n0,
            "nonmembers_above": above,
        })
    return rows


def exposure_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        writer.writerow([r["rank"], r["row"], r["label"], r["predicted"], repr(r["score"]),
                         repr(r["flagged_at_fpr"]), r["nonmembers_above"]])
    return buf.getvalue()


def thumbnail_figure(rows: list[dict[str, Any]], data: AuditData, attack: str) -> Figure | None:
    """A grid of the ranked training images with their row, label and FPR; None unless the
    data are images."""
    if data.kind != "image" or not rows:
        return None
    n = len(rows)
    cols = min(10, n)
    lines = math.ceil(n / cols)
    fig = Figure(figsize=(1.25 * cols, 1.5 * lines + 0.5), layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(f"Most exposed training samples under {attack} (most exposed first)",
                 fontsize=9)
    for k, r in enumerate(rows):
        ax = fig.add_subplot(lines, cols, k + 1)
        image = data.features[r["bank_index"]]  # [C, H, W] in [0, 1]
        if image.shape[0] == 1:
            ax.imshow(image[0], cmap="gray", vmin=0, vmax=1)
        else:
            ax.imshow(np.clip(image[:3].transpose(1, 2, 0), 0, 1))
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"#{r['rank']} row {r['row']}\ny={r['label']} FPR {_fpr(r)}", fontsize=7)
    return fig


def _fpr(row: dict[str, Any]) -> str:
    value = row["flagged_at_fpr"]
    return "0" if value == 0 else f"{100 * value:.2g}%"
