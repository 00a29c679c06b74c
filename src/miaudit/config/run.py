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

import dataclasses
import difflib
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from miaudit.config.canaries import check_canaries_section
from miaudit.config.section_checks import (
    check_forgetting,
    check_split_members,
    check_split_sizes,
    whole,
)
from miaudit.config.sections import (
    DEFAULT_ATTACKS,
    CanariesConfig,
    CheckpointsConfig,
    ComputeConfig,
    DatasetConfig,
    ForgettingConfig,
    MetricsConfig,
    SignalsConfig,
    SplitConfig,
    compute_section,
)
from miaudit.config.typecheck import check_field_types
from miaudit.errors import AttackError, ConfigError, ParamError
from miaudit.records.run_dir import check_run_name

# Keys renamed in this release: old dotted key -> new one. The old spelling still works for one
# release and warns that it is now the new one; giving both is an error.
RUN_RENAMED: dict[str, str] = {"dataset.data_dir": "data_dir"}
# reference_recipe values with a fixed meaning; they cannot name an entry of `recipes`.
REFERENCE_KEYWORDS = ("target", "plain")

@dataclass
class RunConfig:
    name: str = "audit"
    seed: int = 0
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    design: str = "offline"  # offline | online | paired-halves (miaudit.protocol registry)
    models: int = 2  # target included
    target: int = 0
    # Named recipes {name: {Recipe fields}} that `recipe` / `reference_recipe` may name.
    recipes: dict[str, dict[str, Any]] = field(default_factory=dict)
    recipe: dict[str, Any] | str = field(default_factory=dict)  # Recipe fields, or a name
    # The attacker's knowledge ("Generalization and Membership Inference Attack: a Practical
    # Perspective", §IV-B): "target" (None: the default) = the target's
    # recipe; "plain" = the target's without augmentation/regularisation/DP; a name; fields.
    reference_recipe: dict[str, Any] | str | None = None
    checkpoints: CheckpointsConfig = field(default_factory=CheckpointsConfig)
    signals: SignalsConfig = field(default_factory=SignalsConfig)
    forgetting: ForgettingConfig = field(default_factory=ForgettingConfig)
    attacks: list[str] = field(default_factory=lambda: list(DEFAULT_ATTACKS))
    """The attacks scored, each of which must run (an attack the run cannot support is an
    error, not skipped, raised when the config is checked, before any model trains:
    :func:`check_attacks_fit`). The default is the five threshold attacks, which need no references,
    channel or augmented query; `miaudit audit`'s default differs on purpose: it tries every
    attack and lists those the audit cannot run, since it cannot choose its models."""
    attack_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    canaries: CanariesConfig = field(default_factory=CanariesConfig)
    device: str = "auto"  # auto | cpu | cuda[:N]
    compute: ComputeConfig = field(default_factory=ComputeConfig)  # where the models train
    output: str | None = None  # run directory; default runs/<name>
    cache_dir: str | None = None  # model cache; default $MIAUDIT_CACHE_DIR or ~/.cache/miaudit
    data_dir: str | None = None
    """Datasets folder; default $MIAUDIT_DATA_DIR or ~/.cache/miaudit/data. Top level, as in an
    audit config (where it serves the audit and the public data alike) and beside the other
    places a run reads and writes; ``dataset.data_dir`` is its old spelling."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_NESTED = {
    "dataset": DatasetConfig,
    "split": SplitConfig,
    "signals": SignalsConfig,
    "metrics": MetricsConfig,
    "forgetting": ForgettingConfig,
    "checkpoints": CheckpointsConfig,
    "canaries": CanariesConfig,
    "compute": ComputeConfig,
}


def build_config(
    root: type, data: Any, sections: dict[str, type], what: str = "the config",
    renamed: Mapping[str, str] | None = None,
) -> Any:
    """Dataclass `root` from a mapping whose keys in `sections` are nested dataclasses; an
    unknown key is a ConfigError naming its place, the closest valid key and all of them.
    `what` names the document in messages ("the config", "the audit config"). `renamed` maps
    old dotted keys to their new ones (:func:`apply_renamed`): the old spelling works and
    warns, and a typo of it is pointed at the new one."""
    renamed = dict(renamed or {})
    if isinstance(data, dict):
        data = apply_renamed(data, renamed, what)

    def build(cls: type, value: Any, where: str) -> Any:
        if not isinstance(value, dict):
            raise ConfigError(
                f"'{where or what}' must be a mapping; got {type(value).__name__}."
            )
        valid = [f.name for f in dataclasses.fields(cls)]
        # the old spellings of this place, for the suggestion of a misspelt one
        old = {key.rpartition(".")[2]: new for key, new in renamed.items()
               if key.rpartition(".")[0] == where}
        kwargs = {}
        for key, item in value.items():
            if key not in valid:
                close = difflib.get_close_matches(str(key), [*valid, *old], n=1)
                hint = f" Did you mean '{close[0]}'?" if close else ""
                if close and close[0] in old:
                    hint = (f" Did you mean '{old[close[0]]}' (formerly "
                            f"'{where + '.' if where else ''}{close[0]}')?")
                raise ConfigError(
                    f"unknown key '{where + '.' if where else ''}{key}' in {what}.{hint} "
                    f"Valid keys{' of ' + where if where else ''}: {', '.join(valid)}."
                )
            nested = sections.get(key) if cls is root else None
            kwargs[key] = build(nested, item, key) if nested and item is not None else item
        return cls(**kwargs)

    return build(root, data, "")


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


def _check_types(cfg: RunConfig) -> None:
    def need(cond: bool, message: str) -> None:
        if not cond:
            raise ConfigError(message)

    check_run_name(cfg.name)  # it names the folder runs/<name>: a name, never a path
    need(isinstance(cfg.seed, int) and not isinstance(cfg.seed, bool) and cfg.seed >= 0,
         f"seed must be an integer >= 0 (it seeds numpy's generators); got {cfg.seed!r}.")
    if cfg.signals is None:  # `signals:` left empty in the YAML
        cfg.signals = SignalsConfig()
    need(isinstance(cfg.models, int) and not isinstance(cfg.models, bool) and cfg.models >= 1,
         f"models must be an integer >= 1 (the target and its references); got "
         f"{cfg.models!r}.")
    need(isinstance(cfg.target, int) and not isinstance(cfg.target, bool),
         f"target must be an integer model index; got {cfg.target!r}.")
    need(not isinstance(cfg.models, int) or 0 <= cfg.target < cfg.models,
         f"target is {cfg.target!r}, but the run has {cfg.models} models (0..{cfg.models - 1}); "
         "target is the index of the model attacked: set it in that range or raise models.")
    from miaudit.protocol import design_spec

    need(isinstance(cfg.design, str), f"design must be the name of a design (e.g. offline, "
         f"online, paired-halves); got {cfg.design!r}.")
    design_spec(cfg.design)  # an unknown design: its registry's message, with did-you-mean
    check_split_sizes(cfg)
    check_split_members(cfg)
    cfg.canaries = check_canaries_section(cfg.canaries, cfg.design)
    _check_attacks(cfg)  # first of the sections that name things: it needs no torch
    from miaudit.models.text import TOKENIZERS

    need(cfg.dataset.tokenizer in TOKENIZERS,
         f"dataset.tokenizer must be one of {', '.join(TOKENIZERS)}; "
         f"got {cfg.dataset.tokenizer!r}.")
    need(whole(cfg.dataset.bpe_vocab_size) and cfg.dataset.bpe_vocab_size >= 300,
         "dataset.bpe_vocab_size must be an integer >= 300 (the 256 bytes, the special tokens "
         f"and some merges); got {cfg.dataset.bpe_vocab_size!r}.")
    need(whole(cfg.dataset.max_length) and cfg.dataset.max_length >= 2,
         f"dataset.max_length must be an integer >= 2 (tokens per text, longer ones cut); got "
         f"{cfg.dataset.max_length!r}.")
    need(whole(cfg.signals.batch_size) and cfg.signals.batch_size >= 1,
         f"signals.batch_size must be an integer >= 1 (samples per query batch); got "
         f"{cfg.signals.batch_size!r}.")
    _check_recipes(cfg)
    from miaudit.train.checkpoints import CheckpointSpec  # checks the positions

    if cfg.checkpoints is None:  # `checkpoints:` left empty in the YAML
        cfg.checkpoints = CheckpointsConfig()
    for key in ("epochs", "steps"):  # `epochs:` left empty: none, as CheckpointSpec reads it
        if getattr(cfg.checkpoints, key) is None:
            setattr(cfg.checkpoints, key, [])

    CheckpointSpec(cfg.checkpoints.epochs, cfg.checkpoints.steps)
    check_white_box_target(cfg)
    need(cfg.device in ("auto", "cpu", "cuda") or str(cfg.device).startswith("cuda:"),
         f"device must be auto, cpu or cuda[:N]; got {cfg.device!r}.")
    need(all(0 < f < 1 for f in cfg.metrics.fprs), "metrics.fprs must lie in (0, 1).")
    check_forgetting(cfg)
    cfg.compute = compute_section(cfg.compute)
    check_field_types(cfg)  # the backstop: every field of its annotated type
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


def check_attacks_fit(cfg: RunConfig, kind: str | None = None) -> None:
    """Every attack in ``attacks`` can run on the bank this run will build: ConfigError
    naming each one that cannot, what the bank will lack and how to give it, before any model
    trains (a run scores every attack it lists: one it cannot support is an error, not
    skipped). ``kind``: the dataset's kind once loaded (:func:`run_bank_plan`)."""
    from miaudit.attacks.fit import check_fit

    check_fit(cfg.attacks, run_bank_plan(cfg, kind, planned_recipes(cfg)))


