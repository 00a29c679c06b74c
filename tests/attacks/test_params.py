"""Declared attack parameters: every registered attack declares exactly its function's keyword
parameters, with valid defaults, and `miaudit attacks NAME` prints them; a misspelt name or an
invalid value is refused before any model trains or any bank loads, from every entry point
(`miaudit run`, `miaudit audit`, `miaudit attack --params`, the Python API, `run_attack`)."""

from __future__ import annotations

import inspect
import math
import time

import numpy as np
import pytest
import yaml

import miaudit
from miaudit.attacks import TargetView, get_attack, list_attacks, register_attack, run_attack
from miaudit.attacks import registry as registry
from miaudit.attacks.params import Param
from miaudit.attacks.registry import check_attack_params, check_params
from miaudit.cli.main import main
from miaudit.config import RunConfig, config_from_dict
from miaudit.errors import AttackError, ConfigError, ParamError

TYPO = {"rmia": {"gama": 2}}
HINT = "did you mean 'gamma'"


def _keyword_parameters(fn) -> list[str]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in list(inspect.signature(fn).parameters.values())[1:]
            if p.kind in kinds]


def test_every_attack_declares_exactly_its_function_parameters():
    specs = list_attacks()
    assert len(specs) >= 40
    for spec in specs:
        first = next(iter(inspect.signature(spec.fn).parameters))
        assert first == "view", spec.name
        assert sorted(p.name for p in spec.params) == sorted(_keyword_parameters(spec.fn)), \
            spec.name
        assert len({p.name for p in spec.params}) == len(spec.params), spec.name
        for param in spec.params:
            assert param.meaning and "\n" not in param.meaning, (spec.name, param.name)
        assert check_params(spec.name, spec.defaults) == spec.defaults  # defaults are valid


def test_the_parameters_rapid_hybrid_gives_its_feature_attacks_are_valid():
    """rapid-hybrid calls its feature attacks' functions directly, past `run_attack`."""
    from miaudit.attacks.hybrid import DEFAULT_EXTRA_ATTACKS, FEATURE_PARAMS

    for name, params in FEATURE_PARAMS.items():
        check_params(name, params)
    check_params("rapid-hybrid", {"extra_attacks": list(DEFAULT_EXTRA_ATTACKS)})


def test_miaudit_attacks_name_prints_every_parameter(capsys):
    for spec in list_attacks():
        assert main(["attacks", spec.name]) == 0
        out = capsys.readouterr().out
        lines = out.splitlines()
        assert lines[0] == spec.name
        assert f"  family:      {spec.family}" in lines
        assert f"  description: {spec.description}" in lines
        if not spec.params:
            assert "  parameters:  none" in lines
        for param in spec.params:
            row = next((ln for ln in lines if ln.split()[:2] == [param.name, param.type]), None)
            assert row is not None and row.startswith(f"    {param.name} "), (spec.name, param)
            assert param.bounds() in row
            assert row.rstrip().endswith(f"default {_yaml(param.default)}")
            assert " ".join(param.meaning.split()) in " ".join(out.split())


