"""The calibration study end to end on German Credit at toy size (real training through the
pipeline, seconds), its cells for the shipped configs, and the transcribed paper numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from miaudit.config import config_from_dict
from miaudit.studies.calibration import settings as calibration_config
from miaudit.studies.calibration.evaluation import subsample_members
from miaudit.studies.calibration.paper import COLUMNS, TABLE2_AUC, TABLE3_ACC
from miaudit.studies.calibration.report import score_table
from miaudit.studies.registry import get_study, resolve_config, run_study
from miaudit.studies.sweep import StudyError

# The toy study runs on sklearn's digits, which ships with scikit-learn: the suite never needs a
# dataset fetched into a user's cache (the paper's datasets are fetched by `miaudit data fetch`).
TOY = {
    "repetitions": 1,
    "include": ["digits"],
    "figure_dataset": "digits",
    "datasets": {"digits": {
        "split": {"audit": 200, "public": 200},
        "recipe": {"architecture": "mlp", "arch_params": {"hidden": 64}, "optimizer": "sgd",
                   "lr": 0.1, "batch_size": 32, "epochs": 3},
        "forgetting": {"epochs": 1, "lr": 0.02},
    }},
    "ratios": [1.0, 0.25],
    "train_size": {"sizes": [60], "repetitions": 1},
    "references": {"counts": [1, 2], "public_sizes": [200], "repetitions": 1},
    "dp": {"epsilons": [10], "repetitions": 1, "split": {"audit": 200, "public": 200},
           "recipe": {"epochs": 1}},
}


def test_paper_tables_transcribed_as_printed():
    assert len(COLUMNS) == 10
    assert TABLE2_AUC["Credit"][("loss", "cal")] == 0.648  # the +0.10 the text highlights
    assert TABLE2_AUC["CIFAR10"][("gn", "cal")] == 0.787
    assert TABLE3_ACC["MNIST"][("gap", "orig")] == 0.506
    assert TABLE3_ACC["ImageNet"][("confidence", "cal-f")] == 0.553


def test_shipped_configs_make_valid_cells(monkeypatch):
    # The configs' cells, not the data: every dataset counts as fetched here.
    monkeypatch.setattr(calibration_config, "_present", lambda name: True)
    study = get_study("calibration")
    for size in ("cpu", "paper"):
        config = resolve_config(study, size)
        cells = study.cells(config)
        kinds = pd.Series([c.params["kind"] for c in cells]).value_counts()
        assert set(kinds.index) == {"main", "size", "refs", "dp"}
        for cell in cells:
            config_from_dict(cell.params["run"])  # every run config is valid
        main = [c.params for c in cells if c.params["kind"] == "main"]
        seeds = {(p["dataset"], p["run"]["seed"]) for p in main}
        assert len(seeds) == len(main)  # each repetition is its own split
    cpu = resolve_config(study, "cpu")
    assert sum(c.params["kind"] == "main" for c in study.cells(cpu)) == 4 * cpu["repetitions"]


def test_subsample_members_keeps_nonmembers_and_sets_the_ratio():
    members = np.array([True] * 50 + [False] * 40)
    keep = subsample_members(members, 0.25, np.random.default_rng(0))
    assert keep[~members].all() and keep[members].sum() == 10


def test_absent_dataset_is_a_clear_error():
    # The suite's data folder is empty (tests/conftest.py): the paper's datasets are absent.
    config = resolve_config(get_study("calibration"), "cpu")
    with pytest.raises(StudyError, match="miaudit data fetch german-credit"):
        get_study("calibration").cells(config)


def test_toy_study_runs_every_cell_kind_and_summarizes(tmp_path):
    table, out = run_study("calibration", "cpu", TOY, "serial", tmp_path / "cal",
                           progress=False)
    main = table[table["section"] == "main"]
    pairs = set(zip(main["score"], main["method"], strict=True))
    assert pairs == set(COLUMNS)
    assert main["auc"].between(0, 1).all()
    # accuracy thresholds from public data: every original and calibrated attack has one
    assert main[main["method"] != "cal-f"]["threshold"].notna().all()
    assert (main[main["method"] == "cal-f"]["threshold"] == 1e-4).all()
    ratio = table[table["section"] == "ratio"]
    assert sorted(ratio["n_members"].unique()) == [25, 100]  # 1:1 and 1:4 of 100 non-members
    refs = table[table["section"] == "refs"]
    assert sorted(set(zip(refs["method"], refs["k"], strict=True))) == [
        ("cal", 1), ("cal", 2), ("cal-f", 1), ("cal-f", 2)]
    dp_models = table[(table["kind"] == "dp") & (table["section"] == "model")]
    assert dp_models["epsilon_spent"].dropna().between(9, 10.01).all()
    assert table[(table["kind"] == "size") & (table["section"] == "size")].shape[0] == 3
    summary = (out / "summary.md").read_text()
    assert "| digits | ours (T=1) |" in summary
    assert "| digits | paper | - | - | - |" in summary  # the paper has no digits row
    # A dataset the paper has gets its transcribed row beside ours.
    as_credit = table.assign(dataset=table["dataset"].replace("digits", "german-credit"))
    wide, tidy = score_table(as_credit, "auc")
    paper_row = wide[wide["source"] == "paper"].iloc[0]
    assert (paper_row["dataset"], paper_row["Gap"]) == ("german-credit", "0.549")
    assert tidy["paper"].notna().all()
    for name in ("fig2_curves", "fig3_size", "fig4_ratio", "fig5_references", "fig6_dp"):
        assert (out / f"{name}.png").stat().st_size > 1000
    assert len(pd.read_csv(out / "table2_auc.csv")) == len(COLUMNS)