def run_bank_plan(cfg: RunConfig, kind: str | None = None,
                  recipes: tuple[Any, Any] | None = None) -> Any:
    """The bank this run will build, planned from the config
    (:class:`~miaudit.attacks.fit.BankPlan`, :func:`miaudit.config.plan.run_plan`).
    ``kind``: the dataset's kind once loaded; without it, the registry's or the user file's
    (a ``.npz`` is images or a table: what only its kind decides is left unplanned).
    ``recipes``: :func:`planned_recipes`, when the caller has them."""
    from miaudit.config.plan import run_plan

    target, reference = recipes or planned_recipes(cfg)
    return run_plan(cfg, target, reference, recipe_fields(cfg)[0].get("augment"), kind)


def planned_recipes(cfg: RunConfig) -> tuple[Any, Any]:
    """The target's and the reference models' :class:`~miaudit.train.recipe.Recipe`, as the
    pipeline resolves them (miaudit.pipeline.models.resolve_recipes)."""
    from miaudit.train.recipe import Recipe

    target_fields, ref = recipe_fields(cfg)
    target = Recipe.from_dict(target_fields,
                              f"recipes.{cfg.recipe}" if isinstance(cfg.recipe, str) else "recipe")
    if ref == "target":
        return target, target
    if ref == "plain":
        return target, target.plain()
    named = isinstance(cfg.reference_recipe, str)
    return target, Recipe.from_dict(
        ref, f"recipes.{cfg.reference_recipe}" if named else "reference_recipe")


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


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" Did you mean '{close[0]}'?" if close else ""


