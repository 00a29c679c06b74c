"""Stacked CNN training: K reference models one by one, in a lean loop, and stacked.

Not run in CI. From the repository root (a CUDA build of torch for ``--device cuda``)::

    PYTHONPATH=src python bench/bench_stacked_cnn.py --device cuda --json /tmp/stacked.json
    PYTHONPATH=src python bench/bench_stacked_cnn.py --device cuda --dtype bf16
    .venv/bin/python bench/bench_stacked_cnn.py --device cpu --steps 2 --models 2 4 \\
        --arch mnist-cnn cifar-cnn                        # minutes on a CPU

For each architecture (``--arch``: ``mnist-cnn``, ``cifar-cnn``, ``resnet18``, at their recipes'
batch sizes: 64, 128, 256, see RECIPES) and each K in ``--models`` (default 16 64), K models
train ``--steps`` optimizer steps each (one epoch over ``steps x batch`` rows, each model a
seeded random subset of a synthetic pool made here: images in [0, 1], labels from a fixed
random linear teacher; nothing is downloaded), three ways, each timed after an untimed
warm-up of the same way (CUDA context, cuDNN's algorithm search):

* ``loop``: today's one-by-one trainer, ``train_models(..., max_stack=1)`` (``train_model``
  per model: seeding, the engine's shuffled batches, augmentation, autograd);
* ``lean``: the floor of one model at a time, a plain PyTorch loop with the data already on
  the device: index a batch, forward, cross-entropy, backward, SGD step (no augmentation, no
  per-epoch bookkeeping);
* ``stacked``: ``train_models`` with the stack size the trainer picks for the device
  (``trainer.stack_size``, printed; ``--stack S`` sets it), the models in groups trained as
  one through ``torch.func`` (:mod:`miaudit.train.stacked_func`). ``bf16`` recipes are never
  stacked (they train one by one under autocast), so with ``--dtype bf16`` this way is the
  loop's path again and says so (``stack`` 1).

Each row: samples/s (K x steps x batch / seconds), seconds, peak device memory, and on CUDA the
GPU utilisation sampled from ``nvidia-smi`` every 0.2 s while it ran (mean and max; None
where ``nvidia-smi`` is missing). The header gives torch's version, the device and dtype.
``--json PATH`` writes ``{"env": ..., "rows": [...]}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

# The recipes the studies train these architectures with (batch size, optimizer, augmentation):
# rapid's fashion-mnist (mnist-cnn), calibration's CIFAR (cifar-cnn), rapid's cifar10 (resnet18).
RECIPES: dict[str, dict[str, Any]] = {
    "mnist-cnn": {"optimizer": "sgd", "lr": 0.05, "batch_size": 64,
                  "augment": [{"name": "crop", "padding": 1}, "mirror"]},
    "cifar-cnn": {"optimizer": "sgd", "lr": 0.1, "batch_size": 128},
    "resnet18": {"optimizer": "sgd", "lr": 0.1, "weight_decay": 5e-4, "batch_size": 256,
                 "augment": ["crop", "mirror"]},
}  # fmt: skip
SHAPES = {"mnist-cnn": (1, 28, 28), "cifar-cnn": (3, 32, 32), "resnet18": (3, 32, 32)}


def synthetic(rows: int, shape: tuple[int, ...], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` images in [0, 1] and labels 0..9 from a random linear teacher (learnable)."""
    rng = np.random.default_rng(seed)
    x = rng.random((rows, *shape), dtype=np.float32)
    teacher = rng.normal(size=(int(np.prod(shape)), 10)).astype(np.float32)
    return x, ((x.reshape(rows, -1) - 0.5) @ teacher).argmax(1).astype(np.int64)


