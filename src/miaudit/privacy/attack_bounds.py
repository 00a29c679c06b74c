"""ε and μ-GDP lower bounds for every attack of a run, and the best of them
(docs/algorithms.md §16).

:class:`EpsilonPlan` fixes, before any attack is scored, everything the bounds rest on: δ (the
target's DP-SGD δ, else ``metrics.epsilon_delta``), α, the seeded halves of the audit samples
(τ is chosen on the selection half and counted on the other, never on the counted samples)
and, with canaries, their inclusion, halves and the (k₊, k₋) guesses. ``plan.bounds(scores)``
gives one attack's metrics entries (:mod:`miaudit.privacy.results`), vectorised by
:mod:`miaudit.privacy`: the threshold ε bound and the μ-GDP bound (Nasr et al. 2023) of each
set of halves, each with its own τ chosen on the same selection half. :func:`privacy_audit`
names the best ε bound of all attacks, every bound recounted at α / K (Bonferroni over the K
bounds compared), so that the best holds at 1 − α, and the best μ bound the same way over
the μ bounds; it reads only the metrics dicts, so a caller can call it again after adding
outcomes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from miaudit.config import CanariesConfig, MetricsConfig
from miaudit.errors import ConfigError
from miaudit.privacy import (
    clopper_pearson_upper,
    epsilon_from_counts,
    gaussian_dp_from_counts,
    mu_array,
    mu_from_rates,
    one_run_epsilon,
    one_run_epsilon_from_counts,
    split_halves,
)
from miaudit.privacy.bounds import best_threshold, count_at, epsilon_from_rates
from miaudit.privacy.canaries import resolve_guesses
from miaudit.privacy.results import (
    CANARY_EPSILON_LOWER_BOUND,
    CANARY_GAUSSIAN_DP_LOWER_BOUND,
    EPSILON_LOWER_BOUND,
    EPSILON_TYPES,
    EVIDENCE_AGAINST,
    GAUSSIAN_DP_LOWER_BOUND,
    NOT_EXCEEDED,
    ONE_RUN,
    REFUTED,
    WITHHELD,
    GuessCandidate,
    OneRunEpsilon,
    ThresholdEpsilon,
    ThresholdGaussianDP,
)
from miaudit.records.outcomes import AttackOutcome
from miaudit.signals import SignalBank

# keys privacy_audit computes; the rest of meta["privacy_audit"] is the plan's settings
SUMMARY_KEYS = ("bounds_compared", "best", "exceeds_claim", "refutes_claim", "claim_finding",
                "mu_bounds_compared", "best_mu")
# who assigned the audit samples' membership (EpsilonPlan.membership): a threshold bound on
# them is a proof only when miaudit drew it at random itself
MEMBERSHIP_SOURCES = ("miaudit", "user", "unknown")
MODEL_FREE_REASON = ("a model-free attack: it never reads the model, so it bounds nothing "
                     "about it; a score above chance means the split itself differs")


def split_seed(seed: int, stream: int) -> int:
    """The seed of ``split_halves`` for a run seed (stream 0: audit samples, 1: canaries),
    recorded with every bound so that anyone can redo the halves."""
    return int(np.random.SeedSequence([seed, 16, stream]).generate_state(1)[0])


def claim_of(target_privacy: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The (ε, δ) claim of a DP-SGD target's privacy record (``epsilon_spent`` as Opacus's
    accountant computed it, or a plain ``epsilon``), None without one."""
    if not target_privacy:
        return None
    eps = target_privacy.get("epsilon_spent", target_privacy.get("epsilon"))
    if eps is None or target_privacy.get("delta") is None:
        return None
    claim = {"epsilon": float(eps), "delta": float(target_privacy["delta"])}
    for key in ("target_epsilon", "accountant"):
        if target_privacy.get(key) is not None:
            claim[key] = target_privacy[key]
    return claim


