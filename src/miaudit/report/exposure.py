"""Report sections of `miaudit audit`: the release statement and the most exposed samples.

They read ``result.meta["verdict"]`` and ``result.meta["exposure"]`` (written by
:mod:`miaudit.audit`); a report without them renders as before.
"""

from __future__ import annotations

import base64
from html import escape
from typing import Any

EXPOSURE_FIGURE = "exposed"  # the thumbnail grid, shown in the exposure section
_HEADER = ["rank", "row", "label", "predicted", "score", "flagged at FPR", "non-members above"]


def _verdict_html(verdict: dict[str, Any]) -> str:
    parts = ["<h3>For a release decision</h3>", f"<p><b>{escape(verdict['headline'])}</b></p>"]
    parts += [f"<p>{escape(p)}</p>" for p in verdict.get("paragraphs", [])]
    caveats = verdict.get("caveats") or []
    if caveats:
        parts.append("<ul>" + "".join(f"<li>{escape(c)}</li>" for c in caveats) + "</ul>")
    return "\n".join(parts)


def _fpr(value: float) -> str:
    return "0 (above every non-member)" if value == 0 else f"{100 * value:.3g}%"


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
    if isinstance(verdict, dict) and verdict.get("headline"):
        out["verdict"] = _verdict_html(verdict)
    exposure = meta.get("exposure")
    if isinstance(exposure, dict) and "rows" in exposure:
        out["exposure"] = _exposure_html(exposure, figures)
    return out
