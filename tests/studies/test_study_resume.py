"""Kill a real sweep with SIGKILL after its first cell is saved, rerun it, and check that
finished cells were not recomputed, the killed cell's models came from the cache, and the
table equals that of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from study_work import GATE, TRACE, invocations, smoke_cells, traced_work

from miaudit.studies.sweep import RESULTS, cell_path, run_sweep

HERE = Path(__file__).parent
SCRIPT = """
import sys
from study_work import smoke_cells, traced_work
from miaudit.studies.sweep import run_sweep
run_sweep(smoke_cells(4), traced_work, sys.argv[1], "serial", progress=False)
"""


def _start(study: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(study)], env=env,
                            start_new_session=True)  # its own process group, killed whole


def _cache_entries(cache: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in cache.glob("*.json")}


def test_killed_sweep_resumes_without_recomputing(tmp_path, private_cache, monkeypatch):
    study, trace, gate = tmp_path / "study", tmp_path / "trace", tmp_path / "gate"
    cells = smoke_cells(4)
    env = {**os.environ, TRACE: str(trace), GATE: str(gate),
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = _start(study, env)
    first = cell_path(study, cells[0])
    try:
        deadline = time.monotonic() + 300
        # cell 0 is saved; cell 1 has trained its models and waits at the gate
        while not (first.exists() and invocations(trace).get(cells[1].key()[:12])):
            assert proc.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline, "the sweep made no progress"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    saved = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (study / "cells").iterdir()}
    assert list(saved) == [first.name]
    assert len(pd.read_csv(study / RESULTS)) == 2  # the table holds the finished cell
    models_before = _cache_entries(private_cache)
    assert len(models_before) == 4  # target + reference of cells 0 and 1

    gate.touch()
    rerun = _start(study, env)
    assert rerun.wait(timeout=300) == 0
    counts = invocations(trace)
    assert counts[cells[0].key()[:12]] == 1  # finished before the kill: not run again
    assert counts[cells[1].key()[:12]] == 2  # in flight when killed: run again ...
    assert [counts[c.key()[:12]] for c in cells[2:]] == [1, 1]
    for name, (data, mtime) in saved.items():  # ... and the saved cell file is untouched
        path = study / "cells" / name
        assert path.read_bytes() == data and path.stat().st_mtime_ns == mtime
    models_after = _cache_entries(private_cache)
    assert len(models_after) == 8  # ... but only cells 2 and 3 trained models
    assert all(models_after[k] == t for k, t in models_before.items())

    resumed = pd.read_csv(study / RESULTS)
    monkeypatch.setenv(TRACE, str(tmp_path / "trace-uninterrupted"))
    monkeypatch.setenv("MIAUDIT_CACHE_DIR", str(tmp_path / "fresh-cache"))  # train all again
    whole = run_sweep(cells, traced_work, tmp_path / "whole", "serial", progress=False)
    pd.testing.assert_frame_equal(resumed, pd.read_csv(tmp_path / "whole" / RESULTS))
    assert len(whole) == 8