@dataclass(frozen=True)
class Halves:
    """The seeded halves of one set of samples (:func:`miaudit.privacy.split_halves`), and the
    objectives that pick τ on the selection half (ε's, and μ's for the Gaussian-DP bound).

    The objective is :func:`miaudit.privacy.choose_threshold`'s, with the Clopper–Pearson
    bounds of every possible count tabulated once (n₀ + n₁ + 2 quantiles) instead of twice
    per candidate τ: every attack of a run shares the halves, so the scipy quantiles are paid
    once per run, not once per attack (on 100,000 audit samples about 0.2 s an attack). It
    picks exactly choose_threshold's τ (tests/pipeline/test_epsilon_bounds.py)."""

    select: np.ndarray  # sample indices whose scores choose τ
    count: np.ndarray  # sample indices counted at τ
    fpr_upper: np.ndarray  # [n₀ + 1]: FPR⁺ of each possible count of false positives
    fnr_upper: np.ndarray  # [n₁ + 1]
    seed: int
    delta: float
    alpha: float

    @classmethod
    def of(cls, flags: np.ndarray, seed: int, delta: float, alpha: float) -> Halves:
        select, count = split_halves(flags, seed)
        n1 = int(flags[select].sum())
        n0 = int(select.size - n1)
        level = 1.0 - alpha / 2  # as epsilon_array: each rate at 1 − α/2, both at 1 − α
        return cls(select, count, np.asarray(clopper_pearson_upper(np.arange(n0 + 1), n0, level)),
                   np.asarray(clopper_pearson_upper(np.arange(n1 + 1), n1, level)), seed,
                   delta, alpha)

    def objective(self, fp: np.ndarray, n0: int, fn: np.ndarray, n1: int) -> np.ndarray:
        """privacy.epsilon_array(fp, n0, fn, n1, δ, α) from the tables."""
        return epsilon_from_rates(self.fpr_upper[fp], self.fnr_upper[fn], self.delta)

    def mu_objective(self, fp: np.ndarray, n0: int, fn: np.ndarray, n1: int) -> np.ndarray:
        """privacy.mu_array(fp, n0, fn, n1, α) from the same tables (the level is the same,
        1 − α/2 per rate): picks gaussian_dp_lower_bound's τ."""
        return mu_from_rates(self.fpr_upper[fp], self.fnr_upper[fn])


def _halves(flags: np.ndarray, seed: int, delta: float, alpha: float
            ) -> tuple[Halves | None, str]:  # fmt: skip
    try:
        return Halves.of(flags, seed, delta, alpha), ""
    except ConfigError as exc:  # too few members or non-members: recorded, never fatal
        return None, str(exc)


def _scorable(scores: np.ndarray) -> tuple[np.ndarray, int]:
    """NaN scores as -inf (the metrics' rule: ranked lowest, never predicted member), and how
    many there were."""
    nan = np.isnan(scores)
    return np.where(nan, -np.inf, scores), int(nan.sum())


def _halves_record(record: type, objective: Callable[..., np.ndarray],
                   from_counts: Callable[..., Any], scores: np.ndarray, flags: np.ndarray,
                   halves: Halves | None, why_not: str) -> dict[str, Any]:
    """The metrics entry of one bound on ``halves`` (at its δ and α): τ maximises
    ``objective(halves, fp, n0, fn, n1)`` on ``halves.select``, then ``from_counts`` bounds
    FP and FN counted on ``halves.count`` (never on the samples that chose τ)."""
    if halves is None:
        return record(None, reason=why_not).to_dict()
    s, unscorable = _scorable(np.asarray(scores, dtype=np.float64))
    if unscorable == s.size:
        return record(None, reason="the attack scored no sample").to_dict()
    select, count = halves.select, halves.count
    try:
        tau = best_threshold(s[select], flags[select], partial(objective, halves))
        fp, n0, fn, n1 = count_at(tau, s[count], flags[count])
        bound = from_counts(fp, n0, fn, n1, halves.delta, halves.alpha, threshold=tau)
    except ConfigError as exc:
        return record(None, reason=str(exc)).to_dict()
    chosen = flags[select]
    return record(bound, halves.seed, int(chosen.sum()), int((~chosen).sum()),
                  unscorable).to_dict()


