from __future__ import annotations

import json
import logging
import pickle

import pandas as pd
import pytest
from study_work import TRACE, failing_work, invocations, smoke_cells, traced_work

from miaudit.studies.sweep import RESULTS, Cell, StudyError, cell_path, run_sweep


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
