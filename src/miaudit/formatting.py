"""How numbers read in every table, verdict and caption: one formatter per kind of number."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def plural(n: int, word: str, many: str | None = None) -> str:
    """A count and its noun, singular for one: plural(1, "row") -> '1 row', plural(3, "row")
    -> '3 rows'; ``many`` for an irregular plural (plural(2, "entry", "entries"))."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def fmt_pct(value: float | None) -> str:
    """A rate as a percentage without the sign: 2 decimals below 1%, 1 decimal above; '-'
    when missing."""
    if value is None or not math.isfinite(value):
        return "-"
    pct = 100 * value
    return f"{pct:.2f}" if abs(pct) < 1 else f"{pct:.1f}"


def pct(value: float | None) -> str:
    """A rate as a percentage with its sign: 0.048 -> '4.8%'; '-' when missing."""
    text = fmt_pct(value)
    return text if text == "-" else text + "%"


def p_words(p: float) -> str:
    """A p-value as the reports write it after 'p': '< 0.0001' or '= 0.032'."""
    return "< 0.0001" if p < 1e-4 else f"= {p:.2g}"


def pct_ci(value: float | None, ci: Any) -> str:
    """A rate with its interval, as every table writes a TPR: '4.8% [4.1, 5.2]'; '-' when
    missing, no brackets without an interval."""
    return pct(value) + fmt_ci(ci, fmt_pct)


def rate(fpr: float) -> str:
    """An FPR as the config states it: 0.001 -> '0.1%'."""
    return f"{100 * fpr:g}%"


def fmt_auc(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def fmt_epsilon(value: float | None) -> str:
    """An ε (a lower bound or a claim) or a μ, 3 significant digits: 0.0311, 1.82, 0; '-'
    when missing."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.3g}"


def fmt_ci(ci: Any, fmt: Callable[[float], str]) -> str:
    """' [low, high]' in ``fmt``, or '' when there is no interval."""
    if not ci or len(ci) != 2 or ci[0] is None:
        return ""
    return f" [{fmt(ci[0])}, {fmt(ci[1])}]"


def ci_words(ci: Any, level: str = "CI", fmt: Callable[[float], str] = pct,
             missing: str = "no CI") -> str:
    """An interval in words, as the verdicts quote it: '95% CI 4.1% to 5.2%' (``level``
    '95% CI'); ``missing`` when there is none."""
    return f"{level} {fmt(ci[0])} to {fmt(ci[1])}" if ci else missing


def mean_std(values: Any, digits: int = 3, scale: float = 1.0) -> str:
    """``0.612 ± 0.013`` style text of the finite values (times ``scale``): mean and sample
    std with ``digits`` decimals; just the value for one; ``-`` for none."""
    import pandas as pd  # only the study tables use it: `import miaudit` stays cheap

    series = pd.Series(values, dtype="float64").dropna() * scale
    if series.empty:
        return "-"
    if len(series) == 1:
        return f"{series.iloc[0]:.{digits}f}"
    return f"{series.mean():.{digits}f} ± {series.std(ddof=1):.{digits}f}"


def pct_mean_std(values: Any) -> str:
    """Rates as ``mean ± std`` in percent without the sign, 2 decimals: '4.80 ± 0.31'."""
    return mean_std(values, digits=2, scale=100)


def _cell_text(value: Any, floatfmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return format(value, floatfmt)
    return str(value)


def markdown_table(table: Any, floatfmt: str = ".3f", *,
                   header: Sequence[str] | None = None) -> str:
    """A GitHub-flavoured markdown table, without a trailing newline.

    ``table``: a pandas DataFrame (its columns the header, its index left out), or rows of
    cells with ``header``. Floats are written in ``floatfmt``, None and NaN as ``-``, other
    cells as ``str`` gives them (pass text to format a column otherwise).
    """
    rows: Iterable[Sequence[Any]]
    if header is None:
        header, rows = list(table.columns), table.itertuples(index=False)
    else:
        rows = table
    lines = ["| " + " | ".join(str(c) for c in header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(_cell_text(v, floatfmt) for v in row) + " |")
    return "\n".join(lines)
