"""Reference models whose membership says nothing about the target's (docs/algorithms.md §11).

In a balanced design (LiRA's online design, paired halves, a LiRA ``keep.npy``) every sample of
a pool is IN for exactly k of the models whose membership varies on that pool. With the target
among them, the other models' IN count is ``k - 1`` for a target member and ``k`` for a
non-member: the attacker, who knows the references' membership, reads the target's off it
without querying the target. Per-side means and spreads estimated from one sample fewer, a
"no IN reference" indicator, or a scorer trained on leave-one-out shadow views of the same
matrix all carry it (Jälkö et al., 2026, report the same effect in the common efficient LiRA
evaluation).

The cure, per sample of such a pool: set one other model aside (it is neither IN nor OUT for
that sample in the view) — a random OUT one when the target is IN, a random IN one when it is
OUT. What is left is a uniformly random set of the others with a uniformly random ``k - 1`` of
them IN, whatever the target's membership: when the matrix was drawn exchangeably (random
ranks, as every balanced design here and LiRA's code draw it), for every visible outcome
(set-aside model a, IN set S) a member gives ``1 / C(P-1, k-1) * 1 / (P-k)`` and a non-member
``1 / C(P-1, k) * 1 / k``, the same number. Models that no balanced pool involves (offline
references, forgetting copies: constant on the pool) are never set aside, and pools whose
sums vary (independent draws, the offline target's half) need nothing. A pool counts as
balanced when at least 90% of its samples share one IN count (:data:`BALANCED_SHARE`); a sample
edited apart from that count keeps all its references.

The same rule applies again in every shadow view (a reference playing target, the real target
excluded): the available models' sum is then ``k - 1`` on every sample, so a scorer trained on
shadows never learns the count either. Everything is seeded by the view (its target and
shadow), so a view is the same on every run, and drawn from each sample's own outputs (a
fingerprint of the models' plain-query logits of its label), so that two samples identical in
every way have the same model set aside and score the same; the target's own outputs are left
out, so what it outputs never moves the draw. Under the null (outputs independent of
membership) that draw is uniform and independent of the target's membership.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_SEED = 20261127  # the set-aside draws' own stream; a view adds its target (and shadow)
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
# A pool is balanced when at least this share of its samples have the same IN count over the
# models that vary on it: all of them in a balanced design, about 1/sqrt(M) in an independent
# one (C(M, M/2) / 2^M: 20% at M = 16, 50% at M = 2).
BALANCED_SHARE = 0.9


def fingerprints(logits: np.ndarray, labels: np.ndarray, target: int) -> np.ndarray:
    """uint64 [N]: a hash of every model's plain-query logit of each sample's label but the
    target's (equal for samples equal in every way, whatever the target outputs; O(M N))."""
    n_models, n_samples = logits.shape[:2]
    rows = np.arange(n_samples)
    values = np.zeros((n_models, n_samples), dtype=np.float64)
    for m in range(n_models):  # one model at a time: no [M, N, C] temporary
        if m != target:
            values[m] = logits[m, rows, 0, labels]
    bits = values.view(np.uint64)
    weights = _splitmix(np.arange(1, n_models + 1, dtype=np.uint64))[:, None] | np.uint64(1)
    with np.errstate(over="ignore"):
        mixed = (bits * weights).sum(axis=0, dtype=np.uint64)
    return _splitmix(mixed ^ labels.astype(np.uint64))


def _splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        result: np.ndarray = x ^ (x >> np.uint64(31))
        return result


def _uniforms(sample_keys: np.ndarray, seed: tuple[int, ...]) -> np.ndarray:
    """float64 [len(sample_keys)] in [0, 1): one uniform per sample, for the view ``seed``."""
    salt = np.uint64(int(np.random.default_rng([_SEED, *seed]).integers(0, 2**63)))
    keys = _splitmix(sample_keys ^ salt)
    result: np.ndarray = (keys >> np.uint64(11)).astype(np.float64) / float(2**53)
    return result


@dataclass(frozen=True)
class Pools:
    """The samples' pools and which models vary on each: what decides a balanced pool.

    ``pool`` int [N]: the pool of each sample (audit, public, population, canary);
    ``varies`` bool [P, M]: model m is IN for some but not all samples of pool p."""

    pool: np.ndarray
    varies: np.ndarray

    @classmethod
    def of(cls, membership: np.ndarray, audit: np.ndarray, population: np.ndarray,
           canary: np.ndarray) -> Pools:
        """From the bank's full membership [M, N] and its role masks [N]."""
        pool = np.where(audit, 0, np.where(population, 2, np.where(canary, 3, 1)))
        varies = np.zeros((4, membership.shape[0]), dtype=bool)
        for p in range(4):
            cols = membership[:, pool == p]
            if cols.shape[1]:
                varies[p] = cols.any(axis=1) & ~cols.all(axis=1)
        return cls(pool.astype(np.int8), varies)


def set_aside(membership: np.ndarray, available: np.ndarray, target: int, pools: Pools,
              sample_keys: np.ndarray, seed: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The models available to a view whose (pseudo-)target is ``target``.

    ``membership`` bool [M, N]: every model's membership as the view may know it (hidden
    entries False); ``available`` bool [M, N]: the models the view may use per sample (the
    target's row is ignored); ``sample_keys`` uint64 [N], :func:`fingerprints`; ``seed``
    names the view (its target, its shadow). Returns ``(available, balanced)``: the new
    availability, with one other model set aside on each sample of a balanced pool, and
    bool [N], the samples where one was. A sample where the target itself is not available is
    left as it is (its membership is unknown to the view and it is never labelled)."""
    n_models, n_samples = membership.shape
    available = available.copy()
    balanced = np.zeros(n_samples, dtype=bool)
    t_in = membership[target]
    own = available[target]
    for p in np.unique(pools.pool):
        varies = pools.varies[p]
        if not varies[target]:
            continue  # the target's membership is constant on this pool: nothing to read
        cols = np.flatnonzero((pools.pool == p) & own)
        if cols.size < 2:
            continue
        involved = available[:, cols] & varies[:, None]
        involved[target] = True
        total = (membership[:, cols] & involved).sum(axis=0)
        values, counts = np.unique(total, return_counts=True)
        common = values[counts.argmax()]
        if counts.max() < BALANCED_SHARE * cols.size:
            continue  # sums vary (an independent draw): the others say nothing already
        # the samples of the design's common sum (all of them in a balanced design; a sample
        # edited apart keeps its references, and says what it says on its own)
        keep = (total == common) & (total > 0) & (total < involved.sum(axis=0))
        cols, involved = cols[keep], involved[:, keep]
        if cols.size == 0:
            continue
        # one other model per sample on the side opposite the target's, uniformly at random
        candidates = involved & (membership[:, cols] != t_in[cols])
        candidates[target] = False
        # the j-th candidate in model order, j uniform: each candidate with probability 1/c
        count = candidates.sum(axis=0)
        j = np.minimum((_uniforms(sample_keys[cols], (*seed, int(p))) * count).astype(np.int64),
                       count - 1)
        chosen = (np.cumsum(candidates, axis=0, dtype=np.int32) > j).argmax(axis=0)
        available[chosen, cols] = False
        balanced[cols] = True
    return available, balanced
