"""The sections of a configuration that `miaudit run` and `miaudit audit` share or a run
has, each a :class:`~miaudit.config.sections.spec.Spec` (a pydantic model, validated on
construction) with its rules: dataset, split, signals (with the one ``auto`` rule of both
for queries and gradient norms), forgetting, checkpoints, metrics, canaries
(:mod:`miaudit.config.sections.canary_spec`), compute. :class:`~miaudit.config.run.RunConfig`
assembles them; the audit's config reuses ``signals``, ``metrics`` and ``compute``.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any, overload

from pydantic import Field, ValidationInfo, field_validator

from miaudit.config.sections.canary_spec import (
    GRADIENT_KIND,
    MAX_GRADIENT_CANARIES,
    WHITE_BOX_NOISE,
    WHITE_BOX_SCORES,
    WHITE_BOX_THREAT_MODELS,
    CanariesConfig,
    CanariesSpec,
    GradientCanariesConfig,
    RowCanariesConfig,
)
from miaudit.config.sections.compute import ComputeConfig, compute_section
from miaudit.config.sections.signals import (
    AUTO,
    SignalsConfig,
    check_signals,
    default_queries,
    resolve_grad_norm,
    resolve_queries,
)
from miaudit.config.sections.spec import (
    Bool,
    Dict,
    Float,
    Int,
    OptFloat,
    OptInt,
    Spec,
    Str,
    Typed,
    check_alpha,
    check_delta,
    real,
)
from miaudit.errors import ConfigError

__all__ = [
    "AUTO", "DEFAULT_ATTACKS", "GRADIENT_KIND", "MAX_GRADIENT_CANARIES", "WHITE_BOX_NOISE",
    "WHITE_BOX_SCORES", "WHITE_BOX_THREAT_MODELS", "CanariesConfig", "CanariesSpec",
    "CheckpointsConfig", "ComputeConfig", "DatasetConfig", "ForgettingConfig",
    "GradientCanariesConfig", "MetricsConfig", "RowCanariesConfig", "SignalsConfig",
    "SplitConfig", "check_alpha", "check_delta", "check_signals", "compute_section",
    "default_queries", "identity_config", "resolve_grad_norm", "resolve_queries",
    "split_names",
]

DEFAULT_ATTACKS = ("loss", "confidence", "entropy", "modified-entropy", "correctness")


class DatasetConfig(Spec):
    """The dataset a run audits."""

    key = "dataset"

    name: Str = Field("digits", description=(
        "A registered dataset (`miaudit data list`) or a data file (.npz, .csv, .parquet, "
        ".jsonl, .txt)."))
    options: Dict = Field(default_factory=dict, description=(
        "The loader's options (label_column, preprocessing, ...)."))
    max_length: Int = Field(64, ge=2, description=(
        "Text datasets: tokens per text, longer ones cut."),
        json_schema_extra={"why": "tokens per text, longer ones cut"})
    tokenizer: Str = Field("auto", description=(
        "Text datasets: MiniLM's WordPiece (wordpiece: fixed, 30,522 ids), a byte-level BPE "
        "of bpe_vocab_size ids trained on the public pool's texts only (bpe: never on audit "
        "rows), or the base model's own (base: hf-causal-lm); auto: base for hf-causal-lm, "
        "else wordpiece."))
    bpe_vocab_size: Int = Field(4096, ge=300, description=(
        "tokenizer bpe: its vocabulary size."),
        json_schema_extra={"why": "the 256 bytes, the special tokens and some merges"})


# A count of rows or a fraction of the dataset: make_split's rule once its size is known.
Size = Typed[float | int]
OptSize = Typed[float | int | None]
# A list of rates (its items' bounds: the field's "items")
Rates = Typed[list[float]]


SIZE = "be a count (integer >= 0) or a fraction in (0, 1) of the dataset's rows"


def _size(value: Any, name: str, low: int, pool: str) -> Any:
    count = isinstance(value, numbers.Integral) and int(value) >= low
    if not (count or (isinstance(value, float) and 0 < value < 1)):
        raise ConfigError(f"split.{name} must be a count (integer >= {low}) or a fraction in "
                          f"(0, 1) of {pool}; got {value!r}.")
    return value


class SplitConfig(Spec):
    """How the dataset's rows are split: each a count (integer >= 0) or a fraction in (0, 1)
    of the dataset's rows."""

    key = "split"

    audit: Size = Field(0.4, description=(
        "The audit pool (members and non-members of the target): a count, or a fraction of "
        "the dataset."), json_schema_extra={"must": SIZE})
    public: Size = Field(0.4, description="The attacker's rows the references train on.",
                         json_schema_extra={"must": SIZE})
    population: Size = Field(0.2, description=(
        "Rows no model trains on (RMIA's population samples)."),
        json_schema_extra={"must": SIZE})
    members: OptSize = Field(None, json_schema_extra={"must": (
        "be a count (integer >= 1) or a fraction in (0, 1) of the audit pool")}, description=(
        "Offline design: audit rows the target trains on (a count >= 1, or a fraction of the "
        "audit pool); null: a random half. Fewer members than non-members puts low-FPR "
        "figures on more non-members; each reference then trains on as many public rows."))

    @field_validator("audit", "public", "population")
    @classmethod
    def _sizes(cls, value: Any, info: ValidationInfo) -> Any:
        return _size(value, str(info.field_name), 0, "the dataset's rows")

    @field_validator("members")
    @classmethod
    def _members(cls, value: Any) -> Any:
        return value if value is None else _size(value, "members", 1, "the audit pool")