def _check_recipes(cfg: RunConfig) -> None:
    """``recipes`` maps names to mappings; ``recipe`` and ``reference_recipe`` are mappings or
    names that exist (ConfigError with a suggestion otherwise); every mapping makes a Recipe
    (its own rules, a bad field named by its place in the config: recipe.lr, ...)."""
    from miaudit.train.recipe import Recipe

    if not isinstance(cfg.recipes, dict):
        raise ConfigError("recipes must map recipe names to mappings of recipe fields.")
    for name, fields in cfg.recipes.items():
        if not isinstance(name, str) or name in REFERENCE_KEYWORDS:
            raise ConfigError(
                f"recipes: {name!r} cannot name a recipe; {', '.join(REFERENCE_KEYWORDS)} are "
                "reserved for reference_recipe."
            )
        if not isinstance(fields, dict):
            raise ConfigError(f"recipes.{name} must be a mapping of recipe fields.")
        Recipe.from_dict(fields, f"recipes.{name}")  # each field, named by its place
    for where in ("recipe", "reference_recipe"):
        if isinstance(getattr(cfg, where), dict):
            Recipe.from_dict(getattr(cfg, where), where)
    names = list(cfg.recipes)
    if isinstance(cfg.recipe, str):
        if cfg.recipe not in cfg.recipes:
            hint = _suggest(cfg.recipe, names)
            raise ConfigError(
                f"recipe names '{cfg.recipe}', which is not in recipes.{hint} Named recipes: "
                f"{', '.join(names) or '(none)'}."
            )
    elif not isinstance(cfg.recipe, dict):
        raise ConfigError(
            "recipe must be a mapping of training-recipe fields or a name in recipes."
        )
    ref = cfg.reference_recipe
    if isinstance(ref, str):
        choices = [*REFERENCE_KEYWORDS, *names]
        if ref not in choices:
            raise ConfigError(
                f"reference_recipe '{ref}' is unknown.{_suggest(ref, choices)} Use target (the "
                "target's recipe), plain (it without augmentation, regularisation and DP), a "
                "name in recipes, or a mapping of recipe fields."
            )
    elif ref is not None and not isinstance(ref, dict):
        raise ConfigError("reference_recipe must be a name (target, plain, or one in recipes) "
                          "or a mapping of recipe fields.")


def recipe_fields(cfg: RunConfig) -> tuple[dict[str, Any], str | dict[str, Any]]:
    """The target's recipe fields, and the reference recipe as ``"target"``, ``"plain"`` or
    its fields (a name in ``recipes`` resolved)."""
    target = cfg.recipes[cfg.recipe] if isinstance(cfg.recipe, str) else cfg.recipe
    ref = "target" if cfg.reference_recipe is None else cfg.reference_recipe
    if isinstance(ref, str) and ref not in REFERENCE_KEYWORDS:
        ref = cfg.recipes[ref]
    return dict(target), ref if isinstance(ref, str) else dict(ref)


def config_from_dict(data: dict[str, Any] | None) -> RunConfig:
    cfg = build_config(RunConfig, data or {}, _NESTED, renamed=RUN_RENAMED)
    _check_types(cfg)
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
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
