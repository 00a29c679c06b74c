"""Membership inference attacks on causal language models (docs/algorithms.md §15).

Every attack reads a sequence bank: per model and sample, the log-probability of each actual
next token `log p(x_t)` at the valid positions t < L_n (`seq_lengths`; padding is never read),
and, for Min-K%++, the mean `mu_t` and std `sigma_t` of log p(v) under the next-token
distribution. `ll(n) = mean_{t < L_n} log p(x_t)` is the sequence log-likelihood per token and
`loss(n) = -ll(n)` the LM loss (nats per token). Higher score = more likely a member.

- `lm-loss` (Yeom et al. on sequences): `ll_t`.
- `zlib` (Carlini et al. 2021): `-loss_t / zlib_bytes`, the log-perplexity over the zlib
  entropy (bytes of the zlib-compressed UTF-8 text), negated.
- `min-k` (Shi et al. 2024): the mean of the lowest `k * L_n` token log-probs (at least one).
- `min-k-plus-plus` (Zhang et al. 2024): the same over `(log p(x_t) - mu_t) / sigma_t`.
- `lm-calibrated` (Watson et al. 2022): `mean_{OUT(n)} loss_r - loss_t`.
- `lm-lira-offline` (Carlini et al. 2022): `log Phi((ll_t - mu_out) / s_out)`, a Gaussian fit
  to the OUT references' ll (lira.py's fit, equal counts); `lm-lira-offline-fixed-variance`
  pools one OUT variance over samples (few references).
- `lm-rmia` (Zarifzadeh et al. 2024): offline RMIA (rmia.py) on `p = exp(ll)`; no softmax
  temperature (the bank lacks the vocabulary's distribution; `lm_rmia` says why).
- `lm-rapid` (He et al. 2024): RAPID's scorer on `[loss, loss - mean_OUT loss]`.
- `blind` (Das et al. 2024): `-zlib_bytes / chars`, the text's compressibility; no model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import log_ndtr

from miaudit.attacks.lira import (
    EQUAL_COUNTS,
    FIXED_VARIANCE,
    SIGMA_FLOOR,
    equal_count_mask,
    fit_gaussians,
)
from miaudit.attacks.params import Param
from miaudit.attacks.rapid import RAPID_PARAMS, rapid_scorer_attack
from miaudit.attacks.registry import Needs, Scored, register_attack
from miaudit.attacks.rmia import GAMMA, OFFLINE_A, offline_scores
from miaudit.attacks.view import TargetView, mean_over_out
from miaudit.errors import AttackError
from miaudit.signals.bank import valid_positions

FAMILY = "language-model"

K = Param("k", 0.2, "float", "the fraction of the sample's tokens, lowest-scored first, "
          "averaged (at least one token)", low=0.0, high=1.0, low_open=True)


def lowest_fraction_mean(values: np.ndarray, lengths: np.ndarray, k: float) -> np.ndarray:
    """Mean of the `max(1, floor(k * L_n))` smallest of `values[n, :L_n]`, float64 [N].

    Padding (positions >= L_n) is replaced by +inf before the sort, so it is never selected,
    whatever it holds."""
    if not 0.0 < k <= 1.0:
        raise AttackError(f"Min-K%'s k must lie in (0, 1]; got {k}.")
    valid = valid_positions(lengths, values.shape[1])
    ordered = np.sort(np.where(valid, values.astype(np.float64), np.inf), axis=1)
    count = np.maximum(1, np.floor(k * lengths + 1e-9).astype(np.int64))
    # Only the first `count` (finite) columns are summed: the +inf padding sorts last.
    keep = np.arange(values.shape[1])[None, :] < count[:, None]
    result: np.ndarray = np.where(keep, ordered, 0.0).sum(axis=1) / count
    return result


def _out_loss_mean(view: TargetView) -> np.ndarray:
    """Mean LM loss of the references OUT for each sample, float64 [N]; NaN without one."""
    result: np.ndarray = view.memo(
        "lm-out-loss", lambda: -mean_over_out(view.reference_seq_loglik(), view.out_mask())
    )
    return result


@register_attack(
    "lm-loss",
    family=FAMILY,
    needs=Needs(sequence=True),
    description="LM loss: mean log p(x_t) over the sample's tokens (= -loss)",
)
def lm_loss(view: TargetView) -> np.ndarray:
    result: np.ndarray = view.target_seq_loglik().copy()
    return result


@register_attack(
    "zlib",
    family=FAMILY,
    needs=Needs(sequence=True, text=True),
    description="Carlini et al. 2021: -loss / zlib entropy (bytes of the compressed text)",
)
def zlib_ratio(view: TargetView) -> np.ndarray:
    result: np.ndarray = view.target_seq_loglik() / view.text_zlib_bytes
    return result


@register_attack(
    "min-k",
    family=FAMILY,
    needs=Needs(sequence=True),
    description="Shi et al. 2024 (Min-K% Prob): mean of the lowest k of token log-probs",
    params=(K,),
)
def min_k(view: TargetView, k: float) -> np.ndarray:
    assert view.seq_lengths is not None  # Needs(sequence=True)
    return lowest_fraction_mean(view.target_token_logprob(), view.seq_lengths, k)


@register_attack(
    "min-k-plus-plus",
    family=FAMILY,
    needs=Needs(sequence=True, next_token_moments=True),
    description="Zhang et al. 2024 (Min-K%++): lowest-k mean of (log p(x_t) - mu_t) / sigma_t",
    params=(K,),
)
def min_k_plus_plus(view: TargetView, k: float) -> np.ndarray:
    token = view.target_token_logprob().astype(np.float64)
    mu, sigma = view.target_next_token_moments()
    assert view.seq_lengths is not None  # Needs(sequence=True)
    valid = valid_positions(view.seq_lengths, token.shape[1])
    with np.errstate(all="ignore"):  # padding may hold anything; it is masked below
        z = (token - mu) / np.maximum(sigma.astype(np.float64), SIGMA_FLOOR)
    return lowest_fraction_mean(np.where(valid, z, 0.0), view.seq_lengths, k)


@register_attack(
    "lm-calibrated",
    family=FAMILY,
    needs=Needs(sequence=True, out_references=1),
    description="Watson et al. on sequences: mean_OUT loss_r - loss_t",
)
def lm_calibrated(view: TargetView) -> np.ndarray:
    result: np.ndarray = _out_loss_mean(view) + view.target_seq_loglik()
    return result


@register_attack(
    "lm-lira-offline",
    family=FAMILY,
    needs=Needs(sequence=True, out_references=1),
    description="Carlini et al. 2022 offline on ll: log Phi((ll_t - mu_out) / s_out)",
    params=(FIXED_VARIANCE, EQUAL_COUNTS),
)
@register_attack(
    "lm-lira-offline-fixed-variance",
    family=FAMILY,
    needs=Needs(sequence=True, out_references=1),
    description="Carlini et al. 2022 offline on ll with one pooled OUT variance (few refs)",
    params=(FIXED_VARIANCE.with_default(True), EQUAL_COUNTS),
)
def lm_lira_offline(view: TargetView, fixed_variance: bool, equal_counts: bool) -> np.ndarray:
    out = view.out_mask()
    if equal_counts:
        out = equal_count_mask(out, view.audit)
    g = fit_gaussians(view.reference_seq_loglik()[:, :, None], out, fixed_variance)
    result: np.ndarray = log_ndtr((view.target_seq_loglik() - g.mean[:, 0]) / g.std[:, 0])
    return result


@register_attack(
    "lm-rmia",
    family=FAMILY,
    needs=Needs(sequence=True, out_references=1, population=True),
    description="Zarifzadeh et al. 2024 offline on p = exp(ll): fraction of z with LR > gamma",
    params=(OFFLINE_A, GAMMA.with_default(1.0)),
)
def lm_rmia(view: TargetView, a: float, gamma: float) -> np.ndarray:
    """Offline RMIA on the sequence likelihood `p = exp(ll)`.

    No softmax temperature (rmia's `temperature`), deliberately: the tempered probability of
    a token is `softmax(z / T)[x] = p(x)^(1/T) / sum_v p(v)^(1/T)`, whose normaliser
    `sum_v p(v)^(1/T) = E_{v~p}[exp((1/T - 1) log p(v))]` needs the whole next-token
    distribution (every moment of log p(v) under p). A sequence bank keeps log p of the
    actual token and only the mean and std of log p(v) (Min-K%++'s), so any tempered
    likelihood built from it would be an approximation (e.g. a Gaussian in log p(v)), not the
    paper's T. Tempering the per-token mean `ll` instead (`exp(ll / T)`) would only be a
    monotone map of each model's likelihood, not a softmax temperature. Signalling the
    models at temperature T (logits / T before the log-softmax) is the faithful way."""
    p_target = np.exp(view.target_seq_loglik())
    p_out = mean_over_out(np.exp(view.reference_seq_loglik()), view.out_mask())
    return offline_scores(p_target, p_out, view.population, a, gamma)


def lm_rapid_features(view: TargetView) -> tuple[np.ndarray, np.ndarray]:
    """RAPID's `[S, S - S_ref]` on sequences: S the view's target LM loss, S_ref the mean
    loss of its OUT references; float64 [N, 2], and where S_ref exists."""
    s = -view.target_seq_loglik()
    s_ref = _out_loss_mean(view)
    return np.stack([s, s - s_ref], axis=1), np.isfinite(s_ref)


@register_attack(
    "lm-rapid",
    family=FAMILY,
    needs=Needs(sequence=True, out_references=1, shadows=2),
    description="He et al. CCS'24 on sequences: MLP scorer on [loss, loss - mean OUT loss]",
    params=RAPID_PARAMS,
)
def lm_rapid(
    view: TargetView, *, epochs: int, lr: float, weight_decay: float, batch_size: int,
    hidden: Sequence[int], early_stopping: bool, patience: int, holdout: float,
    n_shadows: int | None, max_train_samples: int, seed: int,
) -> Scored:
    return rapid_scorer_attack(
        view, lm_rapid_features, desc="training the lm-rapid scorer", epochs=epochs, lr=lr,
        weight_decay=weight_decay, batch_size=batch_size, hidden=hidden,
        early_stopping=early_stopping, patience=patience, holdout=holdout,
        n_shadows=n_shadows, max_train_samples=max_train_samples, seed=seed,
    )


@register_attack(
    "blind",
    family=FAMILY,
    needs=Needs(text=True),
    model_free=True,
    description="Das et al. 2024 blind baseline: -zlib_bytes / chars, never reads a model",
)
def blind(view: TargetView) -> np.ndarray:
    chars, zlib_bytes = view.text_chars, view.text_zlib_bytes
    assert chars is not None and zlib_bytes is not None  # Needs(text=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        scores: np.ndarray = np.where(chars > 0, -zlib_bytes / np.maximum(chars, 1), np.nan)
    return scores
