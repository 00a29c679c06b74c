"""The most exposed samples, and the report sections of `miaudit audit`.

:func:`rank_members` ranks the members by an attack's score with the false-positive rate an
attacker accepts to flag each (the share of non-members scoring at least as high); both the
run report and `miaudit audit` (:mod:`miaudit.external.exposed`) use it. The audit's sections
read ``result.meta["verdict"]`` and ``result.meta["exposure"]`` (written by
:mod:`miaudit.external`); a report without them shows the ranking of :func:`exposed_section`.
The functions here compute the values; templates/exposure.html.j2 lays them out.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from miaudit.records.outcomes import AuditResult
from miaudit.verdict.records import ReleaseVerdict

EXPOSURE_FIGURE = "exposed"  # the thumbnail grid, shown in the exposure section
_HEADER = ["rank", "row", "label", "predicted", "score", "flagged at FPR", "non-members above"]


def rank_members(result: AuditResult, attack: str, top: int | None = None) -> list[dict[str, Any]]:
    """The `top` members with the highest score under `attack` (ties: lower dataset row, else
    lower bank position, first), most exposed first.

    Each: ``rank``, ``position`` (in the audit arrays), ``bank_index``, ``row`` (dataset row;
    None when ``result.rows`` is unknown), ``score``, ``flagged_at_fpr`` (the share of
    non-members scoring at least as high) and ``nonmembers_above``. Members the attack could
    not score (NaN) are not ranked.
    """
    scores = np.asarray(result.outcome(attack).scores, dtype=np.float64)
    members = np.asarray(result.members, dtype=bool)
    indices = np.asarray(result.indices)
    rows = None if result.rows is None else np.asarray(result.rows)
    tiebreak = indices if rows is None else rows
    nonmember = np.sort(scores[~members & ~np.isnan(scores)])
    candidates = np.flatnonzero(members & ~np.isnan(scores))
    order = candidates[np.lexsort((tiebreak[candidates], -scores[candidates]))][:top]
    n0 = max(int((~members).sum()), 1)  # NaN non-members are never flagged but count in the FPR
    ranked = []
    for rank, i in enumerate(order, start=1):
        above = int(nonmember.size - np.searchsorted(nonmember, scores[i], side="left"))
        ranked.append({
            "rank": rank,
            "position": int(i),
            "bank_index": int(indices[i]),
            "row": None if rows is None else int(rows[i]),
            "score": float(scores[i]),
            "flagged_at_fpr": above / n0,
            "nonmembers_above": above,
        })
    return ranked


def _fpr(value: float) -> str:
    return "0 (above every non-member)" if value == 0 else f"{100 * value:.3g}%"


def exposed_section(result: AuditResult, attack: str | None, top: int) -> dict[str, Any]:
    """The values of the most exposed members under `attack` (the strongest) for a report
    without the audit's exposure section (``exposed`` in exposure.html.j2): dataset rows when
    ``result.rows`` is known, else bank positions, labelled as such."""
    if attack is None:
        return {"attack": None, "rows": []}
    ranked = rank_members(result, attack, top)
    known = result.rows is not None
    header = ["rank", "dataset row" if known else "bank position", "score", "flagged at FPR",
              "non-members above"]
    rows = [[r["rank"], r["row"] if known else r["bank_index"], f"{r['score']:.6g}",
             _fpr(r["flagged_at_fpr"]), r["nonmembers_above"]] for r in ranked]
    return {"attack": attack, "known": known, "header": header, "rows": rows}


def _exposure_section(exposure: dict[str, Any], figures: dict[str, bytes]) -> dict[str, Any]:
    rows = [[r["rank"], r["row"], r["label"], r["predicted"], f"{r['score']:.6g}",
             _fpr(r["flagged_at_fpr"]), r["nonmembers_above"]]
            for r in exposure.get("rows") or []]
    n_members = exposure.get("n_members")
    png = figures.get(EXPOSURE_FIGURE)
    return {"rows": rows, "header": _HEADER, "attack": str(exposure.get("attack")),
            # "?" when the run did not record it (this used to fail: '?' has no ',' format)
            "n_members": "?" if n_members is None else f"{n_members:,}"
            if isinstance(n_members, (int, np.integer)) else str(n_members),
            "thumbnails": base64.b64encode(png).decode("ascii") if png else None}


def audit_sections(meta: dict[str, Any], figures: dict[str, bytes]) -> dict[str, Any]:
    """The values of the ``release`` statement and the ``exposure`` section when the run
    recorded them (else no keys), for exposure.html.j2's ``release`` and ``audit_exposure``."""
    out: dict[str, Any] = {}
    verdict = meta.get("verdict")
    if isinstance(verdict, ReleaseVerdict) and verdict.headline:
        out["release"] = verdict
    exposure = meta.get("exposure")
    if isinstance(exposure, dict) and "rows" in exposure:
        out["exposure"] = _exposure_section(exposure, figures)
    return out
