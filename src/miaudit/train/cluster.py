"""Train a run's models on a Ray cluster: the sibling of :mod:`miaudit.train.parallel`.

Where :mod:`~miaudit.train.parallel` fans stacked groups out over processes on this machine,
this module fans the same groups out as Ray tasks, on a local instance (bound to loopback) or
on a cluster the driver joins (``address``: ``auto``, ``ray://host:port``). The features and
labels go to the cluster once (``ray.put``; every task gets the object refs, so each node
fetches them once); each task carries one group of jobs, planned by the local trainer's own
grouping (``stacked.plan_groups``) and trained by the local worker's own code
(``parallel.train_group``) on one intra-op thread on CPU, so a model's weights are those the
local path trains, byte for byte on the same CPU. A task runs on ``cpus_per_model`` CPUs and
``gpus_per_model`` GPUs (a stacked group trains as one model: one process, one thread, one
device), on ``cuda`` when Ray gave it a GPU.

Workers send back each model's weights as safetensors bytes with plain metadata (Ray node id,
device, seconds, losses, checkpoint snapshots); this process rebuilds the modules and hands
each group to ``on_group`` as it arrives, so the driver writes the model cache (no shared
filesystem) and a model stored before a failure or an interrupt is kept: a rerun trains only
what was lost. Ray retries a task whose worker or node died (``max_retries``) and one that
raised a system error (:func:`retryable`), never one that raised anything else (a bad
config fails the same way every time); a group that keeps failing raises
:class:`RayTrainingError` with its jobs and the worker's error.

Ray is optional (``pip install 'miaudit[ray]'``): it is imported by the functions that use it,
never by this module, so the local path and ``import miaudit`` do not load it. Torch and the
local trainer are imported by the functions that train too: a config check reads
:class:`Compute` without loading them.
:func:`training_document` (no Ray either) records where each model of a run came from.
"""

from __future__ import annotations

import contextlib
import math
import socket
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from miaudit.errors import ClusterConnectionError, ConfigError, MiauditError
from miaudit.runtime.local_ray import LOCAL_RAY_ADDRESS, loopback_only
from miaudit.train.checkpoints import CheckpointSpec
from miaudit.train.recipe import Recipe

if TYPE_CHECKING:
    import torch

    from miaudit.train.common import TrainedModel

    RETRYABLE: tuple[type[BaseException], ...]  # retryable(), by module __getattr__

EXECUTORS = ("local", "ray")
INSTALL_HINT = "pip install 'miaudit[ray]'"


def retryable() -> tuple[type[BaseException], ...]:
    """Exceptions a worker may raise that another try can cure (a full disk or GPU, a dropped
    connection); anything else is the job's own error and fails every try alike."""
    import torch

    return (OSError, MemoryError, torch.cuda.OutOfMemoryError)


def __getattr__(name: str) -> Any:
    if name == "RETRYABLE":  # the constant it was, without torch at import (PEP 562)
        return retryable()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Compute:
    """Where a run's models train: ``local`` (this machine: in-process or worker processes,
    see :mod:`miaudit.train.parallel`) or ``ray``.

    For ``ray``: ``address`` ``None`` starts a local instance on loopback (this machine's
    usable cores); ``"auto"`` or ``"ray://host:port"`` joins an existing cluster. Each task
    (a stacked group, or one unstackable model) asks Ray for ``cpus_per_model`` CPUs and
    ``gpus_per_model`` GPUs; a task whose worker dies or that raises a :func:`retryable`
    error is tried again up to ``max_retries`` times.
    """

    executor: str = "local"
    address: str | None = None
    cpus_per_model: float = 1.0
    gpus_per_model: float = 0.0
    max_retries: int = 3
    # seconds to wait for the cluster at ``address`` to answer before giving up with a
    # ClusterConnectionError naming it (a refused port fails at once)
    connect_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ConfigError(
                f"compute.executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}."
            )
        if self.address is not None and self.executor != "ray":
            raise ConfigError("compute.address only applies to compute.executor 'ray'.")
        if self.address is not None and not isinstance(self.address, str):
            raise ConfigError(f"compute.address must be a string, got {self.address!r}.")
        for name in ("cpus_per_model", "gpus_per_model", "max_retries"):
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or value < 0 or (name == "max_retries" and value != int(value)):
                kind = "a whole number" if name == "max_retries" else "a number"
                raise ConfigError(f"compute.{name} must be {kind} >= 0, got {value!r}.")
        if self.cpus_per_model == 0 and self.gpus_per_model == 0:
            raise ConfigError("compute: a model needs cpus_per_model > 0 or gpus_per_model > 0.")
        timeout = self.connect_timeout_s
        if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                or not math.isfinite(timeout) or timeout <= 0):
            raise ConfigError(f"compute.connect_timeout_s must be a finite number of seconds "
                              f"> 0 (how long to wait for the Ray cluster at compute.address "
                              f"to answer), got {timeout!r}.")

    @property
    def uses_ray(self) -> bool:
        return self.executor == "ray"

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None, where: str = "compute") -> Compute:
        """Settings from a config mapping (``None``: local); ConfigError naming an unknown
        key."""
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown key(s) in {where}: {', '.join(unknown)}; known: "
                              f"{', '.join(sorted(known))}.")  # fmt: skip
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class RayTrainingError(MiauditError):
    """Models that failed on the Ray cluster: ``failures`` holds each failed group's job
    indices (into the ``train_models`` call's jobs) and the worker's error."""

    def __init__(self, message: str, failures: Sequence[tuple[list[int], str]] = ()) -> None:
        super().__init__(message)
        self.failures = list(failures)

    def with_keys(self, keys: Sequence[str]) -> RayTrainingError:
        """This error restated with the cache key of each failed job (``keys[j]``: job j's)."""
        lines = [f"model {keys[j]}: {error}" for jobs, error in self.failures for j in jobs]
        return RayTrainingError(
            f"{len(lines)} model(s) failed on the Ray cluster; the models that finished are "
            "cached, a rerun trains only these:\n  " + "\n  ".join(lines),
            self.failures,
        )


