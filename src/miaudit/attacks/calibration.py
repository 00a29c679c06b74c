"""Difficulty calibration (Watson et al., ICLR 2022, "On the importance of difficulty
calibration in membership inference attacks").

A threshold score of the target is calibrated by subtracting the same score averaged over the
reference models that did not train on the sample: `s_t(n) - mean_{r in OUT(n)} s_r(n)`
(docs/algorithms.md §4). A sample with no OUT reference cannot be calibrated and scores NaN.
"""

from __future__ import annotations

import numpy as np

from miaudit.attacks.registry import Needs, register_attack
from miaudit.attacks.view import TargetView, mean_over_out, side_means


def query_mean(values: np.ndarray) -> np.ndarray:
    """Mean over the last (query) axis; a running sum, several times faster than `.mean(-1)`
    on a short, innermost axis."""
    total: np.ndarray = values[..., 0].copy()
    for j in range(1, values.shape[-1]):
        total += values[..., j]
    total /= values.shape[-1]
    return total


def calibrate(target: np.ndarray, references: np.ndarray, out: np.ndarray) -> np.ndarray:
    """`target [N] - mean over OUT references of references [R, N]`; NaN without OUT refs."""
    result: np.ndarray = target - mean_over_out(references, out)
    return result


@register_attack(
    "calibrated-loss",
    family="calibration",
    needs=Needs(out_references=1),
    description="Watson et al.: loss_t - mean_OUT loss_r, loss = -mean_q cross-entropy",
)
def calibrated_loss(view: TargetView) -> np.ndarray:
    """Watson et al. eq. 4 on Yeom's loss score `-mean_q l`."""
    # -(t - mean_OUT r) = -t + mean_OUT r: the negated scores' calibration, exactly.
    result: np.ndarray = side_means(view, "loss").non_members - view.target_query_mean("loss")
    return result


@register_attack(
    "calibrated-confidence",
    family="calibration",
    needs=Needs(out_references=1),
    description="Watson et al.: confidence_t - mean_OUT confidence_r (mean_q max_c log p)",
)
def calibrated_confidence(view: TargetView) -> np.ndarray:
    """Watson et al. on the confidence score `mean_q max_c log p` (their eq. 3)."""
    target = view.target_query_mean("log_confidence")
    result: np.ndarray = target - side_means(view, "log_confidence").non_members
    return result


@register_attack(
    "calibrated-gradient-norm",
    family="calibration",
    needs=Needs(channel="grad_norm", out_references=1),
    description="Watson et al. (white-box): -||g_t|| + mean_OUT ||g_r|| on query 0",
)
def calibrated_gradient_norm(view: TargetView) -> np.ndarray:
    """Watson et al. on the gradient-norm score `-||grad_theta l||_2` (their eq. 2)."""
    target = -view.target_channel("grad_norm")
    references = -view.reference_channel("grad_norm")
    return calibrate(target, references, view.out_mask())
