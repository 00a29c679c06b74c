"""Every field of both config types refuses values of the wrong type or out of range with a
ConfigError naming its dotted key, when the config is checked (before any data loads or model
trains), never a TypeError/ValueError/... nor a pass: in the spirit of scikit-learn's
``check_param_validation``.

The fields are found by walking the config models' ``model_fields`` (nested sections and the
variants of a union included), so a new field is fuzzed without touching this file; the
invalid values of a field follow from its type annotation (:func:`invalid_values`). Recipe
fields (``recipe``, ``reference_recipe``, a named recipe, the audit's ``references.recipe``:
the fields of :class:`~miaudit.train.recipe.Recipe`, and the keys of its ``dp`` and
augmentation steps) and attack parameters (each registered attack's declared ``Param``,
through check_attack_params) are fuzzed the same way. `pytest -s -k count` prints how many
values each field is tried with.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import operator
import re
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from miaudit.config import RunConfig, config_from_dict
from miaudit.config.sections.spec import Spec
from miaudit.errors import ConfigError
from miaudit.external.audit_config import AuditConfig, audit_config

NAN, INF = float("nan"), float("inf")

# Fields that legitimately accept any value: never fuzzed.
ALLOW_ANY = {
    # an in-memory model from the Python API (miaudit.audit): any object is the model
    "audit:model.instance",
}
# Values of a type the annotation admits that are still valid for one field (not refused).
STILL_VALID: dict[str, tuple[Any, ...]] = {
    # an audit's reference recipe is checked before its model loads less its architecture's
    # own (train.recipe.check_fields): the name is looked up where the recipe is built (the
    # architectures' registry imports torch); its type is checked up front
    "references.recipe.architecture": ("",),
    # null: `auto`, as documented (SignalsConfig, check_signals), in both configs
    "signals.queries": (None,),
    "signals.grad_norm": (None,),
    # null (`epochs:` left empty in the YAML): no checkpoints, as CheckpointSpec reads it
    "checkpoints.epochs": (None,),
    "checkpoints.steps": (None,),
}

RUN_BASE: dict[str, Any] = {"name": "fuzz", "dataset": {"name": "digits"}}
AUDIT_BASE: dict[str, Any] = {"model": {"predict": "nets.py:predict_proba"},
                              "data": {"dataset": "digits", "members": "members.txt"}}
# Settings a field is only read under, laid under the fuzzed value (by dotted-key prefix) so
# that its own check runs, not only "this key needs that one".
RUN_CONTEXT: dict[str, dict[str, Any]] = {
    "canaries.exposure_candidates": {"canaries": {"count": 10, "kind": "secret"},
                                     "dataset": {"name": "spam"}},
    "canaries.secret_format": {"canaries": {"count": 10, "kind": "secret"},
                               "dataset": {"name": "spam"}},
    "canaries.guesses": {"canaries": {"count": 10}},
}
_GRADIENT = {"canaries": {"count": 10, "kind": "gradient"},
             "recipe": {"dp": {"epsilon": 4.0}}}
for _key in ("direction", "coordinates", "probe_rows", "score", "threat_models", "known_data",
             "noise", "delta"):
    RUN_CONTEXT[f"canaries.{_key}"] = _GRADIENT
AUDIT_CONTEXT: dict[str, dict[str, Any]] = {
    "model.max_length": {"model": {"predict": None, "hf_model": "folder"}},
    "model.base_model": {"model": {"predict": None, "hf_model": "folder"}},
    "references.base": {"model": {"predict": None, "hf_model": "folder"}},
    "model.dp_epsilon": {"model": {"dp_delta": 1e-5}},
    "model.dp_delta": {"model": {"dp_epsilon": 8.0}},
    "model.weights": {"model": {"predict": None, "module": "nets.py:Net"}},
    "model.public_outputs": {"model": {"predict": None, "outputs": "outputs.npy"}},
}


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _members(annotation: Any) -> tuple[Any, ...]:
    """The members of a union annotation (``X | None``), or the annotation alone."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _bare(annotation: Any) -> Any:
    """An annotation less its ``Annotated`` metadata (the validators of the value rules)."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _bare(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, [_bare(t) for t in typing.get_args(annotation)])
    return annotation


def _section(annotation: Any) -> type[Spec] | None:
    """The Spec class of a section's annotation (the first variant of a union: every
    variant has the same fields), or None for a value."""
    for t in _members(_bare(annotation)):
        if isinstance(t, type) and issubclass(t, Spec):
            return t
    return None


def leaves(cls: type[Spec], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, annotation) of every field of the config model ``cls`` (its
    ``model_fields``), nested sections walked (a field whose type is a Spec is a section)."""
    for name, info in cls.model_fields.items():
        section = _section(info.annotation)
        if section is not None:
            yield from leaves(section, f"{prefix}{name}.")
        else:
            yield prefix + name, _bare(info.annotation)


