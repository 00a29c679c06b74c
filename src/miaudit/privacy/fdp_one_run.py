"""One-run auditing of f-DP: a μ-GDP lower bound from guesses on m randomly included canaries.

Mahloujifar, Melis & Chaudhuri, "Auditing f-Differential Privacy in One Run" (ICML 2025).
The game is the one of Steinke, Nasr & Jagielski 2023 ("Privacy Auditing with One (1) Training
Run"; :mod:`~miaudit.privacy.one_run`): each of m canaries is included independently with
probability ½, the attack scores all m, the auditor guesses IN for the k₊ highest scores, OUT
for the k₋ lowest and abstains on the rest, r = k₊ + k₋ guesses, v correct. Instead of
bounding P[≥ v correct] through (ε, δ), the paper bounds it with the mechanism's whole
trade-off curve f. Write f̄(x) = 1 − f(x) for the most probability an event of probability x
under one neighbour can have under the other, and f̄⁻¹ for its inverse; for μ-GDP
(Dong, Roth & Su 2022, "Gaussian Differential Privacy") f = G_μ and

    f̄⁻¹(x) = Φ(Φ⁻¹(x) − μ).

The paper's bound for guessing with abstention (its recursive algorithm, as the authors'
implementation computes it), for a level τ: start from

    r_v = τ·v/m,   h_v = τ·(r − v)/m

and for i = v − 1, …, 0

    h_i = max(h_{i+1}, (k − 1)·f̄⁻¹(r_{i+1})),   r_i = r_{i+1} + i/(r − i)·(h_i − h_{i+1}),

with k = 2 secrets per canary (in or out). If r_0 + h_0 > r/m, then under every f-DP mechanism
P[≥ v of the r guesses correct] < τ: f is *rejected* at level τ. r_i and h_i only grow as i
falls, so the recursion stops as soon as h stops changing (nothing changes after) or
r_i + h_i > r/m (rejected already).

Reported: μ̂ = the end of the run of rejected μ starting at 0 (``mu``): every μ' ≤ μ̂ is
rejected at level α (found on nested 64-cell grids, keeping the rejected side, so μ̂ itself is
rejected), and its ε at δ by the exact privacy profile of μ-GDP (Balle & Wang 2018;
:func:`~miaudit.privacy.gaussian_dp.gaussian_epsilon`).

Why it holds (what soundness rests on): for the true μ*, the audit reports μ̂ > μ* only if μ*
is rejected at the observed v; if v₀ is the least count at which μ* is rejected, that has
probability ≤ P[V ≥ v₀] < α by the theorem. This needs, as the paper's proof does:

- the canaries' inclusions independent Bernoulli(½), drawn by the auditor, and the mechanism
  μ*-GDP with respect to each canary's inclusion (add/remove of that one canary);
- the guesses (k₊, k₋ and the ranking they cut) a function of the mechanism's output only:
  fixed before the inclusions are looked at, never tuned on them (several (k₊, k₋) tried on
  the same canaries are several tests: share α among them);
- the family assumed: the claim refuted is "μ-GDP". The ε at δ is an *estimate* in the sense
  of :mod:`~miaudit.privacy.gaussian_dp`: a lower bound on the (ε, δ) of a mechanism whose
  trade-off curve is Gaussian (DP-SGD's is close to it), not of every (ε, δ)-DP mechanism. It
  is that assumption that makes it far tighter than the one-run ε bound at small δ.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from miaudit.errors import ConfigError
from miaudit.privacy._checks import check_alpha, check_count, check_delta, check_scores
from miaudit.privacy.gaussian_dp import gaussian_epsilon

__all__ = [
    "FDPOneRunBound",
    "fdp_one_run_rejects",
    "fdp_one_run_mu_from_counts",
    "fdp_one_run_mu",
]

METHOD = "one-run f-dp gaussian"
_SECRETS = 2  # k of the paper: a canary is in or out
_TOL = 1e-7  # the search stops when the bracket is this narrow (relative to max(1, μ))
_POINTS = 64  # cells per grid of the nested search


@dataclass(frozen=True)
class FDPOneRunBound:
    """A one-run f-DP bound: with probability ≥ 1 − ``alpha`` over which canaries were
    included, the mechanism is not μ'-GDP for any μ' < ``mu``; ``epsilon`` is the ε at
    ``delta`` of μ-GDP with that μ (an estimate: valid if the trade-off curve is Gaussian)."""

    mu: float
    epsilon: float
    method: str
    alpha: float
    delta: float
    m: int  # canaries
    k_plus: int | None  # None: the counts were given, not the guesses
    k_minus: int | None
    guesses: int  # r = k₊ + k₋
    correct: int  # v

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values in field order, for metrics.json."""
        return dataclasses.asdict(self)


