"""The dp-audit study (issue #15): the whole study on digits with a small MLP (no DP and ε = 8,
both canary kinds), resumed without running a cell, its configs' cells, bad configs, and
Privacy Meter's published numbers as data."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from miaudit.studies import registry
from miaudit.studies.dp_audit import ATTACKS, SETUPS, cells
from miaudit.studies.dp_audit.report import CAVEAT, REFERENCE_NUMBERS, REFERENCE_SOURCE
from miaudit.studies.registry import get_study, resolve_config, run_study
from miaudit.studies.sweep import StudyError

M = 200  # of the 397 digits rows the pools leave free

TINY = {
    "setup": "tiny-digits",
    "extra_setups": {"tiny-digits": SETUPS["digits"]},  # Adam, 30 epochs: seconds
    "epsilons": [None, 8],
    "canaries": M,
    "references": 2,
    "bootstrap": 20,
}


def _cell_rows(table: pd.DataFrame, kind: str, dp: bool) -> pd.DataFrame:
    eps = table["epsilon"].astype("float64")
    return table[(table["kind"] == kind) & (eps.notna() if dp else eps.isna())]


def test_the_study_runs_every_cell_and_resumes(tmp_path, monkeypatch):
    out = tmp_path / "study"
    table, study_dir = run_study("dp-audit", "cpu", TINY, executor="serial", out=out,
                                 progress=False)
    assert study_dir == out
    assert len(table) == 2 * 2 * len(ATTACKS) and table["cell"].nunique() == 4
    for row in table.to_dict("records"):
        # every bound present, >= 0, on the split's counts
        for column in ("eps_audit", "eps_canary", "eps_one_run", "best_epsilon"):
            assert row[column] >= 0, (column, row)
        assert row["n_members"] + row["n_nonmembers"] == 600
        assert row["eps_audit_n0"] + row["eps_audit_n1"] <= 300  # the counting half only
        assert row["one_run_m"] == M and row["one_run_delta"] == 1e-5
        assert 0 <= row["one_run_v"] <= row["one_run_r"] == row["one_run_k_plus"] + row[
            "one_run_k_minus"]
        assert row["one_run_candidates"] == 3 and row["bounds_compared"] == 4 * (2 + 3)
        assert 0 < row["canaries_included"] < M
        assert 0 < row["target_test_acc"] <= row["target_train_acc"] <= 1
    # no DP: no claim; mislabelled canaries are memorised, so a one-run bound certifies ε > 0
    plain = _cell_rows(table, "mislabelled", dp=False)
    assert plain["claimed_epsilon"].isna().all() and plain["refutes_claim"].isna().all()
    assert plain["eps_one_run"].max() > 0.5 and plain["best_epsilon"].iloc[0] > 0
    assert (plain["one_run_v"] > plain["one_run_r"] / 2).all()
    # DP cells: the accountant's claim recorded, audited at its δ, never refuted here
    for kind in ("mislabelled", "natural"):
        dp = _cell_rows(table, kind, dp=True)
        assert dp["claimed_epsilon"].between(7.5, 8.0).all() and (dp["accountant"] == "prv").all()
        assert (dp["claimed_delta"] == 1e-5).all() and (~dp["refutes_claim"].astype(bool)).all()
        assert (dp["best_epsilon"] < dp["claimed_epsilon"]).all()
        assert dp["noise_multiplier"].iloc[0] > 0
    # the natural cells reused the references the mislabelled ones trained (model cache)
    natural = table[table["kind"] == "natural"].drop_duplicates("cell")
    assert (natural["models_trained"] == 1).all() and (natural["models_from_cache"] == 2).all()

    summary = (out / "summary.md").read_text()
    for heading in ("# DP audit", "## Claimed ε vs empirical lower bounds",
                    "## Per attack: mislabelled canaries", "## Per attack: natural canaries",
                    "## Privacy Meter 2's published one-run audit beside ours"):
        assert heading in summary
    assert "Command: `miaudit study dp-audit --size cpu`" in summary and "4 cells" in summary
    assert "documentation/dpaudit.md" in summary and "vs digits MLP here" in summary
    for number in ("5.48", "4.56", "0.418", "0.126", "68.51"):
        assert number in summary
    for name in ("main.csv", "detail-mislabelled.csv", "detail-natural.csv", "reference.csv",
                 "reference-vs-ours.csv", "results.csv"):
        assert (out / name).is_file(), name
    assert (out / "bounds.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    main = pd.read_csv(out / "main.csv")
    assert list(main["target ε"]) == ["8", "none", "8", "none"] and (main["reps"] == 1).all()
    side = pd.read_csv(out / "reference-vs-ours.csv")
    assert list(side["ours: target ε"]) == ["none", "8", "none", "8"]  # 8: nearest to 68.51

    # resumable: a rerun finds every cell done and runs none (the registered study's work
    # replaced, since the sweep calls the function the registry holds)
    def no_work(cell):
        raise AssertionError("a finished cell ran again")

    monkeypatch.setitem(registry._STUDIES, "dp-audit",
                        dataclasses.replace(get_study("dp-audit"), work=no_work))
    again, _ = run_study("dp-audit", "cpu", TINY, executor="serial", out=out, progress=False)
    pd.testing.assert_frame_equal(again, table)


def test_cells_follow_the_configs():
    study = get_study("dp-audit")
    cpu = cells(resolve_config(study, "cpu"))
    assert len(cpu) == 5 * 2  # ε 1, 4, 10, 100 and no DP x two kinds x one repetition
    params = [c.params for c in cpu]
    assert [p["epsilon"] for p in params[:5]] == [1.0, 4.0, 10.0, 100.0, None]
    assert [p["kind"] for p in params] == ["mislabelled"] * 5 + ["natural"] * 5
    first = params[0]
    assert first["m"] == 1000 and first["references"] == 2 and first["device"] == "cpu"
    assert first["spec"]["dataset"]["name"] == "fashion-mnist"
    assert first["spec"]["recipe"] == {"architecture": "mlp", "arch_params": {"hidden": 256},
                                       "optimizer": "sgd", "lr": 0.1, "epochs": 30,
                                       "batch_size": 64}
    assert first["attack_params"]["lira-offline-fixed-variance"] == {"equal_counts": False}
    paper = cells(resolve_config(study, "paper"))
    assert len(paper) == 5 * 2 * 3
    assert {c.params["m"] for c in paper} == {5000} and paper[0].params["references"] == 8
    assert paper[0].params["spec"]["split"]["audit"] == 10000
    # "none" in a YAML list is no DP too
    tiny = cells(resolve_config(study, "cpu", {**TINY, "epsilons": ["none", 2]}))
    assert [c.params["epsilon"] for c in tiny[:2]] == [None, 2.0]


def test_run_configs_carry_dp_and_canaries():
    from miaudit.studies.dp_audit import run_config

    made = cells(resolve_config(get_study("dp-audit"), "cpu", TINY))
    dp = run_config(made[1].params)
    assert dp["recipe"]["dp"] == {"epsilon": 8.0, "delta": 1e-5}
    assert dp["canaries"]["count"] == M and dp["canaries"]["kind"] == "mislabelled"
    assert dp["design"] == "offline" and dp["models"] == 3
    assert "dp" not in run_config(made[0].params)["recipe"]


def test_bad_configs_fail_with_the_pipelines_message():
    study = get_study("dp-audit")
    with pytest.raises(StudyError, match="canaries.kind must be one of"):
        cells(resolve_config(study, "cpu", {**TINY, "kinds": ["poisoned"]}))
    with pytest.raises(StudyError, match="even all-correct guesses give ε = 0"):
        cells(resolve_config(study, "cpu", {**TINY, "canaries": 4, "guesses": None}))
    with pytest.raises(StudyError, match="no entry under setups"):
        cells(resolve_config(study, "cpu", {"setup": "cifar10"}))
    with pytest.raises(StudyError, match="references must be >= 1"):
        cells(resolve_config(study, "cpu", {**TINY, "references": 0}))


def test_privacy_meter_numbers_are_data_with_their_source():
    by = {(r["canaries"], r["training"]): r for r in REFERENCE_NUMBERS}
    assert by["mislabelled", "non-DP"]["empirical_epsilon"] == pytest.approx(5.48, abs=0.01)
    assert by["natural", "non-DP"]["empirical_epsilon"] == pytest.approx(4.56, abs=0.01)
    assert by["mislabelled", "DP-SGD"]["empirical_epsilon"] == pytest.approx(0.418, abs=1e-3)
    assert by["natural", "DP-SGD"]["empirical_epsilon"] == pytest.approx(0.126, abs=1e-3)
    assert {r["claimed_epsilon"] for r in REFERENCE_NUMBERS} == {None, 68.51}
    assert all(r["m"] == 1000 and r["delta"] == 1e-5 and r["dataset"] == "CIFAR-10"
               for r in REFERENCE_NUMBERS)
    assert "dpaudit.md" in REFERENCE_SOURCE and "CIFAR-10" in CAVEAT
