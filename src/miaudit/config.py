"""Run configuration: a validated YAML file, saved into every run directory.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import yaml

from miaudit.errors import ConfigError

DEFAULT_ATTACKS = ("loss", "confidence", "entropy", "modified-entropy", "correctness")
# The value of a signals setting that follows the rule of resolve_queries / resolve_grad_norm.
AUTO = "auto"
# Keys renamed in this release: old dotted key -> new one. The old spelling still works for one
# release and warns that it is now the new one; giving both is an error.
RUN_RENAMED: dict[str, str] = {"dataset.data_dir": "data_dir"}
# reference_recipe values with a fixed meaning; they cannot name an entry of `recipes`.
REFERENCE_KEYWORDS = ("target", "plain")


@dataclass
class DatasetConfig:
    name: str = "digits"
    options: dict[str, Any] = field(default_factory=dict)
    max_length: int = 64  # text datasets: tokens per text, longer ones cut
    # text datasets: MiniLM's WordPiece (fixed, 30,522 ids) or a byte-level BPE of
    # bpe_vocab_size ids trained on the public pool's texts only (never on audit rows)
    tokenizer: str = "wordpiece"
    bpe_vocab_size: int = 4096


@dataclass
class SplitConfig:
    audit: float | int = 0.4  # count, or fraction of the dataset
    public: float | int = 0.4
    population: float | int = 0.2
    # offline design: audit rows the target trains on (count, or fraction of the audit pool);
    # None: a random half. Fewer members than non-members puts low-FPR figures on more
    # non-members; each reference then trains on as many public rows.
    members: float | int | None = None


@dataclass
class SignalsConfig:
    queries: list[str] | str = AUTO
    """The views every model is queried on (plain, mirror, crop-flip-K for images;
    token-dropout-K, adjacent-swap-K for token ids), or ``auto``: replay the training
    augmentation. A model answers the views of its training augmentation differently for
    members (LiRA and RAPID query with it); views it never trained on are not what those
    papers query, and each costs a query of every model. So images
    whose target trained with augmentation (a run: its recipe's ``augment``; an audit: the
    declared ``model.augment``, else ``references.recipe``'s) get the views the attacks' papers
    query with (plain + mirror; RAPID's 8 with rapid or rapid-hybrid), anything else plain only
    (:func:`resolve_queries`). The same rule and default in `miaudit run` and `miaudit
    audit`."""
    grad_norm: bool | str = AUTO
    """Per-sample gradient norms (a white-box channel: a backward pass per sample per model),
    or ``auto``: computed when an attack to run reads them (gradient-norm,
    calibrated-gradient-norm; in an audit without ``attacks``, every attack, so on for
    white-box models), so no run pays for a channel nothing reads (:func:`resolve_grad_norm`).
    The same rule and default in `miaudit run` and `miaudit audit`."""
    boundary_distance: bool = False  # label-only HopSkipJump distance channel (slow)
    defence: str | dict[str, Any] | None = None  # output defence applied to every query
    batch_size: int = 1024

    def __post_init__(self) -> None:
        self.queries, self.grad_norm = check_signals(self.queries, self.grad_norm)


def check_signals(queries: Any, grad_norm: Any) -> tuple[list[str] | str, bool | str]:
    """``signals.queries`` and ``signals.grad_norm`` of either config, checked: ``auto`` (also
    spelled null, or ``--queries auto``) or a non-empty list of query names; ``auto`` or true
    or false."""
    if queries is None or (isinstance(queries, list) and queries == [AUTO]):
        queries = AUTO
    if queries != AUTO and not (isinstance(queries, list) and queries
                                and all(isinstance(q, str) for q in queries)):
        raise ConfigError(f"signals.queries must be auto or a non-empty list of query names, "
                          f"e.g. [plain, mirror]; got {queries!r}.")
    if grad_norm is None:
        grad_norm = AUTO
    if grad_norm != AUTO and not isinstance(grad_norm, bool):
        raise ConfigError(f"signals.grad_norm must be auto, true or false; got {grad_norm!r}.")
    return queries, grad_norm


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
    return default_queries(kind, list(attacks))


def default_queries(kind: str, attacks: list[str]) -> list[str]:
    """The views the attacks' papers query with (`signals.queries: auto` of a target trained
    with augmentation, config.resolve_queries): plain for tabular data; for images, the
    largest number of augmented queries any of the run's attacks' papers makes (plain and
    mirror; 8 with RAPID: plain, mirror and 6 crop + flip draws); for token ids (text), plain,
    or RAPID's count of seeded token perturbations (token dropout, adjacent swaps) when an
    attack's paper makes more than the image pair."""
    from miaudit.attacks import get_attack
    from miaudit.signals.query import augmented_queries, text_queries

    wanted = [get_attack(a).image_queries for a in attacks]
    if kind == "tokens":
        return text_queries(max([q for q in wanted if q > 2] + [1]))
    if kind != "image":
        return ["plain"]
    return augmented_queries(max(wanted + [2]))


def resolve_grad_norm(grad_norm: bool | str, attacks: Sequence[str]) -> bool:
    """Whether ``signals.grad_norm`` (:class:`SignalsConfig`) computes gradient norms for
    ``attacks``: as given, or for ``auto`` when one of them reads the channel."""
    if grad_norm != AUTO:
        return bool(grad_norm)
    from miaudit.attacks import get_attack

    return any(get_attack(name).needs.channel == "grad_norm" for name in attacks)


@dataclass
class ForgettingConfig:
    """Calibration via forgetting: copies of the target trained further on public data."""

    models: int = 0  # how many copies (0: off)
    epochs: int = 5
    lr: float | None = None  # default: the target recipe's
    batch_size: int | None = None  # default: the target recipe's


@dataclass
class CheckpointsConfig:
    """Models kept along training ("Generalization and Membership Inference Attack: a
    Practical Perspective", §IV-A2): every model of the design is kept after these epochs
    and/or optimizer steps, and each checkpoint is audited as its own bank."""

    epochs: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)