def _matches(value: Any, annotation: Any) -> bool:
    """Whether ``value`` is of (one member of) ``annotation``, as YAML gives values: a bool is
    not a number, an int is a float, a list is a list of its element type."""
    for t in _members(annotation):
        origin, args = typing.get_origin(t), typing.get_args(t)
        if t is Any:
            return True
        if t is type(None):
            if value is None:
                return True
        elif t is bool:
            if isinstance(value, bool):
                return True
        elif t is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return True
        elif t is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return True
        elif t is str:
            if isinstance(value, str):
                return True
        elif origin is typing.Literal:
            if value in args:
                return True
        elif origin is list:
            if isinstance(value, list) and all(_matches(v, args[0]) for v in value):
                return True
        elif origin is dict:
            if isinstance(value, dict):
                return True
        else:
            raise AssertionError(f"no rule for the annotation {t!r}: teach _matches it")
    return False


# Every candidate: each field is tried with those its annotation does not admit, and with the
# out-of-range values of the types it does.
CANDIDATES: tuple[Any, ...] = ("abc", [1], ["x"], {"x": 1}, None, True, 1.5, -1)
# out of range for any field of the type: negative numbers, NaN, infinity, an empty string
# (a field that takes one names it in STILL_VALID)
RANGE: dict[Any, tuple[Any, ...]] = {
    int: (-1, -5),
    float: (-1.0, NAN, INF),
    str: ("",),
}


def invalid_values(key: str, annotation: Any) -> list[Any]:
    """The invalid values tried for the field ``key`` of type ``annotation``."""
    out = [v for v in CANDIDATES if not _matches(v, annotation)]
    for t in _members(annotation):
        for value in RANGE.get(t, ()):
            if value not in out:  # (NAN is one object: `in` finds it by identity)
                out.append(value)
        if typing.get_origin(t) is list and typing.get_args(t)[0] in (int, float):
            out += [[-1], [NAN], [True]] + ([[1.5]] if typing.get_args(t)[0] is int else [])
        if typing.get_origin(t) is list and typing.get_args(t)[0] is str:
            out += [[""]]
    keep = STILL_VALID.get(key, ())
    return [v for v in out if not any(v is k or v == k for k in keep)]


