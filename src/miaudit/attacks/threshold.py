"""Threshold attacks: scores of the target model alone, no references (docs/algorithms.md §3)."""

from __future__ import annotations

import numpy as np

from miaudit.attacks.registry import Needs, register_attack
from miaudit.attacks.view import TargetView


@register_attack("loss", family="threshold", description="Yeom: -mean_q cross-entropy")
def loss_score(view: TargetView) -> np.ndarray:
    result: np.ndarray = -view.target_stat("loss").mean(axis=1)
    return result


@register_attack(
    "confidence", family="threshold", description="Salem/Watson eq. 3: mean_q max_c log p"
)
def confidence_score(view: TargetView) -> np.ndarray:
    result: np.ndarray = view.target_stat("log_confidence").mean(axis=1)
    return result


@register_attack("entropy", family="threshold", description="negative Shannon entropy")
def entropy_score(view: TargetView) -> np.ndarray:
    result: np.ndarray = view.target_stat("neg_entropy").mean(axis=1)
    return result


@register_attack(
    "modified-entropy", family="threshold", description="Song & Mittal: -mean_q Mentr"
)
def modified_entropy_score(view: TargetView) -> np.ndarray:
    result: np.ndarray = -view.target_stat("modified_entropy").mean(axis=1)
    return result


@register_attack(
    "correctness",
    family="threshold",
    description="Yeom's gap attack: 1 if argmax = y (query 0)",
    first_query_only=True,
)
def correctness_score(view: TargetView) -> np.ndarray:
    predicted = view.target_logits()[:, 0, :].argmax(axis=1)
    result: np.ndarray = (predicted == view.labels).astype(np.float64)
    return result


@register_attack(
    "gradient-norm",
    family="threshold",
    needs=Needs(channel="grad_norm"),
    description="Watson eq. 2 (white-box): -||grad_theta loss||_2 on query 0",
)
def gradient_norm_score(view: TargetView) -> np.ndarray:
    return -view.target_channel("grad_norm")
