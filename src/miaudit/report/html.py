"""One self-contained HTML page: inline CSS, figures as base64 data URIs, no external assets."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from html import escape
from typing import Any

import numpy as np

from miaudit.privacy.sections import privacy_line, privacy_section
from miaudit.records.outcomes import AuditResult
from miaudit.report.exposure import EXPOSURE_FIGURE, audit_sections, exposed_html
from miaudit.report.formatting import fmt_auc, pct, rate
from miaudit.report.split import split_line
from miaudit.report.table import Table, build_table
from miaudit.verdict.headline import short_verdict
from miaudit.verdict.records import HeadlineVerdict
from miaudit.verdict.strength import ranked

TOP_EXPOSED = 20
# how each figure is read; an extra figure without an entry gets a generic caption
CAPTIONS = {
    "roc": "ROC curves of every attack on log-log axes, drawn as steps (the TPR reachable at "
    "each FPR, as in the table). Read the left part: how many members (y) an attack finds "
    "while wrongly flagging only a small share of non-members (x). The dotted diagonal is "
    "guessing; dashed lines mark the reported FPRs; the grey band covers FPRs where fewer than "
    "10 non-members would be false positives, so curves there rest on a handful of samples.",
    "histograms": "Where each attack ranks members (red) and non-members (blue) among all "
    "audit samples: x is the score's rank as a share of the audit samples (0 = lowest score, "
    "1 = highest), y the share of each group per bin. Ranks rather than raw scores make every "
    "attack readable on one scale (scores can be huge, negative or tied). Without a leak both "
    "groups are flat at the dashed line; a leak piles members up on the right. A red bar above "
    "the blue one at the far right means members the attack flags with few false alarms. "
    "Panels are ordered strongest attack first.",
    "calibration": "Difficulty calibration (Watson et al., fig. 1): the loss attack's ranks "
    "before calibration (left) and after subtracting what reference models expect for each "
    "sample (right); same axes as the histograms. Calibration helps when the members (red) "
    "move further right and the non-members (blue) further left after it.",
    EXPOSURE_FIGURE: "The most exposed training samples, most exposed first, with their "
    "row, label and the FPR at which the strongest attack flags them.",
}
# inconclusive is neither green nor red: the audit could not support a verdict either way
_LEVEL_CLASS = {"exposed": "bad", "average-case": "warn", "not measured": "ok",
                "inconclusive": "unsure", "none": "muted"}

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 72rem; padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.6rem; }
th { background: #f4f4f4; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
pre { background: #f7f7f7; padding: 0.7rem; overflow-x: auto; font-size: 0.85rem; }
ul.warnings li { color: #8a5300; }
figure { margin: 1rem 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85rem; color: #555; }
.muted { color: #666; font-size: 0.85rem; }
p.verdict { font-size: 1.05rem; padding: 0.7rem 1rem; border-left: 6px solid; margin-top: 0; }
p.verdict.bad { background: #fdecea; border-color: #c62828; }
p.verdict.warn { background: #fff4e0; border-color: #e08a00; }
p.verdict.ok { background: #eaf5ea; border-color: #2e7d32; }
p.verdict.muted { background: #f4f4f4; border-color: #999; }
p.verdict.unsure { background: #eef1f6; border-color: #5c6b80; }
tr.strongest td { font-weight: 600; background: #fff8d6; }
tbody td:first-child { white-space: nowrap; }
th small { font-weight: normal; color: #666; display: block; }
ul.legend { font-size: 0.85rem; color: #444; margin-top: 0.2rem; }
"""

_SCALARS = (str, int, float, bool, type(None))