def _nested(key: str, value: Any) -> dict[str, Any]:
    head, _, rest = key.partition(".")
    return {head: _nested(rest, value) if rest else value}


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _context(key: str, contexts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return contexts.get(key, {})


def run_cases() -> list[tuple[str, Any, dict[str, Any]]]:
    cases = []
    for key, annotation in leaves(RunConfig):
        if f"run:{key}" in ALLOW_ANY:
            continue
        base = _merge(RUN_BASE, _context(key, RUN_CONTEXT))
        for value in invalid_values(key, annotation):
            cases.append((key, value, _merge(base, _nested(key, value))))
    return cases


def audit_cases() -> list[tuple[str, Any, dict[str, Any]]]:
    cases = []
    for key, annotation in leaves(AuditConfig):
        if f"audit:{key}" in ALLOW_ANY:
            continue
        base = _merge(AUDIT_BASE, _context(key, AUDIT_CONTEXT))
        for value in invalid_values(key, annotation):
            data = _merge(base, _nested(key, value))
            # a None in the context removes the key (another model kind than the base's)
            data["model"] = {k: v for k, v in data["model"].items()
                             if v is not None or k == key.partition(".")[2]}
            cases.append((key, value, data))
    return cases


# Where recipe fields are given: (config, dotted place, the base config), each place tried
# with every field of Recipe.
RECIPE_PLACES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("run", "recipe", RUN_BASE),
    ("run", "reference_recipe", RUN_BASE),
    ("run", "recipes.fuzzed", RUN_BASE),  # a named recipe, even one nothing names
    ("audit", "references.recipe", AUDIT_BASE),
)


def recipe_cases() -> list[tuple[str, Any, dict[str, Any]]]:
    from miaudit.train.recipe import Recipe

    cases = []
    for config, where, base in RECIPE_PLACES:
        for f in dataclasses.fields(Recipe):
            key = f"{where}.{f.name}"
            annotation = _hints(Recipe)[f.name]
            if annotation is tuple or typing.get_origin(annotation) is tuple:
                annotation = list[Any]  # augment: a list of steps
            elif any(typing.get_origin(t) is collections.abc.Mapping
                     for t in _members(annotation)):  # arch_params, dp: mappings
                annotation = (dict[str, Any] | None if type(None) in _members(annotation)
                              else dict[str, Any])
            for value in invalid_values(key, annotation):
                cases.append((f"{config}:{key}", value, _merge(base, _nested(key, value))))
    return cases


# Invalid values of the settings inside a recipe's dp and augment steps, by the type of
# their default (the keys themselves come from the code: DP_KEYS, AUGMENTATIONS).
NESTED_INVALID: dict[type, tuple[Any, ...]] = {
    float: ("abc", True, None, -1.0, NAN, INF, [1], {"x": 1}),
    int: ("abc", True, None, -1, 1.5, NAN, [1]),
    str: (1, "", "nonsense", None, [1], True),
}


def nested_recipe_cases() -> list[tuple[str, Any, dict[str, Any]]]:
    """(config:place.dp.key or place.augment.step.param, invalid value, config) for every
    key of ``dp`` and every parameter of every augmentation step, in a run's recipe and an
    audit's reference recipe."""
    from miaudit.train.augment import AUGMENTATIONS
    from miaudit.train.recipe import DP_DEFAULTS, DP_KEYS

    dp_types = {k: type(DP_DEFAULTS.get(k, 1.0)) for k in DP_KEYS}  # epsilon: a number
    cases = []
    for config, where, base in (RECIPE_PLACES[0], RECIPE_PLACES[3]):
        for key, kind in dp_types.items():
            values = list(NESTED_INVALID[kind]) + ([1.0, 2.0] if key == "delta" else [])
            for value in values:
                dp = {"epsilon": 4.0, key: value}
                cases.append((f"{config}:{where}.dp.{key}", value,
                              _merge(base, _nested(where, {"dp": dp}))))
        for step, params in AUGMENTATIONS.items():
            for name, default in params.items():
                values = list(NESTED_INVALID[int if type(default) is int else float])
                if name == "p":
                    values += [1.5]
                if name == "size":  # pixels (>= 1) or a fraction in (0, 1]
                    values = [v for v in values if v != 1.5] + [0, 0.0, 2.5]
                for value in values:
                    augment = [{"name": step, name: value}]
                    cases.append((f"{config}:{where}.augment.{step}.{name}", value,
                                  _merge(base, _nested(where, {"augment": augment}))))
    return cases


