"""Training recipes: everything that decides a model's weights besides data, indices and seed.

A :class:`Recipe` is frozen and hashable; :meth:`Recipe.key` is a stable content hash over every
field, so the model cache can tell recipes apart. To add a field, give it a default of the right
type (``int``, ``float``, ``bool``, ``str`` or a mapping); validation and ``from_dict`` pick it up.
List it in :data:`KEY_NEUTRAL_FIELDS` with its "not used" value so existing keys stay valid (and
a new architecture parameter in :data:`KEY_NEUTRAL_ARCH_PARAMS`).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import logging
import math
import numbers
import operator
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from miaudit.errors import ConfigError
from miaudit.runtime.devices import DEFAULT_PRECISION, PRECISIONS
from miaudit.train.augment import normalize_augmentation

OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("cosine", "constant", "triangular")  # triangular: airbench94's (common.lr_at)
log = logging.getLogger(__name__)

# Fields added after cache keys were in use, with the value that means "not used": left out of
# canonical_json at that value, so recipes that do not use them keep their keys.
KEY_NEUTRAL_FIELDS: dict[str, Any] = {
    "dp": None,
    "augment": (),
    "label_smoothing": 0.0,
    "precision": DEFAULT_PRECISION,
    "epoch_fraction": 1.0,
}
# The same for architecture parameters: dropped from arch_params at that value (so
# {"dropout": 0} and {} are one recipe).
KEY_NEUTRAL_ARCH_PARAMS: dict[str, dict[str, Any]] = {
    "mlp": {"dropout": 0.0},
    "cifar-cnn": {"dropout": 0.0},
}
# Architecture parameters that regularise (reset by Recipe.plain()).
REGULARISING_ARCH_PARAMS = ("dropout", "conv_dropout", "fc_dropout")


def _whole_at_least_one(value: Any) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and float(value).is_integer() and float(value) >= 1)


def _finite_positive(value: Any) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value) and float(value) > 0)


# The fields without which a recipe cannot train at all: the test, what the value must be (and
# why), and the fix. One rule for every path: Recipe checks its own fields, and the run and
# audit configs check their recipe mappings with it before any dataset loads (check_trainable).
TRAINABLE: dict[str, tuple[Callable[[Any], bool], str, str]] = {
    "epochs": (_whole_at_least_one,
               "a whole number >= 1 (passes over the training rows; 0 leaves the model "
               "untrained)", "to 1 or more, e.g. 20"),
    "batch_size": (_whole_at_least_one, "a whole number >= 1 (rows per optimizer step)",
                   "to 1 or more, e.g. 128"),
    "lr": (_finite_positive,
           "a finite number > 0 (the learning rate; 0 never moves the weights)",
           "to a positive number, e.g. 0.1 for SGD or 0.001 for Adam"),
}


def check_trainable(fields: Mapping[str, Any], where: str = "recipe") -> None:
    """ConfigError naming ``{where}.{key}`` and the fix when a field of :data:`TRAINABLE`
    present in ``fields`` cannot train a model (``epochs`` or ``batch_size`` below 1, ``lr``
    <= 0 or NaN). Absent fields are not checked: their defaults train."""
    for key, (ok, must, fix) in TRAINABLE.items():
        if key in fields and not ok(fields[key]):
            raise ConfigError(f"{where}.{key} is {fields[key]!r}, which cannot train a model: "
                              f"it must be {must}. Set {where}.{key} {fix}.")


# False while check_fields builds a recipe without its architecture's own check.
_CHECK_ARCHITECTURE: ContextVar[bool] = ContextVar("_CHECK_ARCHITECTURE", default=True)


def check_fields(fields: Mapping[str, Any], where: str = "recipe") -> None:
    """ConfigError naming ``{where}.{key}`` for a field of the recipe mapping ``fields`` that
    makes no :class:`Recipe` (Recipe.from_dict's checks), less the architecture's own: whether
    ``architecture`` is registered and ``arch_params`` are its parameters is checked where the
    recipe is built (the registry imports torch). For a config whose architecture is known
    only once its model loads (`miaudit audit`'s ``references.recipe``), checked up front."""
    token = _CHECK_ARCHITECTURE.set(False)
    try:  # a mapping of arch_params is the architecture's; anything else is refused here
        Recipe.from_dict({k: v for k, v in fields.items()
                          if k != "arch_params" or not isinstance(v, Mapping)}, where)
    finally:
        _CHECK_ARCHITECTURE.reset(token)


def _freeze(value: Any, where: str) -> Any:
    """Immutable, JSON-representable copy of ``value`` (lists become tuples)."""
    if isinstance(value, Mapping):
        return FrozenParams(value)
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, where) for v in value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        if not math.isfinite(value):
            raise ConfigError(f"{where}: {value} is not a finite number.")
        return float(value)
    raise ConfigError(
        f"{where}: value {value!r} of type {type(value).__name__} is not allowed; "
        "use numbers, strings, booleans, lists or mappings."
    )


def _thaw(value: Any) -> Any:
    if isinstance(value, FrozenParams):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


class FrozenParams(Mapping[str, Any]):
    """A read-only, hashable mapping of string keys to JSON-like values."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        items = {}
        for key, value in (data or {}).items():
            if not isinstance(key, str):
                raise ConfigError(f"parameter names must be strings, got {key!r}.")
            items[key] = _freeze(value, f"parameter {key!r}")
        self._data = dict(sorted(items.items()))

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(json.dumps(_thaw(self), sort_keys=True))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            same: bool = _thaw(self) == {k: _thaw(_freeze(v, k)) for k, v in other.items()}
            return same
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenParams({self._data!r})"


@dataclass(frozen=True)
class Recipe:
    """How to train one model. Every field enters :meth:`key`."""

    architecture: str = "mlp"
    arch_params: Mapping[str, Any] = field(default_factory=FrozenParams)
    optimizer: str = "sgd"  # "sgd" | "adam"
    lr: float = 0.1
    momentum: float = 0.9  # sgd only; 0 gives plain SGD (nesterov is then ignored)
    nesterov: bool = True  # sgd only
    weight_decay: float = 0.0
    schedule: str = "cosine"  # "cosine" (per step, to 0 at the end) | "constant"
    epochs: int = 20
    batch_size: int = 128
    # DP-SGD (Opacus) settings, or None for ordinary training; see DP_DEFAULTS / check_dp.
    dp: Mapping[str, Any] | None = None
    # Batch augmentation steps, e.g. ("crop", "mirror"); see miaudit.train.augment. Image data only.
    augment: tuple[Any, ...] = ()
    # Cross-entropy label smoothing in [0, 1) (F.cross_entropy's label_smoothing); 0: none.
    label_smoothing: float = 0.0
    # "fp32", or "bf16": forward pass and loss under bfloat16 autocast (weights, gradients and
    # optimizer state stay float32; queries run under it too). On CUDA, or a CPU with native
    # bfloat16 (refused on other CPUs when training or querying starts, see
    # miaudit.runtime.devices), and not with dp.
    precision: str = DEFAULT_PRECISION
    # The share of the last epoch's steps that run: airbench94's 9.9 epochs are epochs 10,
    # epoch_fraction 0.9 (ceil(0.9 * steps per epoch) steps in the last). airbench94 only.
    epoch_fraction: float = 1.0

    def __post_init__(self) -> None:
        # before coercion, so a NaN or zero learning rate is named with its fix
        check_trainable({k: getattr(self, k) for k in TRAINABLE})
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _coerce(f, getattr(self, f.name)))
        if _CHECK_ARCHITECTURE.get():  # (not in check_fields)
            # imported here: the registry's architectures import torch, which a config check
            # of the other fields (check_fields, check_trainable) does not load
            from miaudit.models import check_model_params

            check_model_params(self.architecture, self.arch_params)
        neutral = KEY_NEUTRAL_ARCH_PARAMS.get(self.architecture, {})
        kept = {
            k: v for k, v in self.arch_params.items() if not (k in neutral and v == neutral[k])
        }
        if len(kept) != len(self.arch_params):
            object.__setattr__(self, "arch_params", FrozenParams(kept))
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("schedule", self.schedule, SCHEDULES)
        _choice("precision", self.precision, PRECISIONS)
        if self.momentum < 0 or self.weight_decay < 0:
            raise ConfigError("momentum and weight_decay must be >= 0.")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}.")
        if not 0.0 < self.epoch_fraction <= 1.0 or (
                self.epoch_fraction != 1.0 and self.architecture != "airbench94"):
            raise ConfigError(f"epoch_fraction must be in (0, 1], and below 1 only for "
                              f"airbench94 (its trainer runs it); got {self.epoch_fraction}.")
        if self.dp is not None:
            object.__setattr__(self, "dp", check_dp(self.dp))
        # Checked (ConfigError naming the valid steps) and spelled out with defaults, so
        # ["crop"] and [{"name": "crop", "padding": 4}] share one key.
        steps = normalize_augmentation(self.augment)
        object.__setattr__(self, "augment", _freeze(steps, "augment"))
        if self.dp is not None and self.augment:
            raise ConfigError("augment is not supported with dp (DP-SGD) yet; drop one of them.")
        if self.dp is not None and self.precision != DEFAULT_PRECISION:
            # Opacus's per-sample gradients under autocast are untested here: refuse, not guess.
            raise ConfigError(
                f"precision {self.precision} is not supported with dp (DP-SGD): Opacus's "
                "per-sample gradients and clipping run in fp32; set precision: fp32."
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every field."""
        return {f.name: _thaw(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "recipe") -> Recipe:
        """Build from a dict; unknown keys raise ConfigError naming the key and the valid ones.
        `where`: the mapping's place in its config (``reference_recipe``, ``recipes.strong``),
        named in the message of a field that cannot train (:func:`check_trainable`)."""
        valid = [f.name for f in dataclasses.fields(cls)]
        for key in data:
            if key not in valid:
                close = difflib.get_close_matches(str(key), valid, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(
                    f"unknown recipe key {key!r}.{hint} Valid keys: {', '.join(valid)}."
                )
        check_trainable(data, where)
        # each field alone first (with the architecture its params belong to), so that a bad
        # value is named by its place: recipe.optimizer, recipes.strong.dp, ...
        given = [k for k in valid if k in data]
        for key in given:
            try:
                cls(**{k: data[k] for k in dict.fromkeys(("architecture", key)) if k in data})
            except ConfigError as exc:
                if f"{where}.{key}" in str(exc):
                    raise
                raise ConfigError(f"{where}.{key}: {exc}") from exc
        try:
            return cls(**dict(data))
        except ConfigError as exc:  # two fields that do not go together (dp and augment, ...)
            raise ConfigError(f"{where}: {exc}") from exc

    def replace(self, **changes: Any) -> Recipe:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def plain(self) -> Recipe:
        """This recipe without augmentation, DP-SGD, weight decay, label smoothing and dropout
        (the dropout parameters go back to the architecture's defaults): how an attacker who
        does not know the training technique trains its reference models."""
        params = {k: v for k, v in self.arch_params.items() if k not in REGULARISING_ARCH_PARAMS}
        return self.replace(
            arch_params=params, augment=(), dp=None, weight_decay=0.0, label_smoothing=0.0
        )

    def canonical_json(self) -> str:
        """Sorted, compact JSON of every field: the input of :meth:`key`.

        Fields at their value in :data:`KEY_NEUTRAL_FIELDS` (``dp`` None, no ``augment``, no
        label smoothing, ``precision`` fp32) are left out, so adding such a field keeps the
        keys (and cache entries) of recipes that do not use it. A recipe fine-tuning a
        pretrained ``base_model`` (``hf-causal-lm``) also carries the base's content identity
        (its file's sha256): the same name on other weights is another recipe.
        """
        data = {
            k: v
            for k, v in self.to_dict().items()
            if not (k in KEY_NEUTRAL_FIELDS and _thaw(KEY_NEUTRAL_FIELDS[k]) == v)
        }
        base = self.arch_params.get("base_model")
        if base:
            from miaudit.models.hf_lm import base_model_identity

            data["base_model_identity"] = base_model_identity(str(base))
        return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)

    def key(self) -> str:
        """Stable sha256 hex digest of :meth:`canonical_json`."""
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()


DP_ACCOUNTANTS = ("prv", "rdp")
# Filled in for missing keys, so {"epsilon": 8} and its spelled-out form share one key.
# "accountant": "auto" resolves to a concrete one (see resolve_accountant) before it is stored.
DP_DEFAULTS: dict[str, Any] = {"delta": 1e-5, "max_grad_norm": 1.0, "accountant": "auto"}
DP_KEYS = ("epsilon", *DP_DEFAULTS)
# Above this target epsilon "auto" picks the RDP accountant: PRV discretises the privacy loss on
# a grid of about 2 L / mesh points, where L grows with epsilon (~1,800 at epsilon 1,000), and
# its noise search at epsilon 1,000 outgrew 11 GiB (EXPERIMENTS.md). At epsilon <= 100 PRV's
# tighter accounting costs under ~1 GiB and seconds for the audits here.
PRV_MAX_AUTO_EPSILON = 100.0


def resolve_accountant(accountant: str, epsilon: float) -> str:
    """``accountant`` unless it is ``"auto"``: then ``"prv"`` up to epsilon
    :data:`PRV_MAX_AUTO_EPSILON` and ``"rdp"`` above it (with a warning, once per epsilon)."""
    if accountant != "auto":
        return accountant
    if epsilon <= PRV_MAX_AUTO_EPSILON:
        return "prv"
    _warn_rdp_chosen(epsilon)
    return "rdp"


@functools.cache
def _warn_rdp_chosen(epsilon: float) -> None:
    log.warning(
        "dp epsilon=%g > %g: using Opacus's RDP accountant (PRV's accounting grid grows with "
        "epsilon and needs GiBs there); the model's privacy record names the accountant. Set "
        "dp.accountant: prv to insist (its noise search is then bounded, see miaudit.train.dp).",
        epsilon, PRV_MAX_AUTO_EPSILON,
    )


def check_dp(dp: Any) -> FrozenParams:
    """Validated DP-SGD settings with defaults filled in: ``epsilon`` (the target, > 0,
    required), ``delta`` (0 < delta < 1), ``max_grad_norm`` (per-sample clipping norm, > 0)
    and ``accountant`` (``"prv"`` or ``"rdp"``, Opacus's accountants, or ``"auto"`` (the
    default): PRV up to epsilon 100, RDP above; stored resolved, so ``{"epsilon": 8}`` keeps
    the key it had when PRV was the fixed default)."""
    if not isinstance(dp, Mapping):
        raise ConfigError(f"dp must be a mapping like {{'epsilon': 8.0}} or None, got {dp!r}.")
    unknown = [k for k in dp if k not in DP_KEYS]
    if unknown:
        raise ConfigError(f"unknown dp key(s) {unknown}; valid keys: {', '.join(DP_KEYS)}.")
    if "epsilon" not in dp:
        raise ConfigError("dp needs a target 'epsilon' (> 0).")
    out = {**DP_DEFAULTS, **dp}
    for name in ("epsilon", "delta", "max_grad_norm"):
        value = out[name]
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(f"dp {name!r} must be a number, got {value!r}.")
        out[name] = float(value)
        if not math.isfinite(out[name]) or out[name] <= 0:
            raise ConfigError(f"dp {name!r} must be finite and > 0, got {value!r}.")
    if out["delta"] >= 1:
        raise ConfigError(f"dp 'delta' must lie in (0, 1), got {out['delta']}.")
    _choice("dp accountant", out["accountant"], (*DP_ACCOUNTANTS, "auto"))
    out["accountant"] = resolve_accountant(out["accountant"], out["epsilon"])
    return FrozenParams(out)


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} {value!r} is unknown; use one of {', '.join(choices)}.")


def _coerce(f: dataclasses.Field[Any], value: Any) -> Any:
    """Check ``value`` against the type of the field's default; ints become floats if needed."""
    if f.default is not dataclasses.MISSING:
        default = f.default
    else:  # every recipe field has a default or a factory
        assert f.default_factory is not dataclasses.MISSING
        default = f.default_factory()
    bad = ConfigError(
        f"recipe field {f.name!r} must be {type(default).__name__}, got {value!r} "
        f"({type(value).__name__})."
    )
    if isinstance(default, Mapping):
        if not isinstance(value, Mapping):
            raise bad
        return FrozenParams(value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise bad
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise bad
        if isinstance(value, numbers.Integral):
            return operator.index(value)
        if not float(value).is_integer():
            raise bad
        return int(float(value))
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise bad
        return _freeze(float(value), f.name)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise bad
        return value
    return _freeze(value, f.name)
