"""The Likelihood Ratio Attack, LiRA (Carlini et al., "Membership Inference Attacks From First
Principles", IEEE S&P 2022).

Statistic: LiRA's logit-scaled confidence `phi = z_y - logsumexp_{c != y} z_c` per query (the
cached statistic "phi"). For each sample n and query q, Gaussians are fitted to the references'
phi: over IN(n) (references that trained on n) and over OUT(n) (those that did not). Mean and
population std (ddof 0), std floored at `SIGMA_FLOOR` (docs/algorithms.md §5).

- `lira-online`: `mean_q [log N(phi_t; mu_in, s_in^2) - log N(phi_t; mu_out, s_out^2)]`.
- `lira-offline`: `mean_q log Phi((phi_t - mu_out) / s_out)`, the paper's one-sided test
  (large phi_t = confident on the true class = member), via `scipy.special.log_ndtr`.
- `lira-offline-two-sided`: `-mean_q log N(phi_t; mu_out, s_out^2)`, what the authors'
  reference code (research/mi_lira_2021/plot.py, `generate_ours_offline`) scores: any phi_t far
  from the OUT distribution, above or below it, looks like a member.
- `*-fixed-variance`: one std per side and query, pooled over samples (see `fit_gaussians`).
  The paper recommends it when there are few references (e.g. < 64): with one or two references
  on a side the per-sample std is 0 or very noisy (a single reference gives std 0, floored to
  `SIGMA_FLOOR`, which makes the per-sample test degenerate).

Equal counts (parameter `equal_counts`, default True, as in the reference code, which keeps
`x[:in_size]` with `in_size = min(map(len, dat_in))`): on each side every sample uses its first
k references in bank order, k the smallest non-zero per-sample count on that side. The
reference code needs it because leaving the target out of a balanced bank gives a target
member one IN reference fewer and one OUT reference more than a non-member (the per-sample
std, fitted to 3 vs 4 values, then differs by the target's membership: AUC 0.45-0.50 on every
target of the digits test bank, below chance). Here the view already sets one reference per
sample aside so that every audit sample has the same counts and the references say nothing of
the target's membership (docs/algorithms.md §11), so in a balanced bank this rule changes
nothing; it still equalises the counts of an independent design.

Differences from the reference code: mu is the mean, by contract (the code uses the median);
the fixed variance is the pooled within-sample variance (the code's `np.std(dat_in)` is taken
around the overall mean, so it also counts how much the samples' means differ), and each side
uses its own (the code's online variant reuses the IN std for OUT). A sample with no
reference on a side the score needs (OUT; and IN for online) scores NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr

from miaudit.attacks.calibration import query_mean
from miaudit.attacks.params import Param
from miaudit.attacks.registry import Needs, register_attack
from miaudit.attacks.view import TargetView

SIGMA_FLOOR = 1e-6
_HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)

FIXED_VARIANCE = Param("fixed_variance", False, "bool", "one std per side and query, pooled "
                       "over samples (the paper's choice with few references); false: each "
                       "sample's own")
EQUAL_COUNTS = Param("equal_counts", True, "bool", "each sample uses its first k references "
                     "per side, k the smallest count, as the reference code; false: all of them")


@dataclass(frozen=True)
class Gaussians:
    """Per-sample, per-query Gaussian fits of the references on one side (IN or OUT)."""

    mean: np.ndarray  # float64 [N, Q]; NaN where count == 0
    std: np.ndarray  # float64 [N, Q]; >= floor; NaN where count == 0
    count: np.ndarray  # int [N]: references on this side for each sample


@dataclass(frozen=True)
class Moments:
    """What both Gaussian fits of one side need: per sample and query, the mean of the
    selected references' values and the sum of squared deviations from it."""

    mean: np.ndarray  # float64 [N, Q]; 0 where count == 0
    sq_dev: np.ndarray  # float64 [N, Q]
    count: np.ndarray  # int [N]


Blocks = Callable[[], Iterable[tuple[slice, np.ndarray]]]  # (samples, values [R, b, Q])