def _check(build: Callable[[dict[str, Any]], Any], key: str, value: Any,
           data: dict[str, Any]) -> str | None:
    """None when ``data`` is refused with a ConfigError naming ``key``; else what happened."""
    try:
        build(data)
    except ConfigError as exc:
        return None if key in str(exc) else f"ConfigError not naming {key}: {exc}"
    except Exception as exc:  # noqa: BLE001 - any other exception is the failure reported
        return f"{type(exc).__name__}: {exc}"
    return "accepted"


RUN_CASES, AUDIT_CASES, RECIPE_CASES = run_cases(), audit_cases(), recipe_cases()
NESTED_CASES = nested_recipe_cases()


def _id(case: tuple[str, Any, dict[str, Any]]) -> str:
    return f"{case[0]}={case[1]!r}"


@pytest.mark.parametrize("case", RUN_CASES, ids=_id)
def test_run_config_refuses_invalid_values(case: tuple[str, Any, dict[str, Any]]) -> None:
    key, value, data = case
    assert _check(config_from_dict, key, value, data) is None


@pytest.mark.parametrize("case", RECIPE_CASES, ids=_id)
def test_recipe_fields_refuse_invalid_values(case: tuple[str, Any, dict[str, Any]]) -> None:
    place, value, data = case
    config, _, key = place.partition(":")
    assert _check(config_from_dict if config == "run" else audit_config, key, value,
                  data) is None


@pytest.mark.parametrize("case", NESTED_CASES, ids=_id)
def test_recipe_dp_and_augment_settings_refuse_invalid_values(
        case: tuple[str, Any, dict[str, Any]]) -> None:
    """The message names the recipe's field (recipe.dp, recipe.augment) and the setting."""
    place, value, data = case
    config, _, key = place.partition(":")
    inner = ".dp." if ".dp." in key else ".augment."
    field, setting = key.split(inner)[0] + inner.rstrip("."), key.rsplit(".", 1)[1]
    build = config_from_dict if config == "run" else audit_config
    assert _check(build, field, value, data) is None
    with pytest.raises(ConfigError, match=re.escape(setting)):
        build(data)

@pytest.mark.parametrize("case", AUDIT_CASES, ids=_id)
def test_audit_config_refuses_invalid_values(case: tuple[str, Any, dict[str, Any]]) -> None:
    key, value, data = case
    assert _check(audit_config, key, value, data) is None


def _param_invalid(p: Any, value: Any, own: str) -> bool:
    """Whether ``value`` is invalid for the declared parameter ``p`` of attack ``own``, by
    its declared type, bounds and choices (decided here, not by the code under test)."""
    def number(v: Any, whole: bool) -> bool:  # a valid number of the parameter
        if isinstance(v, bool) or not isinstance(v, int if whole else (int, float)):
            return False
        if v != v or (v in (INF, -INF) and not (p.high == INF and not p.high_open)):
            return False
        low = p.low is None or v > p.low or (v == p.low and not p.low_open)
        high = p.high is None or v < p.high or (v == p.high and not p.high_open)
        return low and high

    if value is None:
        return not p.nullable
    if p.type == "bool":
        return not isinstance(value, bool)
    if p.type in ("int", "float"):
        return not number(value, p.type == "int")
    if p.type == "str":
        return not isinstance(value, str) or (p.choices is not None and value not in p.choices)
    if not isinstance(value, list):
        return True
    if p.type == "list[int]":
        return not all(number(v, True) for v in value)
    return not all(isinstance(v, str) and v in ("loss", "rmia") and v != own for v in value)


# Values tried on every declared parameter: those its declaration refuses are the cases.
PARAM_POOL: tuple[Any, ...] = ("abc", "", 1.5, True, 0, 1, 3, -1, NAN, INF, None, [1], [1.5],
                               [True], ["x"], [NAN], [-1], {"x": 1}, "loss")


