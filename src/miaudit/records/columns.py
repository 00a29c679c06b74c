"""The column names of flat per-attack rows (a study's results.csv, checkpoints.json), spelled
here only, and the one reader of the TPR columns older results spelled otherwise.

The column of the TPR at FPR f is ``tpr@<f>`` (:func:`tpr_column`: ``tpr@0.001``), its interval
``tpr@0.001_lo`` / ``tpr@0.001_hi`` (:func:`ci_columns`). Studies recorded before this
spelling was the only one named it ``tpr_0.1%`` (rapid, power, text, dp-audit) or
``tpr_at_0.001`` (calibration); :func:`canonical_tpr_column` maps both onto ``tpr@0.001``, so
their cell files and results.csv tables read as new ones (:func:`canonical_tpr_columns` for a
row, ``frame.rename(columns=canonical_tpr_column)`` for a table).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

AUC = "auc"
BALANCED_ACCURACY = "balanced_accuracy"
COUNT_COLUMNS = ("n_members", "n_nonmembers", "n_unscorable")

_NUMBER = r"\d+(?:\.\d+)?(?:e[+-]?\d+)?"
# the spellings older results used: tpr_0.1% (a percentage), tpr_at_0.001 (a rate); each may
# go on (_lo, _hi, " x rmia")
_PERCENT = re.compile(rf"^tpr_(?P<value>{_NUMBER})%(?P<rest>.*)$", re.S)
_AT = re.compile(rf"^tpr_at_(?P<value>{_NUMBER})(?P<rest>(?![\d.]).*)$", re.S)

def tpr_column(fpr: float) -> str:
    """The name of the column holding the TPR at FPR ``fpr``: 0.001 -> 'tpr@0.001'."""
    return f"tpr@{float(fpr):g}"


def ci_columns(column: str) -> tuple[str, str]:
    """The columns of the interval of ``column``: 'auc' -> ('auc_lo', 'auc_hi')."""
    return f"{column}_lo", f"{column}_hi"


def canonical_tpr_column(name: str) -> str:
    """``name`` with an older spelling of a TPR column mapped onto :func:`tpr_column`'s:
    'tpr_0.1%' and 'tpr_at_0.001' -> 'tpr@0.001', 'tpr_1%_lo' -> 'tpr@0.01_lo'; any other
    name unchanged."""
    for pattern, scale in ((_PERCENT, 100), (_AT, 1)):
        found = pattern.match(name)
        if found is None:
            continue
        return tpr_column(float(Decimal(found["value"]) / scale)) + found["rest"]
    return name


def canonical_tpr_columns(row: Mapping[str, Any]) -> dict[str, Any]:
    """One row (a cell file's, say) with its TPR columns named as :func:`tpr_column` names
    them (:func:`canonical_tpr_column`), the other keys and the order unchanged; a table is
    ``frame.rename(columns=canonical_tpr_column)``."""
    return {canonical_tpr_column(str(k)): v for k, v in row.items()}
