"""A run's reference models on this machine vs on a 2-node Ray cluster (miaudit.train.cluster).

Not run in CI. Usage (from the repository root; needs the `ray` extra):

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_ray_training.py [--models 32] [--epochs 30]
        [--hidden 128] [--out result.json]

Workload: sklearn digits as a table (1,797 rows x 64 pixel columns in [0, 1], 10 classes);
`--models` reference MLPs (64 -> hidden tanh -> 10, SGD lr 0.1 momentum 0.9, batch 64), model
m trains on a seeded random half of the rows with seed m: a run's reference models. Each
path trains them with `trainer.train_models` (no cache: everything trains):

- `local-1`: this process, stacked groups of up to 10 (`workers=1`);
- `local-2`: two spawned worker processes (`workers=2`, the local fan-out);
- `ray-cold` / `ray-warm`: a Ray cluster started here (a head and one worker node, 1 CPU each,
  bound to 127.0.0.1 only), as Ray tasks; `cold` is the first call of the driver (each node
  starts a worker process that imports torch), `warm` the second (workers reused).

Printed: wall seconds of each, the cluster's start, and for the Ray calls the data put into the
object store once, bytes sent back per model (safetensors weights), each task's worker time
against its training loop's (in-worker overhead) and against its submit-to-rebuilt round trip
(scheduling, transfer, rebuild), the estimated overhead per task (wall minus training time
over the task slots, per task), the nodes used, and whether the Ray-trained weights are
byte-identical to the local ones (sha256 of the safetensors bytes). The load average is
printed before and after: on a shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import time
from typing import Any

import numpy as np
import torch
from safetensors.torch import save
from sklearn.datasets import load_digits

from miaudit.train import Recipe, stacked, trainer
from miaudit.train.cluster import Compute, task_slots, train_groups_on_ray

LOOPBACK = "127.0.0.1"


def workload(models: int, epochs: int, hidden: int) -> tuple[Any, ...]:
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    rng = np.random.default_rng(0)
    halves = [np.sort(rng.permutation(len(x))[: len(x) // 2]) for _ in range(models)]
    arch = {"hidden": hidden, "activation": "tanh"}
    recipe = Recipe(architecture="mlp", arch_params=arch, optimizer="sgd", lr=0.1,
                    momentum=0.9, epochs=epochs, batch_size=64)  # fmt: skip
    return recipe, x, y, halves, list(range(models))


def digests(models: list[Any]) -> list[str]:
    def blob(m: Any) -> bytes:
        return save({k: v.detach().cpu().contiguous() for k, v in m.module.state_dict().items()})

    return [hashlib.sha256(blob(m)).hexdigest() for m in models]


def timed_local(recipe: Recipe, x: Any, y: Any, halves: Any, seeds: Any, workers: int
                ) -> tuple[float, list[Any]]:  # fmt: skip
    start = time.perf_counter()
    models = trainer.train_models(recipe, x, y, halves, seeds, progress=False, workers=workers)
    return time.perf_counter() - start, models


def timed_ray(ray: Any, recipe: Recipe, x: Any, y: Any, halves: Any, seeds: Any
              ) -> tuple[float, Any, int]:  # fmt: skip
    """One Ray call as ``trainer.train_models`` makes it (same grouping), with its stats."""
    compute = Compute("ray")
    start = time.perf_counter()
    slots = task_slots(ray, compute)
    groups = stacked.plan_groups([len(h) for h in halves], stacked.can_stack(recipe),
                                 trainer.MAX_STACK, slots)  # fmt: skip
    run = train_groups_on_ray(ray, recipe, torch.from_numpy(x), torch.from_numpy(y), halves,
                              seeds, groups, 10, compute)  # fmt: skip
    return time.perf_counter() - start, run, slots


def ray_figures(wall: float, run: Any, slots: int) -> dict[str, Any]:
    tasks = run.tasks
    train = sum(t["train_seconds"] for t in tasks)
    models = sum(t["models"] for t in tasks)
    return {
        "wall_s": round(wall, 2),
        "tasks": len(tasks),
        "slots": slots,
        "nodes": sorted({t["node"][:8] for t in tasks}),
        "data_put_once_bytes": run.data_bytes,
        "bytes_back_per_model": round(sum(t["result_bytes"] for t in tasks) / models),
        "train_loop_s_total": round(train, 2),
        "worker_overhead_s_per_task": round(
            sum(t["task_seconds"] - t["train_seconds"] for t in tasks) / len(tasks), 3),
        "round_trip_minus_worker_s_per_task": round(
            sum(t["round_trip_seconds"] - t["task_seconds"] for t in tasks) / len(tasks), 3),
        "overhead_s_per_task_est": round((wall - train / slots) / len(tasks) * slots, 3),
    }  # fmt: skip


def start_cluster(ray: Any) -> tuple[Any, float]:
    from ray.cluster_utils import Cluster

    from miaudit.runtime.local_ray import loopback_only

    start = time.perf_counter()
    with loopback_only(ray):
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "node_ip_address": LOOPBACK, "include_dashboard": False})
        cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK)
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    return cluster, time.perf_counter() - start  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    import ray

    jobs = workload(args.models, args.epochs, args.hidden)
    result: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_before": [round(v, 2) for v in os.getloadavg()],
        "workload": {"models": args.models, "epochs": args.epochs, "hidden": args.hidden,
                     "rows_per_model": len(jobs[3][0])},
    }  # fmt: skip
    wall, local = timed_local(*jobs, workers=1)
    result["local-1_wall_s"] = round(wall, 2)
    wall, _ = timed_local(*jobs, workers=2)
    result["local-2_wall_s"] = round(wall, 2)
    cluster, started = start_cluster(ray)
    result["cluster_start_s"] = round(started, 2)
    try:
        for name in ("ray-cold", "ray-warm"):
            wall, run, slots = timed_ray(ray, *jobs)
            result[name] = ray_figures(wall, run, slots)
        result["ray_weights_identical_to_local"] = digests(run.models) == digests(local)
    finally:
        ray.shutdown()
        cluster.shutdown()
    result["load_after"] = [round(v, 2) for v in os.getloadavg()]
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
