"""Shadow-model attack of Shokri et al. ("Membership Inference Attacks Against Machine Learning
Models", S&P 2017).

Attack-training rows come from shadow models (every reference by default, via
`TargetView.as_shadow`): the shadow's softmax probability vector on query 0 sorted in
descending order (optionally only the `top_k` largest), plus the one-hot true label when
`use_label`; label = membership in that shadow, balanced per shadow. Attack classifier: a torch
MLP with one hidden layer of 64 ReLU units (features standardised on the shadow rows), trained
with BCE / Adam (batch 128) for a fixed 50 epochs by the shared, seeded trainer in `shadow.py`.
`holdout` of the shadows' public rows (never audited, population or canary samples) is held
out and never trained on; their scores give the pipeline its public-data threshold without a
second training. `early_stopping=True` would stop on their BCE after `patience` epochs without
a new best; off by default: on a development bank held-out loss bottomed out well before the
held-out AUC peaked (docs/algorithms.md §8). The score is the classifier's member log-odds.

`shokri` trains one global classifier. `shokri-per-class` trains one per true class as in the
original; a class with fewer than `min_class_rows` member or non-member rows falls back to the
global classifier for its samples.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.special import softmax

from miaudit.attacks.params import Param
from miaudit.attacks.rapid import (
    BATCH_SIZE,
    EARLY_STOPPING,
    EPOCHS,
    HOLDOUT,
    LR,
    MAX_TRAIN_SAMPLES,
    PATIENCE,
    SEED,
    WEIGHT_DECAY,
)
from miaudit.attacks.registry import Needs, Scored, register_attack
from miaudit.attacks.shadow import MLPScorer, build_shadow_split, threshold_rows, train_scorer
from miaudit.attacks.view import TargetView


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


_PARAMS = (
    Param("top_k", None, "int", "how many of the largest sorted probabilities are features "
          "(null: all)", low=1, nullable=True),
    Param("use_label", True, "bool", "the one-hot true label is a feature too"),
    Param("hidden", 64, "int", "width of the attack classifier's hidden layer", low=1),
    EPOCHS.with_default(50),
    LR,
    WEIGHT_DECAY.with_default(0.0),
    BATCH_SIZE.with_default(128),
    EARLY_STOPPING.with_default(False),
    PATIENCE.with_default(5),
    HOLDOUT,
    Param("n_shadows", None, "int", "how many references play shadow, the first in bank order "
          "(null: all)", low=1, nullable=True),
    MAX_TRAIN_SAMPLES,
    SEED,
)
_MIN_CLASS_ROWS = Param("min_class_rows", 20, "int", "the fewest member and non-member rows a "
                        "class needs for a classifier of its own (else the global one)", low=1)


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
    early_stopping: bool,
    patience: int,
    holdout: float,
    n_shadows: int | None,
    max_train_samples: int,
    seed: int,
    min_class_rows: int = 20,
) -> Scored:
    featurize = shokri_featurizer(top_k, use_label)
    rows, held = build_shadow_split(view, featurize, n_shadows=n_shadows, holdout=holdout,
                                    max_train_samples=max_train_samples, seed=seed)  # fmt: skip

    def fit(select: np.ndarray, held_select: np.ndarray, desc: str) -> MLPScorer:
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
            validation=(held.features[held_select], held.labels[held_select]),
            patience=int(patience) if early_stopping else 0,
        )

    features, _ = featurize(view)
    scores = np.full(view.n_samples, np.nan)
    held_scores = np.full(len(held), np.nan)
    remaining = np.ones(view.n_samples, dtype=bool)
    held_class = view.labels[held.sample]
    if per_class:
        row_class = view.labels[rows.sample]
        for c in range(view.n_classes):
            select = row_class == c
            n_members = int(rows.labels[select].sum())
            if min(n_members, int(select.sum()) - n_members) < min_class_rows:
                continue  # too few rows of one kind: the global classifier scores this class
            targets, mine = view.labels == c, held_class == c
            scorer = fit(select, mine, f"training the shokri scorer of class {c}")
            scores[targets] = scorer.logit(features[targets])
            held_scores[mine] = scorer.logit(held.features[mine])
            remaining &= ~targets
    if remaining.any():
        everything = np.ones(len(held), dtype=bool)
        scorer = fit(np.ones(len(rows), dtype=bool), everything, "training the shokri scorer")
        scores[remaining] = scorer.logit(features[remaining])
        rest = np.isin(held_class, np.unique(view.labels[remaining]))
        held_scores[rest] = scorer.logit(held.features[rest])
    if holdout == 0:
        return Scored(scores)  # no held-out rows: the pipeline reruns the attack for it
    return Scored(scores, threshold_rows(held, held_scores))


@register_attack(
    "shokri",
    family="shadow",
    needs=Needs(shadows=1),
    description="Shokri et al. S&P'17: one MLP attack classifier on sorted probabilities + label",
    params=_PARAMS,
)
def shokri_score(
    view: TargetView, *, top_k: int | None, use_label: bool, hidden: int, epochs: int,
    lr: float, weight_decay: float, batch_size: int, early_stopping: bool, patience: int,
    holdout: float, n_shadows: int | None, max_train_samples: int, seed: int,
) -> Scored:
    """Member log-odds from one global attack classifier."""
    return _shokri(
        view, per_class=False, top_k=top_k, use_label=use_label, hidden=hidden, epochs=epochs,
        lr=lr, weight_decay=weight_decay, batch_size=batch_size, early_stopping=early_stopping,
        patience=patience, holdout=holdout, n_shadows=n_shadows,
        max_train_samples=max_train_samples, seed=seed,
    )


@register_attack(
    "shokri-per-class",
    family="shadow",
    needs=Needs(shadows=1),
    description="Shokri et al. S&P'17: one attack classifier per true class (global fallback)",
    params=(_MIN_CLASS_ROWS, *_PARAMS),
)
def shokri_per_class_score(
    view: TargetView, *, min_class_rows: int, top_k: int | None, use_label: bool, hidden: int,
    epochs: int, lr: float, weight_decay: float, batch_size: int, early_stopping: bool,
    patience: int, holdout: float, n_shadows: int | None, max_train_samples: int, seed: int,
) -> Scored:
    """Member log-odds from per-class attack classifiers, the global one as fallback."""
    return _shokri(
        view, per_class=True, min_class_rows=min_class_rows, top_k=top_k, use_label=use_label,
        hidden=hidden, epochs=epochs, lr=lr, weight_decay=weight_decay, batch_size=batch_size,
        early_stopping=early_stopping, patience=patience, holdout=holdout,
        n_shadows=n_shadows, max_train_samples=max_train_samples, seed=seed,
    )