def fit_gaussians(
    values: np.ndarray,
    mask: np.ndarray,
    fixed_variance: bool = False,
    floor: float = SIGMA_FLOOR,
) -> Gaussians:
    """Fit N(mu, s^2) to `values [R, N, Q]` over the references selected by `mask [R, N]`.

    Per-sample variance: population variance (ddof 0) of the selected values. Fixed variance:
    per query, the pooled within-sample variance `sum_n sum_r (v - mu_n)^2 / sum_n k_n` over
    the samples with k_n >= 2 references on this side (a sample with one reference has no
    spread to contribute); if no sample has two, the variance of all selected values
    around their overall mean (what the reference code's `np.std(dat_out)` computes).
    """

    def blocks() -> Iterable[tuple[slice, np.ndarray]]:
        return [(slice(0, mask.shape[1]), values)]

    return gaussians(moments(blocks, mask), blocks, mask, fixed_variance, floor)


def moments(blocks: Blocks, mask: np.ndarray) -> Moments:
    """Moments of the values in `blocks()` over the references selected by `mask [R, N]`."""
    count = mask.sum(axis=0)  # [N]
    safe = np.maximum(count, 1)[:, None]
    mean = sq_dev = np.empty((0, 0))
    for block, values in blocks():
        if not mean.size:  # the first block tells Q
            mean = np.empty((mask.shape[1], values.shape[2]))
            sq_dev = np.empty_like(mean)
        weights = mask[:, block].astype(np.float64)  # [R, b]
        mu = np.einsum("rnq,rn->nq", values, weights, optimize=True) / safe[block]
        dev = values - mu[None]
        np.multiply(dev, dev, out=dev)
        sq_dev[block] = np.einsum("rnq,rn->nq", dev, weights, optimize=True)
        mean[block] = mu
    return Moments(mean=mean, sq_dev=sq_dev, count=count)


def gaussians(
    fit: Moments, blocks: Blocks, mask: np.ndarray, fixed_variance: bool, floor: float
) -> Gaussians:
    """The Gaussians of `fit_gaussians` from a side's moments (`blocks` and `mask` only for
    the fixed variance's fallback)."""
    count, has = fit.count, (fit.count > 0)[:, None]
    if fixed_variance:
        pool = count >= 2
        if pool.any():
            var = fit.sq_dev[pool].sum(axis=0) / count[pool].sum()  # [Q]
        else:
            var = _overall_variance(blocks, mask)
        std = np.broadcast_to(np.sqrt(var)[None, :], fit.mean.shape)
    else:
        std = np.sqrt(fit.sq_dev / np.maximum(count, 1)[:, None])
    std = np.where(has, np.maximum(std, floor), np.nan)
    mean = np.where(has, fit.mean, np.nan)
    return Gaussians(mean=mean, std=std, count=count)


def _overall_variance(blocks: Blocks, mask: np.ndarray) -> np.ndarray:
    """Per query, the variance of all selected values around their overall mean."""
    total = max(int(mask.sum()), 1)
    overall = sum(np.einsum("rnq,rn->q", v, mask[:, b].astype(np.float64)) for b, v in blocks())
    overall = overall / total
    spread = sum(
        np.einsum("rnq,rn->q", (v - overall) ** 2, mask[:, b].astype(np.float64))
        for b, v in blocks()
    )
    result: np.ndarray = spread / total
    return result


def equal_count_mask(mask: np.ndarray, scored: np.ndarray | None = None) -> np.ndarray:
    """Keep each sample's first k selected references (bank order), k the smallest non-zero
    per-sample count of `mask [R, N]` among the `scored` samples (default: all); samples with
    none keep none.

    Why `scored`: in the offline design a public sample can be OUT for a single reference;
    a minimum over every sample would then score each audit sample against one reference."""
    count = mask.sum(axis=0)
    among = count if scored is None else count[scored]
    if not among.any():
        among = count
    if not among.any():
        return mask
    k = int(among[among > 0].min())
    # A running count, a reference at a time: `np.cumsum(mask, axis=0)` walks each sample's
    # column with a stride of N and took ~10x longer (130 ms for R = 63, N = 100k).
    kept = np.empty_like(mask)
    running = np.zeros(mask.shape[1], dtype=np.int64)
    for r in range(mask.shape[0]):
        running += mask[r]
        np.logical_and(mask[r], running <= k, out=kept[r])
    return kept


