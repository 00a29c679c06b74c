"""The rapid study (He et al., RAPID, CCS 2024): one real cell on digits, cells from the
configs, the summary of a hand-made table, and the paper's numbers as data."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from miaudit.attacks.rapid import PAPER_RECIPE
from miaudit.signals.query import training_queries, untrained_queries
from miaudit.studies.rapid import FASHION_AUGMENT, IMAGE_QUERIES, SETUPS, cells, settings, work
from miaudit.studies.rapid.report import PAPER_NUMBERS, paper_table, summarize
from miaudit.studies.registry import get_study, resolve_config
from miaudit.studies.sweep import Cell, StudyError, build_table

ATTACKS = ["rapid", "lira-offline", "rmia", "calibrated-loss", "loss"]


def tiny_cell() -> Cell:
    setup = {**SETUPS["digits"], "split": {"audit": 300, "public": 300, "population": 100},
             "recipe": {**SETUPS["digits"]["recipe"], "epochs": 3}}
    return Cell("rapid", {
        "dataset": "digits", "rep": 0, "epsilon": None, "setup": setup, "references": [2, 3],
        "query_counts": [1, 2], "attacks": ATTACKS, "main_references": 2, "bootstrap": 0,
        "attack_params": {"rapid": {"epochs": 3}}, "device": "cpu"})


def test_one_cell_scores_every_setting_on_one_bank():
    cell = tiny_cell()
    assert settings(cell.params) == [(2, 2), (3, 2), (2, 1)]
    rows = work(cell)
    assert len(rows) == 3 * len(ATTACKS)
    main = [r for r in rows if r["main"]]
    assert [r["attack"] for r in main] == ATTACKS
    assert {(r["n_references"], r["n_queries"]) for r in main} == {(2, 2)}
    by = {(r["attack"], r["n_references"], r["n_queries"]): r for r in rows}
    # cost: the target alone for Yeom; target + references for the others
    assert by["loss", 3, 2]["cost_models"] == 1
    assert by["rapid", 3, 2]["cost_models"] == 4 and by["rapid", 2, 2]["cost_models"] == 3
    assert by["rapid", 2, 1]["cost_queries"] == 1 and by["rapid", 2, 1]["query_names"] == "plain"
    assert by["lira-offline", 2, 2]["query_names"] == "plain,mirror"
    assert all(r["cost_train_s"] >= 0 and r["cost_score_s"] >= 0 for r in rows)
    for r in rows:
        assert 0 <= r["auc"] <= 1 and 0 <= r["tpr@0.001"] <= r["tpr@0.01"] <= 1
        assert "tpr_1%" not in r  # one spelling of the TPR columns
        assert r["n_members"] + r["n_nonmembers"] == 300 and r["epsilon_spent"] is None
    # the sub-banks differ: more references change the calibrated scores
    assert by["calibrated-loss", 2, 2]["auc"] != by["calibrated-loss", 3, 2]["auc"]
    # the study table of this cell summarises without error
    table = build_table([cell], {cell.key(): rows})
    assert {"dataset", "setup.recipe.epochs", "attack", "auc"} <= set(table.columns)


def test_cells_follow_the_config():
    study = get_study("rapid")
    cpu = cells(resolve_config(study, "cpu"))
    assert len(cpu) == 3 * 2 + 2 * 2  # datasets x reps, then DP epsilons x reps
    dp = [c.params for c in cpu if c.params["epsilon"] is not None]
    assert {p["dataset"] for p in dp} == {"purchase-celeba"} and all(
        p["references"] == [4] and p["query_counts"] == [] for p in dp)
    assert all(c.params["references"] == [2, 4, 8] for c in cpu if c.params["epsilon"] is None)
    assert len(cells(resolve_config(study, "paper"))) > len(cpu)
    paper_recipe = {**PAPER_RECIPE, "hidden": list(PAPER_RECIPE["hidden"])}
    assert cpu[0].params["attack_params"] == {  # the study runs RAPID's paper recipe
        "rapid": {**paper_recipe, "max_train_samples": 4000},
        "lira-offline": {"equal_counts": False},
        "lira-offline-fixed-variance": {"equal_counts": False}}
    tiny = resolve_config(study, "cpu", {
        "datasets": ["digits", "mine"], "repetitions": 1, "dp": {"datasets": [], "epsilons": []},
        "extra_setups": {"mine": SETUPS["digits"]}, "attack_params": {"rapid": {"epochs": 5}}})
    made = cells(tiny)
    assert [c.params["dataset"] for c in made] == ["digits", "mine"]
    assert made[0].params["attack_params"]["rapid"] == {**paper_recipe, "max_train_samples": 4000,
                                                        "epochs": 5}
    with pytest.raises(StudyError, match="no entry under setups"):
        cells(resolve_config(study, "cpu", {"datasets": ["svhn"]}))
    with pytest.raises(StudyError, match="at least 2 references"):
        cells(resolve_config(study, "cpu", {"references": [1, 4]}))


def hand_made_table() -> pd.DataFrame:
    """Two reps of one image dataset (refs 2/4, queries 1/2) and one DP cell, two attacks."""
    rows = []
    for rep in (0, 1):
        for r, q in [(4, 2), (2, 2), (4, 1)]:
            for attack, auc in [("rapid", 0.70), ("loss", 0.60)]:
                rows.append({"cell": f"c{rep}", "dataset": "img", "rep": rep, "epsilon": None,
                             "main_references": 4, "attack": attack,
                             "main": (r, q) == (4, 2), "n_references": r, "n_queries": q,
                             "auc": auc + 0.02 * rep + 0.01 * r + 0.01 * q,
                             "tpr@0.001": 0.01 * (rep + 1), "tpr@0.01": 0.05,
                             "n_nonmembers": 1000,
                             "cost_models": 1 + r if attack == "rapid" else 1,
                             "cost_queries": q, "cost_train_s": 10.0 * (1 + r),
                             "cost_score_s": 5.0 if attack == "rapid" else 0.1,
                             "target_train_acc": 1.0, "target_test_acc": 0.8,
                             "epsilon_spent": None})
    for attack in ("rapid", "loss"):
        rows.append({**rows[0], "cell": "dp", "epsilon": 10.0, "attack": attack, "auc": 0.52,
                     "epsilon_spent": 9.99, "cost_models": 5})
    return pd.DataFrame(rows)


def test_summarize_writes_tables_and_figures(tmp_path):
    summarize(hand_made_table(), tmp_path)
    for name in ("summary.md", "paper.csv", "main.csv", "references.csv", "queries.csv",
                 "dp.csv", "cost.csv", "main.png", "references.png", "queries.png", "dp.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    main = pd.read_csv(tmp_path / "main.csv")
    rapid = main[main["attack"] == "rapid"].iloc[0]
    assert rapid["AUC"] == "0.770 ± 0.014"  # 0.70 + 0.04 + 0.02 (+0.02 for rep 1)
    assert rapid["TPR@0.1% (%)"] == "1.50 ± 0.71" and rapid["reps"] == 2
    refs = pd.read_csv(tmp_path / "references.csv")
    assert list(refs["n_references"].unique()) == [2, 4]
    assert set(pd.read_csv(tmp_path / "queries.csv")["n_queries"]) == {1, 2}
    dp = pd.read_csv(tmp_path / "dp.csv")
    assert set(dp["ε"]) == {10.0, math.inf}
    cost = pd.read_csv(tmp_path / "cost.csv").set_index("attack")
    assert cost.loc["rapid", "models"] == 5 and cost.loc["rapid", "total_s"] == 55.0
    text = (tmp_path / "summary.md").read_text()
    assert "0.188" in text and "![references](references.png)" in text


def test_summarize_empty_table_writes_paper_only(tmp_path):
    summarize(pd.DataFrame(), tmp_path)
    assert "No finished cells" in (tmp_path / "summary.md").read_text()


def test_paper_numbers_are_well_formed():
    table = paper_table()
    assert len(table) == len(PAPER_NUMBERS) and table.notna().all().all()
    assert np.isfinite(table["value"].astype(float)).all()
    tpr = table[table["quantity"] == "TPR@0.1% FPR"].set_index("attack")["value"]
    assert tpr["rapid"] == 0.188 and tpr["best previous attack"] == 0.115
    assert ((0 < tpr) & (tpr < 1)).all()
    assert table.loc[table["quantity"] == "queries per sample", "value"].item() == 8


def test_image_setups_query_only_what_their_recipe_trains_with():
    """The paper queries with its training augmentation: every setup of both sizes queries
    plain, mirror and crops its recipe trains with (a query the model never trained on, as
    the 4-pixel crop-flips on the old mirror-only Fashion-MNIST model, fails this)."""
    study = get_study("rapid")
    for size in ("cpu", "paper"):
        config = resolve_config(study, size)
        for name, setup in {**config["setups"], **config["extra_setups"]}.items():
            augment = setup["recipe"].get("augment", [])
            assert untrained_queries(setup["queries"], augment) == [], (size, name)
    fashion = SETUPS["fashion-mnist"]
    assert fashion["recipe"]["augment"] == FASHION_AUGMENT
    assert fashion["queries"] == training_queries(FASHION_AUGMENT, 8)
    assert fashion["queries"][:3] == ["plain", "mirror", "crop1-flip-1"]
    assert untrained_queries(IMAGE_QUERIES, ["mirror"]) == IMAGE_QUERIES[2:]


def test_query_ablation_smoke_with_queries_that_replay_training(tmp_path):
    """One digits cell trained with mirror + 1-pixel shifts, queried with 4 draws of that
    augmentation: the ablation scores 1, 2 and 4 queries, each a prefix of the list."""
    augment = [{"name": "crop", "padding": 1}, "mirror"]
    cell = tiny_cell()
    setup = {**cell.params["setup"], "queries": training_queries(augment, 4),
             "recipe": {**cell.params["setup"]["recipe"], "augment": augment}}
    params = {**cell.params, "setup": setup, "references": [2], "query_counts": [1, 2, 4],
              "attacks": ["rmia", "calibrated-loss"]}
    assert settings(params) == [(2, 4), (2, 1), (2, 2)]
    smoke = Cell("rapid", params)
    rows = work(smoke)
    names = {r["n_queries"]: r["query_names"] for r in rows}
    assert names == {1: "plain", 2: "plain,mirror",
                     4: "plain,mirror,crop1-flip-1,crop1-flip-2"}
    assert {r["cost_queries"] for r in rows if r["n_queries"] == 4} == {4}
    by = {(r["attack"], r["n_queries"]): r["auc"] for r in rows}
    assert by["calibrated-loss", 1] != by["calibrated-loss", 4]  # the queries matter
    # the summary lists the queries and says they replay the training augmentation
    summarize(build_table([smoke], {smoke.key(): rows}), tmp_path)
    text = (tmp_path / "summary.md").read_text()
    assert ("- digits: queries plain, mirror, crop1-flip-1, crop1-flip-2; training augmentation "
            "[name=crop, padding=1; mirror]: every query replays it.") in text