def threshold_record(scores: np.ndarray, flags: np.ndarray, halves: Halves | None,
                     why_not: str = "") -> dict[str, Any]:
    """The threshold bound's metrics entry at the halves' δ and α: τ chosen on
    ``halves.select``, FP and FN counted on ``halves.count`` (never on the samples that chose
    τ); ``why_not`` the reason when there are no halves."""
    return _halves_record(ThresholdEpsilon, Halves.objective, epsilon_from_counts, scores,
                          flags, halves, why_not)


def gaussian_dp_record(scores: np.ndarray, flags: np.ndarray, halves: Halves | None,
                       why_not: str = "") -> dict[str, Any]:
    """The μ-GDP bound's metrics entry, under :func:`threshold_record`'s rules (the same
    halves, δ and α): τ maximising μ on ``halves.select``, μ and its ε at δ from FP and FN
    counted on ``halves.count``, i.e. ``privacy.gaussian_dp_lower_bound`` on the two halves.
    The halves' δ must be > 0 (μ-GDP has no finite ε at δ = 0)."""
    return _halves_record(ThresholdGaussianDP, Halves.mu_objective, gaussian_dp_from_counts,
                          scores, flags, halves, why_not)


def one_run_record(scores: np.ndarray, included: np.ndarray, candidates: Sequence[tuple[int, int]],
                   delta: float, alpha: float) -> dict[str, Any]:
    """The one-run metrics entry: each (k₊, k₋) candidate at α / len(candidates), the best
    reported (Bonferroni: it holds at 1 − α)."""
    s, unscorable = _scorable(np.asarray(scores, dtype=np.float64))
    each = alpha / len(candidates)
    found, reasons = [], []
    for k_plus, k_minus in candidates:  # a handful of pairs fixed in advance
        try:
            bound = one_run_epsilon(s, included, k_plus, k_minus, delta, each)
        except ConfigError as exc:
            reasons.append(str(exc))
            found.append((GuessCandidate(k_plus, k_minus, None, None), None))
            continue
        found.append((GuessCandidate(k_plus, k_minus, bound.correct, bound.epsilon), bound))
    bounds = [b for _, b in found if b is not None]
    if not bounds:
        return OneRunEpsilon(None, reason=reasons[0]).to_dict()
    best = max(bounds, key=lambda b: b.epsilon)  # ties: the first candidate
    return OneRunEpsilon(best, tuple(c for c, _ in found), alpha, int(included.sum()),
                         unscorable).to_dict()


