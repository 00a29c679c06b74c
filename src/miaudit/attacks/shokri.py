"""Shadow-model attack of Shokri et al. ("Membership Inference Attacks Against Machine Learning
Models", S&P 2017).

Attack-training rows come from shadow models (every reference by default, via
`TargetView.as_shadow`): the shadow's softmax probability vector on query 0 sorted in
descending order (optionally only the `top_k` largest), plus the one-hot true label when
`use_label`; label = membership in that shadow, balanced per shadow. Attack classifier: a torch
MLP with one hidden layer of 64 ReLU units (features standardised on the shadow rows), trained
with BCE / Adam for a fixed number of epochs by the shared, seeded trainer in `shadow.py`.
The score is the classifier's member log-odds.

`shokri` trains one global classifier. `shokri-per-class` trains one per true class as in the
original; a class with fewer than `min_class_rows` member or non-member rows falls back to the
global classifier for its samples.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import softmax

from miaudit.attacks.base import Needs, TargetView, register_attack
from miaudit.attacks.shadow import MLPScorer, build_shadow_set, train_scorer


def shokri_featurizer(
    top_k: int | None = None, use_label: bool = True
) -> Callable[[TargetView], tuple[np.ndarray, np.ndarray]]:
    """Featurizer: sorted query-0 probabilities (top_k of them; all when None) [+ one-hot]."""

    def featurize(view: TargetView) -> tuple[np.ndarray, np.ndarray]:
        probs = softmax(view.target_logits()[:, 0, :].astype(np.float64), axis=1)
        ranked = -np.sort(-probs, axis=1)
        k = view.n_classes if top_k is None else max(1, min(int(top_k), view.n_classes))
        parts = [ranked[:, :k]]
        if use_label:
            parts.append(np.eye(view.n_classes)[view.labels])
        return np.concatenate(parts, axis=1), np.ones(view.n_samples, dtype=bool)

    return featurize


_PARAMS = dict(
    top_k=None,
    use_label=True,
    hidden=64,
    epochs=50,
    lr=1e-3,
    weight_decay=0.0,
    batch_size=128,
    n_shadows=None,
    max_train_samples=20_000,
    seed=0,
)


def _shokri(
    view: TargetView,
    *,
    per_class: bool,
    top_k: int | None,
    use_label: bool,
    hidden: int,
    epochs: int,
    lr: float,
    weight_decay: float,
    batch_size: int,
    n_shadows: int | None,
    max_train_samples: int,
    seed: int,
    min_class_rows: int = 20,
) -> np.ndarray:
    featurize = shokri_featurizer(top_k, use_label)
    rows = build_shadow_set(
        view, featurize, n_shadows=n_shadows, max_train_samples=max_train_samples, seed=seed
    )

    def fit(select: np.ndarray, desc: str) -> MLPScorer:
        return train_scorer(
            rows.features[select],
            rows.labels[select],
            hidden=(int(hidden),),
            dropout=(),
            lr=lr,
            weight_decay=weight_decay,
            epochs=epochs,
            batch_size=batch_size,
            seed=seed,
            desc=desc,
        )

    features, _ = featurize(view)
    scores = np.full(view.n_samples, np.nan)
    remaining = np.ones(view.n_samples, dtype=bool)
    if per_class:
        row_class = view.labels[rows.sample]
        for c in range(view.n_classes):
            select = row_class == c
            n_members = int(rows.labels[select].sum())
            if min(n_members, int(select.sum()) - n_members) < min_class_rows:
                continue  # too few rows of one kind: the global classifier scores this class
            targets = view.labels == c
            scores[targets] = fit(select, f"training the shokri scorer of class {c}").logit(
                features[targets]
            )
            remaining &= ~targets
    if remaining.any():
        everything = np.ones(len(rows), dtype=bool)
        scores[remaining] = fit(everything, "training the shokri scorer").logit(
            features[remaining]
        )
    return scores


@register_attack(
    "shokri",
    family="shadow",
    needs=Needs(shadows=1),
    description="Shokri et al. S&P'17: one MLP attack classifier on sorted probabilities + label",
    **_PARAMS,
)
def shokri_score(view: TargetView, **params: Any) -> np.ndarray:
    """Member log-odds from one global attack classifier."""
    return _shokri(view, per_class=False, **params)


@register_attack(
    "shokri-per-class",
    family="shadow",
    needs=Needs(shadows=1),
    description="Shokri et al. S&P'17: one attack classifier per true class (global fallback)",
    min_class_rows=20,
    **_PARAMS,
)
def shokri_per_class_score(view: TargetView, **params: Any) -> np.ndarray:
    """Member log-odds from per-class attack classifiers, the global one as fallback."""
    return _shokri(view, per_class=True, **params)
