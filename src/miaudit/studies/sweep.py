"""Resumable sweeps: a list of cells, one result file per finished cell, one table per study.

A :class:`Cell` is one unit of work (e.g. one dataset x repetition x ablation value); its key is
a hash of its content. ``run_sweep`` hands the cells that have no valid result file yet to an
executor and, as each finishes, writes ``study_dir/cells/<key>.json`` atomically and rebuilds
``study_dir/results.csv`` from the finished cells (TPR columns named ``tpr@<fpr>``: cells
recorded with an older spelling, ``tpr_0.1%`` or ``tpr_at_0.001``, read as that;
:func:`read_results` reads an older results.csv alike). A sweep killed at any point therefore loses
only the cells in flight, and since every trained model is cached by content
(:mod:`miaudit.train.model_cache`, which stores each model, or each stack of models trained
together, the moment it is complete), a rerun of such a cell retrains at most the models that
were training when the sweep died.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from miaudit.io import atomic_path, write_json
from miaudit.records.columns import canonical_tpr_column, canonical_tpr_columns
from miaudit.runtime.progress import bars_enabled, progress_bar, progress_on, quiet
from miaudit.studies.cells import Cell as Cell  # re-exported, as are the three below
from miaudit.studies.cells import StudyError as StudyError
from miaudit.studies.cells import Work as Work
from miaudit.studies.cells import canonical as canonical
from miaudit.studies.executors import get_executor

log = logging.getLogger(__name__)

CELL_FORMAT = 1
RESULTS = "results.csv"

# Cells, Work and StudyError live in ``cells`` (the executors build on them too); re-exported
# here so a study imports its sweep's vocabulary from one place.
def cell_path(study_dir: Path, cell: Cell) -> Path:
    return Path(study_dir) / "cells" / f"{cell.key()}.json"


def _check_rows(rows: Any, cell: Cell) -> list[dict[str, Any]]:
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise StudyError(
            f"work for {cell!r} must return a list of dicts (result rows), "
            f"got {type(rows).__name__}."
        )
    params = cell.params
    out = []
    for row in rows:
        row = canonical(row, "row")
        clash = [k for k in row if k in params or k == "cell"]
        if clash:
            raise StudyError(
                f"result rows of {cell!r} repeat the cell parameter(s) {clash}; the table "
                "already holds every parameter, so give the row fields other names."
            )
        out.append(row)
    return out


def read_cell(path: Path, cell: Cell) -> list[dict[str, Any]] | None:
    """The rows stored for ``cell``; None if absent, warning and None if the file is invalid."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != CELL_FORMAT or data.get("key") != cell.key():
            raise ValueError("format or key does not match the cell")
        if data.get("study") != cell.study or data.get("params") != cell.params:
            raise ValueError("parameters do not match the cell")
        return _check_rows(data.get("rows"), cell)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, StudyError) as exc:
        log.warning("cell file %s is invalid (%s); the cell will run again", path, exc)
        return None


def _write_cell(path: Path, cell: Cell, rows: list[dict[str, Any]], seconds: float) -> None:
    write_json(path, {
        "format": CELL_FORMAT,
        "key": cell.key(),
        "study": cell.study,
        "params": cell.params,
        "seconds": round(seconds, 3),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "rows": rows,
    })


def build_table(cells: Sequence[Cell], done: Mapping[str, list[dict[str, Any]]]) -> pd.DataFrame:
    """One row per result row of each finished cell, in cell order: ``cell`` (the key's first
    12 hex digits), the cell's parameters (nested ones flattened with dots), then the row."""
    records = []
    for cell in cells:
        rows = done.get(cell.key())
        if rows is None:
            continue
        flat = pd.json_normalize(cell.params, sep=".").to_dict("records")[0] if cell.params else {}
        for row in rows:  # a cell recorded before the TPR columns had one spelling reads as new
            records.append({"cell": cell.key()[:12], **flat, **canonical_tpr_columns(row)})
    return pd.DataFrame.from_records(records)


