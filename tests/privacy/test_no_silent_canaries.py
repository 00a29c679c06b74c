"""No silent no-ops: gradient canaries need a count >= 1 and a count the model can hold,
refused before anything trains with the limit in the message; a DP claim's ε must be a finite
number > 0, in a recipe's ``dp`` and in ``miaudit audit --dp-epsilon`` alike."""

from __future__ import annotations

import math
import time

import pytest

from miaudit.cli.main import main
from miaudit.config import config_from_dict
from miaudit.config.sections import MAX_GRADIENT_CANARIES
from miaudit.errors import ConfigError
from miaudit.external.audit_config import audit_config

DP_MLP = {"architecture": "mlp", "arch_params": {"hidden": 8}, "epochs": 1, "batch_size": 64,
          "dp": {"epsilon": 4.0, "delta": 1.0e-5}}


@pytest.mark.parametrize("section", [{"kind": "gradient"}, {"kind": "gradient", "count": 0}])
def test_gradient_canaries_without_a_count_are_refused(section):
    with pytest.raises(ConfigError, match=r"gradient canaries need canaries\.count >= 1"):
        config_from_dict({"recipe": DP_MLP, "canaries": section})


@pytest.mark.parametrize("kind", ["natural", "secret"])
def test_another_kind_named_without_a_count_is_refused_too(kind):
    with pytest.raises(ConfigError, match=rf"canaries\.kind {kind} with canaries\.count 0 adds "
                                          r"no canaries"):
        config_from_dict({"canaries": {"kind": kind}})
    assert config_from_dict({"canaries": {"count": 0}}).canaries.count == 0  # off, as before


def test_a_hundred_million_gradient_canaries_are_refused_before_any_work():
    start = time.monotonic()
    with pytest.raises(ConfigError, match=rf"canaries\.count 100,000,000 is more gradient "
                                          rf"canaries than a run takes \(at most "
                                          rf"{MAX_GRADIENT_CANARIES:,}\)"):
        config_from_dict({"recipe": DP_MLP,
                          "canaries": {"kind": "gradient", "count": 100_000_000}})
    assert time.monotonic() - start < 5  # the one-run bound's check alone took minutes
    assert config_from_dict({"recipe": DP_MLP, "canaries": {
        "kind": "gradient", "count": MAX_GRADIENT_CANARIES}}).canaries.white_box


def test_more_canaries_than_the_model_has_parameters_are_refused_before_training(
        tiny_run_yaml, tmp_path, capsys):
    """The mlp of 8 hidden units on digits has 64·8 + 8 + 8·10 + 10 = 610 parameters: one
    Dirac canary each at most, refused as the target is built, before any model trains."""
    path = tiny_run_yaml("canaries", recipe=DP_MLP,
                         canaries={"kind": "gradient", "count": 1000})
    assert main(["run", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "1000 canaries but the model has only 610 parameters" in err
    assert not list((tmp_path / "cache").glob("*.json"))  # no model trained
    assert not (tmp_path / "runs" / "tiny").exists()


def test_the_command_line_refuses_them_as_quickly(tiny_run_yaml, tmp_path, capsys):
    path = tiny_run_yaml("many", recipe=DP_MLP,
                         canaries={"kind": "gradient", "count": 100_000_000})
    start = time.monotonic()
    assert main(["run", str(path), "--quiet"]) == 2
    assert time.monotonic() - start < 10
    assert f"at most {MAX_GRADIENT_CANARIES:,}" in capsys.readouterr().err
    path = tiny_run_yaml("none", recipe=DP_MLP, canaries={"kind": "gradient"})
    assert main(["run", str(path), "--quiet"]) == 2
    assert "gradient canaries need canaries.count >= 1" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()


# --- ε finite -----------------------------------------------------------------------------------

@pytest.mark.parametrize("epsilon", [math.inf, math.nan, -1.0, 0])
def test_a_recipes_epsilon_must_be_finite(epsilon):
    from miaudit.train.recipe import check_dp

    with pytest.raises(ConfigError, match=r"dp 'epsilon' must be finite and > 0"):
        check_dp({"epsilon": epsilon, "delta": 1e-5})


@pytest.mark.parametrize("epsilon", [".inf", ".nan", "-1.0"])
def test_a_recipes_epsilon_from_yaml_is_refused_before_any_work(tmp_path, capsys, epsilon):
    path = tmp_path / "inf.yaml"
    path.write_text(f"recipe: {{architecture: mlp, dp: {{epsilon: {epsilon}, delta: 1.0e-5}}}}\n"
                    f"cache_dir: {tmp_path / 'cache'}\noutput: {tmp_path / 'run'}\n")
    assert main(["run", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "'epsilon'" in err and ("not a finite number" in err or "finite and > 0" in err), err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("epsilon", [math.inf, math.nan, 0.0, -3.0])
def test_a_claimed_epsilon_must_be_a_finite_number(epsilon):
    with pytest.raises(ConfigError, match=r"ε must be a finite number > 0"):
        audit_config({"model": {"predict": "m:f", "dp_epsilon": epsilon, "dp_delta": 1e-5},
                      "data": {"dataset": "digits", "members": "m.txt"}})


@pytest.mark.parametrize("flag", ["inf", "nan", "Infinity"])
def test_dp_epsilon_inf_on_the_command_line_is_refused(tmp_path, capsys, flag):
    members = tmp_path / "m.txt"
    members.write_text("0 1 2\n")
    assert main(["audit", "--predict", "m:f", "--data", "digits", "--members", str(members),
                 "--dp-epsilon", flag, "--dp-delta", "1e-5", "--out",
                 str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "(the claimed ε, --dp-epsilon): ε must be a finite number > 0" in err
    assert not (tmp_path / "run").exists()
