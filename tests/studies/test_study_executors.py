"""The local process pool and the Ray executor (on a local Ray instance) against a serial
run of the same real cells: same table, every result saved."""

from __future__ import annotations

import os

import pandas as pd
import pytest
from study_work import TRACE, invocations, smoke_cells, traced_work

from miaudit.studies import smoke
from miaudit.studies.executors import LocalExecutor, RayExecutor, get_executor
from miaudit.studies.sweep import StudyError, cell_path, run_sweep


def _sorted(table: pd.DataFrame) -> pd.DataFrame:
    return table.sort_values(["cell", "attack"]).reset_index(drop=True)


def test_local_executor_matches_serial(tmp_path, monkeypatch):
    monkeypatch.setenv(TRACE, str(tmp_path / "trace"))
    cells = smoke_cells(2)
    local = run_sweep(cells, traced_work, tmp_path / "local", LocalExecutor(workers=2),
                      progress=False)
    assert all(cell_path(tmp_path / "local", c).exists() for c in cells)
    assert sorted(invocations(tmp_path / "trace").values()) == [1, 1]
    monkeypatch.setenv("MIAUDIT_CACHE_DIR", str(tmp_path / "other-cache"))  # train again
    serial = run_sweep(cells, traced_work, tmp_path / "serial", "serial", progress=False)
    pd.testing.assert_frame_equal(_sorted(local), _sorted(serial))


def test_ray_executor_on_a_local_instance(tmp_path, monkeypatch):
    pytest.importorskip("ray")  # installed by the dev extra, so CI runs this
    import ray

    started, init = [], ray.init

    def recorded(*args, **kwargs):
        started.append(kwargs)
        context = init(*args, **kwargs)
        started.append([n["NodeManagerAddress"] for n in ray.nodes()])
        return context

    monkeypatch.setattr(ray, "init", recorded)
    cells = smoke_cells(2)
    executor = RayExecutor(workers=2)
    assert not ray.is_initialized()
    table = run_sweep(cells, smoke.work, tmp_path / "ray", executor, progress=False)
    assert not ray.is_initialized()  # the instance started for the sweep is shut down
    # the local instance binds to loopback only (Ray would map 127.0.0.1 to the routable
    # address), and Ray's cluster switch is given back as it was
    from ray._private import ray_constants

    assert started[0]["_node_ip_address"] == "127.0.0.1" and started[1] == ["127.0.0.1"]
    assert ray_constants.ENABLE_RAY_CLUSTER and "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in \
        os.environ
    assert all(cell_path(tmp_path / "ray", c).exists() for c in cells)
    serial = run_sweep(cells, smoke.work, tmp_path / "serial", "serial", progress=False)
    pd.testing.assert_frame_equal(_sorted(table), _sorted(serial))


def test_unknown_executor_and_misplaced_address():
    with pytest.raises(StudyError, match="unknown executor"):
        get_executor("threads")
    with pytest.raises(StudyError, match="only applies"):
        get_executor("local", 2, address="auto")
    with pytest.raises(StudyError, match="workers"):
        LocalExecutor(workers=-1)


def test_the_loopback_helper_is_the_trainers():
    """A local Ray instance is started loopback-only by one helper (miaudit.runtime.local_ray),
    which the run's trainer and the studies' executor both use."""
    from miaudit.runtime import local_ray
    from miaudit.studies import executors
    from miaudit.train import cluster

    assert executors.loopback_only is cluster.loopback_only is local_ray.loopback_only
    assert executors.LOCAL_RAY_ADDRESS == cluster.LOCAL_RAY_ADDRESS == "127.0.0.1"


def test_the_study_help_says_cells_fan_out(capsys):
    from miaudit.cli.main import main

    with pytest.raises(SystemExit):
        main(["study", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "the cells fan out as Ray tasks, and each cell's models train in its worker" in \
        help_text


def test_worker_setup_turns_off_the_trainers_nested_pool(monkeypatch):
    import torch

    from miaudit.studies.executors import init_worker
    from miaudit.train import parallel

    monkeypatch.delenv(parallel.NESTED_ENV, raising=False)
    monkeypatch.setattr(parallel, "usable_cpus", lambda: 2)
    big = parallel.MIN_SAMPLES_FOR_WORKERS
    assert parallel.default_workers(big, 10) == 2 and parallel.default_workers(big - 1, 10) == 1
    threads = torch.get_num_threads()
    try:
        init_worker(1)
        assert torch.get_num_threads() == 1
        assert parallel.default_workers(big * 100, 10) == 1  # no processes of its own
    finally:
        torch.set_num_threads(threads)
        os.environ.pop(parallel.NESTED_ENV, None)  # init_worker set it in this process


def test_local_workers_share_the_cores():
    from study_work import smoke_cells, threads_work

    from miaudit.train.parallel import usable_cpus

    cores = usable_cpus()
    for workers, n_cells in [(1, 1), (2, 2), (4, 1)]:
        outcomes = list(LocalExecutor(workers=workers).run(threads_work, smoke_cells(n_cells)))
        used = min(workers, n_cells)
        threads = [rows[0]["threads"] for _, rows, _, _ in outcomes]
        assert threads == [max(1, cores // used)] * n_cells


def test_a_worker_exits_when_its_sweep_process_is_killed(tmp_path):
    """The sweep (a parent process) is SIGKILLed mid-cell; its worker must not run on."""
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "sweep.py"
    pid_file = tmp_path / "worker.pid"
    script.write_text(f"""
import multiprocessing, os, time
from miaudit.studies.executors import init_worker

def child():
    init_worker(1)
    open({str(pid_file)!r}, "w").write(str(os.getpid()))
    time.sleep(120)  # a long cell

if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    ctx.Process(target=child).start()
    time.sleep(120)
""")
    sweep = subprocess.Popen([sys.executable, str(script)])
    deadline = time.time() + 60
    while not pid_file.exists() and time.time() < deadline:
        time.sleep(0.1)
    worker = int(pid_file.read_text())
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the worker outlived its sweep process")