class ForgettingConfig(Spec):
    """Calibration via forgetting: copies of the target trained further on public data."""

    key = "forgetting"

    models: Int = Field(0, ge=0, description="How many copies (0: off).",
                        json_schema_extra={"why": "0: off"})
    epochs: Int = Field(5, description=(
        "Epochs each copy trains on public data (the recipe's rule for epochs)."))
    lr: OptFloat = Field(None, description="The copies' learning rate; null: the target "
                         "recipe's.")
    batch_size: OptInt = Field(None, description="The copies' batch size; null: the target "
                               "recipe's.")

    @field_validator("epochs", "lr", "batch_size", mode="before")
    @classmethod
    def _trainable(cls, value: Any, info: ValidationInfo) -> Any:
        """By the recipe's rule (its message, and the fix)."""
        from miaudit.train.recipe import check_trainable

        if value is not None:
            check_trainable({str(info.field_name): value}, "forgetting")
        return value


class CheckpointsConfig(Spec):
    """Models kept along training ("Generalization and Membership Inference Attack: a
    Practical Perspective", §IV-A2): every model of the design is kept after these epochs
    and/or optimizer steps, and each checkpoint is audited as its own bank."""

    key = "checkpoints"

    epochs: Typed[list[int]] = Field(default_factory=list, description=(
        "Epochs after which every model is kept (null: none)."))
    steps: Typed[list[int]] = Field(default_factory=list, description=(
        "Optimizer steps after which every model is kept (null: none)."))

    @field_validator("epochs", "steps", mode="before")
    @classmethod
    def _none(cls, value: Any) -> Any:
        return [] if value is None else value  # `epochs:` left empty in the YAML: none


class MetricsConfig(Spec):
    """The metrics of every attack: ROC points, bootstrap intervals, ε lower bounds."""

    key = "metrics"

    fprs: Rates = Field(default_factory=lambda: [0.001, 0.01], description=(
        "False-positive rates at which each attack's TPR is reported, in (0, 1)."),
        json_schema_extra={"must": "be a non-empty list of false-positive rates in (0, 1)",
                           "items": "(0, 1)"})
    bootstrap: Int = Field(200, ge=0, description=(
        "Bootstrap resamples of each interval; 0: none."),
        json_schema_extra={"why": "bootstrap resamples of each interval; 0: none"})
    confidence: Float = Field(0.95, gt=0, lt=1, description=(
        "The intervals' confidence level (0.95 for 95% intervals)."))
    recalls: Rates = Field(default_factory=lambda: [0.5, 0.9], description=(
        "Recalls at which each attack's precision is reported, in (0, 1]."),
        json_schema_extra={"must": "be a non-empty list of recalls in (0, 1]",
                           "items": "(0, 1]"})
    epsilon_delta: Float = Field(1e-5, ge=0, lt=1, description=(
        "ε lower bounds (docs/algorithms.md §16): δ when the target makes no DP claim of its "
        "own (a DP-SGD target is audited at its recipe's δ)."))
    epsilon_alpha: Float = Field(0.05, gt=0, lt=1, description=(
        "ε lower bounds: α = 1 - the bounds' confidence."))
    split_check: Bool = Field(True, description=(
        "The model-free split check (docs/algorithms.md §20): can members be told from "
        "non-members without the model? A few seconds; false only to save them."))

    @field_validator("epsilon_delta", mode="before")
    @classmethod
    def _delta(cls, value: Any) -> Any:
        check_delta(value, "metrics.epsilon_delta")
        return value

    @field_validator("epsilon_alpha", mode="before")
    @classmethod
    def _alpha(cls, value: Any) -> Any:
        check_alpha(value, "metrics.epsilon_alpha")
        return value

    @field_validator("fprs", mode="before")
    @classmethod
    def _fprs(cls, value: Any) -> list[float]:
        return _rates(value, "metrics.fprs", "false-positive rates, e.g. [0.001, 0.01]")

    @field_validator("recalls", mode="before")
    @classmethod
    def _recalls(cls, value: Any) -> list[float]:
        return _rates(value, "metrics.recalls", "recalls, e.g. [0.5, 0.9]")

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence(cls, value: Any) -> Any:
        if not 0.0 < real(value, "metrics.confidence") < 1.0:
            raise ConfigError(f"metrics.confidence must lie in (0, 1) (0.95 for 95% "
                              f"intervals); got {value!r}.")
        return value


def identity_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config mapping (a run's or an audit's) as it makes the run's identity
    (:class:`miaudit.records.run_dir.RunIdentity`): less ``compute``, which says where the
    models train, not what the run measures (no cache key holds it either), so a rerun on a
    Ray cluster replaces the same run made locally."""
    return {k: v for k, v in config.items() if k != "compute"}


@overload
def split_names(value: None) -> None: ...


@overload
def split_names(value: str | Sequence[str]) -> list[str]: ...


def split_names(value: str | Sequence[str] | None) -> list[str] | None:
    """Names as a list: ``"loss, rmia"`` (comma-separated, as the command line takes attack
    and query names) or a sequence of names; None stays None (not given)."""
    if value is None:
        return None
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    return list(value)


def _rates(value: Any, name: str, what: str) -> list[float]:
    """A non-empty list of numbers in (0, 1] (a lone number is not a list: said so)."""
    listed = hasattr(value, "__len__") and hasattr(value, "__iter__")
    if isinstance(value, (str, bytes, Mapping)) or not listed or len(value) == 0:
        raise ConfigError(f"{name} must be a non-empty list of {what}; got {value!r}"
                          + (f" (write [{value}])" if isinstance(value, (int, float))
                             and not isinstance(value, bool) else "") + ".")
    rates = [real(v, name) for v in value]
    # (0, 1]: a study's curve may end at 1; a run's config is held to (0, 1) (config/run.py)
    if not all(0.0 < r <= 1.0 for r in rates):
        raise ConfigError(f"{name} must lie in (0, 1); got {list(value)!r}.")
    return rates
