"""The most exposed samples, and the report sections of `miaudit audit`.

:func:`rank_members` ranks the members by an attack's score with the false-positive rate an
attacker accepts to flag each (the share of non-members scoring at least as high); both the
run report and `miaudit audit` (:mod:`miaudit.external.exposed`) use it. The audit's sections
read ``result.meta["verdict"]`` and ``result.meta["exposure"]`` (written by
:mod:`miaudit.external`); a report without them shows the ranking of :func:`exposed_html`.
"""

from __future__ import annotations

import base64
from html import escape
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


def _verdict_html(verdict: ReleaseVerdict) -> str:
    parts = ["<h3>For a release decision</h3>", f"<p><b>{escape(verdict.headline)}</b></p>"]
    parts += [f"<p>{escape(p)}</p>" for p in verdict.paragraphs]
    caveats = verdict.caveats
    if caveats:
        parts.append("<ul>" + "".join(f"<li>{escape(c)}</li>" for c in caveats) + "</ul>")
    return "\n".join(parts)


def _fpr(value: float) -> str:
    return "0 (above every non-member)" if value == 0 else f"{100 * value:.3g}%"


def exposed_html(result: AuditResult, attack: str | None, top: int) -> str:
    """The most exposed members under `attack` (the strongest) for a report without the
    audit's exposure section: dataset rows when ``result.rows`` is known, else bank positions,
    labelled as such."""
    if attack is None:
        return '<p class="muted">No attacks.</p>'
    ranked = rank_members(result, attack, top)
    if not ranked:
        return '<p class="muted">No member could be ranked.</p>'
    known = result.rows is not None
    where = ("<i>dataset row</i> is the sample's row in the dataset (as in scores.csv's "
             "<code>row</code> column)" if known else
             "<i>bank position</i> is the sample's position in the bank (scores.csv's "
             "<code>index</code>): the bank does not record dataset rows")
    intro = (
        f"<p>The {len(ranked)} members with the highest score under <b>{escape(attack)}</b>, "
        f"the strongest attack (★ in the table), most exposed first. {where}; <i>flagged at "
        "FPR</i> is the share of non-members scoring at least as high, i.e. the false-alarm "
        "rate an attacker accepts to flag this sample.</p>"
    )
    header = ["rank", "dataset row" if known else "bank position", "score", "flagged at FPR",
              "non-members above"]
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{escape(str(c))}</td>' for c in (
            r["rank"], r["row"] if known else r["bank_index"], f"{r['score']:.6g}",
            _fpr(r["flagged_at_fpr"]), r["nonmembers_above"])) + "</tr>"
        for r in ranked
    )
    return intro + f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _exposure_html(exposure: dict[str, Any], figures: dict[str, bytes]) -> str:
    rows = exposure.get("rows") or []
    if not rows:
        return '<p class="muted">No training sample could be ranked.</p>'
    intro = (
        f"<p>The {len(rows)} training samples (of {exposure.get('n_members', '?'):,}) with the "
        f"highest score under <b>{escape(str(exposure.get('attack')))}</b>, the attack the "
        "release statement quotes. <i>row</i> is the sample's row in your data; <i>flagged "
        "at FPR</i> is the share of non-members scoring at least as high, i.e. the false-alarm "
        "rate an attacker accepts to flag this sample. The full list is in exposed.csv.</p>"
    )
    head = "".join(f"<th>{escape(h)}</th>" for h in _HEADER)
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{escape(str(c))}</td>' for c in (
            r["rank"], r["row"], r["label"], r["predicted"], f"{r['score']:.6g}",
            _fpr(r["flagged_at_fpr"]), r["nonmembers_above"])) + "</tr>"
        for r in rows
    )
    html = intro + f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    png = figures.get(EXPOSURE_FIGURE)
    if png:
        data = base64.b64encode(png).decode("ascii")
        html += (f'<figure><img alt="most exposed training samples" '
                 f'src="data:image/png;base64,{data}"><figcaption>The ranked training images, '
                 "most exposed first, with their row, label and the FPR at which they are "
                 "flagged.</figcaption></figure>")
    return html


def audit_sections(meta: dict[str, Any], figures: dict[str, bytes]) -> dict[str, str]:
    """HTML for ``verdict`` and ``exposure`` when the run recorded them (else no keys)."""
    out = {}
    verdict = meta.get("verdict")
    if isinstance(verdict, ReleaseVerdict) and verdict.headline:
        out["verdict"] = _verdict_html(verdict)
    exposure = meta.get("exposure")
    if isinstance(exposure, dict) and "rows" in exposure:
        out["exposure"] = _exposure_html(exposure, figures)
    return out
