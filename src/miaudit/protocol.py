"""Seeded splits: who trains on what, and which samples are evaluated.

Every dataset row used by a run has exactly one role:

- audit pool: the samples scored and evaluated (target members and non-members);
- public pool: attacker-owned data that reference and shadow models train on (never evaluated;
  thresholds and scorers are fitted here);
- population: attacker-owned data no model trains on (RMIA's z samples; never evaluated);
- canaries (optional, ``canaries.count``): rows for one-run auditing, each in the target's
  training set with probability ½ and in no reference's (never evaluated as audit samples).

Membership designs, registered by name (:func:`register_design`; ``design:`` in a run config):

- ``online`` (LiRA's balanced design): every audit and public sample is IN for exactly half of
  the M models, so any model can serve as target with the others as IN/OUT references;
- ``offline``: the target trains on a random half of the audit pool; each reference trains on
  its own random half of the public pool ("random sampling"), so every reference is OUT for
  every audit sample. With ``members`` (``split.members``), the target trains on that many
  audit rows instead (more non-members than members) and each reference on as many random
  public rows, so references train on as much data as the target.
- ``paired-halves``: every sample IN for exactly half of the models *and* every model IN on
  exactly half of the samples (the generalization study's many-model banks: equal training
  sets train stacked).

A design and the models' signals make a bank in one place: :meth:`Design.bank`
(:mod:`miaudit.signals.assemble`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from miaudit.errors import ConfigError
from miaudit.registry import Registry
from miaudit.signals.bank import SignalBank

if TYPE_CHECKING:  # the assembly imports torch: a config check needs the designs, not it
    from miaudit.signals.assemble import Signals

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Split:
    """Row indices (into the dataset) of each role; disjoint."""

    audit: np.ndarray
    public: np.ndarray
    population: np.ndarray
    canaries: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def rows(self) -> np.ndarray:
        """Dataset rows of the bank, in bank order: audit, public, population, canaries."""
        return np.concatenate([self.audit, self.public, self.population, self.canaries])


@dataclass(frozen=True)
class Design:
    """A split plus the membership of every model over the bank's rows."""

    split: Split
    membership: np.ndarray  # bool [M, len(split.rows)]
    kind: str
    target: int
    notes: tuple[str, ...] = ()  # warnings for the run's report (e.g. small references)

    @property
    def n_models(self) -> int:
        result: int = self.membership.shape[0]
        return result

    def _mask(self, start: int, size: int) -> np.ndarray:
        mask = np.zeros(self.membership.shape[1], dtype=bool)
        mask[start : start + size] = True
        return mask

    def audit_mask(self) -> np.ndarray:
        return self._mask(0, self.split.audit.size)

    def public_mask(self) -> np.ndarray:
        return self._mask(self.split.audit.size, self.split.public.size)

    def population_mask(self) -> np.ndarray:
        s = self.split
        return self._mask(s.audit.size + s.public.size, s.population.size)

    def canary_mask(self) -> np.ndarray:
        """bool [N]: the canary rows of the bank (the last ``split.canaries.size``)."""
        s = self.split
        return self._mask(s.audit.size + s.public.size + s.population.size, s.canaries.size)

    def canary_included(self) -> np.ndarray:
        """bool [m]: whether each canary is in the target's training set."""
        result: np.ndarray = self.membership[self.target][self.canary_mask()]
        return result

    def training_rows(self, model: int) -> np.ndarray:
        """Dataset row indices model `model` trains on (sorted)."""
        return np.sort(self.split.rows[self.membership[model]])

    def bank(self, signals: Signals, labels: np.ndarray,
             texts: np.ndarray | None = None) -> SignalBank:
        """The bank of the design's models' ``signals`` (queried on ``split.rows``);
        ``labels`` (and a text dataset's ``texts``) are the dataset's [n_rows]."""
        rows = self.split.rows
        from miaudit.signals.assemble import assemble_bank

        return assemble_bank(signals, np.asarray(labels)[rows], self.membership,
                             self.audit_mask(), self.population_mask(),
                             None if texts is None else np.asarray(texts)[rows],
                             canary=self.canary_mask() if self.split.canaries.size else None)


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
    canaries: int = 0,
) -> Split:
    """Seeded disjoint split of `n_rows` dataset rows into the three roles, and `canaries`
    rows outside them. The three pools do not depend on `canaries`: the canaries are the next
    rows of the same seeded order."""
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
    used = sum(sizes.values())
    if canaries > n_rows - used:
        raise ConfigError(
            f"canaries.count asks for {canaries} rows outside the audit, public and population "
            f"pools, but the dataset has {n_rows} rows and the pools take {used} "
            f"(audit {sizes['audit']}, public {sizes['public']}, population "
            f"{sizes['population']}): {n_rows - used} rows are free. Lower the split sizes "
            "(e.g. split.population) or canaries.count."
        )
    order = np.random.default_rng([seed, 1]).permutation(n_rows)
    a, p = sizes["audit"], sizes["public"]
    return Split(
        audit=order[:a],
        public=order[a : a + p],
        population=order[a + p : used],
        canaries=order[used : used + canaries],
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


def resolve_members(members: float | int, n_audit: int) -> int:
    """``split.members`` as a row count: a count, or a fraction of the audit pool; it must
    leave both members and non-members in the audit pool."""
    if isinstance(members, bool):  # a bool is an int to Python, not a count to a reader
        raise ConfigError(f"split.members must be a count or a fraction in (0, 1); got {members}.")
    n = _resolve_size(members, n_audit, "members")
    if not 1 <= n < n_audit:
        raise ConfigError(
            f"split.members is {members!r}: {n} of the {n_audit} audit rows; the target must "
            "train on at least 1 and fewer than all of them (non-members are the rest)."
        )
    return n


def _random_subsets(n_models: int, n_samples: int, size: int, rng: np.random.Generator
                    ) -> np.ndarray:  # fmt: skip
    """bool [M, N]: each model IN on its own random `size` of the samples."""
    membership = np.zeros((n_models, n_samples), dtype=bool)
    for m in range(n_models):
        membership[m, rng.permutation(n_samples)[:size]] = True
    return membership


@dataclass(frozen=True)
class DesignSpec:
    """A registered membership design: ``draw(split, n_models, target, members, seed)``
    returns the membership bool [M, len(split.rows)] (canary columns all OUT) and notes for
    the run's warnings. ``canaries``: whether the design's references leave the canaries out,
    so that the target alone may train on them (one-run auditing)."""

    name: str
    description: str
    draw: Callable[..., tuple[np.ndarray, list[str]]]
    canaries: bool = False


_DESIGNS: Registry[DesignSpec] = Registry(
    "design", ConfigError, unknown="design must be one of {known}; got '{name}'.{hint}",
    ordered=False,
)


def register_design(name: str, description: str, canaries: bool = False
                    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:  # fmt: skip
    """Register a membership design under ``name`` (run configs name it in ``design:``)."""
    return _DESIGNS.decorator(name, lambda draw: DesignSpec(name, description, draw, canaries))


def design_names() -> list[str]:
    return _DESIGNS.names()


def design_spec(name: str) -> DesignSpec:
    """The registered design ``name``; ConfigError naming the known ones (did you mean ...?)
    when there is none."""
    return _DESIGNS.get(name)


def supports_canaries(kind: str) -> bool:
    """Whether the registered design ``kind`` can hold canaries (False for an unknown one)."""
    return kind in _DESIGNS and _DESIGNS[kind].canaries


def include_canaries(membership: np.ndarray, split: Split, target: int, seed: int) -> None:
    """Put each canary in the target's training set independently with probability ½
    (seeded, its own stream: the pools' draws stay as they were without canaries)."""
    m = split.canaries.size
    start = split.rows.size - m
    rng = np.random.default_rng([seed, 3])
    membership[target, start:] = rng.random(m) < 0.5


def make_design(
    split: Split, n_models: int, kind: str, seed: int, target: int = 0,
    members: float | int | None = None,
) -> Design:  # fmt: skip
    """Membership of `n_models` models (target included) over the split's rows, drawn by the
    registered design `kind` (``online``, ``offline``, ``paired-halves``).

    `members` (offline only): how many audit rows the target trains on (a count or a fraction
    of the audit pool; None: a random half); each reference then trains on as many random
    public rows."""
    design = _DESIGNS.get(kind)
    if n_models < 1:
        raise ConfigError("models must be at least 1 (the target).")
    if not 0 <= target < n_models:
        raise ConfigError(f"target must be in 0..{n_models - 1}; got {target}.")
    if members is not None and kind != "offline":
        raise ConfigError(f"split.members sets the target's training rows of the offline design; "
                          f"the {kind} design trains every model on half of every sample: "
                          "remove split.members or use design: offline.")
    if split.canaries.size and not design.canaries:
        raise ConfigError(
            f"canaries need design: offline (the target alone trains on a random half of them; "
            f"references never do); the {kind} design is not supported yet."
        )
    membership, notes = design.draw(split, n_models, target, members, seed)
    if split.canaries.size:
        include_canaries(membership, split, target, seed)
    for note in notes:
        log.warning(note)
    return Design(split=split, membership=membership, kind=kind, target=target,
                  notes=tuple(notes))


@register_design("online", "LiRA's balanced design: every audit and public sample IN for "
                           "exactly half of the models")
def _online(split: Split, n_models: int, target: int, members: Any, seed: int
            ) -> tuple[np.ndarray, list[str]]:
    if n_models < 2:
        raise ConfigError("the online design needs at least 2 models (target + 1 reference).")
    n = split.audit.size + split.public.size
    membership = np.zeros((n_models, split.rows.size), dtype=bool)
    membership[:, :n] = balanced_membership(n_models, n, np.random.default_rng([seed, 2]))
    return membership, []


@register_design("offline", "the target on a random half (or split.members) of the audit "
                            "pool, each reference on its own random subset of the public pool",
                 canaries=True)
def _offline(split: Split, n_models: int, target: int, members: float | int | None, seed: int
             ) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng([seed, 2])
    n_audit, n_public = split.audit.size, split.public.size
    notes: list[str] = []
    membership = np.zeros((n_models, split.rows.size), dtype=bool)
    if n_models > 1 and n_public < 2:
        raise ConfigError(
            "the offline design trains reference models on the public pool; "
            "give split.public at least 2 samples (e.g. as many as split.audit)."
        )
    others = [m for m in range(n_models) if m != target]
    if members is None:  # today's draw, kept bit-identical (model cache keys depend on it)
        membership[target, :n_audit] = random_halves(1, n_audit, rng)[0]
        if others:
            membership[others, n_audit : n_audit + n_public] = random_halves(
                len(others), n_public, rng
            )
        if others and n_public // 2 < n_audit // 2:
            notes.append(_small_references(n_public // 2, n_audit // 2))
    else:
        size = resolve_members(members, n_audit)
        if others and n_public <= size:
            raise ConfigError(
                f"split.members: the target trains on {size} rows, so each reference model "
                f"needs {size} rows of the public pool and some left out, but split.public "
                f"has {n_public}. Give split.public more than {size} rows, or lower "
                "split.members."
            )
        membership[target, :n_audit] = _random_subsets(1, n_audit, size, rng)[0]
        if others:
            membership[others, n_audit : n_audit + n_public] = _random_subsets(
                len(others), n_public, size, rng
            )
    return membership, notes


def paired_membership(n_models: int, n_samples: int, seed: int) -> np.ndarray:
    """bool [M, N]: every sample IN for exactly M/2 models, every model IN on exactly N/2.

    Samples are paired at random; the first of each pair is IN for a random half of the
    models (LiRA's balanced design) and the second for the other half. Equal training-set
    sizes let the stacked trainer train all M models at once.
    """
    if n_models < 2 or n_models % 2:
        raise ConfigError(f"models must be an even number >= 2 (exact halves), got {n_models}.")
    if n_samples < 4 or n_samples % 2:
        raise ConfigError(f"pool must be an even number of samples >= 4, got {n_samples}.")
    rng = np.random.default_rng([seed, 2002])
    order = rng.permutation(n_samples)
    first, second = order[: n_samples // 2], order[n_samples // 2 :]
    half = balanced_membership(n_models, n_samples // 2, rng)
    membership = np.zeros((n_models, n_samples), dtype=bool)
    membership[:, first] = half
    membership[:, second] = ~half
    return membership


@register_design("paired-halves", "exact halves: every audit and public sample IN for exactly "
                                  "half of the models and every model IN on exactly half of "
                                  "them (even counts; stacks, see paired_membership)")
def _paired_halves(split: Split, n_models: int, target: int, members: Any, seed: int
                   ) -> tuple[np.ndarray, list[str]]:
    n = split.audit.size + split.public.size
    membership = np.zeros((n_models, split.rows.size), dtype=bool)
    membership[:, :n] = paired_membership(n_models, n, seed)
    return membership, []


def _small_references(ref_rows: int, target_rows: int) -> str:
    return (f"reference models train on {ref_rows} rows (half of split.public), the target on "
            f"{target_rows} (half of split.audit): references trained on less data than the "
            "target overfit differently and calibrate reference attacks less well. Give "
            "split.public at least as many rows as split.audit (or set split.members).")
