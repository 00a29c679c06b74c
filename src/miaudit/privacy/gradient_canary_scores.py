"""White-box gradient canaries, the auditor's side: scores and one-run bounds of a run's
:class:`~miaudit.train.gradient_canaries.GradientCanaryRecord` (docs/algorithms.md §16).

The canaries and what a DP-SGD run records of them are :mod:`miaudit.train.gradient_canaries`
(training code, in the trainer digest); everything here reads a finished record only, so it
sits outside the training code: editing a score or a bound retrains nothing.

**Scores.** *Every iterate* (the auditor sees θ_0, θ_1, …, θ_T and knows the optimizer, so it
can recover each step's privatised gradient from consecutive iterates): the sum over steps of
the log likelihood ratio of the Poisson-subsampled Gaussian,
``Σ_t log(1 − q + q·exp((x_t − ½)/σ²))`` (``score="likelihood"``, the default: the optimal
per-step test, Neyman–Pearson), or the plain ``Σ_t x_t`` (``score="sum"``). Note that the sum
of the *updates'* projections, Σ_t ⟨θ_t − θ_{t+1}, u_i⟩, telescopes to the final-model score
below, so recording it would add nothing: the every-iterate auditor gains only by weighing the
steps (here, by the likelihood ratio of each). ``known_data=True`` scores ``x − d`` instead:
the adversary of DP's own threat model, who knows every other row and which of them each step
sampled (the rows' sampling is independent of the canaries' coins, so conditioning on it
leaves the canary's guarantee, subsampling included, intact), subtracts their clipped sum
and is left with the canary and the noise alone. *Final model*: ``⟨θ_0 − θ_T, u_i⟩`` (the canary
adds to the gradient, so an included one pushes its coordinate down). The IN/OUT guesses on
the top/bottom scores then give the one-run ε bound (:mod:`miaudit.privacy.one_run`) and the
f-DP one (:mod:`miaudit.privacy.fdp_one_run`): :func:`gradient_canary_audit`.

Soundness rests on the DP-SGD guarantee with respect to each canary's inclusion (the canary
being one more example, sampled like the others) and on the guesses being fixed in advance;
the σ used by the likelihood score is the one the accountant claims, so a run whose real noise
is smaller than claimed (a bug) scores its canaries *better*, never worse.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from miaudit.config.sections import WHITE_BOX_SCORES as SCORES
from miaudit.errors import ConfigError
from miaudit.privacy.canaries import resolve_guesses
from miaudit.privacy.fdp_one_run import fdp_one_run_mu
from miaudit.privacy.one_run import one_run_epsilon

if TYPE_CHECKING:  # the record is training's output; only its fields are read here
    from miaudit.train.gradient_canaries import GradientCanaryRecord

__all__ = [
    "SCORES",
    "ThreatModelBounds",
    "GradientCanaryAudit",
    "canary_scores",
    "estimated_noise",
    "gradient_canary_audit",
]


def _observed(record: GradientCanaryRecord, known_data: bool) -> np.ndarray:
    """x, or x − d for the adversary who knows the other rows (module doc)."""
    if not known_data:
        return record.projections
    if record.data is None:
        raise ConfigError("known_data needs a record with the rows' part d (recorded by runs "
                          "since the dp-bugs study); this one has none.")
    result: np.ndarray = record.projections - record.data
    return result


def estimated_noise(record: GradientCanaryRecord, known_data: bool = False) -> float:
    """σ̂: the noise multiplier read off the run itself, 1.4826 × the median absolute deviation
    of every recorded x[t, i] (of x − d with ``known_data``; robust to the few entries shifted
    by a sampled canary). A function of the output alone (never of the inclusions), so scoring
    with it keeps the bound sound; it is what lets the audit see a run whose real noise is
    below the claimed one."""
    x = _observed(record, known_data).ravel()
    if x.size == 0:
        return float(record.noise_multiplier)
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


def canary_scores(record: GradientCanaryRecord, threat_model: str = "every-iterate",
                  score: str = "likelihood", noise: str | float = "estimated",
                  known_data: bool = False) -> np.ndarray:  # fmt: skip
    """Each canary's score (higher = more likely included) under ``threat_model``:
    ``"every-iterate"`` (``score``: ``"likelihood"`` or ``"sum"``) or ``"final-model"``.

    ``noise``: the σ of the likelihood score: ``"estimated"`` (:func:`estimated_noise`, the
    default), ``"per-step"`` (the same estimate for each step t alone, over the m canaries:
    an implementation whose noise differs between steps, e.g. noise once per epoch, shows
    its unnoised steps, which then weigh as much as they reveal; floored at 1e-3 × the
    claimed σ), ``"claimed"`` (the accountant's), or a number. Any choice is sound (the score is
    a function of the output); a σ far from the real one only costs power. ``known_data``
    (every iterate only): score x − d, the adversary who knows the other rows (module doc)."""
    if threat_model == "final-model":
        result: np.ndarray = record.initial - record.final
        return result
    if threat_model != "every-iterate":
        raise ConfigError(f"threat_model must be 'every-iterate' or 'final-model', "
                          f"got {threat_model!r}.")
    if score not in SCORES:
        raise ConfigError(f"score must be one of {SCORES}, got {score!r}.")
    x = _observed(record, known_data)
    if score == "sum":
        result = x.sum(axis=0)
        return result
    q = record.sample_rate
    if noise == "estimated":
        sigma: float | np.ndarray = estimated_noise(record, known_data)
    elif noise == "per-step":
        sigma = _per_step_noise(x, record.noise_multiplier)[:, None]
    elif noise == "claimed":
        sigma = record.noise_multiplier
    elif isinstance(noise, (int, float)) and not isinstance(noise, bool):
        sigma = float(noise)
    else:
        raise ConfigError(f"noise must be 'estimated', 'per-step', 'claimed' or a number, "
                          f"got {noise!r}.")
    if not np.all(sigma > 0):
        raise ConfigError("the likelihood score needs a noise multiplier > 0; use score='sum'.")
    a = (x - 0.5) / sigma**2  # log N(x; 1, σ²) − log N(x; 0, σ²)
    if q >= 1.0:
        result = a.sum(axis=0)
        return result
    result = np.logaddexp(math.log1p(-q), math.log(q) + a).sum(axis=0)
    return result


def _per_step_noise(x: np.ndarray, claimed: float) -> np.ndarray:
    """σ̂_t for each step t: 1.4826 × the median absolute deviation of x[t, :] (a function of
    the output alone), floored at 1e-3 × the claimed σ so that an unnoised step scores
    finitely."""
    if x.size == 0:
        return np.full(x.shape[0], claimed)
    mad = np.median(np.abs(x - np.median(x, axis=1, keepdims=True)), axis=1)
    result: np.ndarray = np.maximum(1.4826 * mad, 1e-3 * claimed)
    return result


@dataclass(frozen=True)
class ThreatModelBounds:
    """The one-run ε bound and the f-DP one for one threat model's scores; with several
    candidate guesses each is evaluated at α / candidates and the largest kept (so each of
    the two holds at 1 − α)."""

    threat_model: str
    epsilon: float  # one-run (ε, δ) lower bound (privacy/one_run.py)
    fdp_mu: float  # f-DP one-run μ-GDP lower bound (privacy/fdp_one_run.py)
    fdp_epsilon: float  # its ε at δ (an estimate: assumes a Gaussian trade-off curve)
    one_run: dict[str, Any]  # the best OneRunBound's to_dict()
    fdp: dict[str, Any]  # the best FDPOneRunBound's to_dict()


@dataclass(frozen=True)
class GradientCanaryAudit:
    """Both threat models' bounds for one run with gradient canaries."""

    every_iterate: ThreatModelBounds
    final_model: ThreatModelBounds
    m: int
    steps: int
    sample_rate: float
    noise_multiplier: float
    score: str
    noise: float  # σ the every-iterate likelihood score used (per-step: the overall σ̂)
    known_data: bool = False  # the every-iterate adversary knew the other rows (x − d)

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values, for metrics.json."""
        return dataclasses.asdict(self)


def _bounds(threat_model: str, scores: np.ndarray, included: np.ndarray,
            pairs: list[tuple[int, int]], delta: float, alpha: float) -> ThreatModelBounds:
    each = alpha / len(pairs)
    eps = [one_run_epsilon(scores, included, kp, km, delta, each) for kp, km in pairs]
    fdp = [fdp_one_run_mu(scores, included, kp, km, delta, each) for kp, km in pairs]
    best_e = max(eps, key=lambda b: b.epsilon)
    best_f = max(fdp, key=lambda b: b.mu)
    return ThreatModelBounds(threat_model, best_e.epsilon, best_f.mu, best_f.epsilon,
                             best_e.to_dict(), best_f.to_dict())


def gradient_canary_audit(record: GradientCanaryRecord, guesses: Any = None,
                          delta: float = 1e-5, alpha: float = 0.05,
                          score: str = "likelihood", noise: str | float = "estimated",
                          known_data: bool = False) -> GradientCanaryAudit:  # fmt: skip
    """Scores of both threat models (:func:`canary_scores`) and their one-run ε and f-DP
    bounds at ``delta``, ``alpha``. ``guesses``: as ``canaries.guesses`` in a run config
    (:func:`miaudit.privacy.canaries.resolve_guesses`; default a tenth of the canaries each
    way), fixed before the inclusions are seen; several candidates share α (Bonferroni).
    ``score``, ``noise``, ``known_data``: the every-iterate score (:func:`canary_scores`)."""
    pairs = resolve_guesses(guesses, record.m)
    inc = record.included
    return GradientCanaryAudit(
        every_iterate=_bounds("every-iterate",
                              canary_scores(record, "every-iterate", score, noise, known_data),
                              inc, pairs, delta, alpha),
        final_model=_bounds("final-model", canary_scores(record, "final-model"),
                            inc, pairs, delta, alpha),
        m=record.m, steps=record.steps, sample_rate=record.sample_rate,
        noise_multiplier=record.noise_multiplier, score=score,
        noise=(estimated_noise(record, known_data) if noise in ("estimated", "per-step") else
               record.noise_multiplier if noise == "claimed" else float(noise)),
        known_data=known_data,
    )  # fmt: skip
