"""One self-contained HTML page: inline CSS, figures as base64 data URIs, no external assets."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from typing import Any

import numpy as np

from miaudit.config.sections.spec import Spec
from miaudit.formatting import fmt_auc, pct, rate
from miaudit.privacy.sections import privacy_line, privacy_section
from miaudit.records.outcomes import AuditResult
from miaudit.report.exposure import EXPOSURE_FIGURE, audit_sections, exposed_section
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

_SCALARS = (str, int, float, bool, type(None))


def to_jsonable(obj: Any) -> Any:
    """``obj`` as JSON values: a record with ``to_dict`` (the typed results) as its dict,
    numpy values as Python's, anything else unknown as its text."""
    if isinstance(obj, Spec) or (dataclasses.is_dataclass(obj) and not isinstance(obj, type)
                                 and hasattr(obj, "to_dict")):
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

        result: str = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)
        return result
    except ImportError:  # pragma: no cover - pyyaml is a dependency
        return json.dumps(obj, indent=2)


def _verdict(verdict: HeadlineVerdict) -> dict[str, Any]:
    """The verdict line as the page's first paragraph, its label in bold (``head``, then
    ``rest``; ``rest`` None when the line does not start with it), coloured by level."""
    line, head = verdict.line, f"Verdict: {verdict.label}."
    rest = line[len(head):] if line.startswith(head) else None
    return {"level_class": _LEVEL_CLASS[verdict.level], "line": line, "head": head, "rest": rest}


def _results(table: Table) -> dict[str, Any]:
    """The results table: the strongest row highlighted, each TPR column's expected false
    positives under its header, the legend below."""
    subs = table.subheader or [""] * len(table.header)
    return {"head": list(zip(table.header, subs, strict=True)), "rows": table.rows,
            "strongest": table.strongest, "legend": table.legend}


def _models(models: Any) -> dict[str, Any]:
    """Models and their accuracies: a table for dict-of-dicts / list-of-dicts, else YAML
    (``pre``)."""
    if isinstance(models, dict) and models and all(isinstance(v, dict) for v in models.values()):
        items = [{"model": k, **v} for k, v in models.items()]
    elif isinstance(models, list) and models and all(isinstance(v, dict) for v in models):
        items = models
    else:
        return {"pre": _dump(models)}
    keys: list[str] = []
    for item in items:
        keys += [k for k in item if k not in keys]
    return {"pre": None, "header": keys,
            "rows": [[_cell(item.get(k)) for k in keys] for item in items]}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value) if isinstance(value, _SCALARS) else json.dumps(to_jsonable(value))


def _metadata(meta: dict[str, Any]) -> dict[str, Any]:
    """The run metadata's parts, each None when absent: scalars (a table), models, the
    configuration and any other structured metadata (YAML)."""
    scalars = [
        [k, _cell(v)] for k, v in meta.items() if isinstance(v, _SCALARS) and k not in ("warnings",)
    ]
    others = {
        k: v
        for k, v in meta.items()
        if k not in ("models", "config", "warnings", "skipped", "verdict", "exposure",
                     "privacy_audit")
        and not isinstance(v, _SCALARS)
    }
    return {"scalars": scalars or None,
            "models": _models(meta["models"]) if "models" in meta else None,
            "config": _dump(meta["config"]) if "config" in meta else None,
            "others": _dump(others) if others else None}


def _best(result: AuditResult) -> dict[str, Any] | None:
    """What the attack that leaked most finds at the key FPR (None without attacks)."""
    order, key = ranked(result)
    best = order[0] if order else None
    if best is None or key is None:
        return None
    figure = best.metrics.find_tpr(key)
    tpr = None if figure is None else figure.tpr
    auc = best.metrics.auc
    ratio = (tpr / float(key) if float(key) > 0 else math.nan) if tpr is not None else None
    return {"name": best.name, "fpr": rate(float(key)),
            "tpr": None if tpr is None else pct(tpr),
            "ratio": None if ratio is None else f"{ratio:.1f}",
            "auc": None if auc is None else fmt_auc(auc)}


def _figure(name: str, png: bytes) -> dict[str, str]:
    return {"name": name, "data": base64.b64encode(png).decode("ascii"),
            "caption": CAPTIONS.get(name, f"{name}: an extra figure of this run ({name}.png).")}


def render_html(result: AuditResult, figures: dict[str, bytes]) -> str:
    """The report page as a string; ``figures`` maps a name to PNG bytes (embedded).

    The values are computed here; templates/report.html.j2 lays them out and escapes them."""
    from miaudit.report.templating import render

    meta = result.meta or {}
    subtitle = " / ".join(
        f"{k}: {meta[k]}"
        for k in ("dataset", "target")
        if k in meta and isinstance(meta[k], _SCALARS)
    )
    table = build_table(result)
    verdict = short_verdict(result)
    warnings = ([str(w) for w in (meta.get("warnings") or [])] + table.notes
                + [f"{r.text.rstrip('. ')}. To fix: {r.fix}." for r in verdict.reasons])
    audit = audit_sections(meta, figures)  # `miaudit audit` runs: release statement, exposure
    n_members = int(np.asarray(result.members, dtype=bool).sum())
    n_total = int(np.asarray(result.members).size)
    return render(
        "report.html.j2",
        title="miaudit membership inference report",
        verdict=_verdict(verdict),
        privacy_line=privacy_line(result),
        split_line=split_line(result),
        subtitle=subtitle,
        n_total=f"{n_total:,}", n_members=f"{n_members:,}",
        n_nonmembers=f"{n_total - n_members:,}", n_attacks=len(result.outcomes),
        results=_results(table),
        # the release statement names its own attack: the page's summary does not repeat it
        best=None if "release" in audit else _best(result),
        release=audit.get("release"),
        privacy=privacy_section(result),
        warnings=warnings,
        figures=[_figure(name, png) for name, png in figures.items()
                 if not (name == EXPOSURE_FIGURE and "exposure" in audit)],
        audit_exposure=audit.get("exposure"),
        exposed=None if "exposure" in audit else exposed_section(result, verdict.attack,
                                                                  TOP_EXPOSED),
        meta=_metadata(meta),
    )
