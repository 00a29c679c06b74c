"""The most exposed training samples: members ranked by the strongest attack's score.

For each member the ranking also gives the false-positive rate an attacker would accept to
flag it: the fraction of non-members scoring at least as high (a member above every
non-member is flagged at FPR 0, i.e. with no false alarm among the non-members measured).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import replace
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from miaudit.external.data import AuditData
from miaudit.records.outcomes import AuditResult
from miaudit.report.exposure import rank_members

COLUMNS = ("rank", "row", "label", "predicted", "score", "flagged_at_fpr", "nonmembers_above")


def rank_exposed(
    result: AuditResult, attack: str, data: AuditData, top: int, predicted: np.ndarray | None
) -> list[dict[str, Any]]:
    """The `top` members with the highest score under `attack` (ties: lower row first).

    `row` is the sample's row in the user's data; `predicted` [n_audit] is the target's
    predicted class (query 0), or None (a causal LM: left blank). Members the attack could
    not score (NaN) are not ranked.
    The ranking is the report's (:func:`miaudit.report.exposure.rank_members`), with the
    label and prediction of each sample added.
    """
    with_rows = result if result.rows is not None else replace(result, rows=data.audit_rows)
    return [
        {"rank": r["rank"], "bank_index": r["bank_index"], "row": r["row"],
         "label": int(data.labels[r["bank_index"]]),
         "predicted": "" if predicted is None else int(predicted[r["position"]]),
         "score": r["score"], "flagged_at_fpr": r["flagged_at_fpr"],
         "nonmembers_above": r["nonmembers_above"]}
        for r in rank_members(with_rows, attack, top)
    ]


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
