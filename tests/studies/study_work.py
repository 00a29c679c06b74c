"""Work functions for the sweep tests: the smoke study's real work (digits MLPs through the
pipeline), plus a trace file per invocation and an optional gate, so a test can tell which
cells ran and can stop a sweep at a known point. Imported by name in worker processes."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from miaudit.studies import smoke
from miaudit.studies.sweep import Cell

TRACE = "MIAUDIT_TEST_TRACE"  # folder: one file per invocation
GATE = "MIAUDIT_TEST_GATE"  # file: cells with seed > 0 wait for it after their work


def traced_work(cell: Cell) -> list[dict[str, Any]]:
    rows = smoke.work(cell)
    trace = Path(os.environ[TRACE])
    trace.mkdir(parents=True, exist_ok=True)
    (trace / f"{cell.key()[:12]}.{os.getpid()}.{time.time_ns()}").write_text("", "utf-8")
    gate = os.environ.get(GATE)
    if gate and cell.params["seed"] > 0:
        while not Path(gate).exists():  # a killed sweep dies here, its models cached
            time.sleep(0.05)
    return rows


def failing_work(cell: Cell) -> list[dict[str, Any]]:
    if cell.params["seed"] == 1:
        raise ValueError("cell 1 is broken on purpose")
    return smoke.work(cell)


def invocations(trace: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in trace.iterdir() if trace.exists() else []:
        key = path.name.split(".")[0]
        counts[key] = counts.get(key, 0) + 1
    return counts


def smoke_cells(n: int, epochs: int = 3, audit: int = 300) -> list[Cell]:
    """``n`` cells of the smoke study (one target + one reference MLP on digits each)."""
    return [Cell("smoke", {"seed": s, "epochs": epochs, "audit": audit}) for s in range(n)]


def threads_work(cell: Cell) -> list[dict[str, Any]]:
    import torch

    return [{"threads": torch.get_num_threads()}]
