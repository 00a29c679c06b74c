"""`rapid-hybrid`: RAPID's scorer fed with other attacks' scores too ("beyond RAPID").

RAPID (He et al., CCS 2024) learns a non-linear combination of the raw loss and its calibrated
version. This variant adds per-sample scores of stronger reference-based attacks as features:
LiRA (Carlini et al., S&P 2022) offline and online, and RMIA (Zarifzadeh et al., ICML 2024).

Features, for the target and for every shadow view (`TargetView.as_shadow`, leave-one-out):
  - RAPID's `[S, S - S_ref]` (always);
  - each attack in `extra_attacks` (default lira-offline, lira-online, rmia) whose needs the
    *target* view meets: lira-online only when the bank has IN references (the online design),
    rmia only when it has population samples. The attacks are fetched from the registry by name
    and called on each view with their default parameters; their scores pass through
    sign(x)*log1p(|x|) so that LiRA's unbounded log-densities do not swamp the standardisation;
  - for each such attack a 0/1 "missing" indicator; its NaN scores (e.g. lira-online on a sample
    with no IN reference in a shadow view) are replaced by the median over the shadow rows.
The scorer, training (early stopping on held-out shadow rows, which also give the public-data
threshold) and scoring are RAPID's (`rapid.rapid_scorer_attack`, `rapid.RAPID_DEFAULTS`).
Samples with no OUT reference get NaN, as in RAPID.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from miaudit.attacks.base import Needs, Scored, get_attack, register_attack, scores_of
from miaudit.attacks.rapid import RAPID_DEFAULTS, rapid_features, rapid_scorer_attack
from miaudit.attacks.shadow import Featurizer
from miaudit.attacks.view import TargetView
from miaudit.errors import AttackError

DEFAULT_EXTRA_ATTACKS = ("lira-offline", "lira-online", "rmia")
_BASE_COLUMNS = 2  # RAPID's [S, S - S_ref]


def usable_extra_attacks(view: TargetView, names: Sequence[str]) -> list[str]:
    """The attacks of `names` whose needs the view meets (e.g. online ones need IN references)."""
    usable = []
    for name in names:
        spec = get_attack(name)
        try:
            spec.needs.check(view, name)
        except AttackError:
            continue
        usable.append(name)
    return usable


def _symlog(values: np.ndarray) -> np.ndarray:
    return np.sign(values) * np.log1p(np.abs(values))


def hybrid_featurizer(names: Sequence[str]) -> Featurizer:
    """RAPID's features followed by the (symlog-ed) scores of the registry attacks `names`."""
    specs = [get_attack(name) for name in names]

    def featurize(view: TargetView) -> tuple[np.ndarray, np.ndarray]:
        base, scorable = rapid_features(view)
        extra = [np.asarray(scores_of(spec.fn(view, **spec.params)), dtype=np.float64)
                 for spec in specs]
        columns = [_symlog(np.where(np.isfinite(e), e, np.nan)) for e in extra]
        return np.column_stack([base, *columns]), scorable

    return featurize


def fit_imputer(features: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Learn per-column medians of the extra features on shadow rows; the transform fills NaN
    with them and appends one missing-indicator column per extra feature."""
    extra = features[:, _BASE_COLUMNS:]
    medians = np.zeros(extra.shape[1])
    for j in range(extra.shape[1]):
        finite = extra[:, j][np.isfinite(extra[:, j])]
        medians[j] = np.median(finite) if finite.size else 0.0

    def transform(rows: np.ndarray) -> np.ndarray:
        values = rows[:, _BASE_COLUMNS:]
        missing = ~np.isfinite(values)
        filled = np.where(missing, medians, values)
        return np.column_stack([rows[:, :_BASE_COLUMNS], filled, missing.astype(np.float64)])

    return transform


@register_attack(
    "rapid-hybrid",
    family="shadow",
    needs=Needs(out_references=1, shadows=2),
    description="RAPID's scorer on [loss, calibrated loss] + LiRA offline/online + RMIA scores",
    image_queries=8,
    extra_attacks=DEFAULT_EXTRA_ATTACKS,
    **RAPID_DEFAULTS,
)
def rapid_hybrid_score(
    view: TargetView, *, extra_attacks: Sequence[str] = DEFAULT_EXTRA_ATTACKS, **params: Any
) -> Scored:
    """Member log-odds of the hybrid scorer; NaN where no reference is OUT for the sample.
    Other parameters: RAPID's (`rapid.RAPID_DEFAULTS`)."""
    names = usable_extra_attacks(view, extra_attacks)
    return rapid_scorer_attack(view, hybrid_featurizer(names), preprocess=fit_imputer,
                               desc="training the rapid-hybrid scorer", **params)  # fmt: skip
