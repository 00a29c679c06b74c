"""The design check: do the references, as the attacks see them, say anything about the
target's membership (docs/algorithms.md §11)?

Every attack may read which references trained on each sample. A design must make that
independent of the target's membership, or an attack can learn membership without querying
the target (LiRA's balanced design with the target among the models does exactly that, which
the views undo by setting one reference aside per sample: :mod:`miaudit.attacks.independence`).
This check measures it on the audit samples, after the view did its part: the available IN and
OUT counts per sample, and each reference's state (IN, OUT, set aside), against the target's
membership. A bank from elsewhere whose design the view cannot undo fails it, and the verdict
then says the audit is inconclusive.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import chdtrc

from miaudit import metrics
from miaudit.attacks.view import TargetView

P_DEPENDENT = 0.001  # as the split check: only clear evidence withholds a verdict

STRUCTURES = {
    "no-references": "no reference model",
    "disjoint": "no reference trained on an audit sample (offline)",
    "balanced": "a balanced design: one reference per sample set aside",
    "independent": "references drawn independently of the target",
}


def design_check(view: TargetView, members: np.ndarray) -> dict[str, Any]:
    """The record: ``structure`` (a key of :data:`STRUCTURES`), ``set_aside`` (audit samples
    with one reference set aside), ``p_value`` (the smallest of the tests, Bonferroni-adjusted
    over them), ``statistic`` (which test gave it) and ``dependent`` (p below
    :data:`P_DEPENDENT`). ``members`` bool [audit samples]: the target's membership there."""
    audit = view.audit
    set_aside = int(view.set_aside[audit].sum())
    n_in, n_out = (counts[audit] for counts in view.side_counts())
    if view.n_references == 0:
        structure = "no-references"
    elif set_aside:
        structure = "balanced"
    elif not n_in.any():
        structure = "disjoint"
    else:
        structure = "independent"
    tests: list[tuple[str, float]] = []
    if members.any() and not members.all():
        for name, counts in (("IN count", n_in), ("OUT count", n_out)):
            if np.ptp(counts) > 0:
                tests.append((name, _rank_test(counts, members)))
        state = (view.reference_membership.astype(np.int8) * 2
                 + view.reference_available.astype(np.int8))[:, audit]  # 3 IN, 1 OUT, 0 aside
        for r in range(view.n_references):
            p = _table_test(state[r], members)
            if p is not None:
                tests.append((f"reference {int(view.reference_ids[r])}", p))
    if not tests:
        return {"structure": structure, "set_aside": set_aside, "p_value": 1.0,
                "statistic": None, "dependent": False}
    statistic, p = min(tests, key=lambda t: t[1])
    adjusted = min(1.0, p * len(tests))
    return {"structure": structure, "set_aside": set_aside, "p_value": adjusted,
            "statistic": statistic, "dependent": adjusted < P_DEPENDENT}


def _rank_test(values: np.ndarray, members: np.ndarray) -> float:
    """Two-sided Mann–Whitney test of ``values`` between members and non-members (its normal
    approximation without the tie correction: conservative with the many ties of counts)."""
    auc = metrics.auc(values, members)
    n1, n0 = int(members.sum()), int((~members).sum())
    return min(1.0, 2 * metrics.auc_null_p_value(max(auc, 1 - auc), n1, n0))


def _table_test(state: np.ndarray, members: np.ndarray) -> float | None:
    """Pearson's chi-square test of a reference's state (IN, OUT, set aside) against
    membership; None when its state is the same on every audit sample."""
    values = np.unique(state)
    if values.size < 2:
        return None
    table = np.array([[np.sum((state == v) & members), np.sum((state == v) & ~members)]
                      for v in values], dtype=np.float64)
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    if (expected == 0).any():
        return None
    statistic = float(((table - expected) ** 2 / expected).sum())
    return float(chdtrc(values.size - 1, statistic))
