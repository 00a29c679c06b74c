"""The audited model's section of the audit config: a union with one variant per source
(:data:`ModelSource`), chosen by the key the user gave (a PyTorch module, a Hugging Face
folder, a scikit-learn estimator, a prediction function, precomputed outputs, or a model in
memory from the Python API). Every variant has every key (the others null), so code reads
``cfg.model.hf_model`` of any. :class:`~miaudit.external.audit_spec.AuditConfig` holds it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag, field_validator, model_validator
from typing_extensions import Self

from miaudit.config.sections.spec import (
    TAG,
    Dict,
    Float,
    OptStr,
    Spec,
    Typed,
    check_delta,
)
from miaudit.errors import ConfigError

OUTPUT_KINDS = ("auto", "logits", "probabilities")
# The keys that name the model, one per source (an in-memory model is the `instance`)
SOURCES = ("module", "hf_model", "estimator", "predict", "outputs")
ONCE = ("name the model exactly once: model.module (+ model.weights) for a PyTorch module, "
        "model.hf_model for a Hugging Face model folder, model.estimator for a scikit-learn "
        "estimator, model.predict for a prediction function, or model.outputs for "
        "precomputed outputs")


class ModelSection(Spec):
    """The audited model: exactly one of module (+ weights), hf_model, estimator, predict,
    outputs (or, from the Python API, an in-memory instance). Built in Python, this class
    holds any of them; a config chooses the variant by the key given."""

    key = "model"

    module: OptStr = Field(None, description=(
        "PyTorch: \"package.module:Class\" or \"file.py:Class\" (or a factory)."))
    kwargs: Dict = Field(default_factory=dict, description="The constructor's arguments.",
                         json_schema_extra={"must": "be a mapping of constructor arguments"})
    weights: OptStr = Field(None, description=(
        ".safetensors, or a torch.save state dict (loaded weights_only)."))
    estimator: OptStr = Field(None, description=(
        "A scikit-learn estimator with predict_proba (joblib/pickle, or skops)."))
    predict: OptStr = Field(None, description=(
        "Black box: \"package.module:function\", X -> [n, classes]."))
    outputs: OptStr = Field(None, description=(
        "Black box: precomputed outputs on the audit data's rows."))
    public_outputs: OptStr = Field(None, description=(
        "... and on the public data's rows (optional)."))
    output_kind: Typed[str] = Field("auto", description=(
        "Of predict/outputs: auto | logits | probabilities."),
        json_schema_extra={"must": f"be one of {', '.join(OUTPUT_KINDS)}"})
    tolerance: Float = Field(1e-3, gt=0, lt=1, description=(
        "|sum of a probability row - 1| allowed."),
        json_schema_extra={"must": "be a number in (0, 1)"})
    hf_model: OptStr = Field(None, description=(
        "A Hugging Face save_pretrained folder (config.json, weights, tokenizer.json): a "
        "sequence classifier or a causal LM, audited on text data."))
    max_length: Typed[int | None] = Field(None, ge=2, description=(
        "hf_model: tokens per text; null: min(model positions, 512)."),
        json_schema_extra={"why": "tokens per text"})
    base_model: OptStr = Field(None, description=(
        "hf_model causal LMs only: the pretrained model it was fine-tuned from (a base-model "
        "name such as smollm2-135m, a save_pretrained folder or a .gguf file): "
        "lm-base-reference's reference, queried on the texts."), json_schema_extra={
        "must": "be a base-model name, a folder or a .gguf path"})
    dp_epsilon: Typed[float | None] = Field(None, gt=0, description=(
        "The model's differential-privacy claim (e.g. its DP-SGD accountant's ε at δ): the "
        "audit sets each attack's empirical ε lower bound beside it and says whether one "
        "refutes it. With dp_delta."), json_schema_extra={
        "must": "be a number > 0 (the claimed ε, --dp-epsilon): ε must be a finite number "
                "> 0, e.g. 8"})
    dp_delta: Typed[float | None] = Field(None, ge=0, lt=1, description=(
        "The δ of the claim, with dp_epsilon."))
    augment: Typed[list[Any] | None] = Field(None, description=(
        "How the model was trained: its augmentation steps, as a recipe's augment ([crop, "
        "mirror], ...; image data). signals.queries: auto replays the training augmentation, "
        "as a run replays its recipe's: declared, images are queried with the views the "
        "attacks' papers use (plain + mirror; RAPID's 8); null: references.recipe's augment "
        "when it states one (the recipe you state is how the model trained), else none "
        "(plain queries only)."))
    instance: Any = Field(None, repr=False, description=(
        "An in-memory model from the Python API (miaudit.audit): a fitted estimator with "
        "predict_proba, an nn.Module (then module may name its class, for reference models) "
        "or a function X -> outputs. A file cannot hold one: audit.yaml records what it "
        "was."))

    @field_validator("output_kind")
    @classmethod
    def _output_kind(cls, value: str) -> str:
        if value not in OUTPUT_KINDS:
            raise ConfigError(f"model.output_kind must be one of {', '.join(OUTPUT_KINDS)}; "
                              f"got {value!r}.")
        return value

    @field_validator("dp_delta", mode="before")
    @classmethod
    def _delta(cls, value: Any) -> Any:
        if value is not None:
            check_delta(value, "model.dp_delta")
        return value

    @model_validator(mode="after")
    def _claim(self) -> Self:
        """model.dp_epsilon and model.dp_delta come together: an (ε, δ) claim."""
        if (self.dp_epsilon is None) != (self.dp_delta is None):
            raise ConfigError("give the model's DP claim as both model.dp_epsilon and "
                              "model.dp_delta (--dp-epsilon 8 --dp-delta 1e-5), or neither.")
        return self

    @property
    def given(self) -> list[str]:
        """The source keys given (:data:`SOURCES`)."""
        return [k for k in SOURCES if getattr(self, k)]


class _FileSource(ModelSection):
    """A model named by a key (not in memory): the keys of other sources' own are refused."""

    def _refuse(self, key: str, message: str) -> None:
        if getattr(self, key) is not None and getattr(self, key) != "":
            raise ConfigError(message)

    @model_validator(mode="after")
    def _source_keys(self) -> Self:
        if not isinstance(self, TorchModule):
            self._refuse("weights", "model.weights needs model.module (its class).")
        if not isinstance(self, PrecomputedOutputs):
            self._refuse("public_outputs", "model.public_outputs needs model.outputs.")
        if not isinstance(self, HFFolder):
            self._refuse("max_length", "model.max_length applies to a Hugging Face model "
                                       "folder (model.hf_model).")
            self._refuse("base_model", "model.base_model (the pretrained model a causal LM was "
                                       "fine-tuned from) needs model.hf_model, a causal LM "
                                       "folder.")
        return self


