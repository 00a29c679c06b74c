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
from typing import Any, Literal, overload

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
from miaudit.config.sections.spec import (
    Bool,
    Dict,
    Float,
    Int,
    OptFloat,
    OptInt,
    OptStr,
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
# The value of a signals setting that follows the rule of resolve_queries / resolve_grad_norm.
AUTO = "auto"


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


def check_signals(queries: Any, grad_norm: Any) -> tuple[list[str] | str, bool | str]:
    """``signals.queries`` and ``signals.grad_norm`` of either config, checked: ``auto`` (also
    spelled null, or ``--queries auto``) or a non-empty list of query names; ``auto`` or true
    or false."""
    return _queries(queries), _grad_norm(grad_norm)


def _queries(queries: Any) -> list[str] | str:
    if queries is None or (isinstance(queries, list) and queries == [AUTO]):
        queries = AUTO
    if queries != AUTO and not (isinstance(queries, list) and queries
                                and all(isinstance(q, str) and q for q in queries)):
        raise ConfigError(f"signals.queries must be auto or a non-empty list of query names, "
                          f"e.g. [plain, mirror]; got {queries!r}.")
    return queries  # type: ignore[no-any-return]


def _grad_norm(grad_norm: Any) -> bool | str:
    if grad_norm is None:
        grad_norm = AUTO
    if isinstance(grad_norm, bool) or type(grad_norm).__name__ == "bool_":
        return bool(grad_norm)
    if grad_norm != AUTO:
        raise ConfigError(f"signals.grad_norm must be auto, true or false; got {grad_norm!r}.")
    return AUTO


class SignalsConfig(Spec):
    """What every model is queried on, and the channels computed besides its outputs."""

    key = "signals"

    queries: Typed[list[str] | str] = Field(AUTO, description=(
        "The views every model is queried on (plain, mirror, crop-flip-K for images; "
        "token-dropout-K, adjacent-swap-K for token ids), or auto: replay the training "
        "augmentation. A model answers the views of its training augmentation differently "
        "for members (LiRA and RAPID query with it); views it never trained on are not what "
        "those papers query, and each costs a query of every model. So images whose target "
        "trained with augmentation (a run: its recipe's augment; an audit: the declared "
        "model.augment, else references.recipe's) get the views the attacks' papers query "
        "with (plain + mirror; RAPID's 8 with rapid or rapid-hybrid), anything else plain "
        "only (resolve_queries). The same rule and default in `miaudit run` and `miaudit "
        "audit`; null is auto."),
        json_schema_extra={"must": "be auto or a non-empty list of query names"})
    grad_norm: Typed[bool | str] = Field(AUTO, description=(
        "Per-sample gradient norms (a white-box channel: a backward pass per sample per "
        "model), or auto: computed when an attack to run reads them (gradient-norm, "
        "calibrated-gradient-norm; in an audit without attacks, every attack, so on for "
        "white-box models), so no run pays for a channel nothing reads (resolve_grad_norm). "
        "The same rule and default in `miaudit run` and `miaudit audit`; null is auto."),
        json_schema_extra={"must": "be auto, true or false"})
    boundary_distance: Bool = Field(False, description=(
        "The label-only HopSkipJump distance channel (slow: about 1,100 queries per sample "
        "and model)."))
    defence: Typed[str | dict[str, Any] | None] = Field(None, description=(
        "An output defence applied to every query: a registered name, or a mapping with "
        "its name and options."))
    batch_size: Int = Field(1024, ge=1, description="Samples per query batch.",
                            json_schema_extra={"why": "samples per query batch"})

    @field_validator("queries", mode="before")
    @classmethod
    def _auto_queries(cls, value: Any) -> Any:
        return _queries(value)

    @field_validator("grad_norm", mode="before")
    @classmethod
    def _auto_grad_norm(cls, value: Any) -> Any:
        return _grad_norm(value)


def resolve_queries(queries: list[str] | str, kind: str, attacks: Sequence[str],
                    augment: Any) -> list[str]:
    """The queries of ``signals.queries`` (:class:`SignalsConfig`) on data of ``kind``: a list
    as given; ``auto``: replay the training augmentation ``augment`` (recipe steps; empty or
    None: none) -- image data trained with augmentation get the views the papers of
    ``attacks`` query with (plain + mirror; RAPID's 8: :func:`default_queries`),
    anything else (no augmentation; tabular data; token ids, for which no recipe augments)
    plain only."""
    if queries != AUTO:
        return list(queries)
    if kind != "image" or not augment:
        return ["plain"]
    return default_queries(kind, list(attacks), augment)


def default_queries(kind: str, attacks: list[str], augment: Any = None) -> list[str]:
    """The views the attacks' papers query with (`signals.queries: auto` of a target trained
    with augmentation, config.resolve_queries): plain for tabular data; for images, the
    largest number of augmented queries any of the run's attacks' papers makes (plain and
    mirror; 8 with RAPID), drawn from the training augmentation ``augment`` so that every
    query replays it, as the papers' queries do (RAPID: plain, mirror and 6 crop + flip draws
    of the recipe's crop padding), and fewer when it allows fewer (a mirror-only recipe: plain
    and mirror); ``augment`` None: the papers' crop (4-pixel padding) + mirror. For token ids
    (text), plain, or RAPID's count of seeded token perturbations (token dropout, adjacent
    swaps) when an attack's paper makes more than the image pair."""
    from miaudit.attacks import get_attack
    from miaudit.signals.query_names import augmented_queries, replay_queries, text_queries

    wanted = [get_attack(a).image_queries for a in attacks]
    if kind == "tokens":
        return text_queries(max([q for q in wanted if q > 2] + [1]))
    if kind != "image":
        return ["plain"]
    if augment is None:
        return augmented_queries(max(wanted + [2]))
    return replay_queries(augment, max(wanted + [2]))


def resolve_grad_norm(grad_norm: bool | str, attacks: Sequence[str]) -> bool:
    """Whether ``signals.grad_norm`` (:class:`SignalsConfig`) computes gradient norms for
    ``attacks``: as given, or for ``auto`` when one of them reads the channel."""
    if grad_norm != AUTO:
        return bool(grad_norm)
    from miaudit.attacks import get_attack

    return any(get_attack(name).needs.channel == "grad_norm" for name in attacks)


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


class ComputeConfig(Spec):
    """Where the models train: :class:`miaudit.train.cluster.Compute`'s keys and defaults (a
    test holds them alike), checked by it when the config loads, before anything trains.
    Where a model trains is not in its cache key, and on CPU it changes neither the weights
    nor the scores: it is not part of the run's identity either (rerunning with ``--executor
    ray`` replaces the same run)."""

    key = "compute"

    executor: Typed[Literal["local", "ray"]] = Field("local", description=(
        "local (this machine) or ray (a Ray cluster; --executor ray)."))
    address: OptStr = Field(None, description=(
        "null starts a local Ray instance bound to loopback; auto or ray://host:port joins a "
        "running cluster (--ray-address)."))
    cpus_per_model: Float = Field(1.0, ge=0, description="CPUs each Ray task asks for.",
                                  json_schema_extra={"must": "be a number >= 0"})
    gpus_per_model: Float = Field(0.0, ge=0, description="GPUs each Ray task asks for.",
                                  json_schema_extra={"must": "be a number >= 0"})
    max_retries: Int = Field(3, ge=0, description=(
        "How many times a Ray task is retried when its worker dies."),
        json_schema_extra={"must": "be a whole number >= 0"})
    connect_timeout_s: Float = Field(30.0, gt=0, json_schema_extra={"must": (
        "be a finite number of seconds > 0 (how long to wait for the Ray cluster at "
        "compute.address to answer)")}, description=(
        "How long to wait for the cluster at address to answer (--ray-timeout); a refused, "
        "unreachable or silent address is refused with its name and the fix, before "
        "anything trains."))

    def to_compute(self) -> Any:
        """The checked :class:`~miaudit.train.cluster.Compute` (ConfigError naming the key)."""
        from miaudit.train.cluster import Compute

        return Compute.from_dict(self.to_dict())


def compute_section(value: Any) -> ComputeConfig:
    """``compute`` of either config, checked (ConfigError naming the bad key or value): a
    ComputeConfig, left empty in the YAML (None: local), or a Compute from the Python API."""
    if value is None:
        value = ComputeConfig()
    section: ComputeConfig
    if isinstance(value, ComputeConfig):
        section = value
    else:  # a miaudit.train.cluster.Compute
        to_dict = getattr(value, "to_dict", None)
        if not callable(to_dict):
            raise ConfigError(f"compute must be a mapping (executor, address, ...); "
                              f"got {type(value).__name__}.")
        section = ComputeConfig(**to_dict())
    if section != ComputeConfig():  # the defaults are Compute's (a test holds them alike):
        section.to_compute()  # only other values need its check, which imports torch
    return section


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
