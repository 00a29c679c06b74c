"""airbench94 as miaudit trains it: seconds and test accuracy per model (issue #37, item 3).

Not run in CI. Trains ``--models`` airbench94 models (Jordan 2024, "94% on CIFAR-10 in 3.29
seconds on a single GPU", KellerJordan/cifar10-airbench ``airbench94.py``) through miaudit's
own trainer (``train_model`` with :func:`miaudit.train.airbench.airbench94_recipe`: 9.9 epochs of
batches of 1,024, whitening initialisation, label smoothing, alternating flip, 2-pixel
translation, lookahead), each with its own seed, on the 50,000 CIFAR-10 training images, and
reports per model the training seconds and the accuracy on the 10,000 test images, plain and
with the mirror averaged in (airbench's own figure adds translated views too: its 94% is that
TTA's). On a GPU the paper's figure is about 3 s per model (A100; 2.59 s with Muon, which
miaudit does not use)::

    PYTHONPATH=src python bench/bench_airbench.py --device cuda --json /tmp/airbench.json

Data: the real CIFAR-10 files where the data folder has them (``miaudit data fetch cifar10``;
``--data cifar10`` requires them), else (``--data auto``, the default) synthetic CIFAR-shaped
images labelled by a fixed random teacher, said in the output: their accuracy means nothing
beside the paper's, their seconds do. ``--smoke-cpu`` runs the same code at toy sizes on the
CPU (a narrow network, 512 images, 2 epochs of batches of 64): a check that the script runs,
not a measurement (about 15 s a model on 2 busy cores).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from miaudit.data import load_dataset  # noqa: E402
from miaudit.errors import DataError  # noqa: E402
from miaudit.runtime.devices import resolve_device  # noqa: E402
from miaudit.train.airbench import airbench94_recipe  # noqa: E402
from miaudit.train.loop import train_model  # noqa: E402

N_TRAIN, N_TEST = 50_000, 10_000


def synthetic(n_train: int, n_test: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """CIFAR-shaped images in [0, 1] labelled by a fixed random linear teacher (learnable)."""
    rng = np.random.default_rng(seed)
    x = rng.random((n_train + n_test, 3, 32, 32), dtype=np.float32)
    teacher = rng.normal(size=(3 * 32 * 32, 10)).astype(np.float32)
    y = (x.reshape(len(x), -1) @ teacher).argmax(axis=1)
    return x, y, f"synthetic: {n_train:,} + {n_test:,} random images, a random linear teacher"


def cifar10(data_dir: str | None) -> tuple[np.ndarray, np.ndarray, str]:
    """The CIFAR-10 files: the 50,000 training images, then the 10,000 test images."""
    ds = load_dataset("cifar10", data_dir)
    return np.asarray(ds.features), np.asarray(ds.labels), "cifar10 (the real files)"


def accuracy(module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Test accuracy, plain and with the mirrored image's logits averaged in."""
    module.eval()
    plain = mirrored = 0
    with torch.inference_mode():
        for start in range(0, len(x), 1000):
            xb, yb = x[start:start + 1000], y[start:start + 1000]
            logits = module(xb).float()
            both = logits + module(xb.flip(-1)).float()
            plain += int((logits.argmax(1) == yb).sum())
            mirrored += int((both.argmax(1) == yb).sum())
    return plain / len(x), mirrored / len(x)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--models", type=int, default=3)
    p.add_argument("--data", choices=("auto", "cifar10", "synthetic"), default="auto")
    p.add_argument("--data-dir", help="datasets folder (default: miaudit's)")
    p.add_argument("--smoke-cpu", action="store_true", help="toy sizes on the CPU")
    p.add_argument("--json", help="write the record here")
    args = p.parse_args(argv)
    device = "cpu" if args.smoke_cpu else resolve_device(args.device)
    n_train, n_test = (512, 256) if args.smoke_cpu else (N_TRAIN, N_TEST)
    if args.data == "synthetic" or args.smoke_cpu:
        x, y, source = synthetic(n_train, n_test)
    else:
        try:
            x, y, source = cifar10(args.data_dir)
        except DataError as exc:
            if args.data == "cifar10":
                raise
            print(f"CIFAR-10 not available ({exc}); synthetic data instead")
            x, y, source = synthetic(n_train, n_test)
    changes: dict[str, Any] = {}
    if args.smoke_cpu:  # a narrow network, two epochs: that the code runs
        changes = {"arch_params": {"widths": [8, 16, 16]}, "batch_size": 64, "epochs": 2}
    recipe = airbench94_recipe(**changes)
    train = np.arange(n_train)
    test_x = torch.as_tensor(x[n_train:n_train + n_test], device=device)
    test_y = torch.as_tensor(y[n_train:n_train + n_test], device=device)
    rows = []
    for seed in range(args.models):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        model = train_model(recipe, x, y, train, seed=seed, device=device, num_classes=10,
                            progress=False)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
        plain, mirrored = accuracy(model.module, test_x, test_y)
        rows.append({"seed": seed, "train_seconds": round(model.train_seconds, 3),
                     "wall_seconds": round(wall, 3), "test_accuracy": round(plain, 4),
                     "test_accuracy_mirror_tta": round(mirrored, 4)})
        print(f"model {seed}: {model.train_seconds:.2f} s training ({wall:.2f} s wall), "
              f"test accuracy {plain:.4f}, with the mirror {mirrored:.4f}", flush=True)
    record = {
        "bench": "airbench", "device": device, "data": source, "models": rows,
        "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None,
        "torch": torch.__version__, "python": platform.python_version(),
        "smoke": args.smoke_cpu, "recipe": recipe.to_dict(),
        "mean_train_seconds_after_first": (
            round(float(np.mean([r["train_seconds"] for r in rows[1:]])), 3)
            if len(rows) > 1 else None),
    }
    print(f"{args.models} models on {device} ({record['gpu'] or platform.processor() or 'cpu'}), "
          f"data: {source}")
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
