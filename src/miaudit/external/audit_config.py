"""The configuration of `miaudit audit`: a short YAML file and/or command-line flags.

Unknown keys are errors with a suggestion (as in :mod:`miaudit.config`). Paths in a config
file are read relative to that file's folder, paths given as flags relative to the current
directory (:func:`absolute_paths`). The resolved configuration is saved into the run
directory as ``audit.yaml``, with absolute paths, so ``--config`` reruns it from anywhere.

Both front doors build their config here: :func:`options_mapping` turns the options they share
(``miaudit audit``'s flags, :func:`miaudit.audit`'s arguments) into a mapping, and
:func:`resolve` lays the mappings over each other (a config file, flags, the API's
``options``) into one validated :class:`AuditConfig`.

The settings `miaudit run` has too are spelled and defaulted as in its
:class:`~miaudit.config.RunConfig` (the ``signals`` rule for ``auto`` is
:func:`miaudit.config.resolve_queries` / :func:`~miaudit.config.resolve_grad_norm` in both);
tests/external/test_audit_config.py lists them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from miaudit.config import (
    AUTO,
    ComputeConfig,
    MetricsConfig,
    build_config,
    check_signals,
    compute_section,
    resolve_grad_norm,
    resolve_queries,
)
from miaudit.config.section_checks import whole
from miaudit.config.typecheck import check_field_types
from miaudit.errors import ConfigError
from miaudit.records.run_dir import check_run_name

OUTPUT_KINDS = ("auto", "logits", "probabilities")


@dataclass
class ModelSection:
    """The audited model: exactly one of module (+ weights), hf_model, estimator, predict,
    outputs."""

    module: str | None = None  # torch: "package.module:Class" or "file.py:Class" (or factory)
    kwargs: dict[str, Any] = field(default_factory=dict)  # constructor arguments
    weights: str | None = None  # .safetensors, or a torch.save state dict (weights_only)
    estimator: str | None = None  # scikit-learn estimator with predict_proba (joblib/pickle)
    predict: str | None = None  # black box: "package.module:function", X -> [n, classes]
    outputs: str | None = None  # black box: precomputed outputs on the audit data's rows
    public_outputs: str | None = None  # ... and on the public data's rows (optional)
    output_kind: str = "auto"  # of predict/outputs: auto | logits | probabilities
    tolerance: float = 1e-3  # |sum of a probability row - 1| allowed
    # A Hugging Face save_pretrained folder (config.json, weights, tokenizer.json): a sequence
    # classifier or a causal LM, audited on text data (miaudit.external.hf_folder).
    hf_model: str | None = None
    max_length: int | None = None  # tokens per text; default min(model positions, 512)
    # hf_model causal LMs only: the pretrained model it was fine-tuned from (a base-model name
    # such as smollm2-135m, a save_pretrained folder or a .gguf file): lm-base-reference's
    # reference, queried on the texts (no reference model trained for it)
    base_model: str | None = None
    # The model's differential-privacy claim (e.g. its DP-SGD accountant's ε at δ): the audit
    # sets each attack's empirical ε lower bound beside it and says whether one refutes it.
    dp_epsilon: float | None = None
    dp_delta: float | None = None
    augment: list[Any] | None = None
    """How the model was trained: its augmentation steps, as a recipe's ``augment`` ([crop,
    mirror], ...; image data). `signals.queries: auto` replays the training augmentation, as a
    run replays its recipe's: declared, images are queried with the views the attacks' papers
    use (plain + mirror; RAPID's 8); None: ``references.recipe``'s ``augment`` when it states
    one (the recipe you state is how the model trained), else none (plain queries only)."""
    # An in-memory model from the Python API (miaudit.audit): a fitted estimator with
    # predict_proba, an nn.Module (then `module` may name its class, for reference models) or
    # a function X -> outputs. A file cannot hold one: audit.yaml records what it was.
    instance: Any = field(default=None, repr=False, compare=False)


@dataclass
class DataSection:
    """The data the model was trained on and data it was not."""

    dataset: str | None = None  # registry name (`miaudit data list`) or .npz/.csv/.parquet
    options: dict[str, Any] = field(default_factory=dict)  # loader options (label_column, ...)
    members: str | None = None  # file of training row indices (.txt/.csv/.npy/.json)
    membership_column: str | None = None  # or a 0/1 column (array in .npz) of the data file
    nonmembers: str | None = None  # file of row indices; default: every other row


@dataclass
class PublicSection:
    """The attacker's data: reference models train on it; never evaluated."""

    dataset: str | None = None  # default: the audit data (then `rows` is required)
    options: dict[str, Any] = field(default_factory=dict)
    rows: str | None = None  # file of row indices; default: every row of `dataset`
    population: float = 0.2  # fraction kept out of every reference model (RMIA's z samples)


@dataclass
class ReferencesSection:
    """Reference models: the target's architecture, trained on public data."""

    models: int = 4  # 0: threshold attacks only
    # torch: recipe fields (miaudit.train.Recipe; the architecture is your module). scikit-learn:
    # unused (the estimator is cloned). Black box: a stand-in with an `architecture`, or none.
    recipe: dict[str, Any] | None = None
    # Train references on fewer rows than the target when the public pool is too small
    # (otherwise refused: such references understate the leak).
    allow_fewer_rows: bool = False
    # hf_model only: the pretrained checkpoint folder the model was fine-tuned from; references
    # are fine-tuned from it (default: the model's config trained from scratch).
    base: str | None = None


@dataclass
class SignalsSection:
    """As a run's :class:`~miaudit.config.SignalsConfig` (without output defences): the same
    keys, defaults and ``auto`` rule."""

    # plain | mirror | crop-flip-K (images) | token-dropout-K | adjacent-swap-K (texts), or auto
    queries: list[str] | str = AUTO
    """As :attr:`miaudit.config.SignalsConfig.queries`: ``auto`` replays the training
    augmentation, here ``model.augment`` (else ``references.recipe``'s): declared, images get
    plain + mirror (RAPID's 8); not declared (the default), plain only. Precomputed outputs
    hold one query: plain."""
    grad_norm: bool | str = AUTO
    """As :attr:`miaudit.config.SignalsConfig.grad_norm`: ``auto`` computes gradient norms
    when an attack to run reads them (every attack without ``attacks``), on white-box
    models."""
    boundary_distance: bool = False  # label-only HopSkipJump distances (slow)
    batch_size: int = 1024

    def __post_init__(self) -> None:
        self.queries, self.grad_norm = check_signals(self.queries, self.grad_norm)


@dataclass
class AuditConfig:
    name: str = "audit"
    seed: int = 0
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    public: PublicSection = field(default_factory=PublicSection)
    references: ReferencesSection = field(default_factory=ReferencesSection)
    signals: SignalsSection = field(default_factory=SignalsSection)
    attacks: list[str] | None = None
    """Default: every attack the audit permits, those that cannot run listed with the reason
    (an audit cannot choose its models, so it tries all). Listed explicitly, an attack the
    audit could never run (its plan: :func:`check_listed_attacks`) is refused before the
    target is queried or a reference model trains; one only its bank can rule out is listed
    with the reason. `miaudit run` differs on purpose: it
    scores the attacks it lists, each of which must run, by default the five threshold
    attacks."""
    attack_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    exposed: int = 20  # training samples in the exposure ranking
    data_dir: str | None = None  # datasets folder; default $MIAUDIT_DATA_DIR or ~/.cache
    device: str = "auto"  # auto | cpu | cuda[:N]
    # the target's (and the base model's) query precision: fp32, or bf16 (bfloat16 autocast:
    # CUDA, or a CPU with AVX-512 BF16 / AMX); the references run at their recipe's
    precision: str = "fp32"
    # where the reference models train (a run's compute: local, or a Ray cluster)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    output: str | None = None  # run directory; default runs/<name>
    cache_dir: str | None = None  # model cache; default $MIAUDIT_CACHE_DIR or ~/.cache

    def to_dict(self) -> dict[str, Any]:
        instance = self.model.instance
        # asdict would deep-copy an in-memory model; the mapping (audit.yaml, the report's
        # config) names it instead, and has no `instance` key without one (files unchanged)
        plain = dataclasses.replace(self, model=dataclasses.replace(self.model, instance=None))
        out = dataclasses.asdict(plain)
        if instance is None:
            del out["model"]["instance"]
        else:
            out["model"]["instance"] = describe_instance(instance)
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


def instance_kind(obj: Any) -> str:
    """torch | sklearn | function: what an in-memory model is (duck-typed, so torch is not
    imported here)."""
    if callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "forward", None)):
        return "torch"
    if hasattr(obj, "predict_proba"):
        return "sklearn"
    return "function"


