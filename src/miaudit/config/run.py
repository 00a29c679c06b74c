"""The run configuration (:class:`RunConfig`): a validated YAML file, saved into every run
directory.

Unknown keys are errors (with a suggestion), so a typo never silently falls back to a default.
A key renamed in this release (:data:`RUN_RENAMED`) still works under its old spelling, with a
warning that names the new one.

`miaudit run` (:class:`RunConfig`) and `miaudit audit` (its ``AuditConfig``,
:mod:`miaudit.external.audit_config`) spell and default the settings they share alike:
``signals`` (:func:`resolve_queries` and :func:`resolve_grad_norm` are the one rule of both
for ``auto``), ``metrics`` and ``compute`` (one class each), ``name``, ``seed``,
``attack_params``, ``device``, ``output``, ``cache_dir``, ``data_dir``;
tests/external/test_audit_config.py holds them to it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import yaml
from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator
from typing_extensions import Self

from miaudit.config.canaries import check_canaries_section
from miaudit.config.recipes import REFERENCE_KEYWORDS, Recipes, recipe_fields, resolve_recipes
from miaudit.config.section_checks import check_forgetting
from miaudit.config.sections import (
    DEFAULT_ATTACKS,
    CanariesSpec,
    CheckpointsConfig,
    ComputeConfig,
    DatasetConfig,
    ForgettingConfig,
    MetricsConfig,
    SignalsConfig,
    SplitConfig,
    compute_section,
)
from miaudit.config.sections.canary_spec import as_variant
from miaudit.config.sections.spec import Dict, Int, Names, OptStr, Spec, Str, Typed, suggest
from miaudit.errors import AttackError, ConfigError, ParamError
from miaudit.records.run_dir import check_run_name

if TYPE_CHECKING:  # miaudit.data loads its loaders: the config checks stay light
    from miaudit.data.dataset import DataKind

# Keys renamed in this release: old dotted key -> new one. The old spelling still works for one
# release and warns that it is now the new one; giving both is an error.
RUN_RENAMED: dict[str, str] = {"dataset.data_dir": "data_dir"}
# Recipe fields, or the name of one in `recipes`
RecipeValue = Typed[dict[str, Any] | str]
OptRecipeValue = Typed[dict[str, Any] | str | None]
DEVICE = "be auto, cpu or cuda[:N]"


def _run_name(value: str) -> str:
    check_run_name(value)  # it names the folder runs/<name>: a name, never a path
    return value


def check_device(value: str) -> str:
    """``device`` of either config: auto, cpu or cuda[:N]."""
    if not (value in ("auto", "cpu", "cuda") or value.startswith("cuda:")):
        raise ConfigError(f"device must {DEVICE}; got {value!r}.")
    return value


def compute_mapping(value: Any) -> Any:
    """``compute`` as its section takes it: null (left empty) the defaults; a
    :class:`~miaudit.train.cluster.Compute` (the Python API) its keys."""
    if value is None:
        return {}
    if not isinstance(value, (dict, ComputeConfig)) and callable(getattr(value, "to_dict",
                                                                         None)):
        return value.to_dict()
    return value


# The value types both configs' name, device and compute take (one rule each)
RunName = Annotated[Str, AfterValidator(_run_name)]
Device = Annotated[Str, AfterValidator(check_device)]
ComputeSection = Annotated[ComputeConfig, BeforeValidator(compute_mapping)]


class RunConfig(Spec):
    """The configuration of `miaudit run`: a validated YAML file, saved into every run
    directory as ``config.yaml``. Built from a mapping by :func:`config_from_dict`, which
    also checks what needs the registries (names of designs, attacks, canary kinds; the
    recipes' fields); built in Python, those are checked when the run starts."""

    renamed = RUN_RENAMED

    name: RunName = Field("audit", description=(
        "The run's name: it names the folder runs/<name> (a name, never a path)."))
    seed: Int = Field(0, ge=0, description="Seeds numpy's generators and every model's.",
                      json_schema_extra={"why": "it seeds numpy's generators"})
    dataset: DatasetConfig = Field(default_factory=DatasetConfig, description=(
        "The dataset audited."))
    split: SplitConfig = Field(default_factory=SplitConfig, description=(
        "How its rows are split into the audit, public and population pools."))
    design: Str = Field("offline", description=(
        "The membership design: offline | online | paired-halves (miaudit.protocol's "
        "registry)."), json_schema_extra={
        "must": "be the name of a design (e.g. offline, online, paired-halves)"})
    models: Int = Field(2, ge=1, description="How many models train, the target included.",
                        json_schema_extra={"why": "the target and its references"})
    target: Int = Field(0, ge=0, description=(
        "The index of the model attacked, in 0..models-1."),
        json_schema_extra={"must": "be an integer model index"})
    recipes: Dict = Field(default_factory=dict, description=(
        "Named recipes {name: {Recipe fields}} that recipe / reference_recipe may name."),
        json_schema_extra={"must": "map recipe names to mappings of recipe fields"})
    recipe: RecipeValue = Field(default_factory=dict, description=(
        "The target's training recipe: Recipe fields, or a name in recipes."),
        json_schema_extra={"must": "be a mapping of training-recipe fields or a name in "
                                   "recipes"})
    reference_recipe: OptRecipeValue = Field(None, description=(
        "The attacker's knowledge (\"Generalization and Membership Inference Attack: a "
        "Practical Perspective\", §IV-B): target (null: the default) = the target's recipe; "
        "plain = the target's without augmentation, regularisation and DP; a name in "
        "recipes; or Recipe fields."), json_schema_extra={
        "must": "be a name (target, plain, or one in recipes) or a mapping of recipe fields"})
    checkpoints: CheckpointsConfig = Field(default_factory=CheckpointsConfig, description=(
        "Models kept along training, each audited as its own bank."))
    signals: SignalsConfig = Field(default_factory=SignalsConfig, description=(
        "What every model is queried on."))
    forgetting: ForgettingConfig = Field(default_factory=ForgettingConfig, description=(
        "Calibration via forgetting: copies of the target trained further on public data."))
    attacks: Names = Field(default_factory=lambda: list(DEFAULT_ATTACKS), description=(
        "The attacks scored, each of which must run (an attack the run cannot support is an "
        "error, not skipped, raised when the config is checked, before any model trains: "
        "check_attacks_fit). The default is the five threshold attacks, which need no "
        "references, channel or augmented query; `miaudit audit`'s default differs on "
        "purpose: it tries every attack and lists those the audit cannot run, since it "
        "cannot choose its models."),
        json_schema_extra={"must": "be a list of attack names (see `miaudit attacks`)"})
    attack_params: Dict = Field(default_factory=dict, description=(
        "Parameters of the attacks {attack: {parameter: value}} (`miaudit attacks NAME` lists "
        "them)."), json_schema_extra={"must": "map attack names to mappings"})
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description=(
        "ROC points, intervals and ε lower bounds."))
    canaries: CanariesSpec = Field(default_factory=lambda: _row_canaries(), description=(
        "One-run auditing: canary rows or white-box gradient canaries (by kind)."))
    device: Device = Field("auto", description="Where models run: auto | cpu | cuda[:N].",
                        json_schema_extra={"must": DEVICE})
    compute: ComputeSection = Field(default_factory=ComputeConfig, description=(
        "Where the models train (local, or a Ray cluster)."))
    output: OptStr = Field(None, description="The run directory; null: runs/<name>.")
    cache_dir: OptStr = Field(None, description=(
        "The model cache; null: $MIAUDIT_CACHE_DIR or ~/.cache/miaudit."))
    data_dir: OptStr = Field(None, description=(
        "The datasets folder; null: $MIAUDIT_DATA_DIR or ~/.cache/miaudit/data. Top level, "
        "as in an audit config (where it serves the audit and the public data alike) and "
        "beside the other places a run reads and writes; dataset.data_dir is its old "
        "spelling."))

    @classmethod
    def renaming(cls, data: dict[str, Any]) -> dict[str, Any]:
        return apply_renamed(data, RUN_RENAMED, cls.what)

    @field_validator("split", "signals", "checkpoints", "forgetting", mode="before")
    @classmethod
    def _empty_section(cls, value: Any) -> Any:
        return {} if value is None else value  # left empty in the YAML: the defaults

    @field_validator("canaries", mode="before")
    @classmethod
    def _canaries(cls, value: Any) -> Any:
        return as_variant(value)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """The rules between sections that need no registry (those are
        :func:`check_run`'s)."""
        if self.target >= self.models:
            raise ConfigError(
                f"target is {self.target!r}, but the run has {self.models} models "
                f"(0..{self.models - 1}); target is the index of the model attacked: set it "
                "in that range or raise models.")
        check_split_design(self)
        check_recipe_names(self)
        if not all(0 < f < 1 for f in self.metrics.fprs):
            raise ConfigError("metrics.fprs must lie in (0, 1).")
        check_white_box_target(self)
        return self