def _yaml(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    return str(value)


def test_miaudit_attacks_rmia(capsys):
    assert main(["attacks", "rmia"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:5] == [
        "rmia",
        "  family:      rmia",
        "  description: Zarifzadeh et al. (offline): fraction of population z with LR(x, z) "
        "> gamma",
        "  needs:       out_references=1, population=True",
        "  parameters:  set as attack_params: {rmia: {NAME: VALUE}} (miaudit attack: --params)",
    ]
    rows = [ln for ln in lines if ln.startswith("    ") and not ln.startswith("     ")]
    assert rows == [
        "    a            float  [0, 1]         default 0.3",
        "    gamma        float  > 0            default 2.0",
        "    tie_break    str    {none, ratio}  default ratio",
        "    temperature  float  > 0            default 1.0",
    ]
    meanings = [ln for ln in lines if ln.startswith("        ")]
    assert meanings[0].startswith("        offline Pr(x) = ((1 + a) mean_OUT")
    assert any("ratio(x) / ratio(z) > gamma" in ln for ln in meanings)
    assert any("none: the" in ln for ln in meanings)


def test_miaudit_attacks_lists_parameters_compactly(capsys):
    assert main(["attacks"]) == 0
    out = capsys.readouterr().out
    assert "    params: a=0.3, gamma=2.0, tie_break=ratio, temperature=1.0\n" in out
    flat = " ".join(out.split())
    for spec in list_attacks():
        if spec.params:
            defaults = ", ".join(f"{p.name}={_yaml(p.default)}" for p in spec.params)
            assert f"params: {defaults}" in flat, spec.name
    assert "miaudit attacks NAME: one attack in full" in out
    assert main(["attacks", "rmiaa"]) == 2
    assert "unknown attack 'rmiaa'. Did you mean rmia" in capsys.readouterr().err


# --- refused before any work, from every entry point ---------------------------------------


def _cpu_seconds(fn):
    start = time.process_time()
    result = fn()
    return result, time.process_time() - start


def test_a_misspelt_parameter_fails_miaudit_run_before_any_model_trains(tmp_path, capsys):
    cache, out = tmp_path / "cache", tmp_path / "out"
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "name": "typo", "dataset": {"name": "digits"}, "models": 2,
        "recipe": {"architecture": "mlp", "epochs": 1}, "attacks": ["loss", "rmia"],
        "attack_params": TYPO, "cache_dir": str(cache), "output": str(out)}))
    main(["attacks", "loss"])  # imports warmed: the timing below is the command's own work
    capsys.readouterr()
    code, seconds = _cpu_seconds(lambda: main(["run", str(config), "--quiet"]))
    err = capsys.readouterr().err
    assert code == 2
    assert HINT in err and "attack_params.rmia" in err and "'gama'" in err
    assert "a, gamma, tie_break" in err
    assert seconds < 1.0
    assert not cache.exists() and not out.exists()  # nothing trained, nothing written


def test_miaudit_run_in_python_raises_before_training(tmp_path):
    cache = tmp_path / "cache"
    mapping = {"dataset": {"name": "digits"}, "models": 2, "attacks": ["rmia"],
               "attack_params": TYPO, "cache_dir": str(cache), "output": str(tmp_path / "o")}
    with pytest.raises(ConfigError, match=HINT):
        miaudit.run(mapping)
    # a RunConfig built in Python skips config_from_dict's checks: the run's own pre-flight
    cfg = RunConfig(attacks=["rmia"], attack_params={"rmia": {"gamma": -1}},
                    cache_dir=str(cache), output=str(tmp_path / "o"))
    with pytest.raises(ParamError, match="parameter 'gamma' must be a number > 0"):
        miaudit.run(cfg)
    assert not cache.exists() and not (tmp_path / "o").exists()


def _audit_files(tmp_path):
    members = tmp_path / "members.txt"
    members.write_text("0\n1\n2\n")
    return {"model": {"estimator": str(tmp_path / "model.joblib")},
            "data": {"dataset": "digits", "members": str(members)},
            "cache_dir": str(tmp_path / "cache"), "output": str(tmp_path / "out")}


