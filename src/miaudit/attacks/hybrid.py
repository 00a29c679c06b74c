"""`rapid-hybrid`: RAPID's scorer fed with other attacks' scores too ("beyond RAPID").

RAPID (He et al., CCS 2024) learns a non-linear combination of the raw loss and its calibrated
version. This variant adds per-sample scores of stronger reference-based attacks as features:
LiRA (Carlini et al., S&P 2022) offline and online, and RMIA (Zarifzadeh et al., ICML 2024).

Features, for the target and for every shadow view (`TargetView.as_shadow`, leave-one-out):
  - RAPID's `[S, S - S_ref]` (always; query means);
  - with `per_query` (default) and a bank of Q > 1 queries, the calibrated loss of each query,
    `S_q - S_ref,q` (Q columns, in the bank's query order): the query mean hides which views
    of a sample carry membership, e.g. the augmentations the model trained on against shifts
    it never saw (EXPERIMENTS.md, "Study: power"). With one query this column would repeat
    `S - S_ref`, so it is left out;
  - each attack in `extra_attacks` (default lira-offline, lira-online, rmia) whose needs the
    *target* view meets: lira-online only when the bank has IN references (the online design),
    rmia only when it has population samples. The attacks are fetched from the registry by name
    and called on each view with their default parameters; their scores pass through
    sign(x)*log1p(|x|) so that LiRA's unbounded log-densities do not swamp the standardisation;
  - for each such attack a 0/1 "missing" indicator; its NaN scores (e.g. lira-online on a sample
    with no IN reference in a shadow view) are replaced by the median over the shadow rows.
The scorer, training (early stopping on held-out shadow rows, which also give the public-data
threshold) and scoring are RAPID's (`rapid.rapid_scorer_attack`, `rapid.RAPID_PARAMS`).
Samples with no OUT reference get NaN, as in RAPID.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from miaudit.attacks.params import Param
from miaudit.attacks.rapid import RAPID_PARAMS, rapid_features, rapid_scorer_attack
from miaudit.attacks.registry import Needs, Scored, get_attack, register_attack, scores_of
from miaudit.attacks.shadow import Featurizer
from miaudit.attacks.view import TargetView, mean_over_out
from miaudit.errors import AttackError

DEFAULT_EXTRA_ATTACKS = ("lira-offline", "lira-online", "rmia")
# The extra features as rapid-hybrid's defaults were chosen on the power study's development
# banks: RMIA's paper score (its count, ties kept), not its tie-broken default, which moved
# rapid-hybrid's TPR@0.1% there by -0.11 to +0.02 points (EXPERIMENTS.md, "RMIA ties").
FEATURE_PARAMS = {"rmia": {"tie_break": "none"}, "rmia-online": {"tie_break": "none"}}
_RAPID_COLUMNS = 2  # RAPID's [S, S - S_ref]


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


def per_query_calibrated_loss(view: TargetView) -> np.ndarray:
    """`S_q - S_ref,q`, float64 [N, Q]: the target's loss on each query minus the mean loss of
    the references OUT for the sample on the same query (NaN where none is OUT). Blocked over
    samples, as `side_means`, so no [R, N, Q] temporary is made."""
    target = view.target_stat("loss")
    out = view.out_mask()
    calibrated = np.empty(target.shape)
    for block in view.sample_blocks(view.n_references * view.n_queries * 8):
        reference = mean_over_out(view.reference_stat("loss", block), out[:, block])
        calibrated[block] = target[block] - reference
    return calibrated


def base_columns(view: TargetView, per_query: bool) -> int:
    """How many leading columns of the hybrid features are loss features (never NaN where the
    sample is scorable): RAPID's two, then one per query with `per_query` and Q > 1."""
    return _RAPID_COLUMNS + (view.n_queries if per_query and view.n_queries > 1 else 0)


def hybrid_featurizer(names: Sequence[str], per_query: bool = True) -> Featurizer:
    """RAPID's features, with `per_query` each query's calibrated loss (banks of Q > 1
    queries), then the (symlog-ed) scores of the registry attacks `names`."""
    specs = [get_attack(name) for name in names]

    def featurize(view: TargetView) -> tuple[np.ndarray, np.ndarray]:
        base, scorable = rapid_features(view)
        loss_columns = [base]
        if base_columns(view, per_query) > _RAPID_COLUMNS:
            loss_columns.append(per_query_calibrated_loss(view))
        extra = [np.asarray(scores_of(spec.fn(view, **{**spec.defaults,
                                                         **FEATURE_PARAMS.get(spec.name, {})})),
                            dtype=np.float64) for spec in specs]
        columns = [_symlog(np.where(np.isfinite(e), e, np.nan)) for e in extra]
        return np.column_stack([*loss_columns, *columns]), scorable

    return featurize


def fit_imputer(features: np.ndarray, base: int = _RAPID_COLUMNS
                ) -> Callable[[np.ndarray], np.ndarray]:
    """Learn per-column medians of the extra features (every column after the first `base`)
    on shadow rows; the transform fills NaN with them and appends one missing-indicator column
    per extra feature."""
    extra = features[:, base:]
    medians = np.zeros(extra.shape[1])
    for j in range(extra.shape[1]):
        finite = extra[:, j][np.isfinite(extra[:, j])]
        medians[j] = np.median(finite) if finite.size else 0.0

    def transform(rows: np.ndarray) -> np.ndarray:
        values = rows[:, base:]
        missing = ~np.isfinite(values)
        filled = np.where(missing, medians, values)
        return np.column_stack([rows[:, :base], filled, missing.astype(np.float64)])

    return transform


@register_attack(
    "rapid-hybrid",
    family="shadow",
    needs=Needs(out_references=1, shadows=2),
    description="RAPID's scorer on [loss, calibrated loss (per query)] + LiRA and RMIA scores",
    image_queries=8,
    params=(
        Param("extra_attacks", DEFAULT_EXTRA_ATTACKS, "list[attack]", "attacks whose scores "
              "(with their defaults) are features, each where the target's bank meets its needs"),
        Param("per_query", True, "bool", "add each query's calibrated loss S_q - S_ref,q as a "
              "feature (banks of more than one query)"),
        *RAPID_PARAMS,
    ),
)
def rapid_hybrid_score(
    view: TargetView, *, extra_attacks: Sequence[str], per_query: bool, epochs: int,
    lr: float, weight_decay: float, batch_size: int, hidden: Sequence[int],
    early_stopping: bool, patience: int, holdout: float, n_shadows: int | None,
    max_train_samples: int, seed: int,
) -> Scored:
    """Member log-odds of the hybrid scorer; NaN where no reference is OUT for the sample.
    `per_query`: add each query's calibrated loss (Q > 1). Other parameters: RAPID's
    (`rapid.RAPID_PARAMS`)."""
    names = usable_extra_attacks(view, extra_attacks)
    imputer = partial(fit_imputer, base=base_columns(view, bool(per_query)))
    return rapid_scorer_attack(
        view, hybrid_featurizer(names, bool(per_query)), preprocess=imputer,
        desc="training the rapid-hybrid scorer", epochs=epochs, lr=lr,
        weight_decay=weight_decay, batch_size=batch_size, hidden=hidden,
        early_stopping=early_stopping, patience=patience, holdout=holdout,
        n_shadows=n_shadows, max_train_samples=max_train_samples, seed=seed,
    )