def _row_canaries() -> Any:
    from miaudit.config.sections import RowCanariesConfig

    return RowCanariesConfig()


def check_split_design(cfg: RunConfig) -> None:
    """``split.members``: offline design only, fewer than ``split.audit`` when both are
    counts (its size against the audit pool is checked with the dataset, in
    protocol.make_design)."""
    members, audit = cfg.split.members, cfg.split.audit
    if members is None:
        return
    if cfg.design != "offline":
        raise ConfigError("split.members applies to the offline design (the target's training "
                          "rows); remove it or set design: offline.")
    if isinstance(members, int) and isinstance(audit, int) and members >= audit:
        raise ConfigError(f"split.members ({members}) must be smaller than split.audit "
                          f"({audit}): the audit rows the target does not train on are the "
                          "non-members.")


def build_config(
    root: type[Spec], data: Any, sections: dict[str, type] | None = None,
    what: str = "the config", renamed: Mapping[str, str] | None = None,
) -> Any:
    """The Spec ``root`` (:class:`~miaudit.config.sections.spec.Spec`) validated from a
    mapping: an unknown key is a ConfigError naming its place, the closest valid key and all
    of them. ``what`` names the document in messages ("the config", "the audit config").
    ``sections`` and ``renamed`` are the root's own (its fields; :meth:`Spec.renaming`),
    kept for the callers that name them."""
    del sections, renamed  # the root's fields and renaming say them
    return root.build(data, what, "")