def describe_instance(obj: Any) -> str:
    """What audit.yaml records for an in-memory model (it cannot be rerun from the file)."""
    kind = type(obj)
    name = getattr(obj, "__qualname__", None) if instance_kind(obj) == "function" else None
    return f"in memory: {name or f'{kind.__module__}.{kind.__qualname__}'}"


_SECTIONS: dict[str, type] = {
    "model": ModelSection,
    "data": DataSection,
    "public": PublicSection,
    "references": ReferencesSection,
    "signals": SignalsSection,
    "metrics": MetricsConfig,
    "compute": ComputeConfig,
}


def _check(cfg: AuditConfig) -> None:
    def need(cond: bool, message: str) -> None:
        if not cond:
            raise ConfigError(message)

    check_run_name(cfg.name)  # it names the folder runs/<name>: a name, never a path
    m = cfg.model
    given = [k for k in ("module", "hf_model", "estimator", "predict", "outputs")
             if getattr(m, k)]
    if m.instance is not None:
        _check_instance(m, given)
    need(m.instance is not None or len(given) == 1,
         "name the model exactly once: model.module (+ model.weights) for a PyTorch module, "
         "model.hf_model for a Hugging Face model folder, "
         "model.estimator for a scikit-learn estimator, model.predict for a prediction "
         "function, or model.outputs for precomputed outputs"
         + (f"; got {', '.join(given)}." if given else "; got none."))
    need(not m.module or bool(m.weights) or m.instance is not None,
         "model.module needs model.weights (a .safetensors file or a torch.save state dict).")
    need(not m.weights or bool(m.module), "model.weights needs model.module (its class).")
    need(not m.public_outputs or bool(m.outputs), "model.public_outputs needs model.outputs.")
    need(isinstance(m.kwargs, dict), "model.kwargs must be a mapping of constructor arguments.")
    need(m.max_length is None or (isinstance(m.max_length, int) and not isinstance(
        m.max_length, bool) and m.max_length >= 2),
         f"model.max_length must be an integer >= 2 (tokens per text); got {m.max_length!r}.")
    need(m.max_length is None or bool(m.hf_model),
         "model.max_length applies to a Hugging Face model folder (model.hf_model).")
    need(m.base_model is None or (isinstance(m.base_model, str) and bool(m.base_model)),
         f"model.base_model must be a base-model name, a folder or a .gguf path; got "
         f"{m.base_model!r}.")
    need(not m.base_model or bool(m.hf_model),
         "model.base_model (the pretrained model a causal LM was fine-tuned from) needs "
         "model.hf_model, a causal LM folder.")
    need(not cfg.references.base or bool(m.hf_model),
         "references.base (the checkpoint a Hugging Face model was fine-tuned from) needs "
         "model.hf_model.")
    _check_claim(m)
    need(m.output_kind in OUTPUT_KINDS,
         f"model.output_kind must be one of {', '.join(OUTPUT_KINDS)}; got {m.output_kind!r}.")
    need(isinstance(m.tolerance, (int, float)) and 0 < m.tolerance < 1,
         "model.tolerance must be a number in (0, 1).")
    need(bool(cfg.data.dataset), "data.dataset is required: a dataset name or a data file.")
    need(bool(cfg.data.members) != bool(cfg.data.membership_column),
         "give the training rows as data.members (a file of row indices) or "
         "data.membership_column (a 0/1 column of the data file), exactly one of them.")
    need(not (cfg.data.membership_column and cfg.data.nonmembers),
         "data.nonmembers cannot be combined with data.membership_column (the column says "
         "which rows are non-members).")
    need(isinstance(cfg.public.population, (int, float)) and 0 <= cfg.public.population < 1,
         "public.population must be a fraction in [0, 1).")
    need(whole(cfg.references.models) and cfg.references.models >= 0,
         f"references.models must be an integer >= 0 (0: threshold attacks only); got "
         f"{cfg.references.models!r}.")
    need(isinstance(cfg.references.allow_fewer_rows, bool),
         "references.allow_fewer_rows must be true or false.")
    need(cfg.references.recipe is None or isinstance(cfg.references.recipe, dict),
         "references.recipe must be a mapping of recipe fields (epochs, lr, ...).")
    if cfg.references.recipe is not None:  # before the model loads or a reference trains
        from miaudit.train.recipe import check_fields

        check_fields(cfg.references.recipe, "references.recipe")  # the architecture's: later
    need(isinstance(cfg.seed, int) and not isinstance(cfg.seed, bool) and cfg.seed >= 0,
         f"seed must be an integer >= 0 (it seeds numpy's generators); got {cfg.seed!r}.")
    need(whole(cfg.exposed) and cfg.exposed >= 1,
         f"exposed must be an integer >= 1 (training samples in the exposure ranking); got "
         f"{cfg.exposed!r}.")
    need(cfg.attacks is None or (isinstance(cfg.attacks, list)
                                 and all(isinstance(a, str) for a in cfg.attacks)),
         "attacks must be a list of attack names (see `miaudit attacks`).")
    if cfg.signals is None:  # `signals:` left empty in the YAML
        cfg.signals = SignalsSection()
    need(whole(cfg.signals.batch_size) and cfg.signals.batch_size >= 1,
         f"signals.batch_size must be an integer >= 1 (samples per query batch); got "
         f"{cfg.signals.batch_size!r}.")
    if m.augment is not None:  # before the model loads
        from miaudit.train.augment import normalize_augmentation

        try:
            normalize_augmentation(m.augment)
        except ConfigError as exc:
            raise ConfigError(f"model.augment: {exc}") from exc
    need(cfg.device in ("auto", "cpu", "cuda") or str(cfg.device).startswith("cuda:"),
         f"device must be auto, cpu or cuda[:N]; got {cfg.device!r}.")
    need(all(0 < f < 1 for f in cfg.metrics.fprs), "metrics.fprs must lie in (0, 1).")
    from miaudit.runtime.devices import PRECISIONS

    need(cfg.precision in PRECISIONS,
         f"precision must be one of {', '.join(PRECISIONS)}; got {cfg.precision!r}.")
    need(isinstance(cfg.attack_params, dict),
         "attack_params must map attack names to mappings {parameter: value}.")
    # names and values, before the model loads or a reference trains
    from miaudit.attacks.registry import check_attack_params

    check_attack_params(cfg.attack_params, selected=cfg.attacks)
    cfg.compute = compute_section(cfg.compute)
    check_field_types(cfg)  # the backstop: every field of its annotated type


