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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from miaudit.config import (
    ComputeConfig,
    MetricsConfig,
    compute_section,
    resolve_grad_norm,
    resolve_queries,
)
from miaudit.errors import ConfigError
from miaudit.external.audit_model_spec import (
    OUTPUT_KINDS,
    ModelSection,
    ModelSource,
    describe_instance,
    instance_kind,
)
from miaudit.external.audit_spec import (
    AuditConfig,
    DataSection,
    PublicSection,
    ReferencesSection,
    SignalsSection,
    check_complete,
)

if TYPE_CHECKING:  # miaudit.data loads its loaders: the config checks stay light
    from miaudit.data.dataset import DataKind

__all__ = [
    "OUTPUT_KINDS", "AuditConfig", "DataSection", "ModelSection", "ModelSource",
    "PublicSection", "ReferencesSection", "SignalsSection", "absolute_paths", "audit_config",
    "audit_plan", "audit_signals", "check_listed_attacks", "describe_instance",
    "dump_audit_config", "instance_kind", "merge", "options_mapping", "resolve",
    "training_augment",
]

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
    """What the audit config's construction leaves to the registries, before the model loads
    or a reference trains: the reference recipe's fields, the declared augmentation, the
    attacks' parameters, compute."""
    if cfg.references.recipe is not None:
        from miaudit.train.recipe import check_fields

        check_fields(cfg.references.recipe, "references.recipe")  # the architecture's: later
    if cfg.model.augment is not None:
        from miaudit.train.augment import normalize_augmentation

        try:
            normalize_augmentation(cfg.model.augment)
        except ConfigError as exc:
            raise ConfigError(f"model.augment: {exc}") from exc
    # names and values, before the model loads or a reference trains
    from miaudit.attacks.registry import check_attack_params

    check_attack_params(cfg.attack_params, selected=cfg.attacks)
    cfg.compute = compute_section(cfg.compute)


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
    """A validated AuditConfig from a mapping (YAML file and flags merged): built (its own
    rules, :mod:`miaudit.external.audit_spec`), complete, and checked against the
    registries."""
    cfg = AuditConfig.build(data or {})
    check_complete(cfg)  # (an empty mapping builds the defaults)
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


def absolute_paths(data: dict[str, Any], base: str | os.PathLike[str]) -> dict[str, Any]:
    """A copy of an audit config mapping with every relative path made absolute against
    `base` (the config file's folder, or the current directory for flags); other values,
    registry dataset names and module names are left as they are."""
    folder = Path(base)
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for fields, make in ((_FILES, _absolute), (_SPECS, _absolute_spec), (_DATA, _absolute_data),
                        (_BASE, _absolute_base)):
        for section, keys in fields.items():
            where = out if section is None else out.get(section)
            if not isinstance(where, dict):
                continue  # absent, or malformed: audit_config says what is wrong
            for key in keys:
                if isinstance(where.get(key), str) and where[key]:
                    where[key] = make(where[key], folder)
    return out


def dump_audit_config(cfg: AuditConfig) -> str:
    """YAML of the resolved configuration, paths absolute (relative ones are taken from the
    current directory): `miaudit audit --config` reruns it as is, from any folder."""
    return str(yaml.safe_dump(absolute_paths(cfg.to_dict(), Path.cwd()), sort_keys=False))


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
               kind: DataKind | None = None, target_kind: str | None = None) -> Any:
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
    from miaudit.attacks.fit import BankPlan, PlanData
    from miaudit.config.plan import dataset_kind

    target_kind = target_kind or cfg.target_kind
    if kind is None:
        kind = dataset_kind(str(cfg.data.dataset), cfg.data.options, cfg.data_dir)
    # tokens: the texts, tokenized by the model folder's tokenizer
    seen: PlanData | None = "text" if kind == "tokens" else kind
    hf = bool(cfg.model.hf_model)
    data = ("sequence" if causal_lm else "text") if hf else seen
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
    if target_kind != "outputs" and seen is not None:
        queries = tuple(audit_signals(cfg, "tokens" if hf else seen, target_kind)[0])
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