def _sides(view: TargetView, equal_counts: bool) -> tuple[np.ndarray, np.ndarray]:
    """IN and OUT reference masks [R, N], equalised when asked."""
    members = view.reference_membership
    if not equal_counts:
        return members, view.out_mask()
    result: tuple[np.ndarray, np.ndarray] = view.memo(
        ("lira-sides",),
        lambda: (
            equal_count_mask(members, view.audit),
            equal_count_mask(view.out_mask(), view.audit),
        ),
    )
    return result


def out_gaussians(view: TargetView) -> Gaussians:
    """Per-sample, per-query Gaussians of the OUT references' phi, every OUT reference (no
    equal counts), per-sample variance: what LiRA offline fits, for other attacks' features."""
    return _fit(view, 1, equal_counts=False, fixed_variance=False)


def _fit(view: TargetView, side: int, equal_counts: bool, fixed_variance: bool) -> Gaussians:
    """Gaussians of the references' phi on one side (0: IN, 1: OUT). The moments are shared
    by all five variants on this view, computed a block of samples at a time."""
    mask = _sides(view, equal_counts)[side]

    def blocks() -> Iterator[tuple[slice, np.ndarray]]:
        for block in view.sample_blocks(view.n_references * view.n_queries * 8):
            yield block, view.reference_stat("phi", block)

    fit = view.memo(("lira-moments", side, equal_counts), lambda: moments(blocks, mask))
    return gaussians(fit, blocks, mask, fixed_variance, SIGMA_FLOOR)


def log_normal_pdf(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """log N(x; mean, std^2), elementwise."""
    z = (x - mean) / std
    result: np.ndarray = -0.5 * z * z - np.log(std) - _HALF_LOG_2PI
    return result


@register_attack(
    "lira-online",
    family="lira",
    needs=Needs(in_references=1, out_references=1),
    description="Carlini et al.: mean_q log N(phi; IN) - log N(phi; OUT), per-sample variances",
    params=(FIXED_VARIANCE, EQUAL_COUNTS),
)
@register_attack(
    "lira-online-fixed-variance",
    family="lira",
    needs=Needs(in_references=1, out_references=1),
    description="Carlini et al.: online LiRA with one variance per side (few references)",
    params=(FIXED_VARIANCE.with_default(True), EQUAL_COUNTS),
)
def lira_online(view: TargetView, fixed_variance: bool, equal_counts: bool) -> np.ndarray:
    """Online LiRA (Carlini et al. 2022, Algorithm 1): Gaussian likelihood ratio IN vs OUT."""
    target = view.target_stat("phi")
    g_in = _fit(view, 0, equal_counts, fixed_variance)
    g_out = _fit(view, 1, equal_counts, fixed_variance)
    ratio = log_normal_pdf(target, g_in.mean, g_in.std) - log_normal_pdf(
        target, g_out.mean, g_out.std
    )
    return query_mean(ratio)


@register_attack(
    "lira-offline",
    family="lira",
    needs=Needs(out_references=1),
    description="Carlini et al.: one-sided offline test mean_q log Phi((phi - mu_out)/s_out)",
    params=(FIXED_VARIANCE, EQUAL_COUNTS),
)
@register_attack(
    "lira-offline-fixed-variance",
    family="lira",
    needs=Needs(out_references=1),
    description="Carlini et al.: one-sided offline LiRA with one OUT variance (few references)",
    params=(FIXED_VARIANCE.with_default(True), EQUAL_COUNTS),
)
def lira_offline(view: TargetView, fixed_variance: bool, equal_counts: bool) -> np.ndarray:
    """Offline LiRA (Carlini et al. 2022, §VI-C): one-sided test against the OUT Gaussian."""
    target = view.target_stat("phi")
    g_out = _fit(view, 1, equal_counts, fixed_variance)
    return query_mean(log_ndtr((target - g_out.mean) / g_out.std))


@register_attack(
    "lira-offline-two-sided",
    family="lira",
    needs=Needs(out_references=1),
    description="Carlini et al.'s reference code: -mean_q log N(phi; mu_out, s_out^2)",
    params=(FIXED_VARIANCE, EQUAL_COUNTS),
)
def lira_offline_two_sided(
    view: TargetView, fixed_variance: bool, equal_counts: bool
) -> np.ndarray:
    """Offline LiRA as in the authors' code: negative log density under the OUT Gaussian."""
    target = view.target_stat("phi")
    g_out = _fit(view, 1, equal_counts, fixed_variance)
    return -query_mean(log_normal_pdf(target, g_out.mean, g_out.std))
