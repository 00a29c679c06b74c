"""The power study: the whole study on digits with tiny models (both RMIA anchors' ratio
columns), resumed without running a cell, held-out seeds by default, the image setups' queries
replaying their training augmentation, bad configs, and the × RMIA columns on a hand-made
table."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from miaudit.attacks import list_attacks
from miaudit.signals.query import untrained_queries
from miaudit.studies import registry
from miaudit.studies.power import (
    ANCHORS,
    ATTACKS,
    DEVELOPMENT_SEEDS,
    HELD_OUT_SEEDS,
    OPTIONAL_ATTACKS,
    cells,
    resolve_attacks,
    run_config,
)
from miaudit.studies.power.report import (
    TPR01,
    TPR1,
    anchor_labels,
    best_anchor,
    format_power,
    per_target_table,
    power_table,
    summarize,
    times_baseline,
)
from miaudit.studies.registry import get_study, resolve_config, run_study
from miaudit.studies.sweep import StudyError

FAST = ["rmia", "rmia-paper", "lira-offline", "calibrated-loss", "rapid", "qmia-label"]
TINY = {
    "datasets": ["digits"],
    "seeds": [5, 6],
    "setups": {"digits": {"split": {"audit": 300, "public": 300, "population": 100},
                          "recipe": {"epochs": 3}}},
    "models": 4,
    "attacks": FAST,
    "optional_attacks": ["no-such-attack"],
    "attack_params": {"rapid": {"epochs": 2}},
    "bootstrap": 20,
}


def test_the_study_runs_every_cell_and_resumes(tmp_path, monkeypatch):
    out = tmp_path / "study"
    table, study_dir = run_study("power", "cpu", TINY, executor="serial", out=out,
                                 progress=False)
    assert study_dir == out and table["cell"].nunique() == 2
    n = len(FAST)
    assert list(table["attack"]) == FAST * 2 and list(table["seed"]) == [5] * n + [6] * n
    for row in table.to_dict("records"):
        assert 0 <= row["auc_lo"] <= row["auc"] <= row["auc_hi"] <= 1
        assert 0 <= row[TPR01] <= row[TPR1] <= 1 and TPR01 == "tpr@0.001"
        assert row["n_members"] + row["n_nonmembers"] == 300 and row["n_nonmembers"] > 100
        assert row["cost_queries"] == 1 and row["cost_score_s"] >= 0
        # target + 3 references; qmia-label reads the target alone
        alone = row["attack"] == "qmia-label"
        assert row["cost_models"] == (1 if alone else 4)
        assert row["cost_train_s"] >= 0 if alone else row["cost_train_s"] > 0
    # seeds are separate banks: different targets, different scores
    rmia = table[table["attack"] == "rmia"]
    assert rmia["auc"].nunique() == 2
    for name in ("summary.md", "power.csv", "per_target.csv", "results.csv", "config.yaml"):
        assert (out / name).is_file(), name
    assert (out / "tpr_0.1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = (out / "summary.md").read_text()
    assert "not the held-out evaluation seeds 0–3" in summary
    assert "not registered when this ran: no-such-attack" in summary
    assert "## Power table" in summary and "## Per target" in summary
    power = pd.read_csv(out / "power.csv").set_index("attack")
    assert power.loc["rmia", "x_rmia"] == pytest.approx(1.0) and (power["targets"] == 2).all()
    assert power.loc["rmia", "auc_minus_rmia"] == 0
    # both anchors' ratio columns, each naming its parameters, and the best anchor's
    # (on these tiny banks a TPR@0.1% may be 0: then a ratio is NaN or inf)
    assert {"x_rmia", "x_rmia-paper", "x_best", "beats_best"} <= set(power.columns)
    ratios = power[["x_rmia", "x_rmia-paper"]].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = power[TPR01].to_numpy(float)[:, None] / power.loc[
            ["rmia", "rmia-paper"], TPR01].to_numpy(float)[None, :]
    np.testing.assert_allclose(ratios[np.isfinite(expected)], expected[np.isfinite(expected)])
    best = power["best_anchor"].iloc[0]
    assert best in ANCHORS and (power["best_anchor"] == best).all()
    assert power.loc[ANCHORS, TPR01].max() == power.loc[best, TPR01]
    np.testing.assert_array_equal(power[f"x_{best}"], power["x_best"])
    assert ("| × rmia (lib default: T=1, a=0.3, γ=2, ties=ratio) | × rmia-paper (paper: T=2, "
            "a=0.2, γ=2, ties=none) | best anchor | × best |") in summary
    assert "## The goal: ≥ 2× the stronger RMIA anchor" in summary
    assert f"best anchor **{best}**" in summary
    assert "one quantile regression (population rows); no reference model" in summary
    per_target = pd.read_csv(out / "per_target.csv")
    assert {f"{TPR01} x rmia", f"{TPR01} x rmia-paper"} <= set(per_target.columns)

    # resumable: a rerun finds every cell done and runs none
    def no_work(cell):
        raise AssertionError("a finished cell ran again")

    monkeypatch.setitem(registry._STUDIES, "power",
                        dataclasses.replace(get_study("power"), work=no_work))
    again, _ = run_study("power", "cpu", TINY, executor="serial", out=out, progress=False)
    pd.testing.assert_frame_equal(again, table)
    # one more seed: only its cell runs (and here fails, being the stub), the others are kept
    with pytest.raises(StudyError, match="1 of 1 cells failed"):
        run_study("power", "cpu", {**TINY, "seeds": [5, 6, 7]}, executor="serial", out=out,
                  progress=False)


def test_held_out_seeds_are_the_default():
    study = get_study("power")
    assert HELD_OUT_SEEDS == [0, 1, 2, 3] and not set(DEVELOPMENT_SEEDS) & set(HELD_OUT_SEEDS)
    for size in ("cpu", "paper"):
        config = resolve_config(study, size)
        assert config["seeds"] == [0, 1, 2, 3]
        made = cells(config)
        assert sorted({c.params["seed"] for c in made}) == [0, 1, 2, 3]
    cpu = cells(resolve_config(study, "cpu"))
    assert [(c.params["dataset"], c.params["seed"]) for c in cpu] == [
        (d, s) for d in ("texas-health", "purchase-celeba") for s in range(4)]
    params = cpu[0].params
    assert params["models"] == 7 and params["attack_params"] == {}
    assert params["setup"]["split"] == {"audit": 20000, "public": 20000, "population": 5000}
    assert params["setup"]["recipe"] == {"architecture": "mlp", "arch_params": {"hidden": 256},
                                         "optimizer": "sgd", "lr": 0.1, "epochs": 40,
                                         "batch_size": 64}
    config = run_config(params)
    assert config["design"] == "offline" and config["seed"] == 0
    assert config["signals"] == {"queries": ["plain"]}
    # the configured attacks, then the optional ones registered now
    known = {spec.name for spec in list_attacks()}
    assert params["attacks"] == ATTACKS + [a for a in OPTIONAL_ATTACKS if a in known]
    paper = cells(resolve_config(study, "paper"))
    fashion = [c.params for c in paper if c.params["dataset"] == "fashion-mnist"]
    assert len(fashion) == 4 and len(fashion[0]["setup"]["queries"]) == 8
    assert fashion[0]["setup"]["recipe"]["architecture"] == "mnist-cnn"
    assert "members" not in fashion[0]["setup"]["split"]  # 10,000-member targets
    cpu_fashion = cells(resolve_config(study, "cpu", {"datasets": ["fashion-mnist"]}))
    split = cpu_fashion[0].params["setup"]["split"]
    assert split["members"] == 2000 and split["audit"] - split["members"] >= 10000
    shipped = Path(__file__).parents[2] / "examples" / "studies" / "power-image-and-tabular.yaml"
    four = cells(resolve_config(study, "cpu", shipped))
    assert [c.params["dataset"] for c in four[::4]] == ["texas-health", "purchase-celeba",
                                                        "fashion-mnist", "mnist"]
    image = [c.params["setup"] for c in four[8:]]
    assert all(setup == image[0] for setup in image)  # MNIST: exactly Fashion-MNIST's setup
    assert image[0]["split"]["members"] == 2000
    dev = cells(resolve_config(study, "cpu", {"seeds": DEVELOPMENT_SEEDS,
                                              "datasets": ["texas-health"]}))
    assert [c.params["seed"] for c in dev] == [100, 101]


def test_optional_attacks_are_kept_only_when_registered():
    config = resolve_config(get_study("power"), "cpu", {
        "attacks": ["rmia"], "optional_attacks": ["loss", "no-such-attack", "rmia"]})
    assert resolve_attacks(config) == (["rmia", "loss"], ["no-such-attack"])


@pytest.mark.parametrize(("overrides", "message"), [
    ({"datasets": ["svhn"]}, "no entry under setups"),
    ({"datasets": []}, "datasets is empty"),
    ({"seeds": []}, "non-empty list"),
    ({"seeds": [1, 1]}, "repeat"),
    ({"seeds": [-1]}, "integers >= 0"),
    ({"models": 2}, "integer >= 3"),
    ({"attacks": ["rmia", "lira-ofline"]}, "unknown attack 'lira-ofline'"),
    ({"attacks": ["lira-offline"]}, "anchor 'rmia' must be among the attacks"),
    ({"attacks": ["rmia"]}, "anchor 'rmia-paper' must be among the attacks"),
    ({"anchors": []}, "anchors must be a non-empty list"),
    ({"attack_params": {"loss": {}}}, "does not score"),
    ({"extra_setups": {"mine": {"split": {}}}, "datasets": ["mine"]}, "lacks recipe, queries"),
])
def test_bad_configs_fail(overrides, message):
    with pytest.raises(StudyError, match=message):
        cells(resolve_config(get_study("power"), "cpu", overrides))


def test_unknown_config_keys_fail():
    with pytest.raises(StudyError, match="Did you mean 'seeds'"):
        resolve_config(get_study("power"), "cpu", {"seed": [1]})


def hand_made_table() -> pd.DataFrame:
    """One dataset, four targets, RMIA and one attack with TPRs and AUCs chosen by hand."""
    tpr = {"rmia": [0.01, 0.02, 0.01, 0.02], "new": [0.03, 0.03, 0.04, 0.02]}
    auc = {"rmia": [0.80, 0.81, 0.79, 0.80], "new": [0.82, 0.82, 0.80, 0.81]}
    rows = []
    for seed in range(4):
        for attack in ("rmia", "new"):
            rows.append({"cell": f"c{seed}", "dataset": "tab", "seed": seed, "attack": attack,
                         "auc": auc[attack][seed], "auc_lo": auc[attack][seed] - 0.01,
                         "auc_hi": auc[attack][seed] + 0.01,
                         TPR1: 0.1, f"{TPR1}_lo": 0.08, f"{TPR1}_hi": 0.12,
                         TPR01: tpr[attack][seed], f"{TPR01}_lo": 0.0, f"{TPR01}_hi": 0.05,
                         "n_members": 10000, "n_nonmembers": 10000, "cost_models": 7,
                         "cost_queries": 1.0, "cost_train_s": 140.0,
                         "cost_score_s": 0.5 if attack == "rmia" else 20.0 + seed,
                         "target_train_acc": 0.99, "target_test_acc": 0.6})
    return pd.DataFrame(rows)


def test_times_rmia_is_the_ratio_of_the_means(tmp_path):
    table = hand_made_table()
    # mean TPR@0.1%: new 0.03, rmia 0.015 -> 2.0 (the mean of per-target ratios would be 2.125)
    assert times_baseline(table, "new", "rmia") == pytest.approx(2.0)
    power = power_table(table).set_index("attack")
    assert power.loc["new", "x_rmia"] == pytest.approx(2.0)
    assert power.loc["rmia", "x_rmia"] == pytest.approx(1.0)
    assert power.loc["new", "beats_rmia"] == "3/4" and power.loc["rmia", "beats_rmia"] == "0/4"
    # AUC - RMIA: paired differences 0.02, 0.01, 0.01, 0.01: mean 0.0125, sd 0.005,
    # t_{0.975, 3} = 3.182446 -> half-width 3.182446 * 0.005 / 2
    half = 3.182446 * 0.005 / 2
    assert power.loc["new", "auc_minus_rmia"] == pytest.approx(0.0125)
    assert power.loc["new", "auc_minus_rmia_lo"] == pytest.approx(0.0125 - half, abs=1e-6)
    assert power.loc["new", "auc_minus_rmia_hi"] == pytest.approx(0.0125 + half, abs=1e-6)
    assert power.loc["new", TPR01] == pytest.approx(0.03)
    assert power.loc["new", "score_s"] == pytest.approx(21.5) and power.loc["new", "models"] == 7
    assert power.loc["new", "nonmembers_min"] == 10000 and power.loc["new", "targets"] == 4
    text = format_power(power.reset_index()).set_index("attack")
    assert text.loc["new", "× rmia @0.1%"] == "2.00" and text.loc["rmia", "× rmia @0.1%"] == "1.00"
    assert text.loc["new", "non-members/target"] == "10,000"
    assert text.loc["new", "AUC − rmia"] == "+0.012 [+0.005, +0.020]"  # 0.0125: 0.01249...
    per = per_target_table(table).set_index(["seed", "attack"])
    assert per.loc[(0, "new"), f"{TPR01} x rmia"] == pytest.approx(3.0)
    assert per.loc[(3, "new"), f"{TPR01} x rmia"] == pytest.approx(1.0)
    # a baseline at 0: an attack above it is infinitely many times it
    zero = table.assign(**{TPR01: np.where(table["attack"] == "rmia", 0.0, table[TPR01])})
    assert times_baseline(zero, "new", "rmia") == math.inf
    assert math.isnan(times_baseline(zero, "rmia", "rmia"))
    summarize(table, tmp_path)  # no config.yaml: defaults (rmia, 95%)
    summary = (tmp_path / "summary.md").read_text()
    assert "seeds 0–3, the held-out evaluation seeds" in summary and "| 2.00" in summary


def test_empty_table_summary(tmp_path):
    summarize(pd.DataFrame(), tmp_path)
    assert "No finished cells" in (tmp_path / "summary.md").read_text()


def test_two_anchors_each_column_names_its_parameters_and_the_best_one_counts(tmp_path):
    """rmia-paper stronger than rmia on this hand-made table: the goal is against it."""
    table = hand_made_table()
    paper = table[table["attack"] == "rmia"].assign(
        attack="rmia-paper", **{TPR01: [0.02, 0.02, 0.01, 0.03]})  # mean 0.02 vs rmia's 0.015
    table = pd.concat([table, paper], ignore_index=True)
    assert best_anchor(table, ANCHORS) == "rmia-paper"
    assert best_anchor(table, ["rmia"]) == "rmia"
    power = power_table(table, ANCHORS).set_index("attack")
    assert power.loc["new", "x_rmia"] == pytest.approx(2.0)
    assert power.loc["new", "x_rmia-paper"] == pytest.approx(1.5)
    assert (power["best_anchor"] == "rmia-paper").all()
    assert power.loc["new", "x_best"] == pytest.approx(1.5)
    assert power.loc["new", "beats_best"] == "3/4"  # 0.03 > 0.02, 0.03 > 0.02, 0.04 > 0.01
    labels = anchor_labels(ANCHORS)
    assert labels == {"rmia": "× rmia (lib default: T=1, a=0.3, γ=2, ties=ratio)",
                      "rmia-paper": "× rmia-paper (paper: T=2, a=0.2, γ=2, ties=none)"}
    assert anchor_labels(["rmia"], {"rmia": {"temperature": 2}}) == {
        "rmia": "× rmia (set: T=2, a=0.3, γ=2, ties=ratio)"}
    text = format_power(power.reset_index(), ANCHORS, labels).set_index("attack")
    assert text.loc["new", labels["rmia"]] == "2.00"
    assert text.loc["new", labels["rmia-paper"]] == "1.50"
    assert text.loc["new", "× best"] == "1.50" and text.loc["new", "best anchor"] == "rmia-paper"
    assert text.loc["new", "> best"] == "3/4"
    per = per_target_table(table, ANCHORS).set_index(["seed", "attack"])
    assert per.loc[(0, "new"), f"{TPR01} x rmia-paper"] == pytest.approx(1.5)
    (tmp_path / "config.yaml").write_text("anchors: [rmia, rmia-paper]\nconfidence: 0.95\n")
    summarize(table, tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    assert "best anchor **rmia-paper** (paper: T=2, a=0.2, γ=2, ties=none)" in summary
    assert "**new**, is 1.50× (3/4 targets above it): does not reach the 2× goal" in summary


def test_image_setups_query_only_what_their_recipe_trains_with():
    """Every image setup of the study (cpu and paper sizes, the shipped image config) queries
    plain, mirror and crops its recipe trains with: none is a transform the model never saw."""
    study = get_study("power")
    shipped = Path(__file__).parents[2] / "examples" / "studies" / "power-image-and-tabular.yaml"
    configs = [resolve_config(study, size) for size in ("cpu", "paper")]
    configs.append(resolve_config(study, "cpu", shipped))
    for config in configs:
        for name, setup in {**config["setups"], **config["extra_setups"]}.items():
            augment = setup["recipe"].get("augment", [])
            assert untrained_queries(setup["queries"], augment) == [], name
    fashion = resolve_config(study, "cpu")["setups"]["fashion-mnist"]
    assert fashion["queries"][:2] == ["plain", "mirror"] and len(fashion["queries"]) == 8
    # the check itself: the published crop-flip queries on a mirror-only model fail it
    assert untrained_queries(["plain", "mirror", "crop-flip-1"], ["mirror"]) == ["crop-flip-1"]