@dataclass(frozen=True)
class EpsilonPlan:
    """What one target's bounds rest on, fixed before any attack is scored."""

    alpha: float
    delta: float
    delta_source: str
    claim: dict[str, Any] | None
    seed: int  # split_halves seed of the audit samples
    audit: np.ndarray  # bool [N]
    members: np.ndarray  # bool [n_audit]
    halves: Halves | None
    why_not: str
    canary: np.ndarray | None = None  # bool [N]; None: no canaries
    included: np.ndarray | None = None  # bool [m]
    candidates: tuple[tuple[int, int], ...] = ()
    canary_alpha: float = 0.05
    canary_delta: float = 0.0
    canary_delta_source: str = ""
    canary_seed: int = 0
    canary_halves: Halves | None = None
    canary_why_not: str = ""
    membership: str = "unknown"  # who drew the audit samples' membership (MEMBERSHIP_SOURCES)

    @classmethod
    def of(cls, bank: SignalBank, target: int, metric_cfg: MetricsConfig, seed: int,
           target_privacy: Mapping[str, Any] | None = None,
           canaries: CanariesConfig | None = None, membership: str = "unknown") -> EpsilonPlan:
        """``membership``: "miaudit" when miaudit drew the audit samples' membership at
        random (a run's design), "user" when the user gave it (`miaudit audit`), "unknown"
        (a bare bank)."""
        if membership not in MEMBERSHIP_SOURCES:
            raise ValueError(f"membership must be one of {MEMBERSHIP_SOURCES}; got "
                             f"{membership!r}")
        claim = claim_of(target_privacy)
        delta, source = ((claim["delta"], "the target's DP-SGD delta") if claim else
                         (metric_cfg.epsilon_delta, "metrics.epsilon_delta"))
        members = bank.membership[target][bank.audit]
        audit_seed = split_seed(seed, 0)
        halves, why_not = _halves(members, audit_seed, float(delta), metric_cfg.epsilon_alpha)
        plan = dict(alpha=metric_cfg.epsilon_alpha, delta=float(delta), delta_source=source,
                    claim=claim, seed=audit_seed, audit=bank.audit, members=members,
                    halves=halves, why_not=why_not, membership=membership)
        if bank.canary is None or not bank.canary.any():
            return cls(**plan)
        canaries = canaries or CanariesConfig()
        included = bank.membership[target][bank.canary]
        c_delta, c_source = ((canaries.delta, "canaries.delta") if canaries.delta is not None
                             else (delta, source))
        c_seed = split_seed(seed, 1)
        c_halves, c_why = _halves(included, c_seed, float(c_delta), canaries.alpha)
        return cls(**plan, canary=bank.canary, included=included,
                   candidates=tuple(resolve_guesses(canaries.guesses, int(included.size))),
                   canary_alpha=canaries.alpha, canary_delta=float(c_delta),
                   canary_delta_source=c_source, canary_seed=c_seed, canary_halves=c_halves,
                   canary_why_not=c_why)

    def bounds(self, scores: np.ndarray) -> dict[str, dict[str, Any]]:
        """One attack's entries for its metrics dict, from its scores on every bank sample.
        The μ-GDP entries only at δ > 0: at δ = 0 a μ-GDP mechanism has no finite ε."""
        on = scores[self.audit]
        entries = {EPSILON_LOWER_BOUND: threshold_record(
            on, self.members, self.halves, self.why_not)}
        if self.delta > 0:
            entries[GAUSSIAN_DP_LOWER_BOUND] = gaussian_dp_record(
                on, self.members, self.halves, self.why_not)
        if self.canary is not None:
            on = scores[self.canary]
            entries[CANARY_EPSILON_LOWER_BOUND] = threshold_record(
                on, self.included, self.canary_halves, self.canary_why_not)
            if self.canary_delta > 0:
                entries[CANARY_GAUSSIAN_DP_LOWER_BOUND] = gaussian_dp_record(
                    on, self.included, self.canary_halves, self.canary_why_not)
            entries[ONE_RUN] = one_run_record(on, self.included, self.candidates,
                                              self.canary_delta, self.canary_alpha)
        return entries

    def keys(self) -> list[str]:
        """The metrics keys :meth:`bounds` fills, in its order."""
        keys = [EPSILON_LOWER_BOUND] + ([GAUSSIAN_DP_LOWER_BOUND] if self.delta > 0 else [])
        if self.canary is not None:
            keys.append(CANARY_EPSILON_LOWER_BOUND)
            keys += [CANARY_GAUSSIAN_DP_LOWER_BOUND] if self.canary_delta > 0 else []
            keys.append(ONE_RUN)
        return keys

    def no_bounds(self, reason: str) -> dict[str, dict[str, Any]]:
        """The entries of :meth:`bounds`, each without a bound and with ``reason`` (a
        model-free attack, which bounds nothing about the model)."""
        return {key: EPSILON_TYPES[key](None, reason=reason).to_dict() for key in self.keys()}

    def settings(self) -> dict[str, Any]:
        """The plan for meta["privacy_audit"] (JSON-ready). ``split_shifted`` is None until
        the caller records the split check (:func:`privacy_audit` withholds a refutation
        when it is True)."""
        out: dict[str, Any] = {
            "claimed": self.claim, "alpha": self.alpha, "delta": self.delta,
            "delta_source": self.delta_source, "split_seed": self.seed, "canaries": None,
            "membership": self.membership, "split_shifted": None,
        }
        if self.canary is not None:
            out["canaries"] = {
                "count": int(self.included.size), "included": int(self.included.sum()),
                "alpha": self.canary_alpha, "delta": self.canary_delta,
                "delta_source": self.canary_delta_source, "split_seed": self.canary_seed,
                "guesses": [{"k_plus": p, "k_minus": m} for p, m in self.candidates],
            }
        return out


