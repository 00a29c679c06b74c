"""The ``canaries`` section: one-run auditing (Steinke, Nasr & Jagielski 2023), a union over
its ``kind`` (:data:`CanariesSpec`): canary rows (black-box kinds: mislabelled, natural,
secret; :class:`RowCanariesConfig`) or white-box gradient canaries in a DP-SGD target's steps
(kind gradient; :class:`GradientCanariesConfig`). Each variant holds its own rules on
construction; what needs the registries (a registered kind, a secret format, the design,
the gradient canaries' directions) is checked with the whole run config
(:func:`miaudit.config.canaries.check_canaries_section`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag, field_validator, model_validator
from typing_extensions import Self

from miaudit.config.sections.spec import (
    TAG,
    Bool,
    Int,
    OptFloat,
    Spec,
    Str,
    Typed,
    check_alpha,
    check_delta,
    suggest,
)
from miaudit.errors import ConfigError

# canaries.kind of white-box gradient canaries, and the threat models they are scored under
# (miaudit.privacy.gradient_canary_scores.canary_scores): the auditor sees every iterate
# θ_0 … θ_T, or the final model θ_T only (θ_0 known either way)
GRADIENT_KIND = "gradient"
WHITE_BOX_THREAT_MODELS = ("every-iterate", "final-model")
# canaries.noise: the σ of the every-iterate likelihood score (canary_scores' noise): each
# step's own estimate, one estimate over the whole run, or the accountant's σ
WHITE_BOX_NOISE = ("per-step", "estimated", "claimed")
# canaries.score: the every-iterate score (canary_scores' score): the sum over steps of each
# step's log likelihood ratio, or the plain sum of the projections
WHITE_BOX_SCORES = ("likelihood", "sum")
# The most gradient canaries one run takes (canaries.count with kind gradient). Each needs its
# own coordinate of the model's weights (a Dirac canary) or a dense direction over all of them
# (random: count x parameters floats), so no model holds more than it has parameters (checked
# on the target as it is built, before its first step); and the run's record keeps 24 bytes
# per canary per DP-SGD step (1,000,000 canaries: 24 MB a step, 2.4 GB over 100 steps), while
# the one-run bound's test slows with the count (~2 s at this limit). The papers' white-box
# audits use 1,000 to 50,000.
MAX_GRADIENT_CANARIES = 1_000_000
# The keys of gradient canaries only (refused with another kind unless left at the default)
GRADIENT_KEYS = ("direction", "coordinates", "probe_rows", "score", "threat_models",
                 "known_data", "noise")


class CanariesConfig(Spec):
    """One-run auditing (Steinke, Nasr & Jagielski 2023): ``count`` canary rows outside the
    audit, public and population pools, each in the target's training set with probability ½
    (offline design only; references never train on them); or, with ``kind: gradient``,
    ``count`` white-box gradient canaries in a DP-SGD target's steps (no rows, any design).
    Built in Python, this class holds any kind; a config chooses the variant by ``kind``."""

    key = "canaries"

    count: Int = Field(0, ge=0, description="m canaries; 0: off.",
                       json_schema_extra={"why": "0: no canaries"})
    kind: Str = Field("mislabelled", description=(
        "mislabelled | natural | secret (rows, black-box) | gradient (white-box, a DP-SGD "
        "target's steps)."))
    secret_format: Str = Field("account-number", description=(
        "kind secret: the secrets' format (miaudit.privacy.secrets)."))
    exposure_candidates: Int = Field(1000, ge=20, description=(
        "kind secret: how many candidates sampled from the format's space estimate each "
        "canary's exposure."), json_schema_extra={"why": "the sample exposure is estimated from"})
    guesses: Typed[dict[str, Any] | list[dict[str, Any]] | None] = Field(
        None, description=(
            "{k_plus, k_minus} (counts or fractions of count), or a list of such candidates, "
            "each evaluated at alpha / len(list); null: a tenth of the canaries each way."))
    alpha: Typed[float] = Field(0.05, gt=0, lt=1, description=(
        "The bound holds with probability 1 - alpha."))
    delta: OptFloat = Field(None, ge=0, lt=1, description=(
        "null: the target's DP δ, else metrics.epsilon_delta."))
    direction: Str = Field("dirac", description=(
        "kind gradient: each canary a vector of norm max_grad_norm in parameter space, not a "
        "dataset row: dirac (one coordinate) or random (a seeded unit direction)."))
    coordinates: Str = Field("quiet", description=(
        "kind gradient, direction dirac: quiet (the coordinates the data's clipped gradients "
        "hardly touch) or random."))
    probe_rows: Int = Field(1024, ge=1, description=(
        "kind gradient: the training rows that rank the quiet coordinates."),
        json_schema_extra={"why": "training rows whose clipped gradients rank the quiet "
                                  "coordinates"})
    score: Str = Field("likelihood", description=(
        "kind gradient: the every-iterate score, likelihood or sum."),
        json_schema_extra={"must": f"be one of {', '.join(WHITE_BOX_SCORES)}"})
    threat_models: Typed[list[str]] = Field(
        default_factory=lambda: list(WHITE_BOX_THREAT_MODELS), description=(
            "kind gradient: the white-box auditors reported, each its own family of bounds: "
            "every-iterate and/or final-model."))
    known_data: Bool = Field(True, description=(
        "kind gradient, the every-iterate score: score x - d, the privatised gradient minus "
        "the other rows' clipped sum on the canary's coordinate (recorded in training). DP's "
        "own adversary knows every other row, and their sampling is independent of the "
        "canaries' coins, so the bound stays a sound lower bound of the claim while the "
        "data's gradients stop hiding the canary. A scoring-only option (the cached target "
        "serves either); the dp-bugs study's choice (EXPERIMENTS.md)."),
        json_schema_extra={"must": "be true (the every-iterate auditor knows the other rows' "
                                   "clipped gradients, as DP's adversary does) or false"})
    noise: Str = Field("per-step", description=(
        "kind gradient, score likelihood: the σ of the score: per-step (each step's σ read "
        "off its m projections), estimated (one σ for the run) or claimed (the "
        "accountant's). Any σ is sound; a wrong one only costs power, and per-step lets "
        "steps with missing noise weigh as much as they reveal. A scoring-only option."),
        json_schema_extra={"must": f"be one of {', '.join(WHITE_BOX_NOISE)}"})

    @field_validator("alpha", mode="before")
    @classmethod
    def _alpha(cls, value: Any) -> Any:
        check_alpha(value, "canaries.alpha")
        return value

    @field_validator("delta", mode="before")
    @classmethod
    def _delta(cls, value: Any) -> Any:
        if value is not None:
            check_delta(value, "canaries.delta")
        return value

    @field_validator("threat_models", mode="before")
    @classmethod
    def _one_threat_model(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @property
    def white_box(self) -> bool:
        """Gradient canaries (white-box, in DP-SGD's steps) rather than canary rows."""
        return bool(self.kind == GRADIENT_KIND and self.count > 0)

    @property
    def rows(self) -> int:
        """How many dataset rows the canaries take (none for gradient canaries)."""
        return 0 if self.kind == GRADIENT_KIND else self.count


class RowCanariesConfig(CanariesConfig):
    """Canary rows (a black-box kind): the gradient canaries' keys left at their defaults."""

    @model_validator(mode="after")
    def _rows(self) -> Self:
        defaults = CanariesConfig()
        given = [k for k in GRADIENT_KEYS if getattr(self, k) != getattr(defaults, k)]
        if given:
            raise ConfigError(f"canaries.{given[0]} is an option of gradient canaries: set "
                              f"canaries.kind: gradient (a DP-SGD target) or remove it.")
        if self.count == 0 and self.kind != defaults.kind:
            raise ConfigError(f"canaries.kind {self.kind} with canaries.count 0 adds no "
                              f"canaries: set canaries.count >= 1, or remove the canaries "
                              f"section.")
        return self


class GradientCanariesConfig(CanariesConfig):
    """White-box gradient canaries in a DP-SGD target's steps: at least one, at most
    :data:`MAX_GRADIENT_CANARIES`, with their own options."""

    @model_validator(mode="after")
    def _gradient(self) -> Self:
        check_gradient_count(self.count)
        for key, allowed in (("score", WHITE_BOX_SCORES), ("noise", WHITE_BOX_NOISE)):
            value = getattr(self, key)
            if value not in allowed:
                raise ConfigError(f"canaries.{key} must be one of {', '.join(allowed)}; got "
                                  f"{value!r}.{suggest(str(value), allowed)}")
        if self.delta == 0:
            raise ConfigError("canaries.delta must be > 0 with kind gradient: the f-DP bound's "
                              "ε needs δ > 0 (leave it out for the target's DP-SGD δ).")
        models = self.threat_models
        if (not models or len(set(models)) < len(models)
                or any(m not in WHITE_BOX_THREAT_MODELS for m in models)):
            raise ConfigError(f"canaries.threat_models must be a non-empty list of distinct "
                              f"threat models from {', '.join(WHITE_BOX_THREAT_MODELS)} (the "
                              f"auditor sees every iterate, or the final model only); got "
                              f"{models!r}.")
        return self


def check_gradient_count(count: int) -> None:
    """Gradient canaries: at least one (none would be a white-box audit that silently never
    runs), and no more than :data:`MAX_GRADIENT_CANARIES` (the target model's own limit, one
    parameter per Dirac canary, is checked as it is built)."""
    if count < 1:
        raise ConfigError(
            "gradient canaries need canaries.count >= 1: the number of white-box canaries in the "
            "target's DP-SGD steps (examples/dp-whitebox.yaml uses 10,000 of its MLP's 19,210 "
            "weights); without it no white-box audit runs. Set the count, or remove the "
            "canaries section."
        )
    if count > MAX_GRADIENT_CANARIES:
        raise ConfigError(
            f"canaries.count {count:,} is more gradient canaries than a run takes (at most "
            f"{MAX_GRADIENT_CANARIES:,}): each needs its own parameter of the target model (no "
            f"model has more canaries than parameters), the run records 24 bytes per canary "
            f"per DP-SGD step, and the one-run bound's test slows with the count. The papers' "
            f"white-box audits use 1,000 to 50,000; lower canaries.count."
        )


def _canary_variant(value: Any) -> str:
    """The variant's tag: by ``kind`` (gradient, or rows for every other kind)."""
    if isinstance(value, CanariesConfig):
        return f"{TAG}gradient" if isinstance(value, GradientCanariesConfig) else f"{TAG}rows"
    kind = value.get("kind") if isinstance(value, dict) else None
    return f"{TAG}gradient" if kind == GRADIENT_KIND else f"{TAG}rows"


# The canaries section of a run config: one variant per kind of canary.
CanariesSpec = Annotated[
    Annotated[RowCanariesConfig, Tag(f"{TAG}rows")]
    | Annotated[GradientCanariesConfig, Tag(f"{TAG}gradient")],
    Discriminator(_canary_variant),
]


# a canaries section as its kind's variant (what CanariesSpec validates into)
CanaryVariant = RowCanariesConfig | GradientCanariesConfig


def as_kind(value: CanariesConfig) -> CanaryVariant:
    """``value`` as its kind's variant, its rules checked (a plain :class:`CanariesConfig`
    built in Python has not been)."""
    if isinstance(value, (RowCanariesConfig, GradientCanariesConfig)):
        return value
    cls = GradientCanariesConfig if value.kind == GRADIENT_KIND else RowCanariesConfig
    return cls(**{name: getattr(value, name) for name in CanariesConfig.model_fields})


def as_variant(value: Any) -> Any:
    """A canaries value as its variant takes it: null (`canaries:` left empty) the default,
    a plain :class:`CanariesConfig` (built in Python) its fields, to be checked as its kind's
    variant."""
    if value is None:
        return {}
    if type(value) is CanariesConfig:
        return {name: getattr(value, name) for name in CanariesConfig.model_fields}
    return value
