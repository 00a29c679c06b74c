"""One-run auditing: an ε lower bound from guesses on m randomly included canaries.

Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run" (NeurIPS 2023).
Each of m canaries is included in the training set independently with probability ½; the attack
scores all m; the auditor guesses IN for the k₊ highest scores, OUT for the k₋ lowest and
abstains on the rest: r = k₊ + k₋ guesses, v of them correct. k₊ and k₋ must be fixed before
looking at which canaries were included (never tuned on them): the p-values below assume it.

Pure ε-DP (the paper's guessing-game theorem for ε-DP): the number of correct
guesses is stochastically dominated by W̃ ~ Binomial(r, q), q = e^ε/(1 + e^ε), so

    p(ε) = P[W̃ ≥ v]

and ε_lb = sup{ε : p(ε) ≤ α}.

(ε, δ)-DP (the paper's Theorem 5.2, computed as in the algorithm of its appendix that evaluates
that bound; Google DeepMind's jax_privacy ``auditing`` module computes the same p-value):

    p(ε, δ) = min(1, P[W̃ ≥ v] + 2 m δ · max_{i = 1..v} P[v − i ≤ W̃ < v] / i),

and ε_lb = sup{ε : p(ε, δ) ≤ α}. Because p(ε, δ) ≥ p(ε), the δ-corrected bound never exceeds
the pure one; it is searched on [0, ε_lb(δ = 0)] by bisection on nested grids (64 cells at a
time, refining the cell after the last grid point where p ≤ α and keeping that side, so the
reported ε always satisfies p(ε, δ) ≤ α).
Why the largest such ε is valid: an (ε*, δ)-DP mechanism is (ε, δ)-DP for every ε ≥ ε*, so
h(v) := inf_{ε ≥ ε*} p(ε, δ; v) bounds P[W ≥ v] for every v, and reporting more than ε* needs
h(W) ≤ α, which has probability ≤ P[W ≥ v₀] ≤ h(v₀) ≤ α (v₀ the least v with h(v) ≤ α).

A design that cannot give a non-zero bound even if every guess were right (p(0, δ) ≥ α with
v = r) raises :class:`~miaudit.errors.ConfigError` naming the guesses and canaries it would take
(:func:`min_guesses`, :func:`min_canaries`): that is known before any training run, so it is a
configuration to fix, not a result to report.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from miaudit.errors import ConfigError
from miaudit.privacy._checks import check_alpha, check_count, check_delta, check_scores
from miaudit.records.bounds import OneRunBound

__all__ = [
    "OneRunBound",
    "one_run_p_value",
    "one_run_epsilon_from_counts",
    "one_run_epsilon",
    "min_guesses",
    "min_canaries",
]

_TOL = 1e-9  # the search stops when the bracket is this narrow (relative to max(1, ε))
_CELLS = 2_000_000  # grid points x correct guesses evaluated at once (memory bound)
_MAX_CANARIES = 1 << 22  # the search for the canaries needed stops here




def _p_values(m: int, r: int, v: int, eps: np.ndarray, delta: float) -> np.ndarray:
    """p(ε, δ) at every ε of a 1-D array (module doc)."""
    from scipy import stats  # here, not at import: scipy.stats costs ~0.3 s to import

    q = special.expit(eps)  # accuracy of ε-DP randomized response
    beta = stats.binom.sf(v - 1, r, q)  # P[W̃ ≥ v]
    if delta == 0.0 or v == 0:
        result: np.ndarray = beta
        return result
    # P[v − i ≤ W̃ < v] for i = 1..v: the pmf summed from v − 1 downwards
    below = np.cumsum(stats.binom.pmf(np.arange(v - 1, -1, -1)[None, :], r, q[:, None]), axis=1)
    worst = np.max(below / np.arange(1, v + 1), axis=1)
    result = np.minimum(1.0, beta + 2.0 * m * delta * worst)
    return result


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """p(ε, δ): an upper bound on P[≥ v of r guesses correct] for an (ε, δ)-DP mechanism
    auditing m canaries (module doc); the bound rejects ε when p(ε, δ) ≤ α."""
    m = check_count(m, "m (canaries)", low=1)
    r = check_count(r, "r (guesses)", high=m)
    v = check_count(v, "v (correct guesses)", high=r)
    if not float(epsilon) >= 0.0:
        raise ConfigError(f"epsilon must be >= 0, got {epsilon!r}")
    return float(_p_values(m, r, v, np.array([float(epsilon)]), check_delta(delta))[0])


def _sup_rejected(p_value: Any, hi: float, alpha: float, points: int) -> float:
    """The largest ε in [0, hi] found with p(ε) ≤ α, on nested grids (a bisection that splits
    each bracket into ``points`` cells at once); 0 if none. The returned ε always has
    p(ε) ≤ α: the search keeps the side of each bracket where it holds."""
    lo, known = 0.0, False  # known: p(lo) ≤ α was checked
    while True:
        grid = np.linspace(lo, hi, points + 1)
        ok = p_value(grid) <= alpha
        ok[0] |= known
        if not ok.any():
            return 0.0
        j = int(np.flatnonzero(ok)[-1])
        if j == points:
            return float(hi)
        lo, hi, known = float(grid[j]), float(grid[j + 1]), True
        if hi - lo <= _TOL * max(1.0, hi):
            return lo


def _epsilon(m: int, r: int, v: int, delta: float, alpha: float) -> float:
    def pure(eps: np.ndarray) -> np.ndarray:
        return _p_values(m, r, v, eps, 0.0)

    hi = 1.0
    while pure(np.array([hi]))[0] <= alpha:  # p → 1 as ε → ∞ because v ≤ r: this stops
        hi *= 2.0
    eps0 = _sup_rejected(pure, hi, alpha, 64)
    if delta == 0.0 or eps0 == 0.0:
        return eps0

    def corrected(eps: np.ndarray) -> np.ndarray:
        return _p_values(m, r, v, eps, delta)

    # p(ε, δ) ≥ p(ε, 0), so the δ-corrected bound lies in [0, eps0]
    return _sup_rejected(corrected, eps0, alpha, int(np.clip(_CELLS // (v + 1), 4, 64)))


def _possible(m: int, r: int, delta: float, alpha: float) -> bool:
    """Could r guesses among m canaries, all right, give a non-zero bound?"""
    return bool(_p_values(m, r, r, np.zeros(1), delta)[0] < alpha)


def min_guesses(m: int, delta: float = 0.0, alpha: float = 0.05) -> int | None:
    """The fewest guesses r ≤ m that, all right, give a non-zero bound; None if no r ≤ m does."""
    m = check_count(m, "m (canaries)", low=1)
    delta, alpha = check_delta(delta), check_alpha(alpha)
    if not _possible(m, m, delta, alpha):
        return None
    lo, hi = 0, m  # invariant: lo guesses are not enough, hi are (p(0) falls as r grows)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _possible(m, mid, delta, alpha) else (mid, hi)
    return hi


def min_canaries(delta: float = 0.0, alpha: float = 0.05) -> int | None:
    """The fewest canaries m that, all guessed (r = m) and all right, give a non-zero bound.

    None when none up to 2²² does: at ε = 0 the δ term alone is at least 2δ (the i = v term),
    so 2δ ≥ α can never be overcome.
    """
    delta, alpha = check_delta(delta), check_alpha(alpha)
    if 2.0 * delta >= alpha:
        return None
    hi = 1
    while not _possible(hi, hi, delta, alpha):
        if hi >= _MAX_CANARIES:
            return None
        hi *= 2
    lo = hi // 2  # not enough (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _possible(mid, mid, delta, alpha) else (mid, hi)
    return hi


def _check_design(m: int, r: int, delta: float, alpha: float) -> None:
    if _possible(m, r, delta, alpha):
        return
    r_needed, m_needed = min_guesses(m, delta, alpha), min_canaries(delta, alpha)
    if r_needed is not None:
        fix = f"guess on at least r = {r_needed} of these {m} canaries (k_plus + k_minus)"
    elif m_needed is not None:
        fix = f"use at least m = {m_needed} canaries and guess on all of them"
    else:
        fix = "no number of canaries is enough at this delta: audit a smaller delta"
    fewest = ("" if m_needed is None or r_needed is None else
              f"; the fewest canaries that can give a non-zero bound at this alpha and delta "
              f"is m = {m_needed} (all guessed, all right)")
    raise ConfigError(
        f"with m = {m} canaries and r = {r} guesses, even all-correct guesses give ε = 0 at "
        f"alpha = {alpha}, delta = {delta}: {fix}{fewest}"
    )


def one_run_epsilon_from_counts(m: int, r: int, v: int, delta: float = 0.0,
                                alpha: float = 0.05) -> OneRunBound:
    """The bound from m canaries, r guesses and v correct (module doc for the formulas)."""
    m = check_count(m, "m (canaries)", low=1)
    r = check_count(r, "r (guesses)", low=1, high=m,
                    hint=f": between 1 and the number of canaries m = {m}")
    v = check_count(v, "v (correct guesses)", high=r, hint=f" (out of r = {r} guesses)")
    delta, alpha = check_delta(delta), check_alpha(alpha)
    _check_design(m, r, delta, alpha)
    return OneRunBound(
        epsilon=_epsilon(m, r, v, delta, alpha),
        method="one-run" if delta == 0.0 else "one-run delta-corrected",
        alpha=alpha, delta=delta, m=m, k_plus=None, k_minus=None, guesses=r, correct=v,
    )


def one_run_epsilon(scores: ArrayLike, included: ArrayLike, k_plus: int, k_minus: int,
                    delta: float = 0.0, alpha: float = 0.05) -> OneRunBound:
    """Guess IN for the ``k_plus`` highest scores, OUT for the ``k_minus`` lowest, and bound ε.

    ``included[i]``: canary i was in the training set (drawn with probability ½, independently).
    ``k_plus`` and ``k_minus`` must be chosen in advance, never from ``included``. Ties at the
    cuts are broken by position (a stable sort): shuffle the canaries first if their order could
    carry membership.
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
    bound = one_run_epsilon_from_counts(m, k_plus + k_minus, v, delta, alpha)
    return dataclasses.replace(bound, k_plus=k_plus, k_minus=k_minus)
