from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path

import pandas as pd
import pytest
from study_work import TRACE, failing_work, invocations, smoke_cells, traced_work

from miaudit.studies.sweep import (
    RESULTS,
    Cell,
    StudyError,
    cell_path,
    read_results,
    run_sweep,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "studies"


def test_cell_key_is_canonical_and_picklable():
    a = Cell("s", {"b": [1, 2], "a": {"y": 1.0, "x": "t"}})
    b = Cell("s", {"a": {"x": "t", "y": 1.0}, "b": (1, 2)})
    assert a == b and a.key() == b.key() and len(a.key()) == 64
    assert pickle.loads(pickle.dumps(a)).key() == a.key()
    assert Cell("s", {"b": [2, 1]}).key() != Cell("s", {"b": [1, 2]}).key()
    assert Cell("t", {"b": [1, 2]}).key() != Cell("s", {"b": [1, 2]}).key()
    params = a.params
    params["b"] = "changed"  # a copy: the cell stays as it was
    assert a.params["b"] == [1, 2]


@pytest.mark.parametrize("params", [{"x": object()}, {"x": float("nan")}, {1: "a"}])
def test_cell_rejects_params_that_are_not_json(params):
    with pytest.raises(StudyError):
        Cell("s", params)


def test_sweep_writes_cells_and_table_and_skips_done(tmp_path, monkeypatch):
    monkeypatch.setenv(TRACE, str(tmp_path / "trace"))
    cells = smoke_cells(2)
    table = run_sweep(cells, traced_work, tmp_path / "study", "serial", progress=False)
    assert len(table) == 4  # two attacks per cell
    assert set(table.columns) >= {"cell", "seed", "epochs", "audit", "attack", "auc"}
    assert table["auc"].between(0, 1).all()
    on_disk = pd.read_csv(tmp_path / "study" / RESULTS)
    pd.testing.assert_frame_equal(on_disk, table, check_dtype=False)
    stored = json.loads(cell_path(tmp_path / "study", cells[0]).read_text())
    assert stored["params"] == cells[0].params and len(stored["rows"]) == 2
    # a rerun, with one more cell, runs only the new cell
    again = run_sweep([*cells, *smoke_cells(3)[2:]], traced_work, tmp_path / "study", "serial",
                      progress=False)
    assert len(again) == 6
    pd.testing.assert_frame_equal(again.iloc[:4], table)
    assert sorted(invocations(tmp_path / "trace").values()) == [1, 1, 1]


def test_corrupt_cell_file_is_redone_with_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(TRACE, str(tmp_path / "trace"))
    cells = smoke_cells(2)
    first = run_sweep(cells, traced_work, tmp_path / "study", "serial", progress=False)
    path = cell_path(tmp_path / "study", cells[1])
    path.write_text(path.read_text()[:40])  # truncated, as by a crash without atomic writes
    with caplog.at_level(logging.WARNING):
        second = run_sweep(cells, traced_work, tmp_path / "study", "serial", progress=False)
    assert "invalid" in caplog.text
    counts = invocations(tmp_path / "trace")
    assert counts[cells[0].key()[:12]] == 1 and counts[cells[1].key()[:12]] == 2
    pd.testing.assert_frame_equal(first, second)


def test_failed_cells_are_reported_after_the_others_are_saved(tmp_path):
    cells = smoke_cells(3)
    with pytest.raises(StudyError, match="(?s)1 of 3 cells failed.*broken on purpose"):
        run_sweep(cells, failing_work, tmp_path / "study", "serial", progress=False)
    assert cell_path(tmp_path / "study", cells[0]).exists()
    assert cell_path(tmp_path / "study", cells[2]).exists()
    assert not cell_path(tmp_path / "study", cells[1]).exists()
    assert len(pd.read_csv(tmp_path / "study" / RESULTS)) == 4


def _clashing_work(cell):
    return [{"seed": 3, "auc": 0.5}]


def test_rows_may_not_repeat_cell_parameters(tmp_path):
    with pytest.raises(StudyError, match="repeat the cell parameter"):
        run_sweep([Cell("x", {"seed": 1})], _clashing_work, tmp_path, "serial", progress=False)


def _old_rows(cell: Cell) -> list[dict]:
    """A cell's rows as studies recorded them before the TPR columns had one spelling."""
    return [{"attack": "loss", "auc": 0.6, "tpr_0.1%": 0.01, "tpr_1%": 0.05, "tpr_1%_lo": 0.04,
             "tpr_at_0.1": 0.2}]


def _new_rows(cell: Cell) -> list[dict]:
    return [{"attack": "loss", "auc": 0.6, "tpr@0.001": 0.01, "tpr@0.01": 0.05,
             "tpr@0.01_lo": 0.04, "tpr@0.1": 0.2}]


NEW_COLUMNS = ["attack", "auc", "tpr@0.001", "tpr@0.01", "tpr@0.01_lo", "tpr@0.1"]


def test_cells_recorded_with_an_older_tpr_spelling_read_as_new_ones(tmp_path):
    cells = [Cell("s", {"seed": 0}), Cell("s", {"seed": 1})]
    study = tmp_path / "study"
    run_sweep(cells[:1], _old_rows, study, "serial", progress=False)  # an older study's cell
    assert "tpr_0.1%" in json.loads(cell_path(study, cells[0]).read_text())["rows"][0]
    table = run_sweep(cells, _new_rows, study, "serial", progress=False)  # resumed, new code
    assert list(table.columns) == ["cell", "seed", *NEW_COLUMNS]
    assert table["tpr@0.01"].tolist() == [0.05, 0.05] and table["tpr@0.1"].tolist() == [0.2, 0.2]
    assert list(pd.read_csv(study / RESULTS).columns) == list(table.columns)
    # a results.csv written before reads alike, by its path or its study folder
    old = tmp_path / "old" / RESULTS
    old.parent.mkdir()
    pd.DataFrame(_old_rows(cells[0])).to_csv(old, index=False)
    for where in (old, old.parent):
        assert list(read_results(where).columns) == NEW_COLUMNS


def test_the_recorded_study_tables_read_with_the_one_spelling():
    per_target = read_results(DOCS / "power" / "per_target.csv")  # recorded as tpr_1%, ...
    assert {"tpr@0.01", "tpr@0.01_lo", "tpr@0.001_hi", "tpr@0.001 x rmia"} <= set(per_target)
    assert not [c for c in per_target.columns if c.startswith("tpr_")]
    power = read_results(DOCS / "power" / "power.csv")
    assert {"tpr@0.01", "tpr@0.001"} <= set(power) and power["tpr@0.001"].between(0, 1).all()