def test_a_misspelt_parameter_fails_miaudit_audit_before_the_model_loads(tmp_path, capsys):
    """The model file does not even exist: the parameters are refused first."""
    files = _audit_files(tmp_path)
    config = tmp_path / "audit.yaml"
    config.write_text(yaml.safe_dump({**files, "attack_params": TYPO}))
    code, seconds = _cpu_seconds(lambda: main(["audit", "--config", str(config), "--quiet"]))
    assert code == 2 and HINT in capsys.readouterr().err
    assert seconds < 1.0
    # the model and data as flags, the parameters in the config
    only_params = tmp_path / "params.yaml"
    only_params.write_text(yaml.safe_dump({"attack_params": {"rmia": {"tie_break": "rank"}}}))
    code = main(["audit", "--config", str(only_params), "--estimator", files["model"]["estimator"],
                 "--data", "digits", "--members", files["data"]["members"],
                 "--cache-dir", files["cache_dir"], "--out", files["output"], "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert "attack 'rmia': parameter 'tie_break' must be one of none, ratio; got 'rank'" in err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_miaudit_audit_in_python_raises_before_training(tmp_path):
    files = _audit_files(tmp_path)
    with pytest.raises(ConfigError, match=HINT):
        miaudit.audit(files["model"]["estimator"], "digits", members=files["data"]["members"],
                      attack_params=TYPO, cache_dir=files["cache_dir"], out=files["output"],
                      progress=False)
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_a_misspelt_parameter_fails_miaudit_attack_before_the_bank_loads(tmp_path, capsys):
    """The bank does not even exist: the parameters are refused first."""
    bank, out = tmp_path / "bank.npz", tmp_path / "out"
    code, seconds = _cpu_seconds(lambda: main(
        ["attack", str(bank), "--target", "0", "--params", "{rmia: {gama: 2}}",
         "--out", str(out)]))
    err = capsys.readouterr().err
    assert code == 2 and HINT in err and "--params.rmia" in err
    assert seconds < 1.0 and not out.exists()
    assert main(["attack", str(bank), "--target", "0", "--params", "{rmia: {gamma: .nan}}",
                 "--out", str(out)]) == 2
    assert "parameter 'gamma' must be a number > 0; got nan" in capsys.readouterr().err
    assert main(["attack", str(bank), "--target", "0", "--attacks", "loss",
                 "--params", "{rmia: {gamma: 3}}", "--out", str(out)]) == 2
    assert "--params names 'rmia', which is not in --attacks" in capsys.readouterr().err
    assert main(["attack", str(bank), "--target", "0", "--params", "{rmia: [",
                 "--out", str(out)]) == 2
    assert "--params is not valid YAML" in capsys.readouterr().err
    assert not out.exists()


def test_miaudit_attack_in_python_raises_before_the_bank_loads(tmp_path):
    with pytest.raises(ParamError, match=HINT):
        miaudit.attack(tmp_path / "no-bank.npz", params=TYPO)
    with pytest.raises(AttackError, match="unknown attack 'rmiaa'. Did you mean rmia"):
        miaudit.attack(tmp_path / "no-bank.npz", params={"rmiaa": {"gamma": 2}})


def test_run_attack_keeps_validating(digits_bank):
    view = TargetView.of(digits_bank, 0)
    with pytest.raises(ParamError, match=r"attack 'rmia' has no parameter 'gama'; did you"):
        run_attack("rmia", view, gama=2)
    with pytest.raises(AttackError, match="'loss' has no parameter 'gamma'. It takes no"):
        run_attack("loss", view, gamma=2)


# --- values ---------------------------------------------------------------------------------

BAD = [
    # wrong type
    ("rmia", "gamma", "2", "a number > 0"),
    ("rapid", "lr", "1e-3", "YAML reads 1e-5 as text"),
    ("shokri", "epochs", 2.5, "an integer >= 1"),
    ("rapid", "epochs", True, "an integer >= 1"),
    ("lira-offline", "equal_counts", 1, "true or false"),
    ("rapid", "hidden", 64, "a list of integers, each >= 1"),
    ("rapid-hybrid", "extra_attacks", "rmia", "a list of attack names"),
    ("rmia", "tie_break", 1, "one of none, ratio"),
    ("rmia", "gamma", None, "a number > 0"),
    # out of bounds
    ("rmia", "gamma", 0, "a number > 0"),
    ("rmia", "a", 1.5, "a number in [0, 1]"),
    ("informia", "a", -0.1, "a number in [0, 1]"),
    ("min-k", "k", 0.0, "a number in (0, 1]"),
    ("base", "temperature", -1.0, "a number > 0"),
    ("rapid", "holdout", 1.0, "a number in [0, 1)"),
    ("rapid", "hidden", [64, 0], "a list of integers, each >= 1"),
    ("rapid", "n_shadows", 1, "an integer >= 2, or null"),
    ("shokri", "top_k", 0, "an integer >= 1, or null"),
    ("shokri", "seed", -1, "an integer >= 0"),
    ("bavaria-n", "prior_strength", -1.0, "a number in [0, inf], or null"),
    # not in choices
    ("rmia", "tie_break", "rank", "one of none, ratio"),
    ("rmia-online", "tie_break", "Ratio", "one of none, ratio"),
    ("rapid-hybrid", "extra_attacks", ["lira-ofline"], "a list of attack names"),
    ("rapid-hybrid", "extra_attacks", ["rapid-hybrid"], "a list of attack names"),
    # NaN and infinities
    ("rmia", "gamma", float("nan"), "a number > 0"),
    ("lm-rmia", "a", np.float64("nan"), "a number in [0, 1]"),
    ("bavaria-t", "prior_strength", float("nan"), "a number in [0, inf], or null"),
    ("base", "temperature", math.inf, "a number > 0"),
    ("rapid", "lr", float("inf"), "a number > 0"),
]


@pytest.mark.parametrize("attack,name,value,requirement", BAD)
def test_bad_values_are_refused_naming_the_attack_and_the_parameter(
    attack, name, value, requirement
):
    with pytest.raises(ParamError) as caught:
        check_params(attack, {name: value})
    message = str(caught.value)
    assert f"attack '{attack}': parameter '{name}' must be " in message
    assert requirement in message
    assert f"got {value!r}" in message
    # the same message from a run config, with its place in the config
    with pytest.raises(ConfigError, match=f"attack_params.{attack}: attack '{attack}'"):
        config_from_dict({"attacks": [attack], "attack_params": {attack: {name: value}}})


GOOD = [
    ("rmia", {"gamma": 2, "a": 1, "tie_break": "none"}),  # integers for floats
    ("rmia", {"gamma": np.float32(1.5), "a": np.int64(0)}),
    ("bavaria-n", {"prior_strength": math.inf}),  # LiRA fixed-variance
    ("bavaria-n", {"prior_strength": 0, "equal_counts": np.bool_(False)}),
    ("rapid", {"hidden": [512, 256, 128], "n_shadows": None, "holdout": 0, "patience": 0,
               "seed": np.int64(3)}),
    ("rapid", {"hidden": []}),  # no hidden layer: a logistic scorer
    ("rapid-hybrid", {"extra_attacks": ["rmia", "base"], "per_query": False}),
    ("rapid-hybrid", {"extra_attacks": []}),
    ("shokri", {"top_k": 3, "n_shadows": 1, "hidden": 8}),
]


@pytest.mark.parametrize("attack,params", GOOD)
def test_valid_values_pass(attack, params):
    assert check_params(attack, params) == params


def test_the_shape_of_attack_params_is_checked():
    with pytest.raises(ParamError, match=r"attack_params must map attack names"):
        check_attack_params([1, 2])
    with pytest.raises(ParamError, match=r"attack_params.rmia: the parameters of attack 'rmia' "
                                         r"must be a mapping"):
        check_attack_params({"rmia": 2})
    assert check_attack_params({"rmia": None}) == {"rmia": {}}
    with pytest.raises(ConfigError, match="must map attack names"):
        from miaudit.external.audit_config import audit_config

        audit_config({"model": {"estimator": "m.joblib"},
                      "data": {"dataset": "digits", "members": "m.txt"},
                      "attack_params": None})


# --- variants and registration ------------------------------------------------------------


def test_variants_share_the_function_with_other_defaults(digits_bank):
    base, variant = get_attack("lira-offline"), get_attack("lira-offline-fixed-variance")
    assert base.fn is variant.fn
    assert (base.defaults["fixed_variance"], variant.defaults["fixed_variance"]) == (False, True)
    view = TargetView.of(digits_bank, 1)
    np.testing.assert_array_equal(run_attack("lira-offline-fixed-variance", view).scores,
                                  run_attack("lira-offline", view, fixed_variance=True).scores)
    assert get_attack("lm-rmia").defaults == {"a": 0.3, "gamma": 1.0}
    assert get_attack("rmia").defaults == {"a": 0.3, "gamma": 2.0, "tie_break": "ratio",
                                           "temperature": 1.0}


def test_registration_refuses_undeclared_or_invalid_parameters(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    gamma = Param("gamma", 2.0, "float", "a threshold", low=0.0, low_open=True)

    def scored(view, gamma):
        return np.zeros(view.n_samples)

    def loose(view, **params):
        return np.zeros(view.n_samples)

    with pytest.raises(ValueError, match="declares the parameters"):
        register_attack("undeclared-test")(scored)
    with pytest.raises(ValueError, match="no \\*\\*kwargs"):
        register_attack("loose-test", params=(gamma,))(loose)
    with pytest.raises(ValueError, match="default -1 of 'gamma' is invalid"):
        register_attack("bad-default-test", params=(gamma.with_default(-1),))(scored)
    register_attack("declared-test", params=(gamma,))(scored)
    assert get_attack("declared-test").defaults == {"gamma": 2.0}
    with pytest.raises(ValueError, match="type must be one of"):
        Param("x", 1, "integer", "a count")


# --- the pydantic model of each attack's parameters ----------------------------------------

_JSON_TYPES = {"bool": "boolean", "int": "integer", "float": "number", "str": "string",
               "list[int]": "array", "list[attack]": "array"}


def test_each_attack_has_a_model_with_every_parameter_its_bounds_choices_and_meaning():
    for spec in list_attacks():
        assert spec.model is spec.model  # built once
        schema = spec.model.model_json_schema()
        assert schema["additionalProperties"] is False, spec.name
        properties = schema.get("properties", {})
        assert list(properties) == [p.name for p in spec.params], spec.name
        for p in spec.params:
            field = properties[p.name]
            assert field["description"] == p.meaning
            assert field["default"] == (list(p.default) if isinstance(p.default, tuple)
                                        else p.default)
            kinds = field.get("anyOf", [field])
            assert ({"type": "null"} in kinds) == p.nullable, (spec.name, p.name)
            kind = next(k for k in kinds if k.get("type") != "null")
            assert kind["type"] == _JSON_TYPES[p.type], (spec.name, p.name)
            assert kind.get("enum") == (list(p.choices) if p.choices else None)
            bounded = kind["items"] if p.type == "list[int]" else kind
            for bound, is_open, closed_key, open_key in (
                (p.low, p.low_open, "minimum", "exclusiveMinimum"),
                (p.high, p.high_open, "maximum", "exclusiveMaximum"),
            ):
                finite = bound is not None and math.isfinite(bound)
                assert bounded.get(open_key if is_open else closed_key) == (
                    bound if finite else None), (spec.name, p.name)
                assert (closed_key if is_open else open_key) not in bounded


def _in_bounds(p: Param, x: float) -> bool:
    return ((p.low is None or x > p.low or (x == p.low and not p.low_open))
            and (p.high is None or x < p.high or (x == p.high and not p.high_open)))


def _valid_values(p: Param, attack: str) -> list:
    """Valid values of `p` in every form a caller may give them, by its declaration."""
    values = [p.default] + [None] * p.nullable
    if p.type == "bool":
        return values + [True, False, np.bool_(True)]
    if p.type == "str":
        return values + list(p.choices or ("text", ""))
    if p.type == "list[attack]":
        return values + [[], ["loss"], ("rmia", "loss")] * (attack not in ("loss", "rmia"))
    finite = [b for b in (p.low, p.high) if b is not None and math.isfinite(b)]
    numbers = [x for b in finite for x in (b, b - 1, b + 1, b - 0.25, b + 0.25)] + [0, 1, 7, -3]
    whole = sorted({int(x) for x in numbers if x == int(x) and _in_bounds(p, x)})
    if p.type == "list[int]":
        return values + [[], whole, tuple(whole), [np.int64(x) for x in whole]]
    if p.type == "int":
        return values + whole + [np.int64(x) for x in whole]
    reals = [x for x in numbers if _in_bounds(p, x)]
    infinite = [math.inf] if p.high == math.inf and not p.high_open else []
    return values + whole + reals + [np.float32(x) for x in reals] + infinite


def test_valid_values_pass_the_model_as_given_for_every_attack():
    """What an attack receives is what the caller gave, object for object (an int for a
    float stays an int, a tuple a tuple, a numpy scalar a numpy scalar), as it always was."""
    tried = declared = 0
    for spec in list_attacks():
        declared += len(spec.params)
        for p in spec.params:
            for value in _valid_values(p, spec.name):
                given = {p.name: value}
                checked = check_params(spec.name, given)
                assert checked == given and checked[p.name] is value, (spec.name, p.name, value)
                tried += 1
        assert check_attack_params({spec.name: spec.defaults}) == {spec.name: spec.defaults}
    assert declared >= 100 and tried >= 5 * declared


@pytest.mark.parametrize("attack,params,message", [
    ("rmia", {"gama": 2},
     "attack_params.rmia: attack 'rmia' has no parameter 'gama'; did you mean 'gamma'? Its "
     "parameters are a, gamma, tie_break, temperature (`miaudit attacks rmia` describes them)."),
    ("rmia", {1: 2},
     "attack_params.rmia: attack 'rmia' has no parameter '1'. Its parameters are a, gamma, "
     "tie_break, temperature (`miaudit attacks rmia` describes them)."),
    ("loss", {"gamma": 1},
     "attack_params.loss: attack 'loss' has no parameter 'gamma'. It takes no parameters."),
    # the first refused key in the order given: the value before the unknown name
    ("rmia", {"a": 5, "gama": 2},
     "attack_params.rmia: attack 'rmia': parameter 'a' must be a number in [0, 1]; got 5. a: "
     "offline Pr(x) = ((1 + a) mean_OUT Pr(x|theta_r) + (1 - a)) / 2: the linear stand-in for "
     "the IN references offline RMIA lacks (default 0.3)."),
    ("rmia", {"gamma": "abc"},
     "attack_params.rmia: attack 'rmia': parameter 'gamma' must be a number > 0; got 'abc' "
     "(YAML reads 1e-5 as text: write 1.0e-5). gamma: x dominates a population sample z when "
     "ratio(x) / ratio(z) > gamma (default 2.0)."),
    ("rapid", {"hidden": [1, 0], "lr": -1},
     "attack_params.rapid: attack 'rapid': parameter 'hidden' must be a list of integers, each "
     ">= 1; got [1, 0] (its element 0 is out of bounds). hidden: widths of the scorer's hidden "
     "layers (dropout 0.2 after each but the last) (default [128, 64])."),
    ("rapid", {"hidden": "abc"},
     "attack_params.rapid: attack 'rapid': parameter 'hidden' must be a list of integers, each "
     ">= 1; got 'abc' (not a list). hidden: widths of the scorer's hidden layers (dropout 0.2 "
     "after each but the last) (default [128, 64])."),
    ("rapid-hybrid", {"extra_attacks": (2, 3)},
     "attack_params.rapid-hybrid: attack 'rapid-hybrid': parameter 'extra_attacks' must be a "
     "list of attack names (see `miaudit attacks`); got (2, 3) (2 is not a registered attack). "
     "extra_attacks: attacks whose scores (with their defaults) are features, each where the "
     "target's bank meets its needs (default [lira-offline, lira-online, rmia])."),
    ("bavaria-n", {"prior_strength": float("nan")},
     "attack_params.bavaria-n: attack 'bavaria-n': parameter 'prior_strength' must be a number "
     "in [0, inf], or null; got nan. prior_strength: nu0, the variance prior's weight in "
     "pseudo-references; null: empirical Bayes; inf: LiRA fixed-variance; 0: per-sample LiRA "
     "(default null)."),
    ("rmia", {"tie_break": "abc"},
     "attack_params.rmia: attack 'rmia': parameter 'tie_break' must be one of none, ratio; got "
     "'abc'. tie_break: ratio: equal counts ordered by ratio(x), different counts never "
     "swapped; none: the paper's count (default ratio)."),
])
def test_refusals_keep_their_words(attack, params, message):
    with pytest.raises(ParamError) as caught:
        check_attack_params({attack: params})
    assert str(caught.value) == message


def test_a_parameter_may_bear_a_name_pydantic_keeps_for_itself(monkeypatch):
    """A plugin's parameter may be called `copy` or `model_config` (pydantic's own names)."""
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())

    def scored(view, copy, model_config):
        return np.zeros(view.n_samples)

    register_attack("pydantic-names-test", params=(
        Param("copy", 1, "int", "copies", low=1),
        Param("model_config", "a", "str", "a choice", choices=("a", "b"))))(scored)
    spec = get_attack("pydantic-names-test")
    assert list(spec.model.model_json_schema()["properties"]) == ["copy", "model_config"]
    assert check_params(spec.name, {"model_config": "b", "copy": 3}) == {
        "model_config": "b", "copy": 3}
    with pytest.raises(ParamError, match="parameter 'copy' must be an integer >= 1; got 0"):
        check_params(spec.name, {"copy": 0})
    with pytest.raises(ParamError, match="no parameter 'model_confi'; did you mean"):
        check_params(spec.name, {"model_confi": "a"})