def to_jsonable(obj: Any) -> Any:
    """``obj`` as JSON values: a record with ``to_dict`` (the typed results) as its dict,
    numpy values as Python's, anything else unknown as its text."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type) and hasattr(obj, "to_dict"):
        return to_jsonable(obj.to_dict())
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    return obj if isinstance(obj, _SCALARS) else str(obj)


def _dump(obj: Any) -> str:
    """YAML when PyYAML is installed (easier to read), JSON otherwise."""
    obj = to_jsonable(obj)
    try:
        import yaml

        return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)
    except ImportError:  # pragma: no cover - pyyaml is a dependency
        return json.dumps(obj, indent=2)


def _table(header: list[str], rows: list[list[Any]], num_from: int = 1) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{escape(str(c))}</td>'
            if j >= num_from
            else f"<td>{escape(str(c))}</td>"
            for j, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _verdict_html(verdict: HeadlineVerdict) -> str:
    """The verdict line as the page's first paragraph, its label in bold, coloured by level."""
    line, head = verdict.line, f"Verdict: {verdict.label}."
    text = (f"<b>{escape(head)}</b>{escape(line[len(head):])}" if line.startswith(head)
            else escape(line))
    return f'<p class="verdict {_LEVEL_CLASS[verdict.level]}">{text}</p>'


def _results_html(table: Table) -> str:
    """The results table: the strongest row highlighted, each TPR column's expected false
    positives under its header, the legend below."""
    subs = table.subheader or [""] * len(table.header)
    head = "".join(
        f"<th>{escape(h)}" + (f"<small>{escape(sub)}</small>" if sub else "") + "</th>"
        for h, sub in zip(table.header, subs, strict=True)
    )
    body = []
    for i, row in enumerate(table.rows):
        cells = "".join(
            f'<td class="num">{escape(c)}</td>' if j else f"<td>{escape(c)}</td>"
            for j, c in enumerate(row)
        )
        mark = ' class="strongest"' if i == table.strongest else ""
        body.append(f"<tr{mark}>{cells}</tr>")
    legend = "".join(f"<li>{escape(x)}</li>" for x in table.legend)
    return (f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            + (f'<ul class="legend">{legend}</ul>' if legend else ""))


def _privacy_html(result: AuditResult) -> str:
    """The 'Privacy audit' section: the claimed ε and the best bound, a row per attack, the
    legend; empty when the run computed no bound."""
    section = privacy_section(result)
    if section is None:
        return ""
    legend = "".join(f"<li>{escape(x)}</li>" for x in section.legend)
    white = "".join(f"<p>{escape(x)}</p>" for x in section.white_box_lines)
    if section.white_box_rows:
        white += _table(section.white_box_header, section.white_box_rows)
    return (f"<h2>Privacy audit</h2><p>{escape(section.line)}</p>"
            + _table(section.header, section.rows) + white
            + f'<ul class="legend">{legend}</ul>')


def _models_html(models: Any) -> str:
    """Models and their accuracies: a table for dict-of-dicts / list-of-dicts, else YAML."""
    if isinstance(models, dict) and models and all(isinstance(v, dict) for v in models.values()):
        items = [{"model": k, **v} for k, v in models.items()]
    elif isinstance(models, list) and models and all(isinstance(v, dict) for v in models):
        items = models
    else:
        return f"<pre>{escape(_dump(models))}</pre>"
    keys: list[str] = []
    for item in items:
        keys += [k for k in item if k not in keys]
    rows = [[_cell(item.get(k)) for k in keys] for item in items]
    return _table(keys, rows)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value) if isinstance(value, _SCALARS) else json.dumps(to_jsonable(value))


def _meta_html(meta: dict[str, Any]) -> str:
    parts = []
    scalars = [
        [k, _cell(v)] for k, v in meta.items() if isinstance(v, _SCALARS) and k not in ("warnings",)
    ]
    if scalars:
        parts.append(_table(["item", "value"], scalars, num_from=99))
    if "models" in meta:
        parts.append("<h3>Models</h3>" + _models_html(meta["models"]))
    if "config" in meta:
        parts.append(f"<h3>Configuration</h3><pre>{escape(_dump(meta['config']))}</pre>")
    others = {
        k: v
        for k, v in meta.items()
        if k not in ("models", "config", "warnings", "skipped", "verdict", "exposure",
                     "privacy_audit")
        and not isinstance(v, _SCALARS)
    }
    if others:
        parts.append(f"<h3>Other metadata</h3><pre>{escape(_dump(others))}</pre>")
    return "\n".join(parts) or '<p class="muted">No metadata recorded.</p>'


