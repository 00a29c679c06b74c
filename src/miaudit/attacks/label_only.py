"""Label-only attacks (Choquette-Choo et al., "Label-Only Membership Inference Attacks",
ICML 2021; docs/algorithms.md §9).

They use only the target's predicted labels, so they survive output defences such as
top-k, rounding or label-only APIs (see `miaudit.signals.defences`):

- ``augmentation-consistency``: the fraction of the bank's queries (plain + augmented) under
  which the target predicts the true label (the data-augmentation attack, Sec. 4.2). It needs
  at least one augmented query: on a plain-only bank it is ``correctness``, and is skipped.
- ``boundary-distance``: the L2 distance from the input to the target's decision boundary,
  found by a label-only search (HopSkipJump, Chen et al. 2020), read from the channel
  ``boundary_distance`` [M, N] (see `miaudit.signals.boundary`). Following Choquette-Choo et
  al., a sample the model misclassifies (query 0) is already past the boundary and scores 0;
  a correctly classified one scores its distance (members lie further from the boundary).
- ``calibrated-boundary-distance``: that score minus its mean over the reference models that
  did not train on the sample (same convention applied to each reference), which removes the
  per-sample difficulty as in Watson et al.'s calibration.
"""

from __future__ import annotations

import numpy as np

from miaudit.attacks.registry import Needs, register_attack
from miaudit.attacks.view import TargetView, mean_over_out

CHANNEL = "boundary_distance"


@register_attack(
    "augmentation-consistency",
    family="label-only",
    # with the plain query alone the score is `correctness`'s: same AUC, same ε
    needs=Needs(augmented_queries=1),
    description="Choquette-Choo: fraction of queries (plain + augmented) with argmax = y",
)
def augmentation_consistency_score(view: TargetView) -> np.ndarray:
    predicted = view.target_logits().argmax(axis=-1)  # [N, Q]
    result: np.ndarray = (predicted == view.labels[:, None]).mean(axis=1, dtype=np.float64)
    return result


def _convention(distance: np.ndarray, logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Distance where query 0 is classified correctly, 0 where it is not."""
    correct = logits[:, 0, :].argmax(axis=-1) == labels
    return np.where(correct, distance, 0.0)


@register_attack(
    "boundary-distance",
    family="label-only",
    needs=Needs(channel=CHANNEL),
    description="Choquette-Choo: L2 distance to the decision boundary (0 if misclassified)",
)
def boundary_distance_score(view: TargetView) -> np.ndarray:
    return _convention(view.target_channel(CHANNEL), view.target_logits(), view.labels)


@register_attack(
    "calibrated-boundary-distance",
    family="label-only",
    needs=Needs(channel=CHANNEL, out_references=1),
    description="boundary distance minus its mean over OUT references",
)
def calibrated_boundary_distance_score(view: TargetView) -> np.ndarray:
    target = boundary_distance_score(view)
    distances = view.reference_channel(CHANNEL)  # [R, N]
    references = np.zeros((view.n_references, view.n_samples))
    for r in range(view.n_references):
        references[r] = _convention(distances[r], view.reference_logits(r), view.labels)
    result: np.ndarray = target - mean_over_out(references, view.out_mask())
    return result
