"""Attack-R (Ye et al., "Enhanced Membership Inference Attacks against Machine Learning
Models", ACM CCS 2022): per-sample thresholds from reference models that did not train on the
sample.

Attack-R at level alpha flags sample n as a member when the target's loss is at most the
alpha-quantile of the OUT references' losses on n. As a continuous score (ALGORITHMS.md), with
the query-averaged cross-entropies of the k OUT references sorted, l_(1) <= ... <= l_(k):

- Q(p) = l_(1 + (k-1) p), linearly interpolated between order statistics (numpy's default
  "linear" quantile), is a piecewise-linear, non-decreasing map from [0, 1] onto
  [l_(1), l_(k)];
- F(l) = (1 / (k-1)) * sum_{i=1}^{k-1} clip((l - l_(i)) / (l_(i+1) - l_(i)), 0, 1) is its
  inverse (a segment of zero width contributes 0 below, 1/2 at and 1 above its value);
  F(l) = 0 below l_(1) and 1 above l_(k);
- score = 1 - F(l_t): the fraction of OUT losses above the target's, interpolated.

So `score >= 1 - alpha  <=>  l_t <= Q(alpha) = np.quantile(out_losses, alpha)` (up to ties):
thresholding the score at 1 - alpha is Attack-R at level alpha. With k = 1 the score is 1, 1/2
or 0 as l_t is below, at or above the single OUT loss; with k = 0 it is NaN.

Samples have different numbers of OUT references; the computation pads each sample's sorted
losses with +inf and masks the segments beyond its own k, so it stays vectorised.
"""

from __future__ import annotations

import numpy as np

from miaudit.attacks.base import Needs, TargetView, register_attack
from miaudit.attacks.calibration import query_mean


def interpolated_survival(value: np.ndarray, refs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """1 - F(value) for each sample, F as in the module docstring.

    value [N]; refs [R, N]; mask [R, N] selects each sample's references. NaN where a sample
    has none.
    """
    n_refs, n = refs.shape
    count = mask.sum(axis=0)  # [N]
    ordered = np.full((n, n_refs), np.inf)  # sample-major, so the sort runs along rows
    np.copyto(ordered, refs.T, where=mask.T)
    ordered.sort(axis=1)  # each row: its k finite values first, then +inf
    v = value[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        below = np.zeros(n)
        if n_refs >= 2:
            lo, hi = ordered[:, :-1], ordered[:, 1:]  # segments [N, R-1]
            frac = v - lo
            frac /= hi - lo  # zero-width segment: -inf below, NaN at, +inf above its value
            np.clip(frac, 0.0, 1.0, out=frac)
            frac[np.isnan(frac)] = 0.5
            frac[np.arange(n_refs - 1)[None, :] >= (count - 1)[:, None]] = 0.0  # padding
            below = frac.sum(axis=1) / np.maximum(count - 1, 1)
        step = 0.5 * (np.sign(value - ordered[:, 0]) + 1.0)  # 0 below, 1/2 at, 1 above
    cdf = np.where(count >= 2, below, step)
    return np.where(count > 0, 1.0 - cdf, np.nan)


@register_attack(
    "attack-r",
    family="reference",
    needs=Needs(out_references=1),
    description="Ye et al.: interpolated fraction of OUT reference losses above the target's",
)
def attack_r(view: TargetView) -> np.ndarray:
    """Attack-R (Ye et al. 2022) as a score: thresholding it at 1 - alpha is level alpha."""
    target = query_mean(view.target_stat("loss"))
    refs = view.reference_query_mean("loss")
    out = view.out_mask()
    scores = np.empty(view.n_samples)
    block = 16_384  # bounds the [block, R] sort buffers (~100 MiB at once otherwise)
    for lo in range(0, view.n_samples, block):
        hi = lo + block
        scores[lo:hi] = interpolated_survival(target[lo:hi], refs[:, lo:hi], out[:, lo:hi])
    return scores