@dataclass
class MetricsConfig:
    fprs: list[float] = field(default_factory=lambda: [0.001, 0.01])
    bootstrap: int = 200
    confidence: float = 0.95
    recalls: list[float] = field(default_factory=lambda: [0.5, 0.9])
    # ε lower bounds (docs/algorithms.md §16): δ when the target makes no DP claim of its own
    # (a DP-SGD target is audited at its recipe's δ), and α = 1 - the bounds' confidence
    epsilon_delta: float = 1e-5
    epsilon_alpha: float = 0.05
    # the model-free split check (docs/algorithms.md §20): can members be told from
    # non-members without the model? A few seconds; false only to save them
    split_check: bool = True

    def __post_init__(self) -> None:
        # checked here, not in _check_types: `miaudit audit` and the Python API build this
        # section without a RunConfig
        check_delta(self.epsilon_delta, "metrics.epsilon_delta")
        check_alpha(self.epsilon_alpha, "metrics.epsilon_alpha")


@dataclass
class CanariesConfig:
    """One-run auditing (Steinke, Nasr & Jagielski 2023): ``count`` canary rows outside the
    audit, public and population pools, each in the target's training set with probability ½
    (offline design only; references never train on them)."""

    count: int = 0  # m canaries; 0: off
    kind: str = "mislabelled"  # mislabelled | natural (miaudit.privacy.canaries registry)
    # {k_plus, k_minus} (counts or fractions of count), or a list of such candidates, each
    # evaluated at alpha / len(list); None: a tenth of the canaries each way
    guesses: dict[str, Any] | list[dict[str, Any]] | None = None
    alpha: float = 0.05
    delta: float | None = None  # None: the target's DP δ, else metrics.epsilon_delta

    def __post_init__(self) -> None:
        check_alpha(self.alpha, "canaries.alpha")
        if self.delta is not None:
            check_delta(self.delta, "canaries.delta")


@dataclass
class ComputeConfig:
    """Where the models train: :class:`miaudit.train.cluster.Compute`'s keys and defaults (a
    test holds them alike), checked by it when the config loads, before anything trains.

    ``executor``: ``local`` (this machine) or ``ray`` (a Ray cluster; ``--executor ray``).
    ``address``: ``None`` starts a local Ray instance bound to loopback; ``auto`` or
    ``ray://host:port`` joins a running cluster (``--ray-address``). Each Ray task asks for
    ``cpus_per_model`` CPUs and ``gpus_per_model`` GPUs, and is retried up to ``max_retries``
    times when its worker dies. Where a model trains is not in its cache key, and on CPU it
    changes neither the weights nor the scores: it is not part of the run's identity either
    (rerunning with ``--executor ray`` replaces the same run)."""

    executor: str = "local"
    address: str | None = None
    cpus_per_model: float = 1.0
    gpus_per_model: float = 0.0
    max_retries: int = 3

    def to_compute(self) -> Any:
        """The checked :class:`~miaudit.train.cluster.Compute` (ConfigError naming the key)."""
        from miaudit.train.cluster import Compute

        return Compute.from_dict(dataclasses.asdict(self))


