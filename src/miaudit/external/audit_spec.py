"""The audit config's sections as :class:`~miaudit.config.sections.spec.Spec` models
(validated on construction), and :class:`AuditConfig` itself. The audited model is a union
with one variant per source (:data:`~miaudit.external.audit_model_spec.ModelSource`), chosen
by the key the user gave: a PyTorch module (``module`` + ``weights``), a Hugging Face folder
(``hf_model``), a scikit-learn estimator (``estimator``), a prediction function
(``predict``), precomputed outputs (``outputs``) or a model in memory (``instance``, the
Python API). What needs the registries or files is checked by
:func:`miaudit.external.audit_config.audit_config`.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import Field, field_validator, model_validator
from typing_extensions import Self

from miaudit.config.run import ComputeSection, Device, RunConfig, RunName
from miaudit.config.sections import (
    AUTO,
    ComputeConfig,
    MetricsConfig,
    SignalsConfig,
    check_signals,
)
from miaudit.config.sections.spec import (
    Bool,
    Dict,
    Float,
    Int,
    OptStr,
    Spec,
    Str,
    Typed,
)
from miaudit.errors import ConfigError
from miaudit.external.audit_model_spec import (
    ONCE,
    ModelSection,
    ModelSource,
    describe_instance,
    instance_kind,
    model_mapping,
)

SignalsQueries = Typed[list[str] | str]
SignalsGradNorm = Typed[bool | str]


class DataSection(Spec):
    """The data the model was trained on and data it was not."""

    key = "data"

    dataset: OptStr = Field(None, description=(
        "A registry name (`miaudit data list`) or a .npz/.csv/.parquet file."))
    options: Dict = Field(default_factory=dict, description=(
        "The loader's options (label_column, ...)."))
    members: OptStr = Field(None, description=(
        "A file of training row indices (.txt/.csv/.npy/.json)."))
    membership_column: OptStr = Field(None, description=(
        "Or a 0/1 column (an array in .npz) of the data file."))
    nonmembers: OptStr = Field(None, description=(
        "A file of row indices; null: every other row."))


class PublicSection(Spec):
    """The attacker's data: reference models train on it; never evaluated."""

    key = "public"

    dataset: OptStr = Field(None, description=(
        "null: the audit data (then rows is required)."))
    options: Dict = Field(default_factory=dict, description="The loader's options.")
    rows: OptStr = Field(None, description=(
        "A file of row indices; null: every row of dataset."))
    population: Float = Field(0.2, ge=0, lt=1, description=(
        "The fraction kept out of every reference model (RMIA's z samples)."),
        json_schema_extra={"must": "be a fraction in [0, 1)"})


class ReferencesSection(Spec):
    """Reference models: the target's architecture, trained on public data."""

    key = "references"

    models: Int = Field(4, ge=0, description="How many; 0: threshold attacks only.",
                        json_schema_extra={"why": "0: threshold attacks only"})
    recipe: Typed[dict[str, Any] | None] = Field(None, description=(
        "torch: recipe fields (miaudit.train.Recipe; the architecture is your module). "
        "scikit-learn: unused (the estimator is cloned). Black box: a stand-in with an "
        "architecture, or none."),
        json_schema_extra={"must": "be a mapping of recipe fields (epochs, lr, ...)"})
    allow_fewer_rows: Bool = Field(False, description=(
        "Train references on fewer rows than the target when the public pool is too small "
        "(otherwise refused: such references understate the leak)."))
    base: OptStr = Field(None, description=(
        "hf_model only: the pretrained checkpoint folder the model was fine-tuned from; "
        "references are fine-tuned from it (null: the model's config trained from "
        "scratch)."))


def _run_field(name: str) -> Any:
    """The run's signals field of the same name (its description, bounds, default)."""
    return copy.deepcopy(SignalsConfig.model_fields[name])


def _same(name: str) -> Any:
    """The run config's field of the same name (its description, bounds and default)."""
    return copy.deepcopy(RunConfig.model_fields[name])


class SignalsSection(Spec):
    """As a run's :class:`~miaudit.config.SignalsConfig` (without output defences): the same
    keys, defaults and ``auto`` rule. Precomputed outputs hold one query: plain."""

    key = "signals"

    queries: SignalsQueries = _run_field("queries")
    grad_norm: SignalsGradNorm = _run_field("grad_norm")
    boundary_distance: Bool = _run_field("boundary_distance")
    batch_size: Int = _run_field("batch_size")

    @field_validator("queries", mode="before")
    @classmethod
    def _auto_queries(cls, value: Any) -> Any:
        return check_signals(value, None)[0]

    @field_validator("grad_norm", mode="before")
    @classmethod
    def _auto_grad_norm(cls, value: Any) -> Any:
        return check_signals(AUTO, value)[1]


def _no_model() -> Any:
    """``AuditConfig()``'s model section: no source named yet, so no variant (it is the
    defaults a caller fills in; given anything, the config is held to naming a source)."""
    return ModelSection()


