"""Attack-R (Ye et al., "Enhanced Membership Inference Attacks against Machine Learning
Models", ACM CCS 2022): per-sample thresholds from reference models that did not train on the
sample.

Attack-R at level alpha flags sample n as a member when the target's loss is at most the
alpha-quantile of the OUT references' losses on n. As a continuous score (docs/algorithms.md
§7), with the query-averaged cross-entropies of the k OUT references sorted,
l_(1) <= ... <= l_(k):

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

No sort is needed: the sum above counts the segments wholly below l_t (1 each), the zero-width
ones at l_t (1/2 each) and the one segment that straddles it, whose ends are the largest OUT
loss below l_t and the smallest one at or above it. Per block of samples these are masked
maxima, minima and counts over the references, all vectorised.
"""

from __future__ import annotations

import numpy as np

from miaudit.attacks.registry import Needs, register_attack
from miaudit.attacks.view import TargetView


def interpolated_survival(value: np.ndarray, refs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """1 - F(value) for each sample, F as in the module docstring.

    value [N]; refs [R, N]; mask [R, N] selects each sample's references. NaN where a sample
    has none.
    """
    count = mask.sum(axis=0)  # k per sample
    below = mask & (refs < value)
    n_below = below.sum(axis=0)
    n_at = (mask & (refs == value)).sum(axis=0)
    # Ends of the straddling segment: the largest selected loss below l_t, the smallest at or
    # above it (a sample with none on a side gets -inf/+inf there and no straddling segment).
    lower = np.where(below, refs, -np.inf).max(axis=0, initial=-np.inf)
    upper = np.where(mask & ~below, refs, np.inf).min(axis=0, initial=np.inf)
    straddles = (n_below >= 1) & (n_below < count)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(straddles, (value - lower) / (upper - lower), 0.0)  # in (0, 1]
        full = np.maximum(n_below - 1, 0) + 0.5 * np.maximum(n_at - 1, 0)
        cdf = np.where(count >= 2, (full + frac) / np.maximum(count - 1, 1), 0.0)
        step = 0.5 * (np.sign(value - upper) + 1.0)  # k = 1: 0 below, 1/2 at, 1 above
        step = np.where(n_below == count, 1.0, step)
    cdf = np.where(count >= 2, cdf, step)
    return np.where(count > 0, 1.0 - cdf, np.nan)


@register_attack(
    "attack-r",
    family="reference",
    needs=Needs(out_references=1),
    description="Ye et al.: interpolated fraction of OUT reference losses above the target's",
)
def attack_r(view: TargetView) -> np.ndarray:
    """Attack-R (Ye et al. 2022) as a score: thresholding it at 1 - alpha is level alpha."""
    target = view.target_query_mean("loss")
    out = view.out_mask()
    scores = np.empty(view.n_samples)
    # Blocks of samples bound the [R, block] temporaries.
    for block in view.sample_blocks(view.n_references * 8):
        refs = view.reference_query_mean("loss", block)
        scores[block] = interpolated_survival(target[block], refs, out[:, block])
    return scores
