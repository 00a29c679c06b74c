"""The ROC figure draws each curve from a downsampled step curve: exact where it matters."""

from __future__ import annotations

import numpy as np

from miaudit import metrics
from miaudit.report.plots import roc_steps


def test_roc_steps_are_the_roc_read_at_fewer_points():
    rng = np.random.default_rng(0)
    members = rng.random(60_000) < 0.5
    scores = np.round(rng.normal(size=members.size) + members, 3)  # ties too
    fpr, tpr, _ = metrics.roc(scores, members)
    n0 = int((~members).sum())
    x, y = roc_steps(fpr, tpr, n0, marks=(0.001, 0.01))
    assert x.size < fpr.size / 5
    assert np.all(np.diff(x) > 0) and np.all(np.diff(y) >= 0)
    # at every point: the largest TPR at FPR <= x, the convention of the reported TPR@FPR
    for xi, yi in zip(x[::37], y[::37], strict=True):
        assert yi == metrics.tpr_at_fpr(fpr, tpr, xi)
    # every one of the first 100 false positives is a point: the low-FPR region is exact
    assert np.isin(np.arange(101) / n0, x).all()
    for f in (0.001, 0.01):  # the reported FPRs (marked on the figure) are points too
        assert y[np.searchsorted(x, f, side="right") - 1] == metrics.tpr_at_fpr(fpr, tpr, f)


def test_a_short_roc_is_drawn_as_it_is():
    fpr, tpr = np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.8, 1.0])
    x, y = roc_steps(fpr, tpr, 2)
    np.testing.assert_array_equal(x, fpr)
    np.testing.assert_array_equal(y, tpr)
