"""A whole `miaudit run` with 32 reference models, locally vs on a 2-node Ray cluster.

Not run in CI. Usage (repository root; needs the `ray` extra):

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_ray_run.py [--models 33] [--epochs 30]

The run: sklearn digits (1,797 rows), the offline design with ``--models`` models (the target
and its references; 33 = 32 references), an MLP recipe (64 -> 128 -> 10, ``--epochs``), plain
queries, the attacks loss, calibrated-loss, lira-offline and rmia. It runs three times, each
with an empty model cache: local (this machine's trainer), and twice on a cluster of a head and
one worker node (1 CPU each, bound to 127.0.0.1 only): ``ray-cold`` (the driver's first call:
each node starts a worker that imports torch) and ``ray-warm`` (workers reused). Printed per
run: wall seconds of the whole run and of its training (summary.json), the nodes in
training.json, and whether scores.csv is byte-identical to the local run's. The load average is
printed before and after: on a shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import miaudit
from miaudit.runtime.local_ray import loopback_cluster, loopback_only


def config(models: int, epochs: int, out: Path, cache: Path) -> dict:
    return {
        "name": "ray-bench", "seed": 0, "dataset": {"name": "digits"},
        "split": {"audit": 500, "public": 800, "population": 200}, "models": models,
        "design": "offline",
        "recipe": {"architecture": "mlp", "arch_params": {"hidden": 128}, "epochs": epochs,
                   "batch_size": 64},
        "signals": {"queries": ["plain"]},
        "attacks": ["loss", "calibrated-loss", "lira-offline", "rmia"],
        "metrics": {"bootstrap": 0}, "output": str(out), "cache_dir": str(cache),
    }


def one_run(name: str, cfg: dict, compute: dict | None) -> dict:
    started = time.perf_counter()
    result = miaudit.run(cfg, progress=False, compute=compute, overwrite=True)
    wall = time.perf_counter() - started
    out = Path(result.out)
    training = json.loads((out / "training.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    return {"name": name, "wall_s": round(wall, 2),
            "train_wall_s": summary.get("train_wall_seconds"),
            "nodes": training["nodes"], "trained": training["trained"],
            "scores_sha256": hashlib.sha256((out / "scores.csv").read_bytes()).hexdigest()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=33)
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    import ray

    print("load before:", os.getloadavg())
    root = Path(tempfile.mkdtemp(prefix="miaudit-ray-run-"))
    rows = [one_run("local", config(args.models, args.epochs, root / "local", root / "c0"),
                    None)]
    with loopback_cluster(ray, head_cpus=1, worker_cpus=[1]) as cluster:
        with loopback_only(ray):
            ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        compute = {"executor": "ray", "address": cluster.address}
        for k, name in enumerate(("ray-cold", "ray-warm")):
            cfg = config(args.models, args.epochs, root / name, root / f"c{k + 1}")
            rows.append(one_run(name, cfg, compute))
    local = rows[0]["scores_sha256"]
    for row in rows:
        row["scores_identical_to_local"] = row["scores_sha256"] == local
        print(json.dumps(row))
    print("load after:", os.getloadavg())


if __name__ == "__main__":
    main()
