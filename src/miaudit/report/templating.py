"""The report's jinja2 templates (``miaudit/report/templates``), autoescaped.

Templates lay out and escape; the Python that calls :func:`render` computes every value and
hands over text and numbers, never HTML.
"""

from __future__ import annotations

import functools
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jinja2 import Environment


def _escape_value(value: Any) -> Any:
    """Every ``{{ value }}`` passes here before autoescaping: plain values are escaped with
    the standard library's ``html.escape`` (``&quot;``/``&#x27;``, as the report has always
    written quotes; markupsafe would write ``&#34;``/``&#39;``) and marked safe, so autoescape
    leaves them; values already marked safe (a macro's output) pass as they are."""
    from markupsafe import Markup

    if hasattr(value, "__html__"):
        return value
    # Markup here wraps text escaped on the line itself, never raw input
    return Markup(escape(str(value)))


@functools.cache
def environment() -> Environment:
    """The templates' environment (built once; jinja2 is imported only when a report is)."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("miaudit.report", "templates"),
        autoescape=True,
        finalize=_escape_value,
        undefined=jinja2.StrictUndefined,  # a misspelt name fails instead of vanishing
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(name: str, **context: Any) -> str:
    """Template ``name`` filled with ``context``."""
    return environment().get_template(name).render(**context)