def compute_section(value: Any) -> ComputeConfig:
    """``compute`` of either config, checked (ConfigError naming the bad key or value): a
    ComputeConfig, left empty in the YAML (None: local), or a Compute from the Python API."""
    if value is None:
        value = ComputeConfig()
    if not isinstance(value, ComputeConfig):  # a miaudit.train.cluster.Compute
        to_dict = getattr(value, "to_dict", None)
        if not callable(to_dict):
            raise ConfigError(f"compute must be a mapping (executor, address, ...); "
                              f"got {type(value).__name__}.")
        value = ComputeConfig(**to_dict())
    value.to_compute()
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


def _real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        # YAML 1.1 reads 1e-5 (no dot) as a string
        hint = " (YAML reads 1e-5 as text: write 1.0e-5)" if isinstance(value, str) else ""
        raise ConfigError(f"{name} must be a number; got {value!r}{hint}.")
    return float(value)


def check_delta(value: Any, name: str) -> float:
    """δ of an ε lower bound: a number in [0, 1)."""
    if not 0.0 <= _real(value, name) < 1.0:
        raise ConfigError(f"{name} must lie in [0, 1) (the δ of the (ε, δ)-DP claim audited, "
                          f"e.g. 1e-5; 0 for pure ε-DP); got {value!r}.")
    return float(value)


def check_alpha(value: Any, name: str) -> float:
    """α of an ε lower bound (it holds with probability 1 - α): a number in (0, 1)."""
    if not 0.0 < _real(value, name) < 1.0:
        raise ConfigError(f"{name} must lie in (0, 1): one minus the bounds' confidence "
                          f"(0.05 for 95 %); got {value!r}.")
    return float(value)


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
    error, not skipped). The default is the five threshold attacks, which need no references,
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

    need(isinstance(cfg.seed, int), f"seed must be an integer; got {cfg.seed!r}.")
    if cfg.signals is None:  # `signals:` left empty in the YAML
        cfg.signals = SignalsConfig()
    need(isinstance(cfg.models, int) and cfg.models >= 1, "models must be an integer >= 1.")
    need(isinstance(cfg.target, int), "target must be an integer model index.")
    need(not isinstance(cfg.models, int) or 0 <= cfg.target < cfg.models,
         f"target is {cfg.target!r}, but the run has {cfg.models} models (0..{cfg.models - 1}); "
         "target is the index of the model attacked: set it in that range or raise models.")
    from miaudit.protocol import design_names

    need(cfg.design in design_names(),
         f"design must be one of {', '.join(design_names())}; got {cfg.design!r}.")
    _check_split_members(cfg)
    _check_canaries(cfg)
    _check_attacks(cfg)  # first of the sections that name things: it needs no torch
    from miaudit.models.text import TOKENIZERS

    need(cfg.dataset.tokenizer in TOKENIZERS,
         f"dataset.tokenizer must be one of {', '.join(TOKENIZERS)}; "
         f"got {cfg.dataset.tokenizer!r}.")
    need(isinstance(cfg.dataset.bpe_vocab_size, int) and cfg.dataset.bpe_vocab_size >= 300,
         "dataset.bpe_vocab_size must be an integer >= 300 (the 256 bytes, the special tokens "
         "and some merges).")
    _check_recipes(cfg)
    from miaudit.train.checkpoints import CheckpointSpec  # checks the positions

    if cfg.checkpoints is None:  # `checkpoints:` left empty in the YAML
        cfg.checkpoints = CheckpointsConfig()

    CheckpointSpec(cfg.checkpoints.epochs, cfg.checkpoints.steps)
    need(cfg.device in ("auto", "cpu", "cuda") or str(cfg.device).startswith("cuda:"),
         f"device must be auto, cpu or cuda[:N]; got {cfg.device!r}.")
    need(all(0 < f < 1 for f in cfg.metrics.fprs), "metrics.fprs must lie in (0, 1).")
    _check_forgetting(cfg)
    cfg.compute = compute_section(cfg.compute)