def apply_renamed(data: dict[str, Any], renamed: Mapping[str, str],
                  what: str = "the config") -> dict[str, Any]:
    """`data` with every old dotted key of `renamed` that it gives moved to its new key, each
    with a warning (FutureWarning, shown once per key: "`X` is now `Y`"); giving a key under
    both spellings is a ConfigError. Keys are at most one section deep."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for old, new in renamed.items():
        section, _, key = old.rpartition(".")
        where = out.get(section) if section else out
        if not isinstance(where, dict) or key not in where:
            continue
        value = where.pop(key)
        new_section, _, new_key = new.rpartition(".")
        target = out.setdefault(new_section, {}) if new_section else out
        if not isinstance(target, dict):
            continue  # a malformed section: building it says what is wrong
        if new_key in target:
            raise ConfigError(f"{what} gives both '{new}' and '{old}', its old spelling: keep "
                              f"'{new}' only.")
        target[new_key] = value
        warnings.warn(f"`{old}` is now `{new}` (in {what}): the old spelling works in this "
                      "release only, rename it.", FutureWarning, stacklevel=3)
    return out


def check_run(cfg: RunConfig) -> None:
    """What a run config's construction leaves to the registries, before any model trains:
    the design, the canaries' kind, the attacks and their parameters, the tokenizer, every
    recipe's fields, the checkpoints, forgetting, compute, and last the attacks against the
    bank the run will build."""
    from miaudit.protocol import design_spec

    design_spec(cfg.design)  # an unknown design: its registry's message, with did-you-mean
    cfg.canaries = check_canaries_section(cfg.canaries, cfg.design)
    _check_attacks(cfg)  # first of the sections that name things: it needs no torch
    from miaudit.models.names import TOKENIZERS

    if cfg.dataset.tokenizer not in TOKENIZERS:
        raise ConfigError(f"dataset.tokenizer must be one of {', '.join(TOKENIZERS)}; "
                          f"got {cfg.dataset.tokenizer!r}.")
    _check_recipes(cfg)
    from miaudit.train.checkpoints import CheckpointSpec  # checks the positions

    CheckpointSpec(tuple(cfg.checkpoints.epochs), tuple(cfg.checkpoints.steps))
    check_forgetting(cfg)
    cfg.compute = compute_section(cfg.compute)
    check_attacks_fit(cfg)  # last: it reads the recipes, the split and the signals checked


def _check_attacks(cfg: RunConfig) -> None:
    """``attacks`` (known names) and ``attack_params`` (names and values), before any model
    trains (miaudit.attacks.registry.check_attack_params)."""
    if not (isinstance(cfg.attacks, list) and all(isinstance(a, str) for a in cfg.attacks)):
        raise ConfigError("attacks must be a list of attack names (see `miaudit attacks`).")
    from miaudit.attacks.registry import check_attack_params, get_attack

    for name in cfg.attacks:
        try:
            get_attack(name)  # an unknown name, with did-you-mean
        except AttackError as exc:  # a config error too (ParamError is both), named by its key
            raise ParamError(f"attacks: {exc}") from exc
    if not isinstance(cfg.attack_params, dict):
        raise ConfigError("attack_params must map attack names to mappings.")
    check_attack_params(cfg.attack_params, selected=cfg.attacks)


def check_attacks_fit(cfg: RunConfig, kind: DataKind | None = None,
                      recipes: Recipes | None = None) -> None:
    """Every attack in ``attacks`` can run on the bank this run will build: ConfigError
    naming each one that cannot, what the bank will lack and how to give it, before any model
    trains (a run scores every attack it lists: one it cannot support is an error, not
    skipped). ``kind``: the dataset's kind once loaded (:func:`run_bank_plan`); ``recipes``:
    :func:`resolve_recipes`, when the caller has them."""
    from miaudit.attacks.fit import check_fit

    check_fit(cfg.attacks, run_bank_plan(cfg, kind, recipes))


def run_bank_plan(cfg: RunConfig, kind: DataKind | None = None,
                  recipes: Recipes | None = None) -> Any:
    """The bank this run will build, planned from the config
    (:class:`~miaudit.attacks.fit.BankPlan`, :func:`miaudit.config.plan.run_plan`).
    ``kind``: the dataset's kind once loaded; without it, the registry's or the user file's
    (a ``.npz`` is images or a table: what only its kind decides is left unplanned).
    ``recipes``: :func:`resolve_recipes`, when the caller has them."""
    from miaudit.config.plan import run_plan

    if recipes is None:
        recipes = resolve_recipes(cfg)
    return run_plan(cfg, recipes.target, recipes.reference,
                    recipe_fields(cfg)[0].get("augment"), kind)


def check_white_box_target(cfg: RunConfig) -> None:
    """Gradient canaries enter DP-SGD's steps: the target's recipe must have ``dp``, and its
    run keeps no checkpoints (their models would need the canaries' record of each)."""
    if not cfg.canaries.white_box:
        return
    target = recipe_fields(cfg)[0]
    where = f"recipes.{cfg.recipe}" if isinstance(cfg.recipe, str) else "recipe"
    if not target.get("dp"):
        raise ConfigError(
            f"canaries.kind: gradient adds canaries to DP-SGD's clipped gradients, but the "
            f"target's recipe ({where}) has no dp: give it one, e.g. {where}.dp: {{epsilon: 4}}, "
            f"or use canaries.kind: mislabelled (rows, black-box) for a model trained without DP.")
    if cfg.checkpoints.epochs or cfg.checkpoints.steps:
        raise ConfigError("canaries.kind: gradient audits the target's whole run; checkpoints "
                          "are not supported with it: remove the checkpoints section.")


def check_recipe_names(cfg: RunConfig) -> None:
    """``recipes`` maps names (none reserved) to mappings; ``recipe`` and
    ``reference_recipe`` name recipes that exist (ConfigError with a suggestion otherwise)."""
    for name, fields in cfg.recipes.items():
        if not isinstance(name, str) or name in REFERENCE_KEYWORDS:
            raise ConfigError(
                f"recipes: {name!r} cannot name a recipe; {', '.join(REFERENCE_KEYWORDS)} are "
                "reserved for reference_recipe."
            )
        if not isinstance(fields, dict):
            raise ConfigError(f"recipes.{name} must be a mapping of recipe fields.")
    names = list(cfg.recipes)
    if isinstance(cfg.recipe, str) and cfg.recipe not in cfg.recipes:
        raise ConfigError(
            f"recipe names '{cfg.recipe}', which is not in recipes.{suggest(cfg.recipe, names)} "
            f"Named recipes: {', '.join(names) or '(none)'}."
        )
    ref = cfg.reference_recipe
    choices = [*REFERENCE_KEYWORDS, *names]
    if isinstance(ref, str) and ref not in choices:
        raise ConfigError(
            f"reference_recipe '{ref}' is unknown.{suggest(ref, choices)} Use target (the "
            "target's recipe), plain (it without augmentation, regularisation and DP), a "
            "name in recipes, or a mapping of recipe fields."
        )


def _check_recipes(cfg: RunConfig) -> None:
    """Every recipe mapping makes a Recipe (its own rules, a bad field named by its place in
    the config: recipe.lr, recipes.NAME.lr, ...); its names: :func:`check_recipe_names`."""
    from miaudit.train.recipe import Recipe

    for name, fields in cfg.recipes.items():
        Recipe.from_dict(fields, f"recipes.{name}")  # each field, named by its place
    for where in ("recipe", "reference_recipe"):
        if isinstance(getattr(cfg, where), dict):
            Recipe.from_dict(getattr(cfg, where), where)


def config_from_dict(data: dict[str, Any] | None) -> RunConfig:
    """The validated RunConfig of a mapping (a YAML file's, the flags'): built
    (:class:`RunConfig`'s own rules) and checked against the registries (:func:`check_run`)."""
    cfg = RunConfig.build(data or {})
    check_run(cfg)
    return cfg


def read_yaml(path: str | os.PathLike[str], what: str = "config") -> dict[str, Any]:
    """A YAML mapping from a file, with clear errors."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} file {path} does not exist.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} file {path} must hold a mapping, not {type(data).__name__}.")
    return data


def load_config(path: str | os.PathLike[str]) -> RunConfig:
    return config_from_dict(read_yaml(path))


def dump_config(cfg: RunConfig) -> str:
    return str(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