def param_cases() -> list[tuple[str, Any, dict[str, Any]]]:
    """(attack_params.<attack>.<param>, invalid value, attack_params) of every declared
    parameter of every registered attack: the values of PARAM_POOL, and each bound's
    neighbour outside it, that the parameter's declaration refuses."""
    from miaudit.attacks import list_attacks

    cases = []
    for spec in list_attacks():
        for p in spec.params:
            values = list(PARAM_POOL) + [spec.name, [spec.name]]
            for bound, step in ((p.low, -1), (p.high, 1)):
                if bound is not None and bound not in (INF, -INF):
                    values += [bound + step, bound + step * 1e-6] + (
                        [bound] if (p.low_open if step < 0 else p.high_open) else [])
            key = f"attack_params.{spec.name}.{p.name}"
            cases += [(key, v, {spec.name: {p.name: v}}) for v in values
                      if _param_invalid(p, v, spec.name)]
    return cases


PARAM_CASES = param_cases()


def _check_params(key: str, value: Any, params: dict[str, Any]) -> str | None:
    """As :func:`_check`, through check_attack_params (the one check of both configs); the
    message names ``attack_params.<attack>`` and the parameter."""
    from miaudit.attacks.registry import check_attack_params

    attack, name = key.split(".")[1:]
    try:
        check_attack_params(params, selected=[attack])
    except ConfigError as exc:
        named = f"attack_params.{attack}" in str(exc) and f"'{name}'" in str(exc)
        return None if named else f"ConfigError not naming {key}: {exc}"
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    return "accepted"


@pytest.mark.parametrize("case", PARAM_CASES, ids=_id)
def test_attack_params_refuse_invalid_values(case: tuple[str, Any, dict[str, Any]]) -> None:
    assert _check_params(*case) is None


def test_every_field_is_fuzzed_and_the_count_is_reported() -> None:
    """Per field, how many invalid values are tried (printed: pytest -s); every field of both
    configs and of a recipe is tried with several, and the total stays above a floor (a
    shrinking count means fields or values stopped being tried)."""
    counts: collections.Counter[str] = collections.Counter()
    for name, cases in (("run", RUN_CASES), ("recipe", RECIPE_CASES + NESTED_CASES),
                        ("audit", AUDIT_CASES), ("param", PARAM_CASES)):
        counts.update(key if name == "recipe" else f"{name}:{key}" for key, _, _ in cases)
    for key, n in sorted(counts.items()):
        print(f"{n:4d}  {key}")
    total = sum(counts.values())
    print(f"{total} (field x invalid value) cases over {len(counts)} fields")
    fields = {f"run:{k}" for k, _ in leaves(RunConfig)} | {
        f"audit:{k}" for k, _ in leaves(AuditConfig)}
    assert fields - ALLOW_ANY <= set(counts)
    assert all(n >= 3 for n in counts.values())
    assert total >= 4000


def test_numpy_scalars_from_the_api_are_saved_as_python_values() -> None:
    """What the Python API may give (numpy scalars) passes the checks as before, and becomes
    the Python value config.yaml / audit.yaml can hold (yaml.safe_dump refuses numpy's)."""
    import numpy as np
    import yaml

    from miaudit.config import dump_config
    from miaudit.external.audit_config import dump_audit_config

    cfg = config_from_dict({**RUN_BASE, "models": 2, "split": {"audit": np.int64(300),
                                                              "public": np.float64(0.3)},
                            "metrics": {"bootstrap": np.int64(0)},
                            "signals": {"boundary_distance": np.bool_(False)}})
    assert yaml.safe_load(dump_config(cfg))["split"] == {
        "audit": 300, "public": 0.3, "population": 0.2, "members": None}
    assert type(cfg.split.audit) is int and type(cfg.signals.boundary_distance) is bool
    audit = audit_config(_merge(AUDIT_BASE, {"references": {"models": np.int64(2)},
                                             "exposed": np.int64(5)}))
    assert yaml.safe_load(dump_audit_config(audit))["references"]["models"] == 2