def _rejects(m: int, r: int, v: int, mu: np.ndarray, alpha: float) -> np.ndarray:
    """The paper's test at every μ of a 1-D array (module doc): True where r_0 + h_0 > r/m."""
    n = mu.shape[0]
    rr = np.full(n, alpha * v / m)
    hh = np.full(n, alpha * (r - v) / m)
    limit = r / m
    active = rr + hh <= limit  # not yet rejected and not yet at its fixed point
    for i in range(v - 1, -1, -1):
        if not active.any():
            break
        idx = np.flatnonzero(active)
        h_old, r_old = hh[idx], rr[idx]
        # f̄⁻¹(x) = Φ(Φ⁻¹(x) − μ); ndtri(0) = −inf and ndtri(1) = inf give 0 and 1
        h_new = np.maximum(h_old, (_SECRETS - 1) * special.ndtr(special.ndtri(r_old) - mu[idx]))
        r_new = np.minimum(1.0, r_old + (i / (r - i)) * (h_new - h_old))
        hh[idx], rr[idx] = h_new, r_new
        # h unchanged: r is too, and so every later step; above the limit: rejected for good
        active[idx] = (h_new > h_old) & (r_new + h_new <= limit)
    result: np.ndarray = rr + hh > limit
    return result


def _check_counts(m: Any, r: Any, v: Any) -> tuple[int, int, int]:
    m = check_count(m, "m (canaries)", low=1)
    r = check_count(r, "r (guesses)", low=1, high=m,
                    hint=f": between 1 and the number of canaries m = {m}")
    v = check_count(v, "v (correct guesses)", high=r, hint=f" (out of r = {r} guesses)")
    return m, r, v


def fdp_one_run_rejects(m: int, r: int, v: int, mu: ArrayLike, alpha: float = 0.05
                        ) -> np.ndarray:  # fmt: skip
    """Whether v correct of r guesses on m canaries reject μ-GDP at level ``alpha``, for each
    μ of ``mu`` (any shape, each ≥ 0): P[≥ v correct] < ``alpha`` under every μ-GDP
    mechanism (module doc)."""
    m, r, v = _check_counts(m, r, v)
    alpha = check_alpha(alpha)
    mus = np.asarray(mu, dtype=np.float64)
    if not (mus >= 0.0).all():
        raise ConfigError(f"mu must be >= 0 (no NaN), got {mu!r}")
    return _rejects(m, r, v, mus.ravel(), alpha).reshape(mus.shape)


def _mu(m: int, r: int, v: int, alpha: float) -> float:
    """The end of the run of rejected μ from 0 (module doc); 0 when μ = 0 is not rejected."""
    def rejects(mu: np.ndarray) -> np.ndarray:
        return _rejects(m, r, v, mu, alpha)

    if not rejects(np.zeros(1))[0]:
        return 0.0
    lo, hi = 0.0, 1.0
    while rejects(np.array([hi]))[0]:  # as μ → ∞, f̄⁻¹ → 0 and r_0 + h_0 → α·r/m: this stops
        lo, hi = hi, 2.0 * hi
    # invariant: lo is rejected, hi is not; keep the first accepted grid point as hi
    while hi - lo > _TOL * max(1.0, hi):
        grid = np.linspace(lo, hi, _POINTS + 1)[1:-1]
        accepted = ~rejects(grid)
        j = int(np.argmax(accepted)) if accepted.any() else grid.size
        lo = float(grid[j - 1]) if j > 0 else lo
        hi = float(grid[j]) if j < grid.size else hi
    return lo


def fdp_one_run_mu_from_counts(m: int, r: int, v: int, delta: float = 1e-5,
                               alpha: float = 0.05) -> FDPOneRunBound:
    """μ̂ and its ε at δ from m canaries, r guesses and v correct (module doc)."""
    m, r, v = _check_counts(m, r, v)
    delta, alpha = check_delta(delta), check_alpha(alpha)
    if delta == 0.0:
        raise ConfigError("delta must be > 0 for the f-DP one-run bound's ε: a μ-GDP mechanism "
                          "with μ > 0 is not ε-DP for any finite ε (pass e.g. 1e-5)")
    mu = _mu(m, r, v, alpha)
    return FDPOneRunBound(mu=mu, epsilon=gaussian_epsilon(mu, delta), method=METHOD,
                          alpha=alpha, delta=delta, m=m, k_plus=None, k_minus=None,
                          guesses=r, correct=v)


def fdp_one_run_mu(scores: ArrayLike, included: ArrayLike, k_plus: int, k_minus: int,
                   delta: float = 1e-5, alpha: float = 0.05) -> FDPOneRunBound:
    """Guess IN for the ``k_plus`` highest scores, OUT for the ``k_minus`` lowest, and bound μ.

    The same guesses as :func:`~miaudit.privacy.one_run.one_run_epsilon` (``included[i]``:
    canary i was in, drawn with probability ½; ``k_plus``, ``k_minus`` fixed in advance; ties
    at the cuts broken by position).
    """
    s, inc = check_scores(scores, included, "canary", flag="included")
    m = int(s.size)
    k_plus = check_count(k_plus, "k_plus (IN guesses)", high=m)
    k_minus = check_count(k_minus, "k_minus (OUT guesses)", high=m)
    if k_plus + k_minus > m or k_plus + k_minus == 0:
        raise ConfigError(
            f"k_plus + k_minus = {k_plus + k_minus} must be between 1 and the number of "
            f"canaries m = {m}: the highest k_plus are guessed IN and the lowest k_minus OUT, "
            "so the two sets may not overlap"
        )
    order = np.argsort(s, kind="stable")  # ascending
    guessed_out, guessed_in = order[:k_minus], order[m - k_plus:]
    v = int(inc[guessed_in].sum() + (~inc[guessed_out]).sum())
    bound = fdp_one_run_mu_from_counts(m, k_plus + k_minus, v, delta, alpha)
    return dataclasses.replace(bound, k_plus=k_plus, k_minus=k_minus)