class AuditConfig(Spec):
    """The configuration of `miaudit audit` (:func:`~miaudit.external.audit_config.
    audit_config`), saved as ``audit.yaml``. ``AuditConfig()`` alone is the defaults (it names
    no model or data); given anything, it is held to naming them."""

    what = "the audit config"

    name: RunName = _same("name")
    seed: Int = _same("seed")
    model: ModelSource = Field(default_factory=lambda: _no_model(), description=(
        "The audited model: exactly one source (a variant per source key)."))
    data: DataSection = Field(default_factory=DataSection, description=(
        "The data the model was trained on and data it was not."))
    public: PublicSection = Field(default_factory=PublicSection, description=(
        "The attacker's data: reference models train on it; never evaluated."))
    references: ReferencesSection = Field(default_factory=ReferencesSection, description=(
        "Reference models: the target's architecture, trained on public data."))
    signals: SignalsSection = Field(default_factory=SignalsSection, description=(
        "What the models are queried on (a run's signals, without output defences)."))
    attacks: Typed[list[str] | None] = Field(None, description=(
        "null: every attack the audit permits, those that cannot run listed with the reason "
        "(an audit cannot choose its models, so it tries all). Listed explicitly, an attack "
        "the audit could never run (its plan: check_listed_attacks) is refused before the "
        "target is queried or a reference model trains; one only its bank can rule out is "
        "listed with the reason. `miaudit run` differs on purpose: it scores the attacks it "
        "lists, each of which must run, by default the five threshold attacks."),
        json_schema_extra={"must": "be a list of attack names (see `miaudit attacks`)"})
    attack_params: Dict = Field(default_factory=dict, description=(
        "Parameters of the attacks {attack: {parameter: value}}."), json_schema_extra={
        "must": "map attack names to mappings {parameter: value}"})
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description=(
        "ROC points, intervals and ε lower bounds (a run's metrics)."))
    exposed: Int = Field(20, ge=1, description="Training samples in the exposure ranking.",
                         json_schema_extra={"why": "training samples in the exposure ranking"})
    data_dir: OptStr = Field(None, description=(
        "The datasets folder; null: $MIAUDIT_DATA_DIR or ~/.cache/miaudit/data."))
    device: Device = _same("device")
    precision: Str = Field("fp32", description=(
        "The target's (and the base model's) query precision: fp32, or bf16 (bfloat16 "
        "autocast: CUDA, or a CPU with AVX-512 BF16 / AMX); the references run at their "
        "recipe's."), json_schema_extra={"must": "be one of fp32, bf16"})
    compute: ComputeSection = Field(default_factory=ComputeConfig, description=(
        "Where the reference models train (a run's compute: local, or a Ray cluster)."))
    output: OptStr = _same("output")
    cache_dir: OptStr = _same("cache_dir")

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, value: Any) -> Any:
        return model_mapping(value)

    @field_validator("signals", mode="before")
    @classmethod
    def _empty_signals(cls, value: Any) -> Any:
        return {} if value is None else value  # `signals:` left empty in the YAML

    @field_validator("precision")
    @classmethod
    def _precision(cls, value: str) -> str:
        from miaudit.runtime.devices import PRECISIONS

        if value not in PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}; got "
                              f"{value!r}.")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """The rules between sections; naming the model and the data unless nothing at
        all was given (the defaults)."""
        if self.model_fields_set:
            check_complete(self)
        if self.references.base and not self.model.hf_model:
            raise ConfigError("references.base (the checkpoint a Hugging Face model was "
                              "fine-tuned from) needs model.hf_model.")
        if not all(0 < f < 1 for f in self.metrics.fprs):
            raise ConfigError("metrics.fprs must lie in (0, 1).")
        return self

    def to_dict(self) -> dict[str, Any]:
        instance = self.model.instance
        # a deep copy would copy an in-memory model; the mapping (audit.yaml, the report's
        # config) names it instead, and has no `instance` key without one (files unchanged)
        out = {name: (None if name == "model" else _copied(getattr(self, name)))
               for name in type(self).model_fields}
        model = {name: (None if name == "instance" else _copied(getattr(self.model, name)))
                 for name in ModelSection.model_fields}
        if instance is None:
            del model["instance"]
        else:
            model["instance"] = describe_instance(instance)
        out["model"] = model
        return out

    @property
    def target_kind(self) -> str:
        """torch | hf | sklearn | function | outputs (which model input was given)."""
        m = self.model
        if m.instance is not None:
            return instance_kind(m.instance)
        if m.hf_model:
            return "hf"
        return "torch" if m.module else "sklearn" if m.estimator else (
            "function" if m.predict else "outputs"
        )


def _copied(value: Any) -> Any:
    return value.to_dict() if isinstance(value, Spec) else copy.deepcopy(value)


def check_complete(cfg: AuditConfig) -> None:
    """The model named once (any source), the data and its training rows given."""
    m = cfg.model
    if m.instance is None and len(m.given) != 1:
        raise ConfigError(ONCE + (f"; got {', '.join(m.given)}." if m.given else "; got none."))
    data = cfg.data
    if not data.dataset:
        raise ConfigError("data.dataset is required: a dataset name or a data file.")
    if bool(data.members) == bool(data.membership_column):
        raise ConfigError("give the training rows as data.members (a file of row indices) or "
                          "data.membership_column (a 0/1 column of the data file), exactly "
                          "one of them.")
    if data.membership_column and data.nonmembers:
        raise ConfigError("data.nonmembers cannot be combined with data.membership_column "
                          "(the column says which rows are non-members).")