def _check_claim(m: ModelSection) -> None:
    """model.dp_epsilon and model.dp_delta come together: an (ε, δ) claim."""
    from miaudit.config import check_delta

    if (m.dp_epsilon is None) != (m.dp_delta is None):
        raise ConfigError("give the model's DP claim as both model.dp_epsilon and "
                          "model.dp_delta (--dp-epsilon 8 --dp-delta 1e-5), or neither.")
    if m.dp_epsilon is None:
        return
    eps = m.dp_epsilon
    # inf and nan as well: "ε = ∞" claims nothing, and would print as "claimed ε -"
    if (isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0
            or eps == float("inf")):
        raise ConfigError(f"model.dp_epsilon must be a number > 0 (the claimed ε, "
                          f"--dp-epsilon): ε must be a finite number > 0, e.g. 8; got {eps!r}. "
                          f"A model without a DP claim takes neither --dp-epsilon nor "
                          f"--dp-delta.")
    check_delta(m.dp_delta, "model.dp_delta")


def _check_instance(m: ModelSection, given: list[str]) -> None:
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


def training_augment(cfg: AuditConfig) -> tuple[list[Any], str]:
    """The audited model's training augmentation as declared (``model.augment``, else
    ``references.recipe``'s ``augment``; none: []) and the key that declares it."""
    if cfg.model.augment is not None:
        return list(cfg.model.augment), "model.augment"
    recipe = cfg.references.recipe or {}
    return list(recipe.get("augment") or []), "references.recipe.augment"


