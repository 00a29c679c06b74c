"""A run's privacy audit, typed (docs/algorithms.md §16): what every bound rests on (the
target's claim, α, δ, the halves' seed, the canaries), the Bonferroni best ε bound of all
attacks and what it says of the claim, and the best μ-GDP bound.

:func:`miaudit.privacy.best_bound.privacy_audit` builds a :class:`PrivacyAudit` once, from the
:class:`PrivacySettings` of :meth:`miaudit.privacy.attack_bounds.EpsilonPlan.settings` and the
attacks' bounds; ``result.meta["privacy_audit"]`` holds it, the report words it
(:mod:`miaudit.privacy.sections`) and summary.json's ``privacy_audit`` is its ``to_dict()``.
:meth:`PrivacyAudit.from_dict` reads such a dict back, also one written before the claim's
finding or the μ bounds were recorded. Like :mod:`miaudit.records.privacy`, the bounds'
dataclasses are imported only when a dict is read: ``import miaudit`` stays free of scipy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from miaudit.records.privacy import (
    EPSILON_LOWER_BOUND,
    EVIDENCE_AGAINST,
    FDP_ONE_RUN,
    GAUSSIAN_DP_OF,
    NOT_EXCEEDED,
    ONE_RUN,
    REFUTED,
    WITHHELD,
)

if TYPE_CHECKING:
    from miaudit.privacy import EpsilonBound, FDPOneRunBound, GaussianDPBound, OneRunBound

# who assigned the audit samples' membership (EpsilonPlan.membership): a threshold bound on
# them is a proof only when miaudit drew it at random itself
MEMBERSHIP_SOURCES = ("miaudit", "user", "unknown")


def _fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    return {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}


@dataclass(frozen=True)
class Claim:
    """A DP-SGD target's (ε, δ) claim (ε as its accountant computed it)."""

    epsilon: float
    delta: float
    target_epsilon: float | None = None
    accountant: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Claim:
        return cls(**_fields(cls, data))

    def to_dict(self) -> dict[str, Any]:
        """``epsilon`` and ``delta``, then ``target_epsilon`` and ``accountant`` when known."""
        out: dict[str, Any] = {"epsilon": self.epsilon, "delta": self.delta}
        for key in ("target_epsilon", "accountant"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@dataclass(frozen=True)
class CanarySettings:
    """What the canary bounds rest on: how many canaries, how many the target included, α and
    δ (and where δ came from), the halves' seed, the (k₊, k₋) guesses fixed in advance, and
    their kind (mislabelled or natural) when the run knows it."""

    count: int
    included: int
    alpha: float
    delta: float
    delta_source: str
    split_seed: int
    guesses: tuple[tuple[int, int], ...]
    kind: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CanarySettings:
        guesses = tuple((int(g["k_plus"]), int(g["k_minus"])) for g in data.get("guesses") or ())
        return cls(count=data["count"], included=data["included"], alpha=data["alpha"],
                   delta=data["delta"], delta_source=data["delta_source"],
                   split_seed=data["split_seed"], guesses=guesses, kind=data.get("kind"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "count": self.count, "included": self.included, "alpha": self.alpha,
            "delta": self.delta, "delta_source": self.delta_source,
            "split_seed": self.split_seed,
            "guesses": [{"k_plus": p, "k_minus": m} for p, m in self.guesses],
        }
        if self.kind is not None:
            out["kind"] = self.kind
        return out


@dataclass(frozen=True)
class PrivacySettings:
    """What one target's bounds rest on, fixed before any attack is scored
    (:meth:`~miaudit.privacy.attack_bounds.EpsilonPlan.settings`). ``membership``: who drew
    the audit samples' membership (:data:`MEMBERSHIP_SOURCES`); ``split_shifted``: whether the
    split check told members from non-members without the model (None: not checked)."""

    claimed: Claim | None
    alpha: float
    delta: float
    delta_source: str
    split_seed: int
    canaries: CanarySettings | None = None
    membership: str = "unknown"
    split_shifted: bool | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacySettings:
        claim, canaries = data.get("claimed"), data.get("canaries")
        return cls(claimed=None if not claim else Claim.from_dict(claim),
                   alpha=data["alpha"], delta=data["delta"],
                   delta_source=data.get("delta_source", ""),
                   split_seed=data.get("split_seed", 0),
                   canaries=None if not canaries else CanarySettings.from_dict(canaries),
                   membership=data.get("membership") or "unknown",
                   split_shifted=data.get("split_shifted"))

    def to_dict(self) -> dict[str, Any]:
        return {"claimed": None if self.claimed is None else self.claimed.to_dict(),
                "alpha": self.alpha, "delta": self.delta, "delta_source": self.delta_source,
                "split_seed": self.split_seed,
                "canaries": None if self.canaries is None else self.canaries.to_dict(),
                "membership": self.membership, "split_shifted": self.split_shifted}


@dataclass(frozen=True)
class BestBound:
    """The best bound of a run: ``bound`` recounted at ``family_alpha`` / K over the K bounds
    compared (so it holds at 1 − ``family_alpha``), the ``attack`` that gave it and its
    ``kind`` (the metrics key: ``epsilon_lower_bound``, ``one_run``, ...; "bound" in JSON).
    A best μ may also be of kind :data:`~miaudit.records.privacy.FDP_ONE_RUN`: the one-run
    f-DP bound (Mahloujifar, Melis & Chaudhuri 2025) of a one-run record's counts, which no
    attack records itself."""

    bound: EpsilonBound | OneRunBound | GaussianDPBound | FDPOneRunBound
    attack: str
    kind: str
    family_alpha: float

    @property
    def epsilon(self) -> float:
        return self.bound.epsilon

    @property
    def delta(self) -> float:
        return self.bound.delta

    @property
    def mu(self) -> float | None:
        """μ for a μ-GDP bound (None for an ε bound)."""
        mu: float | None = getattr(self.bound, "mu", None)
        return mu

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BestBound:
        """A ``to_dict()`` read back, the bound's type named by its kind (the threshold ε
        kinds, and any other, as an :class:`~miaudit.privacy.EpsilonBound`)."""
        import miaudit.privacy

        kind = data["bound"]
        name = ("OneRunBound" if kind == ONE_RUN else
                "FDPOneRunBound" if kind == FDP_ONE_RUN else
                "GaussianDPBound" if kind in GAUSSIAN_DP_OF.values() else "EpsilonBound")
        bound_type: type = getattr(miaudit.privacy, name)
        return cls(bound_type(**_fields(bound_type, data)), attack=data["attack"], kind=kind,
                   family_alpha=data["family_alpha"])

    def to_dict(self) -> dict[str, Any]:
        """The bound's fields, then ``attack``, ``bound`` (the kind) and ``family_alpha``."""
        return {**self.bound.to_dict(), "attack": self.attack, "bound": self.kind,
                "family_alpha": self.family_alpha}


def rests_on_proof(bound: str, membership: str | None) -> bool:
    """Whether a bound of type ``bound`` (a metrics key) is covered by a proof: the canary
    bounds always (miaudit drew each canary's inclusion with probability ½), the threshold
    bounds on the audit samples only when miaudit drew their membership at random itself (a
    run's design); on a split the user gave they assume it was drawn at random."""
    return bound != EPSILON_LOWER_BOUND or membership == "miaudit"


def claim_finding(settings: PrivacySettings, best: BestBound | None) -> str | None:
    """What the best bound says of the target's DP claim (None without a claim or a bound):
    :data:`NOT_EXCEEDED`; :data:`WITHHELD` when it exceeds the claim but the split check
    tells members from non-members without the model (the bound may measure the split, not
    the model); :data:`REFUTED` when it exceeds it and rests on a proof
    (:func:`rests_on_proof`); else :data:`EVIDENCE_AGAINST` (valid if the members were
    chosen at random)."""
    claim = settings.claimed
    if claim is None or best is None:
        return None
    if not (best.epsilon > claim.epsilon and best.delta >= claim.delta):
        return NOT_EXCEEDED
    if settings.split_shifted:
        return WITHHELD
    return REFUTED if rests_on_proof(best.kind, settings.membership) else EVIDENCE_AGAINST


@dataclass(frozen=True)
class GradientCanarySettings:
    """What the white-box bounds rest on: m gradient canaries (each in the DP-SGD run with
    probability ½), how many took part, their direction (dirac or random) and coordinates,
    the every-iterate score, the σ it used and how it was had (``noise_estimate``, the
    config's ``canaries.noise``), whether it subtracted the other rows' part
    (``known_data``), the run's steps and sample rate, α, δ (and where δ came from) and the
    (k₊, k₋) guesses fixed in advance."""

    count: int
    included: int
    direction: str
    coordinates: str | None
    score: str
    noise: float  # σ of the every-iterate likelihood score (per-step: over all steps)
    noise_multiplier: float  # σ the accountant claims
    steps: int
    sample_rate: float
    alpha: float
    delta: float
    delta_source: str
    guesses: tuple[tuple[int, int], ...]
    # canaries.noise: how the every-iterate score's σ was had (per-step: each step's own,
    # ``noise`` then the run's overall estimate); canaries.known_data: the every-iterate
    # auditor subtracted the other rows' clipped sum. The defaults are what summaries
    # written before these options were scored with.
    noise_estimate: str = "estimated"
    known_data: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GradientCanarySettings:
        fields = _fields(cls, data)
        fields["guesses"] = tuple((int(g["k_plus"]), int(g["k_minus"]))
                                  for g in data.get("guesses") or ())
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["guesses"] = [{"k_plus": p, "k_minus": m} for p, m in self.guesses]
        return out


@dataclass(frozen=True)
class WhiteBoxFamily:
    """One white-box threat model's bounds (``every-iterate``: the auditor sees every
    iterate θ_0 … θ_T; ``final-model``: θ_0 and θ_T only): a Bonferroni family of its own
    over the ``bounds_compared`` (k₊, k₋) candidates. ``best``: the one-run ε bound (kind
    ``one_run``), ``best_mu``: the one-run f-DP μ bound (kind ``fdp_one_run``, μ-GDP
    assumed), each holding at 1 − α; ``claim_finding`` of the best ε against the claim."""

    threat_model: str
    bounds_compared: int
    best: BestBound | None
    best_mu: BestBound | None
    claim_finding: str | None = None

    @property
    def family(self) -> str:
        """The family's name: 'white-box every-iterate', 'white-box final-model'."""
        return f"white-box {self.threat_model}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WhiteBoxFamily:
        best, best_mu = data.get("best"), data.get("best_mu")
        return cls(threat_model=data["threat_model"],
                   bounds_compared=int(data.get("bounds_compared") or 0),
                   best=None if not best else BestBound.from_dict(best),
                   best_mu=None if not best_mu else BestBound.from_dict(best_mu),
                   claim_finding=data.get("claim_finding"))

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "threat_model": self.threat_model,
                "bounds_compared": self.bounds_compared,
                "best": None if self.best is None else self.best.to_dict(),
                "best_mu": None if self.best_mu is None else self.best_mu.to_dict(),
                "claim_finding": self.claim_finding}


@dataclass(frozen=True)
class WhiteBoxAudit:
    """A run's white-box audit: the gradient canaries' settings and one family of bounds
    per threat model asked for (``canaries.threat_models``)."""

    settings: GradientCanarySettings
    families: tuple[WhiteBoxFamily, ...]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WhiteBoxAudit:
        return cls(GradientCanarySettings.from_dict(data["canaries"]),
                   tuple(WhiteBoxFamily.from_dict(f) for f in data.get("families") or ()))

    def to_dict(self) -> dict[str, Any]:
        return {"canaries": self.settings.to_dict(),
                "families": [f.to_dict() for f in self.families]}


@dataclass(frozen=True)
class PrivacyAudit:
    """A run's privacy audit: its :class:`PrivacySettings`, the best ε bound of the
    ``bounds_compared`` bounds (Bonferroni) and what it says of the claim
    (``claim_finding``, :func:`claim_finding`), and the best μ-GDP bound of the
    ``mu_bounds_compared`` μ bounds (a family of its own; its ε is an estimate and refutes
    nothing)."""

    settings: PrivacySettings
    bounds_compared: int = 0
    best: BestBound | None = None
    claim_finding: str | None = None
    mu_bounds_compared: int = 0
    best_mu: BestBound | None = None
    white_box: WhiteBoxAudit | None = None  # gradient canaries: families of their own

    @property
    def exceeds_claim(self) -> bool | None:
        """The best bound lies above the claim at a δ no smaller than the claim's (None
        without a claim or a bound)."""
        return None if self.claim_finding is None else self.claim_finding != NOT_EXCEEDED

    @property
    def refutes_claim(self) -> bool | None:
        """It does, with a proof and no shifted split (None without a claim or a bound)."""
        return None if self.claim_finding is None else self.claim_finding == REFUTED

    def with_canary_kind(self, kind: str) -> PrivacyAudit:
        """This audit with its canaries' kind recorded (a run knows it, a bank does not)."""
        canaries = self.settings.canaries
        if canaries is None:
            raise ValueError("this privacy audit has no canaries")
        settings = dataclasses.replace(self.settings,
                                       canaries=dataclasses.replace(canaries, kind=kind))
        return dataclasses.replace(self, settings=settings)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyAudit:
        """summary.json's ``privacy_audit`` (its ``line`` ignored) typed again. Older runs
        recorded no ``claim_finding`` (only whether the claim was refuted) and no μ bounds."""
        best, best_mu = data.get("best"), data.get("best_mu")
        finding = data.get("claim_finding")
        if finding is None and data.get("refutes_claim") is not None:
            finding = REFUTED if data["refutes_claim"] else NOT_EXCEEDED
        return cls(PrivacySettings.from_dict(data),
                   bounds_compared=int(data.get("bounds_compared") or 0),
                   best=None if not best else BestBound.from_dict(best),
                   claim_finding=finding,
                   mu_bounds_compared=int(data.get("mu_bounds_compared") or 0),
                   best_mu=None if not best_mu else BestBound.from_dict(best_mu),
                   white_box=(None if not data.get("white_box")
                              else WhiteBoxAudit.from_dict(data["white_box"])))

    def to_dict(self) -> dict[str, Any]:
        """The settings' dict, then ``bounds_compared``, ``best``, ``exceeds_claim``,
        ``refutes_claim``, ``claim_finding``, ``mu_bounds_compared`` and ``best_mu``; then
        ``white_box`` (:class:`WhiteBoxAudit`) when the run had gradient canaries."""
        out = {**self.settings.to_dict(), "bounds_compared": self.bounds_compared,
               "best": None if self.best is None else self.best.to_dict(),
               "exceeds_claim": self.exceeds_claim, "refutes_claim": self.refutes_claim,
               "claim_finding": self.claim_finding,
               "mu_bounds_compared": self.mu_bounds_compared,
               "best_mu": None if self.best_mu is None else self.best_mu.to_dict()}
        if self.white_box is not None:  # absent otherwise: other runs' summaries unchanged
            out["white_box"] = self.white_box.to_dict()
        return out
