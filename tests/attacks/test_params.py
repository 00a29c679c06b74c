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