class TorchModule(_FileSource):
    """A PyTorch module: its class (``module``) and its weights."""

    @model_validator(mode="after")
    def _weights(self) -> Self:
        if not self.weights:
            raise ConfigError("model.module needs model.weights (a .safetensors file or a "
                              "torch.save state dict).")
        return self


class HFFolder(_FileSource):
    """A Hugging Face save_pretrained folder (``hf_model``)."""


class SklearnEstimator(_FileSource):
    """A scikit-learn estimator file (``estimator``)."""


class PredictFunction(_FileSource):
    """A black-box prediction function (``predict``)."""


class PrecomputedOutputs(_FileSource):
    """Precomputed outputs (``outputs``, and optionally ``public_outputs``)."""


class InMemoryModel(ModelSection):
    """A model given in memory to :func:`miaudit.audit` (``instance``)."""

    @model_validator(mode="after")
    def _alone(self) -> Self:
        check_instance(self, self.given)
        return self


_VARIANTS: dict[str, type[ModelSection]] = {
    "module": TorchModule, "hf_model": HFFolder, "estimator": SklearnEstimator,
    "predict": PredictFunction, "outputs": PrecomputedOutputs, "instance": InMemoryModel,
}


def _model_source(value: Any) -> str:
    """The variant's tag: by class, or by the one source key given (the section's
    before-validator has refused none or several)."""
    if isinstance(value, ModelSection):
        cls = type(value)
        return TAG + next((k for k, v in _VARIANTS.items() if v is cls), "predict")
    data = value if isinstance(value, dict) else {}
    if data.get("instance") is not None:
        return f"{TAG}instance"
    return TAG + next((k for k in SOURCES if data.get(k)), "predict")


# The model section of an audit config: one variant per source of the model.
ModelSource = Annotated[
    Annotated[TorchModule, Tag(f"{TAG}module")]
    | Annotated[HFFolder, Tag(f"{TAG}hf_model")]
    | Annotated[SklearnEstimator, Tag(f"{TAG}estimator")]
    | Annotated[PredictFunction, Tag(f"{TAG}predict")]
    | Annotated[PrecomputedOutputs, Tag(f"{TAG}outputs")]
    | Annotated[InMemoryModel, Tag(f"{TAG}instance")],
    Discriminator(_model_source),
]


def instance_kind(obj: Any) -> str:
    """torch | sklearn | function: what an in-memory model is (duck-typed, so torch is not
    imported here)."""
    if callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "forward", None)):
        return "torch"
    if hasattr(obj, "predict_proba"):
        return "sklearn"
    return "function"


def check_instance(m: Any, given: list[str]) -> None:
    """An in-memory model (the Python API) is the model: nothing else names one, except
    `module` naming an nn.Module's class (reference models are built from it)."""
    if isinstance(m.instance, str):  # audit.yaml of an in-memory audit, read back
        raise ConfigError(
            f"model.instance is {m.instance!r}: a model given in memory to miaudit.audit() "
            "cannot be reloaded from a config file. Save it and name the file instead: "
            "model.estimator (joblib.dump of the estimator), model.module + model.weights "
            "(its class and state_dict), or model.predict (an importable function)."
        )
    others = [k for k in given if not (k == "module" and instance_kind(m.instance) == "torch")]
    if others or m.weights:
        raise ConfigError(
            "an in-memory model is the model: do not also give "
            f"{', '.join(others + (['model.weights'] if m.weights else []))}."
        )


def model_mapping(value: Any) -> Any:
    """The model section as its variant takes it, named exactly once (ConfigError else):
    a mapping, or a :class:`ModelSection` built in Python as its fields."""
    if type(value) is ModelSection:
        value = {name: getattr(value, name) for name in ModelSection.model_fields}
    if not isinstance(value, dict):
        return value
    if value.get("instance") is not None:
        check_instance(_Fields(value), [k for k in SOURCES if value.get(k)])
        return value
    given = [k for k in SOURCES if value.get(k)]
    if len(given) != 1:
        raise ConfigError(ONCE + (f"; got {', '.join(given)}." if given else "; got none."))
    return value


class _Fields:
    """A mapping's keys read as attributes (check_instance on a mapping)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.instance, self.weights = data.get("instance"), data.get("weights")


def describe_instance(obj: Any) -> str:
    """What audit.yaml records for an in-memory model (it cannot be rerun from the file)."""
    kind = type(obj)
    name = getattr(obj, "__qualname__", None) if instance_kind(obj) == "function" else None
    return f"in memory: {name or f'{kind.__module__}.{kind.__qualname__}'}"
