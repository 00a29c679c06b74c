"""QMIA, quantile-regression membership inference (Bertran, Tang, Kearns, Morgenstern, Roth &
Wu, "Scalable Membership Inference Attacks via Quantile Regression", NeurIPS 2023;
docs/algorithms.md §21).

The paper fits one regressor q(x, y) on public samples that are not members of the target,
with the pinball loss at level 1 - alpha, to the target's score s(x, y) on them: q predicts,
per sample, the (1 - alpha)-quantile of the target's score on non-members *like this one*.
A sample scores its margin s(x, y) - q(x, y); the paper's test declares a member above 0,
which holds the false-positive rate near alpha on every kind of sample, hard or easy. The
score is the hinge `z_y - max_{c != y} z_c` of the target's logits (the paper's), averaged
over queries, or LiRA's `phi = z_y - logsumexp_{c != y} z_c` (LeakPro's rescaled logits).

What the regressor sees. The paper's regressor reads the sample x itself (a pretrained image
network fine-tuned on the public data). A signal bank holds no inputs, only model outputs,
and an attack is a pure function of the bank, so x is out of reach. What the bank holds
about a sample that does not depend on the target is its label and the outputs of the
attacker's own models on it, the reference models that did not train on it. `qmia` gives
the regressor the label (categorical) and, in place of the paper's pretrained network's view
of x, the OUT references' view of it: their mean score s_r(x, y) (a direct estimate of the
target's score on a non-member x) and their mean log-probabilities over the classes (the
public models' "embedding" of x). That costs the references the bank already has (at least
one OUT reference per sample), never another model. `qmia-label` gives it the label alone
(no reference: one class-conditional quantile, the paper's regression with x left out).

Which rows fit it. The population rows: no model, the target included, trained on them, so
they are public non-members of the target, and every reference is OUT for them. Audit rows,
canaries and the target's membership are never read by the fit; an audit row enters only
as an input to `predict`. The regressor is scikit-learn's `HistGradientBoostingRegressor`
with `loss="quantile"` (the pinball loss), seeded, no early stopping (no held-out split of
the few population rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from miaudit.attacks.calibration import query_mean
from miaudit.attacks.params import Param
from miaudit.attacks.registry import Needs, register_attack
from miaudit.attacks.view import TargetView, mean_over_out
from miaudit.errors import AttackError

if TYPE_CHECKING:
    from sklearn.ensemble import HistGradientBoostingRegressor

FAMILY = "quantile"
SCORES = ("hinge", "phi")
FEATURES = ("references", "label")
# sklearn's HistGradientBoosting takes a categorical feature of at most 255 categories
# (its default max_bins); with more classes the label enters as an ordinal number.
_MAX_CATEGORIES = 255

ALPHA = Param("alpha", 0.05, "float", "the regressor predicts the (1 - alpha)-quantile of "
              "the target's score on non-members (pinball loss at level 1 - alpha)",
              low=0.0, high=0.5, low_open=True, high_open=True)
SCORE = Param("score", "hinge", "str", "the target's score regressed: hinge z_y - max_{c!=y} "
              "z_c (the paper's) or phi z_y - logsumexp_{c!=y} z_c (LiRA's), mean over "
              "queries", choices=SCORES)
FEATURES_PARAM = Param("features", "references", "str", "the regressor's inputs: label and "
                       "the OUT references' mean score and log-probabilities (references), or "
                       "the label alone (label)", choices=FEATURES)
MAX_ITER = Param("max_iter", 100, "int", "boosting iterations of the quantile regressor",
                 low=1)
SEED = Param("seed", 0, "int", "the regressor's random_state", low=0)


def model_scores(logits: np.ndarray, labels: np.ndarray, score: str) -> np.ndarray:
    """One model's score on every sample from its logits [N, Q, C], mean over queries,
    float64 [N]: the hinge `z_y - max_{c != y} z_c` or `phi = z_y - logsumexp_{c != y} z_c`."""
    z = np.asarray(logits, dtype=np.float64)
    rows = np.arange(z.shape[0])
    true = z[rows, :, labels]  # [N, Q]
    others = z.copy()
    others[rows, :, labels] = -np.inf
    if score == "hinge":
        rest = others.max(axis=2)
    elif score == "phi":
        top = others.max(axis=2, keepdims=True)
        rest = top[..., 0] + np.log(np.exp(others - top).sum(axis=2))
    else:
        raise AttackError(f"QMIA's score must be one of {', '.join(SCORES)}; got {score!r}.")
    return query_mean(true - rest)


def _log_probs(logits: np.ndarray) -> np.ndarray:
    """log-softmax over classes of logits [N, Q, C], mean over queries: float64 [N, C]."""
    z = np.asarray(logits, dtype=np.float64)
    top = z.max(axis=2, keepdims=True)
    log_p = z - top - np.log(np.exp(z - top).sum(axis=2, keepdims=True))
    result: np.ndarray = log_p.mean(axis=1)
    return result


def qmia_features(view: TargetView, features: str, score: str) -> np.ndarray:
    """The regressor's inputs for every sample, float64 [N, F]: column 0 the label, then (for
    `features="references"`) the OUT references' mean score and their mean log-probability of
    each class; NaN where a sample has no OUT reference. Never reads the target."""
    label = view.labels.astype(np.float64)[:, None]
    if features == "label":
        return label
    if features != "references":
        raise AttackError(f"QMIA's features must be one of {', '.join(FEATURES)}; got "
                          f"{features!r}.")
    if view.n_references == 0:
        raise AttackError("QMIA with features: references needs at least one reference "
                          "model; the bank has none (use features: label, or qmia-label).")
    out = view.out_mask()
    ref_scores = np.empty((view.n_references, view.n_samples))
    log_p = np.zeros((view.n_samples, view.n_classes))
    for r in range(view.n_references):  # one reference at a time: no [R, N, C] array
        ref_scores[r], ref_log_p = _per_block(view, view.reference_logits(r), score)
        log_p += out[r][:, None] * ref_log_p
    count = out.sum(axis=0)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        log_p = np.where(count > 0, log_p / np.maximum(count, 1), np.nan)
    return np.hstack([label, mean_over_out(ref_scores, out)[:, None], log_p])


def _per_block(view: TargetView, logits: np.ndarray, score: str) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """One model's `model_scores` [N] and `_log_probs` [N, C], a block of samples at a time
    (bounded float64 temporaries)."""
    scores = np.empty(view.n_samples)
    log_p = np.empty((view.n_samples, view.n_classes))
    for block in view.sample_blocks(view.n_queries * view.n_classes * 8 * 3):
        chunk = np.asarray(logits[block], dtype=np.float64)
        scores[block] = model_scores(chunk, view.labels[block], score)
        log_p[block] = _log_probs(chunk)
    return scores, log_p


@register_attack(
    "qmia",
    family=FAMILY,
    needs=Needs(out_references=1, population=True),
    description="Bertran et al. NeurIPS'23: hinge_t - quantile regressed on label + OUT refs",
    params=(ALPHA, SCORE, FEATURES_PARAM, MAX_ITER, SEED),
)
@register_attack(
    "qmia-label",
    family=FAMILY,
    needs=Needs(population=True),
    description="Bertran et al. NeurIPS'23: hinge_t - quantile regressed on the label alone",
    params=(ALPHA, SCORE, FEATURES_PARAM.with_default("label"), MAX_ITER, SEED),
)
def qmia(view: TargetView, alpha: float, score: str, features: str, max_iter: int,
         seed: int) -> np.ndarray:
    """The target's score minus its predicted non-member (1 - alpha)-quantile: one quantile
    regressor (pinball loss) fit on the population rows only, never on an audit row; NaN
    where a sample has no OUT reference (`features="references"`)."""
    if not 0.0 < alpha < 0.5:
        raise AttackError(f"QMIA's alpha must lie in (0, 0.5); got {alpha}.")
    x = qmia_features(view, features, score)
    target = _per_block(view, view.target_logits(), score)[0]
    fit = view.population & np.isfinite(x).all(axis=1)
    if not fit.any():
        raise AttackError("QMIA needs population samples with every feature defined to fit "
                          "its quantile regressor; the bank has none.")
    regressor = quantile_regressor(alpha, max_iter, seed, view.n_classes)
    regressor.fit(x[fit], target[fit])
    scorable = np.isfinite(x).all(axis=1)
    margin = np.full(view.n_samples, np.nan)
    if scorable.any():
        margin[scorable] = target[scorable] - regressor.predict(x[scorable])
    return margin


def quantile_regressor(alpha: float, max_iter: int, seed: int,
                       n_classes: int) -> HistGradientBoostingRegressor:
    """The (1 - alpha)-quantile regressor, column 0 (the label) categorical when sklearn
    allows it; deterministic for a seed (no early stopping, no subsampling). sklearn.ensemble
    is imported here, not with the module: it loads pandas (1.5 s), which `miaudit attack`
    must not pay before it scores."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    return HistGradientBoostingRegressor(
        loss="quantile", quantile=1.0 - alpha, max_iter=max_iter, early_stopping=False,
        random_state=seed,
        categorical_features=[0] if n_classes <= _MAX_CATEGORIES else None,
    )