def _tests(outcome: AttackOutcome) -> int:
    """How many tests the bounds of ``outcome`` are: one per threshold bound, one per
    (k₊, k₋) candidate of its one-run bound."""
    m = outcome.summary
    records = [getattr(m, key) for key in (EPSILON_LOWER_BOUND, CANARY_EPSILON_LOWER_BOUND)]
    n = sum(1 for r in records if r is not None and r.bound is not None)
    if m.one_run is not None and m.one_run.bound is not None:
        n += len(m.one_run.candidates)
    return n


def _recounted(outcome: AttackOutcome, alpha: float) -> list[dict[str, Any] | None]:
    """Each bound of ``outcome`` recomputed at ``alpha`` from its counts (τ stays the one its
    selection half chose; k₊, k₋ stay fixed); None for a one-run bound no candidate of which
    can certify ε > 0 at that α."""
    found: list[dict[str, Any] | None] = []
    m = outcome.summary
    for key in (EPSILON_LOWER_BOUND, CANARY_EPSILON_LOWER_BOUND):
        record = getattr(m, key)
        if record is None or record.bound is None:
            continue
        b = record.bound
        again = epsilon_from_counts(b.fp, b.n_nonmembers, b.fn, b.n_members, b.delta, alpha,
                                    b.threshold)
        found.append({**again.to_dict(), "attack": outcome.name, "bound": key})
    record = m.one_run
    if record is not None and record.bound is not None:
        b, best = record.bound, None
        for c in record.candidates:
            if c.correct is None:
                continue
            try:
                again = one_run_epsilon_from_counts(b.m, c.k_plus + c.k_minus, c.correct,
                                                    b.delta, alpha)
            except ConfigError:  # this pair cannot certify ε > 0 at the stricter α
                continue
            if best is None or again.epsilon > best["epsilon"]:
                best = {**again.to_dict(), "k_plus": c.k_plus, "k_minus": c.k_minus,
                        "attack": outcome.name, "bound": ONE_RUN}
        found.append(best)
    return found


def _gaussian_dp_bounds(outcome: AttackOutcome) -> list[tuple[str, Any]]:
    """(metrics key, GaussianDPBound) of each μ-GDP bound of ``outcome``."""
    m = outcome.summary
    records = ((key, getattr(m, key))
               for key in (GAUSSIAN_DP_LOWER_BOUND, CANARY_GAUSSIAN_DP_LOWER_BOUND))
    return [(key, r.bound) for key, r in records if r is not None and r.bound is not None]