def _check_attacks(cfg: RunConfig) -> None:
    """``attacks`` (known names) and ``attack_params`` (names and values), before any model
    trains (miaudit.attacks.registry.check_attack_params)."""
    if not (isinstance(cfg.attacks, list) and all(isinstance(a, str) for a in cfg.attacks)):
        raise ConfigError("attacks must be a list of attack names (see `miaudit attacks`).")
    from miaudit.attacks.registry import check_attack_params, get_attack

    for name in cfg.attacks:
        get_attack(name)  # an unknown name, with did-you-mean
    if not isinstance(cfg.attack_params, dict):
        raise ConfigError("attack_params must map attack names to mappings.")
    check_attack_params(cfg.attack_params, selected=cfg.attacks)


def _check_split_members(cfg: RunConfig) -> None:
    """``split.members``: None, a count >= 1 or a fraction in (0, 1), offline design only
    (its size against the audit pool is checked with the dataset, in protocol.make_design)."""
    if cfg.split is None:  # `split:` left empty in the YAML
        cfg.split = SplitConfig()
    members = cfg.split.members
    if members is None:
        return
    count = isinstance(members, int) and not isinstance(members, bool) and members >= 1
    fraction = isinstance(members, float) and 0 < members < 1
    if not (count or fraction):
        raise ConfigError(f"split.members must be a count (integer >= 1) or a fraction in "
                          f"(0, 1) of the audit pool; got {members!r}.")
    if cfg.design != "offline":
        raise ConfigError("split.members applies to the offline design (the target's training "
                          "rows); remove it or set design: offline.")
    audit = cfg.split.audit
    if count and isinstance(audit, int) and members >= audit:
        raise ConfigError(f"split.members ({members}) must be smaller than split.audit "
                          f"({audit}): the audit rows the target does not train on are the "
                          "non-members.")


def _check_canaries(cfg: RunConfig) -> None:
    """``canaries``: a count >= 0, a registered kind, guesses that fit the count, and a design
    that supports them (whether m can certify ε > 0 at all is checked with the recipe's δ in
    miaudit.privacy.run_canaries, before training)."""
    from miaudit.privacy.canaries import canary_kind, resolve_guesses
    from miaudit.protocol import supports_canaries

    if cfg.canaries is None:  # `canaries:` left empty in the YAML
        cfg.canaries = CanariesConfig()
    count = cfg.canaries.count
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ConfigError(f"canaries.count must be an integer >= 0 (0: no canaries); "
                          f"got {count!r}.")
    canary_kind(cfg.canaries.kind)
    if count == 0:
        return
    resolve_guesses(cfg.canaries.guesses, count)
    if not supports_canaries(cfg.design):
        raise ConfigError(
            f"canaries need design: offline (the target alone trains on a random half of "
            f"them; references never do); the {cfg.design} design is not supported yet."
        )


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" Did you mean '{close[0]}'?" if close else ""


def _check_forgetting(cfg: RunConfig) -> None:
    """``forgetting``: a count of copies >= 0, and the copies' training, epochs (always given)
    and, when set, lr and batch_size, by the recipe's rule (miaudit.train.recipe's
    check_trainable)."""
    from miaudit.train.recipe import check_trainable

    if cfg.forgetting is None:  # `forgetting:` left empty in the YAML
        cfg.forgetting = ForgettingConfig()
    forgetting = cfg.forgetting
    models = forgetting.models
    if isinstance(models, bool) or not isinstance(models, int) or models < 0:
        raise ConfigError(f"forgetting.models must be an integer >= 0 (0: off); got {models!r}.")
    fields = {"epochs": forgetting.epochs, "lr": forgetting.lr,
              "batch_size": forgetting.batch_size}
    check_trainable({k: v for k, v in fields.items() if v is not None}, "forgetting")


def _check_recipes(cfg: RunConfig) -> None:
    """``recipes`` maps names to mappings; ``recipe`` and ``reference_recipe`` are mappings or
    names that exist (ConfigError with a suggestion otherwise); every mapping's epochs,
    batch_size and lr can train (the recipe's own rule, with the key's place in the config)."""
    from miaudit.train.recipe import check_trainable

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
        check_trainable(fields, f"recipes.{name}")
    for where in ("recipe", "reference_recipe"):
        if isinstance(getattr(cfg, where), dict):
            check_trainable(getattr(cfg, where), where)
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
