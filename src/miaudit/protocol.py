"""Seeded splits: who trains on what, and which samples are evaluated.

Every dataset row used by a run has exactly one role:

- audit pool: the samples scored and evaluated (target members and non-members);
- public pool: attacker-owned data that reference and shadow models train on (never evaluated;
  thresholds and scorers are fitted here);
- population: attacker-owned data no model trains on (RMIA's z samples; never evaluated).

Two membership designs:

- ``online`` (LiRA's balanced design): every audit and public sample is IN for exactly half of
  the M models, so any model can serve as target with the others as IN/OUT references;
- ``offline``: the target trains on a random half of the audit pool; each reference trains on
  its own random half of the public pool ("random sampling"), so every reference is OUT for
  every audit sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from miaudit.errors import ConfigError

DESIGNS = ("online", "offline")


@dataclass(frozen=True)
class Split:
    """Row indices (into the dataset) of each role; disjoint."""

    audit: np.ndarray
    public: np.ndarray
    population: np.ndarray

    @property
    def rows(self) -> np.ndarray:
        """Dataset rows of the bank, in bank order: audit, then public, then population."""
        return np.concatenate([self.audit, self.public, self.population])


@dataclass(frozen=True)
class Design:
    """A split plus the membership of every model over the bank's rows."""

    split: Split
    membership: np.ndarray  # bool [M, len(split.rows)]
    kind: str
    target: int

    @property
    def n_models(self) -> int:
        return self.membership.shape[0]

    def audit_mask(self) -> np.ndarray:
        mask = np.zeros(self.membership.shape[1], dtype=bool)
        mask[: self.split.audit.size] = True
        return mask

    def population_mask(self) -> np.ndarray:
        mask = np.zeros(self.membership.shape[1], dtype=bool)
        mask[self.split.audit.size + self.split.public.size :] = True
        return mask

    def training_rows(self, model: int) -> np.ndarray:
        """Dataset row indices model `model` trains on (sorted)."""
        return np.sort(self.split.rows[self.membership[model]])


def _resolve_size(value: float | int, total: int, name: str) -> int:
    if isinstance(value, float) and 0 < value < 1:
        return int(round(value * total))
    if isinstance(value, (int, np.integer)) and value >= 0:
        return int(value)
    raise ConfigError(
        f"split.{name} must be a count (integer >= 0) or a fraction in (0, 1); got {value!r}."
    )


def make_split(
    n_rows: int,
    audit: float | int,
    public: float | int,
    population: float | int,
    seed: int,
) -> Split:
    """Seeded disjoint split of `n_rows` dataset rows into the three roles."""
    sizes = {
        "audit": _resolve_size(audit, n_rows, "audit"),
        "public": _resolve_size(public, n_rows, "public"),
        "population": _resolve_size(population, n_rows, "population"),
    }
    if sum(sizes.values()) > n_rows:
        raise ConfigError(
            f"split sizes {sizes} add up to {sum(sizes.values())} but the dataset has only "
            f"{n_rows} rows; lower them."
        )
    if sizes["audit"] < 2:
        raise ConfigError("split.audit must hold at least 2 samples (members and non-members).")
    order = np.random.default_rng([seed, 1]).permutation(n_rows)
    a, p = sizes["audit"], sizes["public"]
    return Split(
        audit=order[:a],
        public=order[a : a + p],
        population=order[a + p : a + p + sizes["population"]],
    )


def balanced_membership(n_models: int, n_samples: int, rng: np.random.Generator) -> np.ndarray:
    """bool [M, N] with every column IN for exactly floor(M/2) models (LiRA's design)."""
    ranks = rng.random((n_models, n_samples)).argsort(axis=0).argsort(axis=0)
    return ranks < n_models // 2


def random_halves(n_models: int, n_samples: int, rng: np.random.Generator) -> np.ndarray:
    """bool [M, N]: each model IN on its own random half of the samples."""
    membership = np.zeros((n_models, n_samples), dtype=bool)
    for m in range(n_models):
        membership[m, rng.permutation(n_samples)[: n_samples // 2]] = True
    return membership


def make_design(split: Split, n_models: int, kind: str, seed: int, target: int = 0) -> Design:
    """Membership of `n_models` models (target included) over the split's rows."""
    if kind not in DESIGNS:
        raise ConfigError(f"design must be one of {DESIGNS}; got '{kind}'.")
    if n_models < 1:
        raise ConfigError("models must be at least 1 (the target).")
    if not 0 <= target < n_models:
        raise ConfigError(f"target must be in 0..{n_models - 1}; got {target}.")
    rng = np.random.default_rng([seed, 2])
    n_audit, n_public = split.audit.size, split.public.size
    n_rows = split.rows.size
    membership = np.zeros((n_models, n_rows), dtype=bool)
    if kind == "online":
        if n_models < 2:
            raise ConfigError("the online design needs at least 2 models (target + 1 reference).")
        membership[:, : n_audit + n_public] = balanced_membership(
            n_models, n_audit + n_public, rng
        )
    else:
        if n_models > 1 and n_public < 2:
            raise ConfigError(
                "the offline design trains reference models on the public pool; "
                "give split.public at least 2 samples (e.g. as many as split.audit)."
            )
        membership[target, :n_audit] = random_halves(1, n_audit, rng)[0]
        others = [m for m in range(n_models) if m != target]
        if others:
            membership[others, n_audit : n_audit + n_public] = random_halves(
                len(others), n_public, rng
            )
    return Design(split=split, membership=membership, kind=kind, target=target)