class GpuSampler:
    """``nvidia-smi``'s utilisation.gpu every ``period`` s in a thread (None without it)."""

    def __init__(self, device: torch.device, period: float = 0.2) -> None:
        self.cmd = None
        if device.type == "cuda" and shutil.which("nvidia-smi"):
            self.cmd = ["nvidia-smi", f"--id={device.index or 0}",
                        "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
        self.period, self.samples = period, []
        self.stop = threading.Event()

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            try:
                out = subprocess.run(self.cmd, capture_output=True, text=True, timeout=5)
                self.samples.append(float(out.stdout.strip().splitlines()[0]))
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                return

    def __enter__(self) -> GpuSampler:
        if self.cmd:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.cmd:
            self.thread.join()

    def summary(self) -> dict[str, float | None]:
        if not self.samples:
            return {"gpu_util_mean": None, "gpu_util_max": None}
        return {"gpu_util_mean": float(np.mean(self.samples)),
                "gpu_util_max": float(np.max(self.samples))}  # fmt: skip


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[float, dict]:
    """Seconds of ``fn()`` (synchronised on CUDA), its peak device memory and GPU use."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    with GpuSampler(device) as sampler:
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return seconds, {"peak_mib": peak, **sampler.summary()}


def lean_loop(recipe: Any, x: torch.Tensor, y: torch.Tensor, sets: list[torch.Tensor],
              seeds: list[int]) -> None:  # fmt: skip
    """One model after another: the plainest PyTorch loop, data on the device."""
    from miaudit.models import build_model

    bf16 = recipe.precision == "bf16"
    for rows, seed in zip(sets, seeds, strict=True):
        torch.manual_seed(seed)
        model = build_model(recipe.architecture, tuple(x.shape[1:]), 10,
                            **recipe.arch_params).to(x.device).train()  # fmt: skip
        opt = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum,
                              weight_decay=recipe.weight_decay)  # fmt: skip
        order = rows[torch.randperm(len(rows), device=rows.device)]
        for lo in range(0, len(order), recipe.batch_size):
            batch = order[lo : lo + recipe.batch_size]
            with torch.autocast(x.device.type, torch.bfloat16, enabled=bf16):
                loss = F.cross_entropy(model(x[batch]), y[batch])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


def run_ways(arch: str, k: int, args: argparse.Namespace, device: torch.device
             ) -> list[dict[str, Any]]:  # fmt: skip
    from miaudit.train import Recipe, train_models, trainer

    recipe = Recipe(architecture=arch, epochs=1, precision=args.dtype, **RECIPES[arch])
    if args.batch_size:
        recipe = recipe.replace(batch_size=args.batch_size)
    n_train = args.steps * recipe.batch_size
    xs, ys = synthetic(2 * n_train, SHAPES[arch])
    x, y = torch.from_numpy(xs).to(device), torch.from_numpy(ys).to(device)
    rng = np.random.default_rng(1)
    sets = [np.sort(rng.permutation(2 * n_train)[:n_train]) for _ in range(k)]
    seeds = list(range(k))
    stack = trainer.stack_size(recipe, device, SHAPES[arch], 10, args.stack or 0)

    def loop(n: int = k) -> None:
        train_models(recipe, x, y, sets[:n], seeds[:n], device, 10, False, max_stack=1,
                     workers=1)  # fmt: skip

    def lean(n: int = k) -> None:
        lean_loop(recipe, x, y, [torch.as_tensor(s, device=device) for s in sets[:n]], seeds[:n])

    def stacked(n: int = k) -> None:
        train_models(recipe, x, y, sets[:n], seeds[:n], device, 10, False, max_stack=stack,
                     workers=1)  # fmt: skip

    rows = []
    for way, fn in (("loop", loop), ("lean", lean), ("stacked", stacked)):
        if way not in args.ways:
            continue
        fn(min(k, stack if way == "stacked" else 1))  # warm-up: one group / one model
        seconds, extra = timed(fn, device)
        rows.append({
            "arch": arch, "models": k, "way": way, "dtype": args.dtype,
            "batch_size": recipe.batch_size, "steps": args.steps,
            "stack": stack if way == "stacked" and stack > 1 and args.dtype == "fp32" else 1,
            "seconds": seconds, "samples_per_second": k * n_train / seconds, **extra,
        })  # fmt: skip
        print(f"{arch:10s} K={k:<3d} {way:8s} stack={rows[-1]['stack']:<3d} "
              f"{rows[-1]['samples_per_second']:12,.0f} samples/s  {seconds:8.2f} s  "
              f"util={extra['gpu_util_mean']}", flush=True)
    return rows


def environment(device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    env = {"torch": torch.__version__, "device": str(device), "dtype": args.dtype,
           "python": platform.python_version(), "cpus": os.cpu_count(),
           "threads": torch.get_num_threads(), "steps": args.steps}  # fmt: skip
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
        if shutil.which("nvidia-smi"):  # the card as nvidia-smi sees it: driver, memory, use
            query = "--query-gpu=name,driver_version,memory.total,memory.used,utilization.gpu"
            out = subprocess.run(["nvidia-smi", query, "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10)  # fmt: skip
            env["nvidia_smi"] = out.stdout.strip()
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--arch", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    parser.add_argument("--models", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per model")
    parser.add_argument("--batch-size", type=int, default=None, help="instead of the recipe's")
    parser.add_argument("--stack", type=int, default=None, help="instead of the trainer's rule")
    parser.add_argument("--ways", nargs="+", default=["loop", "lean", "stacked"],
                        choices=["loop", "lean", "stacked"])  # fmt: skip
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.dtype == "bf16" and device.type != "cuda":
        parser.error("--dtype bf16 needs --device cuda (bf16 recipes are refused on a CPU)")
    if device.type == "cpu":
        torch.set_num_threads(1)  # the trainer's CPU setting (trainer.py): one intra-op thread
    env = environment(device, args)
    print(json.dumps(env), flush=True)
    rows = [row for arch in args.arch for k in args.models for row in run_ways(arch, k, args,
                                                                                 device)]
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"env": env, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