def audit_signals(cfg: AuditConfig, kind: str, target_kind: str) -> tuple[list[str], bool]:
    """The queries and whether to compute gradient norms, for data of `kind` and a target of
    `target_kind` (``outputs``: precomputed, one query): ``signals`` as given, ``auto`` by the
    rule a run follows (:func:`miaudit.config.resolve_queries`, with the declared training
    augmentation; :func:`~miaudit.config.resolve_grad_norm` with the attacks to run, every
    attack when none are named)."""
    from miaudit.attacks import list_attacks

    attacks = cfg.attacks if cfg.attacks is not None else [s.name for s in list_attacks()]
    augment, where = training_augment(cfg)
    if augment and kind != "image" and where == "model.augment":  # (a recipe's: references)
        raise ConfigError(f"model.augment names image augmentation steps; the audit data are "
                          f"{'texts' if kind in ('text', 'tokens') else kind}: remove it.")
    queryable = target_kind != "outputs"  # precomputed outputs hold the plain query only
    queries = resolve_queries(cfg.signals.queries, kind, attacks, augment if queryable else [])
    return queries, resolve_grad_norm(cfg.signals.grad_norm, attacks)


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` laid over ``base``, section by section (flags over the YAML file)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key in _SECTIONS:
            section = {**out[key], **value}
            # loader options add up: `--preprocessing raw` keeps the file's label_column
            if isinstance(value.get("options"), dict) and isinstance(out[key].get("options"), dict):
                section["options"] = {**out[key]["options"], **value["options"]}
            out[key] = section
        else:
            out[key] = value
    return out


def audit_config(data: dict[str, Any] | None) -> AuditConfig:
    """A validated AuditConfig from a mapping (YAML file and flags merged)."""
    cfg = build_config(AuditConfig, data or {}, _SECTIONS, "the audit config")
    _check(cfg)
    return cfg


# Path fields of the audit config, by section (None: top level). `spec` fields are
# "file.py:Name" or "package.module:Name"; `data` fields are a file or a registry name.
_FILES = {"model": ("weights", "estimator", "outputs", "public_outputs", "hf_model"),
          "data": ("members", "nonmembers"), "public": ("rows",), "references": ("base",),
          None: ("data_dir", "cache_dir", "output")}
_SPECS = {"model": ("module", "predict")}
_DATA = {"data": ("dataset",), "public": ("dataset",)}
_BASE = {"model": ("base_model",)}  # a registered base-model name stays a name


def _absolute(value: str, base: Path) -> str:
    return os.path.abspath(base / Path(value).expanduser())


def _absolute_data(value: str, base: Path) -> str:
    """A dataset file as an absolute path; a registry name (`digits`) stays a name."""
    from miaudit.data import list_datasets
    from miaudit.data.registry import FILE_SUFFIXES

    if value in {info.name for info in list_datasets()}:
        return value
    path = base / Path(value).expanduser()
    if path.is_file() or Path(value).suffix.lower() in FILE_SUFFIXES:
        return os.path.abspath(path)
    return value  # neither: loading says what is wrong


def _absolute_base(value: str, base: Path) -> str:
    from miaudit.models.pretrained import list_base_models

    return value if value in list_base_models() else _absolute(value, base)


def _absolute_spec(value: str, base: Path) -> str:
    where, colon, name = value.rpartition(":")
    if colon and where.endswith(".py"):
        return f"{_absolute(where, base)}:{name}"
    return value  # an importable module name: not a path


def absolute_paths(data: dict[str, Any], base: str | os.PathLike) -> dict[str, Any]:
    """A copy of an audit config mapping with every relative path made absolute against
    `base` (the config file's folder, or the current directory for flags); other values,
    registry dataset names and module names are left as they are."""
    base = Path(base)
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for fields, make in ((_FILES, _absolute), (_SPECS, _absolute_spec), (_DATA, _absolute_data),
                        (_BASE, _absolute_base)):
        for section, keys in fields.items():
            where = out if section is None else out.get(section)
            if not isinstance(where, dict):
                continue  # absent, or malformed: audit_config says what is wrong
            for key in keys:
                if isinstance(where.get(key), str) and where[key]:
                    where[key] = make(where[key], base)
    return out


def dump_audit_config(cfg: AuditConfig) -> str:
    """YAML of the resolved configuration, paths absolute (relative ones are taken from the
    current directory): `miaudit audit --config` reruns it as is, from any folder."""
    return yaml.safe_dump(absolute_paths(cfg.to_dict(), Path.cwd()), sort_keys=False)


# Table files: a label (or text) column names the column of the file itself. A .txt (texts,
# one a line) has no columns: its loader takes the text column as implied and refuses a label
# column (it holds no labels), so a --label-column given for one is not dropped unsaid.
_TABLES = (".csv", ".parquet", ".pq", ".jsonl", ".txt")
# Files fed as given: a public dataset in one of these is not given the audit data's
# preprocessing (a registry dataset is, so both are scaled alike).
_AS_GIVEN = (".npz", ".csv", ".parquet", ".pq")


def options_mapping(
    model: Mapping[str, Any],
    *,
    dataset: str | None = None,
    data_options: Mapping[str, Any] | None = None,
    members: str | None = None,
    membership_column: str | None = None,
    nonmembers: str | None = None,
    public: str | None = None,
    public_rows: str | None = None,
    population: float | None = None,
    label_column: str | None = None,
    text_column: str | None = None,
    preprocessing: str | None = None,
    references: int | None = None,
    recipe: Mapping[str, Any] | None = None,
    allow_fewer_reference_rows: bool = False,
    reference_base: str | None = None,
    attacks: list[str] | None = None,
    output: str | None = None,
) -> dict[str, Any]:
    """The audit config mapping of the options both front doors take (``miaudit audit``'s
    flags, :func:`miaudit.audit`'s arguments): options not given (None) are left out, so a
    config file's values stand under flags.

    ``model``: the model section as given (None values dropped). ``label_column`` and
    ``text_column`` go to the loader options of every table file given (the audit data's and
    the public data's); ``preprocessing`` to the audit data's, and to a public dataset named
    by registry name (scaled as the audit data is; a file is fed as given)."""
    sections: dict[str, dict[str, Any]] = {
        "model": {k: v for k, v in model.items() if v is not None},
        "data": {}, "public": {}, "references": {},
    }

    def put(section: str, key: str, value: Any) -> None:
        if value is not None:
            sections[section][key] = value

    put("data", "dataset", dataset)
    put("data", "options", None if data_options is None else dict(data_options))
    put("data", "members", members)
    put("data", "membership_column", membership_column)
    put("data", "nonmembers", nonmembers)
    put("public", "dataset", public)
    put("public", "rows", public_rows)
    put("public", "population", population)
    for key, value in (("label_column", label_column), ("text_column", text_column)):
        for section, name in (("data", dataset), ("public", public)):
            if value is not None and name and Path(name).suffix.lower() in _TABLES:
                sections[section].setdefault("options", {})[key] = value
    if preprocessing is not None:
        sections["data"].setdefault("options", {})["preprocessing"] = preprocessing
        if public and Path(public).suffix.lower() not in _AS_GIVEN:
            sections["public"].setdefault("options", {})["preprocessing"] = preprocessing
    put("references", "models", references)
    put("references", "recipe", None if recipe is None else dict(recipe))
    put("references", "allow_fewer_rows", True if allow_fewer_reference_rows else None)
    put("references", "base", reference_base)
    top: dict[str, Any] = {}
    if attacks is not None:
        top["attacks"] = list(attacks)
    if output is not None:
        top["output"] = output
    return {**top, **{k: v for k, v in sections.items() if v}}


def resolve(*layers: tuple[Mapping[str, Any], str | os.PathLike[str]]) -> AuditConfig:
    """The validated AuditConfig of mappings laid over each other in order (a config file,
    then flags; or the API's arguments, then its ``options``), each given with the folder its
    relative paths are read from (a config file's own folder; the current directory for
    flags and the API)."""
    merged: dict[str, Any] = {}
    for mapping, base in layers:
        merged = merge(merged, absolute_paths(dict(mapping), base))
    return audit_config(merged)


# --- the attacks listed, against the bank the audit will build ---------------------------

# What a black-box target cannot give per-sample gradients as, for messages.
_NO_GRADIENTS = {
    "sklearn": "a scikit-learn estimator (predict_proba only)",
    "function": "a black-box prediction function",
    "outputs": "precomputed outputs",
}


def _public_given(cfg: AuditConfig) -> bool | None:
    """Whether the audit has public data (reference models train on it; the population is
    drawn from it): given as rows of the audit data or as another dataset; False when none is
    named; None when only loading tells (loader options of its own)."""
    public = cfg.public
    if public.rows or public.dataset not in (None, cfg.data.dataset):
        return True
    if public.dataset is None and not public.options:
        return False
    return None


def audit_plan(cfg: AuditConfig, *, causal_lm: bool = False, base_model: bool = False,
               kind: str | None = None, target_kind: str | None = None) -> Any:
    """The bank `miaudit audit` will build for ``cfg``, before anything loads or trains
    (:class:`~miaudit.attacks.fit.BankPlan`): the most it can hold, None where only loading
    tells (its attacks are then left to the bank's skip reasons).

    ``causal_lm``: ``model.hf_model`` is a causal LM (:func:`~miaudit.external.hf_folder.
    hf_task`); ``base_model``: its pretrained base is known (``model.base_model``, or an
    adapter's); ``kind``: the audit data's kind once loaded (default: from the registry or
    the file's loader options); ``target_kind``: the loaded target's (default:
    ``cfg.target_kind``). Reference models train on public data only: none is IN for an audit
    sample, and each is OUT for all of them."""
    from miaudit.attacks import list_attacks
    from miaudit.attacks.fit import BankPlan
    from miaudit.config.plan import dataset_kind

    target_kind = target_kind or cfg.target_kind
    if kind is None:
        kind = dataset_kind(str(cfg.data.dataset), cfg.data.options, cfg.data_dir)
    if kind == "tokens":  # the texts, tokenized by the model folder's tokenizer
        kind = "text"
    hf = bool(cfg.model.hf_model)
    data = ("sequence" if causal_lm else "text") if hf else kind
    public = _public_given(cfg)
    references = 0 if public is False else cfg.references.models
    attacks = cfg.attacks if cfg.attacks is not None else [s.name for s in list_attacks()]
    white_box = target_kind in ("torch", "hf") and not causal_lm
    channels = {"grad_norm": white_box and resolve_grad_norm(cfg.signals.grad_norm, attacks),
                "boundary_distance": (bool(cfg.signals.boundary_distance) and not causal_lm
                                      and target_kind != "outputs")}
    population: bool | None = None
    if (public is False or not cfg.public.population
            or (target_kind == "outputs" and not cfg.model.public_outputs)):
        population = False
    queries: tuple[str, ...] | None = ("plain",)
    if target_kind != "outputs" and kind is not None:
        queries = tuple(audit_signals(cfg, "tokens" if hf else kind, target_kind)[0])
    elif target_kind != "outputs":
        queries = None  # a user's .npz: images are queried on the declared augmentation
    plan = BankPlan(
        data=data, dataset=Path(str(cfg.data.dataset)).name, where="this audit",
        references=references, in_references=0, out_references=references,
        # each reference on its own random part of the public pool (as offline references):
        # a shadow with members, non-members and other references OUT, when they train
        shadow_scorer=None if references else False,
        shadow_references=None if references > 1 else False,
        population=population, queries=queries,
        channels=frozenset(name for name, on in channels.items() if on),
        sequence=causal_lm, texts=hf, base_model=causal_lm and base_model,
        prefix=False if not causal_lm or public is False else None, token_ids=causal_lm,
    )
    return dataclasses.replace(plan, explain=_audit_explain(cfg, plan, target_kind, public))


def _audit_explain(cfg: AuditConfig, plan: Any, target_kind: str, public: bool | None
                   ) -> Any:  # fmt: skip
    """What the audit's bank lacks for a need, in its config keys and flags, and how to give
    it (:attr:`miaudit.attacks.fit.BankPlan.explain`)."""
    n = cfg.references.models
    no_public = ("this audit has no public data (the attacker's rows: reference models train "
                 "on them, population samples are kept out of every model): give "
                 "public.dataset or public.rows (--public / --public-rows)")

    def not_lm() -> str:
        if cfg.model.hf_model:
            return ("the model folder is a sequence classifier, not a causal LM: these attacks "
                    "read a causal LM's token probabilities")
        return (f"the target is a classifier on {plan.data_words.split(' are ', 1)[1]}, not a "
                "causal LM: audit a causal LM folder (model.hf_model, --hf-model) on texts")

    def explain(need: str, value: Any, attack: str) -> str:
        if need in ("out_references", "in_references", "shadows"):
            if need == "in_references" and n and public is not False:
                return ("the audit's reference models train on public data only, so none is "
                        "IN for an audit sample")
            if n == 0:
                return ("this audit trains no reference model (references.models: 0): raise "
                        "references.models (--references)")
            if public is False:
                return no_public
            return (f"this audit trains at most {n} reference model{'s' if n != 1 else ''} "
                    f"(references.models: {n}): raise references.models (--references) to at "
                    f"least {value}")
        if need == "population":
            if public is False:
                return no_public
            if not cfg.public.population:
                return ("public.population is 0: keep a fraction of the public rows out of "
                        "every reference model (e.g. public.population: 0.2, --population)")
            return ("it reads the target's outputs on population rows, which precomputed "
                    "outputs lack: give model.public_outputs (--public-outputs)")
        if need == "channel":
            if plan.sequence:
                return f"a causal LM has no '{value}' channel (a classifier's)"
            if value == "grad_norm" and target_kind in _NO_GRADIENTS:
                return (f"the target is {_NO_GRADIENTS[target_kind]}: gradients need white-box "
                        "access to a PyTorch model (model.module + model.weights, or "
                        "model.hf_model)")
            if value == "grad_norm":
                return "signals.grad_norm is false (--no-grad-norm): set it to true or auto"
            if value == "boundary_distance" and target_kind == "outputs":
                return ("precomputed outputs cannot be queried at new inputs (its HopSkipJump "
                        "search): give the model itself")
            return (f"signals.{value} is off (its HopSkipJump search costs about 1,100 queries "
                    f"per sample and model): set signals.{value}: true (--boundary-distance)")
        if need in ("sequence", "next_token_moments", "token_ids"):
            return not_lm()
        if need == "text":
            return (f"{plan.data_words}; texts are audited with a Hugging Face model folder "
                    "(model.hf_model, --hf-model) on a text dataset")
        if need == "augmented_queries":
            if target_kind == "outputs":
                return ("precomputed outputs hold the plain query only: give the model itself "
                        "to query augmented views")
            return (f"this audit queries {list(plan.queries or ())}: declare the model's "
                    "training augmentation (model.augment, --augment), which signals.queries: "
                    "auto replays on images, or list views in signals.queries (--queries)")
        if need == "base_model":
            if not plan.sequence:
                return not_lm()
            return ("this audit has no pretrained base model: give the model the target was "
                    "fine-tuned from as model.base_model (--base-model)")
        if need == "prefix_conditioned":
            if not plan.sequence:
                return not_lm()
            return f"{no_public}; ReCaLL's prefix is drawn from public texts"
        return f"this audit's bank will not have it ({plan.data_words})"

    return explain


def check_listed_attacks(cfg: AuditConfig, **plan: Any) -> None:
    """The attacks ``attacks`` lists explicitly (``--attacks``) can run on the bank the audit
    will build (:func:`audit_plan`, with its keyword arguments): ConfigError naming each one
    that cannot, why and how to fix it, before the target is queried or a reference model
    trains. Without ``attacks`` (the default: every attack), those that cannot run are left
    out with the reason, as the bank shows them."""
    if cfg.attacks is None:
        return
    from miaudit.attacks.fit import check_fit

    check_fit(cfg.attacks, audit_plan(cfg, **plan), "attacks (--attacks)")