def _best_mu(outcomes: Sequence[AttackOutcome], alpha: float) -> tuple[int, dict[str, Any] | None]:
    """The number K of μ-GDP bounds and the largest, each recounted at α / K from its counts
    (τ as its selection half chose it), so that it holds at 1 − α: the ε rule of
    :func:`privacy_audit` applied to μ. Ties: the first."""
    found = [(o.name, key, b) for o in outcomes for key, b in _gaussian_dp_bounds(o)]
    if not found:
        return 0, None
    k = len(found)
    mus = [float(mu_array(b.fp, b.n_nonmembers, b.fn, b.n_members, alpha / k))
           for _, _, b in found]
    name, key, b = found[int(np.argmax(mus))]
    # only the best's ε (a root search) is computed
    again = gaussian_dp_from_counts(b.fp, b.n_nonmembers, b.fn, b.n_members, b.delta,
                                    alpha / k, b.threshold)
    return k, {**again.to_dict(), "attack": name, "bound": key, "family_alpha": alpha}


def privacy_audit(outcomes: Sequence[AttackOutcome], settings: Mapping[str, Any]
                  ) -> dict[str, Any]:  # fmt: skip
    """``settings`` (an :meth:`EpsilonPlan.settings`, or a previous result of this function)
    with the best bound of all ``outcomes``: each of the K tests (a threshold bound is one;
    a one-run bound one per (k₊, k₋) candidate) recounted at α / K, the largest kept, so it
    holds at 1 − α (union bound); and what it says of the target's claim (``claim_finding``
    of :func:`claim_finding`; ``exceeds_claim``: above it at a δ no smaller than the
    claim's; ``refutes_claim``: above it with a proof and no shifted split). Then the best
    μ-GDP bound (``best_mu``), the same rule over the ``mu_bounds_compared`` μ bounds: a
    family of its own, so each best holds at 1 − α on its own (both together at 1 − 2α); its
    ε is an estimate and refutes nothing. Model-free attacks have no bounds
    (:data:`MODEL_FREE_REASON`), so they never count here."""
    out = {k: v for k, v in settings.items() if k not in SUMMARY_KEYS}
    alpha = float(out["alpha"])
    k = sum(_tests(o) for o in outcomes)
    best = None
    if k:
        for bound in (b for o in outcomes for b in _recounted(o, alpha / k)):
            if bound is not None and (best is None or bound["epsilon"] > best["epsilon"]):
                best = bound
    if best is not None:
        best["family_alpha"] = alpha
    finding = claim_finding(out, best)
    exceeds = None if finding is None else finding != NOT_EXCEEDED
    k_mu, best_mu = _best_mu(outcomes, alpha)
    return {**out, "bounds_compared": k, "best": best, "exceeds_claim": exceeds,
            "refutes_claim": None if finding is None else finding == REFUTED,
            "claim_finding": finding, "mu_bounds_compared": k_mu, "best_mu": best_mu}


def rests_on_proof(bound: str, membership: str | None) -> bool:
    """Whether a bound of type ``bound`` (a metrics key) is covered by a proof: the canary
    bounds always (miaudit drew each canary's inclusion with probability ½), the threshold
    bounds on the audit samples only when miaudit drew their membership at random itself (a
    run's design); on a split the user gave they assume it was drawn at random."""
    return bound != EPSILON_LOWER_BOUND or membership == "miaudit"


def claim_finding(settings: Mapping[str, Any], best: Mapping[str, Any] | None) -> str | None:
    """What the best bound says of the target's DP claim (None without a claim or a bound):
    :data:`NOT_EXCEEDED`; :data:`WITHHELD` when it exceeds the claim but the split check
    tells members from non-members without the model (the bound may measure the split, not
    the model); :data:`REFUTED` when it exceeds it and rests on a proof
    (:func:`rests_on_proof`); else :data:`EVIDENCE_AGAINST` (valid if the members were
    chosen at random)."""
    claim = settings.get("claimed")
    if not claim or best is None:
        return None
    if not (best["epsilon"] > claim["epsilon"] and best["delta"] >= claim["delta"]):
        return NOT_EXCEEDED
    if settings.get("split_shifted"):
        return WITHHELD
    return REFUTED if rests_on_proof(best["bound"], settings.get("membership")) else (
        EVIDENCE_AGAINST)