class _WrongCode(ConfigError):
    """A worker runs other training code than the driver (never retried)."""


def ray_module() -> Any:
    """The ``ray`` package, or a ConfigError with the install command."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            f"compute.executor 'ray' needs Ray: {INSTALL_HINT} (ray==2.60.0)."
        ) from exc
    return ray


@contextlib.contextmanager
def ray_session(compute: Compute) -> Iterator[Any]:
    """Ray, connected for ``compute``: the instance already initialised in this process if
    there is one (left running), else one started (local, loopback only) or joined here and
    shut down on exit."""
    from miaudit.train import parallel

    ray = ray_module()
    if ray.is_initialized():
        yield ray
        return
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
    if compute.address is None:
        with loopback_only(ray):
            ray.init(num_cpus=parallel.usable_cpus(), _node_ip_address=LOCAL_RAY_ADDRESS,
                     **options)  # fmt: skip
    else:
        join_cluster(ray, compute, options)
    try:
        yield ray
    finally:
        ray.shutdown()


def _fix(address: str, timeout: float) -> str:
    return (f"check --ray-address / compute.address ({address!r}; the head's HOST:PORT, e.g. "
            f"6379 after `ray start --head --port 6379`, or auto on a machine of the cluster) "
            f"and that the head node is up (`ray status` on it) and reachable from here; on a "
            f"slow network raise --ray-timeout / compute.connect_timeout_s (now {timeout:g} s); "
            f"or train on this machine: --executor local")


def _host_port(address: str) -> tuple[str, int] | None:
    """The host and port that ``address`` makes Ray dial (``auto``: as Ray resolves it, from
    $RAY_ADDRESS or the cluster started last on this machine); None when that cannot be told
    here (Ray then reads the address itself)."""
    if address == "auto":
        from ray._private import services  # Ray's own resolution; a ConnectionError if none

        try:
            address = services.get_ray_address_from_environment("auto", None)
        except ConnectionError:
            raise
        except Exception:  # Ray's private helper changed: Ray reads the address itself
            return None
    target = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def join_cluster(ray: Any, compute: Compute, options: Mapping[str, Any]) -> None:
    """``ray.init`` on the cluster at ``compute.address``, after checking within
    ``compute.connect_timeout_s`` that something answers there: an address refused, unreachable
    or silent (which Ray itself retries for minutes) is a :class:`ClusterConnectionError`
    naming it and the fix, as is a cluster Ray cannot join."""
    address, timeout = str(compute.address), float(compute.connect_timeout_s)
    start = time.monotonic()
    try:
        where = _host_port(address)
    except ConnectionError as exc:  # auto, and no cluster found
        raise ClusterConnectionError(
            f"no running Ray cluster found for address 'auto' ({exc}); start one (`ray start "
            f"--head`) or {_fix(address, timeout)}."
        ) from exc
    if where is not None:
        try:
            socket.create_connection(where, timeout=timeout).close()
        except OSError as exc:
            reason = ("no answer" if isinstance(exc, TimeoutError)
                      else f"{exc.strerror or exc}")
            waited = time.monotonic() - start
            dialed = f"{where[0]}:{where[1]}"
            shown = address if address == dialed else f"{address} ({dialed})"
            raise ClusterConnectionError(
                f"cannot reach the Ray cluster at {shown}: {reason} after {waited:.1f} s "
                f"(compute.connect_timeout_s {timeout:g}); nothing was trained. To fix: "
                f"{_fix(address, timeout)}."
            ) from exc
    try:
        ray.init(address=address, **options)
    except ValueError as exc:  # e.g. ray:// without Ray Client's extra, a malformed address
        hint = (" Ray Client (ray://) needs `pip install 'ray[client]'`, or give the head's "
                "GCS address HOST:6379 instead." if "ray[client]" in str(exc) else "")
        raise ConfigError(f"cannot join the Ray cluster at {address}: {exc}.{hint}") from exc
    except (ConnectionError, TimeoutError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterConnectionError(
            f"cannot join the Ray cluster at {address}: {first}; nothing was trained. "
            f"To fix: {_fix(address, timeout)}."
        ) from exc


def task_slots(ray: Any, compute: Compute) -> int:
    """Tasks the cluster's live nodes can run at once; ConfigError if no node can run one."""
    slots, largest = 0, (0.0, 0.0)
    for node in ray.nodes():
        if not node.get("Alive", True):
            continue
        cpus, gpus = (float(node["Resources"].get(r, 0.0)) for r in ("CPU", "GPU"))
        largest = max(largest, (cpus, gpus))
        fits = [
            int(have // need)
            for have, need in ((cpus, compute.cpus_per_model), (gpus, compute.gpus_per_model))
            if need > 0
        ]
        slots += min(fits)
    if slots < 1:
        raise ConfigError(
            f"no node of the Ray cluster has {compute.cpus_per_model:g} CPU(s) and "
            f"{compute.gpus_per_model:g} GPU(s) for one model (largest: {largest[0]:g} CPUs, "
            f"{largest[1]:g} GPUs); lower compute.cpus_per_model / gpus_per_model."
        )
    return slots


def _ray_train_task(task: dict[str, Any], features: np.ndarray, labels: np.ndarray
                    ) -> dict[str, Any]:  # fmt: skip
    """A Ray task: train one group (``parallel.train_group``) on the device Ray gave it; each
    model's weights and snapshots as safetensors bytes, with plain metadata."""
    import ray
    import torch
    from safetensors.torch import save

    from miaudit.cache import code_version
    from miaudit.train import parallel

    start = time.perf_counter()
    digest = code_version.trainer_digest()
    if digest != task["trainer_digest"]:
        raise _WrongCode(
            f"this worker's miaudit trains with other code (trainer digest {digest[:12]}, the "
            f"driver's {task['trainer_digest'][:12]}): install the same miaudit on every node."
        )
    device = torch.device("cuda" if ray.get_gpu_ids() and torch.cuda.is_available() else "cpu")
    if device.type != "cpu":
        task = {**task, "num_threads": None}
    with warnings.catch_warnings():  # the object store's arrays are read-only; never written
        warnings.filterwarnings("ignore", message=".*not writable.*")
        x, y = torch.from_numpy(features), torch.from_numpy(labels)
    models = parallel.train_group(task, x, y, device)

    def pack(state: Mapping[str, torch.Tensor]) -> bytes:
        result: bytes = save({k: v.detach().cpu().contiguous() for k, v in state.items()})
        return result

    return {
        "node": ray.get_runtime_context().get_node_id(),
        "device": device.type,
        "models": [
            {
                "fields": parallel.model_fields(m),
                "weights": pack(m.module.state_dict()),
                "snapshots": {step: pack(s) for step, s in m.snapshots.items()},
            }
            for m in models
        ],
        "task_seconds": time.perf_counter() - start,
    }


@dataclass
class RayRun:
    """One ``train_groups_on_ray`` call: the models (job order) and what it moved."""

    models: list[TrainedModel | None]
    data_bytes: int = 0  # features and labels, put into the object store once
    tasks: list[dict[str, Any]] = field(default_factory=list)  # per finished task, see below


def _worker_error(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"


def _rebuild(result: Mapping[str, Any], recipe: Recipe, device: torch.device
             ) -> list[TrainedModel]:  # fmt: skip
    from safetensors.torch import load

    from miaudit.train import parallel

    return [
        parallel.rebuild(
            entry["fields"],
            load(entry["weights"]),
            {int(step): load(blob) for step, blob in entry["snapshots"].items()},
            recipe,
            device,
            node=result["node"],
            trained_on=result["device"],
        )
        for entry in result["models"]
    ]


def train_groups_on_ray(
    ray: Any,
    recipe: Recipe,
    features: torch.Tensor,
    labels: torch.Tensor,
    index_sets: Sequence[Any],
    seeds: Sequence[int],
    groups: Sequence[Sequence[int]],
    num_classes: int,
    compute: Compute,
    *,
    num_threads: int = 1,
    device: str | torch.device = "cpu",
    on_group: Callable[[list[int], list[TrainedModel]], None] | None = None,
    checkpoints: CheckpointSpec | None = None,
) -> RayRun:
    """Train each group of jobs as one Ray task (see the module docstring); each group's
    models go to ``on_group`` in this process as they arrive, on ``device``.

    Groups that fail are reported together once the others are done (and handed to
    ``on_group``): :class:`RayTrainingError`. An interrupt cancels the tasks not yet done.
    Each of ``RayRun.tasks``: node, device, models, ``task_seconds`` (the worker's),
    ``round_trip_seconds`` (submitted to rebuilt here) and ``result_bytes``.
    """
    import torch

    from miaudit.cache import code_version
    from miaudit.train import parallel

    device = torch.device(device)
    x = np.ascontiguousarray(features.detach().cpu().numpy())
    y = np.ascontiguousarray(labels.detach().cpu().numpy())
    run = RayRun([None] * len(seeds), data_bytes=x.nbytes + y.nbytes)
    x_ref, y_ref = ray.put(x), ray.put(y)  # once: every task gets the refs
    remote = ray.remote(_ray_train_task).options(
        num_cpus=compute.cpus_per_model, num_gpus=compute.gpus_per_model,
        max_retries=int(compute.max_retries), retry_exceptions=list(retryable()),
        scheduling_strategy="SPREAD",
    )  # fmt: skip
    pending: dict[Any, tuple[list[int], float]] = {}
    for group in groups:
        task = parallel.group_task(recipe, index_sets, seeds, group, num_classes, checkpoints,
                                   num_threads)  # fmt: skip
        task["trainer_digest"] = code_version.trainer_digest()
        pending[remote.remote(task, x_ref, y_ref)] = (list(group), time.perf_counter())
    failures: list[tuple[list[int], str]] = []
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                group, submitted = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # the worker's error, after Ray's retries
                    failures.append((group, _worker_error(exc)))
                    continue
                models = _rebuild(result, recipe, device)
                run.tasks.append(_task_record(result, group, submitted))
                for j, model in zip(group, models, strict=True):
                    run.models[j] = model
                if on_group is not None:
                    on_group(group, models)
    finally:
        for ref in pending:  # interrupted: stop what has not finished
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
    if failures:
        first = failures[0][1]
        raise RayTrainingError(
            f"{sum(len(g) for g, _ in failures)} model(s) failed on the Ray cluster "
            f"(the others are done); first error: {first}", failures,
        )  # fmt: skip
    return run


def _task_record(result: Mapping[str, Any], group: list[int], submitted: float
                 ) -> dict[str, Any]:  # fmt: skip
    sizes = [len(m["weights"]) + sum(map(len, m["snapshots"].values())) for m in result["models"]]
    return {
        "node": result["node"],
        "device": result["device"],
        "models": len(group),
        "task_seconds": result["task_seconds"],
        "train_seconds": sum(m["fields"]["train_seconds"] for m in result["models"]),
        "round_trip_seconds": time.perf_counter() - submitted,
        "result_bytes": sum(sizes),
    }


TRAINING_FORMAT = 1  # training.json's layout


def training_document(models: Sequence[TrainedModel]) -> dict[str, Any]:
    """The ``training.json`` document of a run's models: per model (in the run's order) its
    cache key, where it trained (``node``: ``local``, a Ray node id, or ``cache`` for a model
    loaded from the cache), its device, training seconds (0 for a cache hit: nothing trained
    in this run), whether it came from the cache and how many models trained with it as one
    stacked model (``stack``: 1 alone; None for a cache hit); with counts per node."""
    rows: list[dict[str, Any]] = []
    for i, model in enumerate(models):
        hit = bool(model.from_cache)
        rows.append({
            "model": i,
            "cache_key": model.cache_key,
            "seed": int(model.seed),
            "node": "cache" if hit else (model.node or "local"),
            "device": model.device,
            "seconds": 0.0 if hit else float(model.train_seconds),
            "from_cache": hit,
            "stack": None if hit else model.stack,
        })  # fmt: skip
    nodes: dict[str, int] = {}
    for row in rows:
        nodes[row["node"]] = nodes.get(row["node"], 0) + 1
    return {
        "format": TRAINING_FORMAT,
        "models": rows,
        "nodes": nodes,
        "trained": sum(not r["from_cache"] for r in rows),
        "from_cache": sum(r["from_cache"] for r in rows),
        "seconds": sum(r["seconds"] for r in rows),
    }


def write_training_document(run_dir: str | Path, models: Sequence[TrainedModel]) -> Path:
    """Write :func:`training_document` as ``run_dir/training.json`` (atomically)."""
    from miaudit.errors import WriteError, describe_os_error
    from miaudit.io import write_json

    path = Path(run_dir) / "training.json"
    try:
        write_json(path, training_document(models))
    except OSError as exc:  # a full disk, a read-only folder: name the file
        what, todo = describe_os_error(exc, path)
        raise WriteError(f"cannot write {path}: {what}. Nothing half-written is kept. To fix: "
                         f"{todo}", exc.errno) from exc
    return path
