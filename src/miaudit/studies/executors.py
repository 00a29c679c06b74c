"""Where a sweep's cells run: in this process, in local worker processes, or on Ray.

Every executor has ``run(work, cells)``, a generator of ``(cell, rows, error, seconds)`` in the
order cells *finish*, so the sweep can save each result the moment it exists. Local workers
split the cores: one torch thread each when there are as many workers as cores (a cell's models
are small and separate processes use the cores better than intra-op threads, see
:mod:`miaudit.train.parallel`), the spare cores' threads each when there are fewer.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from miaudit.runtime.local_ray import LOCAL_RAY_ADDRESS, loopback_only
from miaudit.studies.cells import Cell, StudyError, Work
from miaudit.train.parallel import usable_cpus

Outcome = tuple[Cell, Any, BaseException | None, float]


def _timed(work: Work, cell: Cell) -> tuple[Any, float]:
    start = time.perf_counter()
    rows = work(cell)
    return rows, time.perf_counter() - start


def init_worker(num_threads: int = 1) -> None:
    """Set up a sweep worker process: ``num_threads`` torch threads, and no nested process
    pool in the trainer (the sweep already keeps every core busy with one cell per worker)."""
    import torch

    from miaudit.train import parallel

    torch.set_num_threads(num_threads)
    os.environ[parallel.NESTED_ENV] = "1"
    watch_parent(os.getppid())


def watch_parent(parent: int, interval: float = 1.0) -> threading.Thread:
    """Exit this worker when the sweep process that started it is gone (killed by a signal it
    could not pass on): a cell mid-training would otherwise keep the cores busy as an orphan.
    Its finished models are cached already; the rerun resumes."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(1)  # no cleanup to run: the cache writes atomically

    thread = threading.Thread(target=watch, name="miaudit-parent-watch", daemon=True)
    thread.start()
    return thread


class SerialExecutor:
    """Every cell in this process, one after another (debugging, tests, tiny sweeps)."""

    name = "serial"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = 1

    def run(self, work: Work, cells: Sequence[Cell]) -> Iterator[Outcome]:
        for cell in cells:
            start = time.perf_counter()
            try:
                rows = work(cell)
            except Exception as exc:  # reported per cell; the sweep goes on
                yield cell, None, exc, time.perf_counter() - start
            else:
                yield cell, rows, None, time.perf_counter() - start


class LocalExecutor:
    """A pool of ``workers`` spawned processes on this machine (default: one per usable core)."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = int(workers) if workers else usable_cpus()
        if self.workers < 1:
            raise StudyError(f"--workers must be >= 1, got {workers}.")

    def run(self, work: Work, cells: Sequence[Cell]) -> Iterator[Outcome]:
        context = multiprocessing.get_context("spawn")  # never fork after torch/OpenMP
        workers = min(self.workers, len(cells)) or 1
        pool = cf.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=init_worker,
            # fewer workers than cores (--workers 1, or fewer cells): give each the spare cores
            initargs=(max(1, usable_cpus() // workers),),
        )
        clean = False
        try:
            started = {pool.submit(_timed, work, cell): (cell, time.perf_counter())
                       for cell in cells}
            for future in cf.as_completed(started):
                cell, submitted = started[future]
                try:
                    rows, seconds = future.result()
                except cf.process.BrokenProcessPool as exc:
                    raise StudyError(
                        f"a sweep worker died ({exc}); finished cells are saved, rerun to "
                        "resume. If this happens at once, the work function may not be "
                        "importable in a spawned process (define it at module top level)."
                    ) from exc
                except Exception as exc:
                    yield cell, None, exc, time.perf_counter() - submitted
                else:
                    yield cell, rows, None, seconds
            clean = True
        finally:
            # On an interrupt, drop the queued cells instead of running them to the end.
            pool.shutdown(wait=clean, cancel_futures=not clean)


def _ray_module() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise StudyError(
            "the ray executor needs Ray: pip install 'miaudit[ray]' (ray==2.60.0)."
        ) from exc
    return ray


def _ray_task(work: Work, cell: Cell) -> tuple[Any, float]:
    init_worker(1)
    return _timed(work, cell)


class RayExecutor:
    """Ray tasks of one CPU each, on an existing cluster (``address``, e.g. ``auto`` or
    ``ray://host:10001``) or on a local instance started here with ``workers`` CPUs."""

    name = "ray"

    def __init__(self, workers: int | None = None, address: str | None = None) -> None:
        self.workers = int(workers) if workers else usable_cpus()
        self.address = address

    def run(self, work: Work, cells: Sequence[Cell]) -> Iterator[Outcome]:
        ray = _ray_module()
        started_here = not ray.is_initialized()
        if started_here:
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
            if self.address is None:  # a local instance sized by --workers, on loopback
                options["num_cpus"] = self.workers
                options["_node_ip_address"] = LOCAL_RAY_ADDRESS
                with loopback_only(ray):
                    ray.init(**options)
            else:
                ray.init(address=self.address, **options)
        try:
            task = ray.remote(num_cpus=1)(_ray_task)
            pending = {task.remote(work, cell): (cell, time.perf_counter()) for cell in cells}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:  # each result is yielded (and saved) as soon as it exists
                    cell, submitted = pending.pop(ref)
                    try:
                        rows, seconds = ray.get(ref)
                    except Exception as exc:
                        cause = getattr(exc, "cause", None)
                        yield cell, None, cause or exc, time.perf_counter() - submitted
                    else:
                        yield cell, rows, None, seconds
        finally:
            if started_here:
                ray.shutdown()


EXECUTORS: dict[str, Callable[..., Any]] = {
    "serial": SerialExecutor,
    "local": LocalExecutor,
    "ray": RayExecutor,
}


def get_executor(name: str, workers: int | None = None, **options: Any) -> Any:
    """An executor by name: ``serial``, ``local`` or ``ray`` (``address=`` for ray)."""
    if name not in EXECUTORS:
        raise StudyError(f"unknown executor {name!r}; use one of {', '.join(EXECUTORS)}.")
    if name == "ray":
        return RayExecutor(workers, options.get("address"))
    if options.get("address"):
        raise StudyError("--ray-address only applies to --executor ray.")
    return EXECUTORS[name](workers)
