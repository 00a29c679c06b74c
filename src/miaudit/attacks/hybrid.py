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
  - with `confidence` (default), LiRA's logit-scaled confidence phi = z_y - logsumexp_{c!=y} z_c
    (Carlini et al.) beside the loss: the target's phi, phi minus the OUT references' mean, and
    that difference over sqrt(s^2 + s0^2) (s the OUT references' std for the sample, s0 its
    median over samples: six references estimate a spread poorly), query means, and where
    the bank has population rows QMIA's margin over its predicted non-member quantile of phi
    (Bertran et al., NeurIPS 2023; `qmia` with `score: phi`). The loss squeezes a confident
    model's members and non-members together near 0 (median losses 5e-4 against 1e-3 on
    texas-health); phi keeps them apart, and the quantile says what phi a non-member like
    this sample reaches;
  - each attack in `extra_attacks` (default lira-offline, lira-online, rmia) whose needs the
    *target* view meets: lira-online only when the bank has IN references (the online design),
    rmia only when it has population samples. The attacks are fetched from the registry by name
    and called on each view with their default parameters; their scores pass through
    sign(x)*log1p(|x|) so that LiRA's unbounded log-densities do not swamp the standardisation;
  - for each such attack a 0/1 "missing" indicator; its NaN scores (e.g. lira-online on a sample
    with no IN reference in a shadow view) are replaced by the median over the shadow rows.
The scorer, training (early stopping on held-out shadow rows, which also give the public-data
threshold) and scoring are RAPID's (`rapid.rapid_scorer_attack`, `rapid.RAPID_PARAMS`).
Samples with no OUT reference get NaN, as in RAPID. The scorer trains on up to 60,000 pooled
shadow rows (RAPID's default cap is 20,000): with one query per sample the 0.1% FPR tail is
what the scorer must place, and on the power study's development banks the larger pool raised
texas-health's TPR@0.1% (3.97 / 3.37 % -> 4.94 / 5.46 % with the features above;
EXPERIMENTS.md, "Study: power").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from miaudit.attacks.calibration import query_mean
from miaudit.attacks.lira import out_gaussians
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
_CONFIDENCE_COLUMNS = 3  # phi, phi - mean_OUT phi, its standardised version (+ QMIA's margin)
MAX_TRAIN_SAMPLES = 60_000


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
    result: np.ndarray = np.sign(values) * np.log1p(np.abs(values))
    return result


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


def confidence_columns(view: TargetView) -> int:
    """How many columns `confidence_features` gives: 3, and QMIA's margin with population."""
    return _CONFIDENCE_COLUMNS + int(bool(view.population.any()))


def confidence_features(view: TargetView) -> np.ndarray:
    """`[phi, phi - mu, (phi - mu) / sqrt(s^2 + s0^2)]`, float64 [N, 3], query means: the
    target's phi, mu and s the mean and std of the OUT references' phi for the sample and
    query (LiRA offline's per-sample Gaussian, every OUT reference), s0 the median of s over
    the samples with one (per query); then, where the bank has population rows, QMIA's
    margin `phi - q(x, y)` (`qmia` on phi, its defaults otherwise). NaN where no reference
    is OUT."""
    phi = view.target_stat("phi")
    out = out_gaussians(view)
    difference = phi - out.mean
    with np.errstate(all="ignore"):  # all-NaN queries (no OUT reference anywhere)
        s0 = np.nanmedian(out.std, axis=0)  # [Q]
    standardised = difference / np.sqrt(out.std ** 2 + np.nan_to_num(s0) ** 2 + 1e-12)
    columns = [query_mean(phi), query_mean(difference), query_mean(standardised)]
    if confidence_columns(view) > _CONFIDENCE_COLUMNS:
        spec = get_attack("qmia")
        columns.append(np.asarray(spec.fn(view, **{**spec.defaults, "score": "phi"}),
                                  dtype=np.float64))
    return np.column_stack(columns)


def base_columns(view: TargetView, per_query: bool, confidence: bool = False) -> int:
    """How many leading columns of the hybrid features are signal features (never NaN where
    the sample is scorable): RAPID's two, one per query with `per_query` and Q > 1, then the
    confidence columns with `confidence` (`confidence_columns`)."""
    return (_RAPID_COLUMNS + (view.n_queries if per_query and view.n_queries > 1 else 0)
            + (confidence_columns(view) if confidence else 0))


def hybrid_featurizer(names: Sequence[str], per_query: bool = True,
                      confidence: bool = False) -> Featurizer:
    """RAPID's features, with `per_query` each query's calibrated loss (banks of Q > 1
    queries), with `confidence` the phi features (`confidence_features`), then the
    (symlog-ed) scores of the registry attacks `names`."""
    specs = [get_attack(name) for name in names]

    def featurize(view: TargetView) -> tuple[np.ndarray, np.ndarray]:
        base, scorable = rapid_features(view)
        loss_columns = [base]
        if per_query and view.n_queries > 1:
            loss_columns.append(per_query_calibrated_loss(view))
        if confidence:
            loss_columns.append(confidence_features(view))
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
    description="RAPID's scorer on loss, phi and their calibrations + LiRA, RMIA, QMIA scores",
    image_queries=8,
    params=(
        Param("extra_attacks", DEFAULT_EXTRA_ATTACKS, "list[attack]", "attacks whose scores "
              "(with their defaults) are features, each where the target's bank meets its needs"),
        Param("per_query", True, "bool", "add each query's calibrated loss S_q - S_ref,q as a "
              "feature (banks of more than one query)"),
        Param("confidence", True, "bool", "add LiRA's logit-scaled confidence phi, phi minus "
              "the OUT references' mean and its standardised version as features"),
        *(p.with_default(MAX_TRAIN_SAMPLES) if p.name == "max_train_samples" else p
          for p in RAPID_PARAMS),
    ),
)
def rapid_hybrid_score(
    view: TargetView, *, extra_attacks: Sequence[str], per_query: bool, confidence: bool,
    epochs: int,
    lr: float, weight_decay: float, batch_size: int, hidden: Sequence[int],
    early_stopping: bool, patience: int, holdout: float, n_shadows: int | None,
    max_train_samples: int, seed: int,
) -> Scored:
    """Member log-odds of the hybrid scorer; NaN where no reference is OUT for the sample.
    `per_query`: add each query's calibrated loss (Q > 1); `confidence`: the phi features.
    Other parameters: RAPID's (`rapid.RAPID_PARAMS`; at most 60,000 scorer rows here)."""
    names = usable_extra_attacks(view, extra_attacks)
    imputer = partial(fit_imputer, base=base_columns(view, bool(per_query), bool(confidence)))
    return rapid_scorer_attack(
        view, hybrid_featurizer(names, bool(per_query), bool(confidence)), preprocess=imputer,
        desc="training the rapid-hybrid scorer", epochs=epochs, lr=lr,
        weight_decay=weight_decay, batch_size=batch_size, hidden=hidden,
        early_stopping=early_stopping, patience=patience, holdout=holdout,
        n_shadows=n_shadows, max_train_samples=max_train_samples, seed=seed,
    )