def _explanation(result: AuditResult, name_best: bool = True) -> str:
    order, key = ranked(result)
    best = order[0] if order else None
    text = (
        "<p><b>AUC</b> is the probability that an attack gives a randomly chosen training "
        "member a higher score than a randomly chosen non-member: 0.5 is guessing, 1.0 is "
        "perfect separation. It summarises average behaviour. <b>TPR at a low FPR</b> (e.g. "
        "TPR@1%) is the fraction of members the attack identifies while wrongly flagging only "
        "that small fraction of non-members. It is the figure that matters for privacy: an "
        "attack that is confidently right about a few samples is a real leak even when its "
        "AUC is close to 0.5. Brackets hold confidence intervals (95% by default): DeLong's "
        "for the AUC, a stratified bootstrap over the samples (members and non-members "
        "resampled apart) for each TPR, which includes the uncertainty of the threshold.</p>"
    )
    if best is not None and key is not None and name_best:
        figure = best.metrics.find_tpr(key)
        tpr = None if figure is None else figure.tpr
        auc = best.metrics.auc
        summary = f"The attack that leaked most here is <b>{escape(best.name)}</b>"
        if tpr is not None:
            ratio = tpr / float(key) if float(key) > 0 else math.nan
            summary += (
                f": at {rate(float(key))} FPR it identifies {pct(tpr)} of members "
                f"({ratio:.1f}&times; the rate expected by chance)"
            )
        if auc is not None:
            summary += f", with AUC {fmt_auc(auc)}"
        text += f"<p>{summary}.</p>"
    return text


def _figure_html(name: str, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    caption = CAPTIONS.get(name, f"{name}: an extra figure of this run ({name}.png).")
    return (
        f'<figure><img alt="{escape(name)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


def render_html(result: AuditResult, figures: dict[str, bytes]) -> str:
    """The report page as a string; ``figures`` maps a name to PNG bytes (embedded)."""
    meta = result.meta or {}
    title = "miaudit membership inference report"
    subtitle = " / ".join(
        f"{k}: {meta[k]}"
        for k in ("dataset", "target")
        if k in meta and isinstance(meta[k], _SCALARS)
    )
    table = build_table(result)
    verdict = short_verdict(result)
    warnings = ([str(w) for w in (meta.get("warnings") or [])] + table.notes
                + [f"{r.text.rstrip('. ')}. To fix: {r.fix}." for r in verdict.reasons])
    warn_html = (
        '<ul class="warnings">' + "".join(f"<li>{escape(w)}</li>" for w in warnings) + "</ul>"
        if warnings
        else '<p class="muted">None.</p>'
    )
    audit = audit_sections(meta, figures)  # `miaudit audit` runs: release statement, exposure
    n_members = int(np.asarray(result.members, dtype=bool).sum())
    n_total = int(np.asarray(result.members).size)
    body = [
        # the verdict comes first: how worried to be, before any table
        _verdict_html(verdict),
        # the claimed ε beside the best empirical lower bound, right under the verdict
        f"<p><b>{escape(privacy)}</b></p>" if (privacy := privacy_line(result)) else "",
        f"<p>{escape(split)}</p>" if (split := split_line(result)) else "",
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">{escape(subtitle)}</p>' if subtitle else "",
        f"<p>{n_total:,} audit samples ({n_members:,} members, {n_total - n_members:,} "
        f"non-members), {len(result.outcomes)} attacks.</p>",
        "<h2>Results</h2>",
        _results_html(table),
        "<h2>What this means</h2>",
        _explanation(result, name_best="verdict" not in audit),  # the verdict names its own
        audit.get("verdict", ""),
        _privacy_html(result),
        "<h2>Warnings</h2>",
        warn_html,
        "<h2>Figures</h2>",
        *(_figure_html(name, png) for name, png in figures.items()
          if not (name == EXPOSURE_FIGURE and "exposure" in audit)),
        "<h2>Most exposed samples</h2>",
        audit.get("exposure") or exposed_html(result, verdict.attack, TOP_EXPOSED),
        "<h2>Run metadata</h2>",
        _meta_html(meta),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(b for b in body if b)
        + "\n</body>\n</html>\n"
    )
