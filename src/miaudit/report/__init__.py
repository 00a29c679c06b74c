"""Reports from audit results: terminal table, JSON/CSV, PNG figures and one HTML page.

The report reads :class:`miaudit.results.AuditResult` and never recomputes an attack.
"""

from miaudit.report.html import render_html
from miaudit.report.plots import histograms_figure, roc_figure
from miaudit.report.terminal import format_table
from miaudit.report.write import write_report

__all__ = ["format_table", "write_report", "render_html", "roc_figure", "histograms_figure"]
