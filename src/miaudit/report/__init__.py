"""Reports from audit results: terminal table, JSON/CSV, PNG figures and one HTML page.

The report reads :class:`miaudit.records.outcomes.AuditResult` and never recomputes an attack. The
names below load their module on first use (PEP 562): a module that only needs
``miaudit.formatting`` (a message's wording) does not pay for matplotlib.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from miaudit.report.html import render_html
    from miaudit.report.plots import histograms_figure, roc_figure
    from miaudit.report.terminal import format_table
    from miaudit.report.write import read_metrics, write_report

# name -> the module that defines it
_EXPORTS = {
    "format_table": "miaudit.report.terminal",
    "write_report": "miaudit.report.write",
    "read_metrics": "miaudit.report.write",
    "render_html": "miaudit.report.html",
    "roc_figure": "miaudit.report.plots",
    "histograms_figure": "miaudit.report.plots",
}

__all__ = ["format_table", "write_report", "read_metrics", "render_html", "roc_figure",
           "histograms_figure"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'miaudit.report' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
