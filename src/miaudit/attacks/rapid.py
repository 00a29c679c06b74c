"""RAPID (He et al., "Is Difficulty Calibration All We Need?", CCS 2024).

Features per sample: `[S, S - S_ref]`, with `S` the target's cross-entropy loss averaged over the
bank's queries (the paper's "multiple queries": 8 augmentations; the bank decides Q) and `S_ref`
the mean, over references that did not train on the sample, of their query-averaged loss (the
paper's "random sampling" of reference models). S is the loss itself, as in the paper: the
scorer learns the direction. Scorer: MLP 2->512->256->128->1, ReLU, dropout 0.2 after the first
two hidden layers, sigmoid output, trained with BCE / Adam (lr 2e-4, weight decay 5e-4, batch 128)
for a fixed 150 epochs on shadow models (every reference by default, leave-one-out). The official
code picks its best epoch on the victim set; this implementation never does (docs/algorithms.md).
The score is the scorer's logit (monotone in its probability, fewer ties).

Parameters: `epochs`, `lr`, `weight_decay`, `batch_size` (the recipe above); `n_shadows` (the
first n references in bank order play shadow; None = all); `max_train_samples` (cap on the
pooled, per-shadow balanced training rows; seeded subsample); `seed` (row sampling, weight
init, dropout, batch order). Shadow rows exclude population samples.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from miaudit.attacks.base import Needs, TargetView, register_attack, side_means
from miaudit.attacks.shadow import Featurizer, Preprocessor, scorer_attack


def rapid_features(view: TargetView) -> tuple[np.ndarray, np.ndarray]:
    """RAPID's `[S, S - S_ref]` for the view's target, float64 [N, 2], and where S_ref exists.

    On `view.as_shadow(r)` this is the leave-one-out feature of shadow r: S_ref averages the
    other references only, never the evaluated target.
    """
    s = view.target_query_mean("loss")
    # Blocked and memoised on the view (calibrated-loss shares it): no [R, N, Q] copy, which
    # a shadow view's non-consecutive references would otherwise make for each shadow.
    s_ref = side_means(view, "loss").non_members
    features = np.stack([s, s - s_ref], axis=1)
    return features, np.isfinite(s_ref)


# The official training recipe; a fixed epoch count, never chosen on the evaluated target.
RAPID_DEFAULTS: dict[str, Any] = dict(
    epochs=150,
    lr=2e-4,
    weight_decay=5e-4,
    batch_size=128,
    n_shadows=None,
    max_train_samples=20_000,
    seed=0,
)


def rapid_scorer_attack(
    view: TargetView,
    featurize: Featurizer,
    *,
    preprocess: Preprocessor | None = None,
    epochs: int,
    lr: float,
    weight_decay: float,
    batch_size: int,
    n_shadows: int | None,
    max_train_samples: int,
    seed: int,
    desc: str = "training the rapid scorer",
) -> np.ndarray:
    """RAPID's scorer (MLP 2->512->256->128->1, dropout 0.2 after the first two hidden layers)
    trained on `featurize`'s shadow rows, applied to the view's target. `desc` labels the
    training's progress bar."""
    return scorer_attack(
        view,
        featurize,
        n_shadows=n_shadows,
        max_train_samples=max_train_samples,
        seed=seed,
        min_shadows=2,  # a shadow needs at least one reference of its own
        preprocess=preprocess,
        hidden=(512, 256, 128),
        dropout=(0.2, 0.2),
        lr=lr,
        weight_decay=weight_decay,
        epochs=epochs,
        batch_size=batch_size,
        desc=desc,
    )


@register_attack(
    "rapid",
    family="shadow",
    needs=Needs(out_references=1, shadows=2),
    description="He et al. CCS'24: MLP scorer on [loss, loss - mean OUT-reference loss]",
    image_queries=8,
    **RAPID_DEFAULTS,
)
def rapid_score(view: TargetView, **params: Any) -> np.ndarray:
    """RAPID member log-odds per sample; NaN where no reference is OUT for the sample.
    Parameters: `RAPID_DEFAULTS`."""
    return rapid_scorer_attack(view, rapid_features, **params)