def read_results(path: str | Path) -> pd.DataFrame:
    """A study's results.csv (``path``, or the study folder holding it) as a table, its TPR
    columns named ``tpr@<fpr>`` also when it was recorded with an older spelling
    (``tpr_0.1%``, ``tpr_at_0.001``: :func:`miaudit.records.columns.canonical_tpr_column`)."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS
    return pd.read_csv(path).rename(columns=canonical_tpr_column)


def write_table(table: pd.DataFrame, study_dir: Path) -> Path:
    path = Path(study_dir) / RESULTS
    with atomic_path(path) as tmp:
        table.to_csv(tmp, index=False)
    return path


def run_sweep(
    cells: Iterable[Cell],
    work: Work,
    study_dir: str | Path,
    executor: Any = "serial",
    progress: bool = True,
) -> pd.DataFrame:
    """Run every cell without a valid result file; return the study table of all cells.

    ``work`` must be a picklable top-level function ``Cell -> list[dict]``. ``executor`` is an
    executor from :mod:`miaudit.studies.executors` or its name. Cells that fail are reported
    together in a :class:`StudyError` after the others have finished (and been saved), so a
    rerun retries only them.
    """

    study_dir = Path(study_dir)
    unique: dict[str, Cell] = {}
    for cell in cells:
        if not isinstance(cell, Cell):
            raise StudyError(f"a sweep takes Cells, got {type(cell).__name__}.")
        unique.setdefault(cell.key(), cell)
    ordered = list(unique.values())
    done: dict[str, list[dict[str, Any]]] = {}
    for cell in ordered:
        rows = read_cell(cell_path(study_dir, cell), cell)
        if rows is not None:
            done[cell.key()] = rows
    todo = [c for c in ordered if c.key() not in done]
    if progress:
        print(f"{len(ordered)} cells: {len(done)} done before, {len(todo)} to run", flush=True)
    (study_dir / "cells").mkdir(parents=True, exist_ok=True)
    write_table(build_table(ordered, done), study_dir)
    if not todo:
        return build_table(ordered, done)
    runner = get_executor(executor) if isinstance(executor, str) else executor
    failures: dict[str, str] = {}
    bar = _progress_bar(len(todo), progress)
    start = time.perf_counter()
    # The cells bar is the study's progress: cells run in this process (serial executor) draw
    # no bars of their own under it.
    try:
        with quiet():
            for cell, rows, error, seconds in runner.run(work, todo):
                if error is None:
                    try:
                        rows = _check_rows(rows, cell)
                    except StudyError as exc:
                        error = exc
                if error is not None:
                    failures[repr(cell)] = f"{type(error).__name__}: {error}"
                    log.error("cell %r failed: %s", cell, error)
                else:
                    _write_cell(cell_path(study_dir, cell), cell, rows, seconds)
                    done[cell.key()] = rows
                    write_table(build_table(ordered, done), study_dir)
                if bar is not None:
                    bar.update(1)
                    elapsed = time.perf_counter() - start
                    bar.set_postfix_str(f"{elapsed:.0f}s, {len(failures)} failed")
    finally:
        if bar is not None:
            bar.close()
    if failures:
        listing = "\n".join(f"  {c}: {e}" for c, e in failures.items())
        raise StudyError(
            f"{len(failures)} of {len(todo)} cells failed (the others are saved; rerun to retry "
            f"the failed ones):\n{listing}"
        )
    return build_table(ordered, done)


class _LineProgress:
    """One printed line per finished cell, for logs (no terminal to redraw a bar in)."""

    def __init__(self, total: int) -> None:
        self.total, self.count, self.note = total, 0, ""

    def update(self, n: int) -> None:
        self.count += n

    def set_postfix_str(self, note: str) -> None:
        print(f"cells {self.count}/{self.total} ({note})", flush=True)

    def close(self) -> None:
        pass


def _progress_bar(total: int, enabled: bool) -> Any:
    """The cells bar on a terminal, one line per cell in logs, None when quiet."""
    if not (enabled and progress_on()):
        return None
    if not bars_enabled():
        return _LineProgress(total)
    return progress_bar(total, "cells", "cell")
