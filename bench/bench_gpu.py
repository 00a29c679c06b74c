"""GPU speed: training and querying an audit's reference models with `device: cuda`.

Not run in CI. On a machine without a CUDA device it prints "no CUDA device: nothing to
measure" and exits 0. On a GPU machine, from the repository root, with a CUDA build of torch
(this project's .venv has torch's CPU build; install the CUDA one there first)::

    PYTHONPATH=src python bench/bench_gpu.py --json /tmp/bench_gpu.json

(defaults: ``--models 8 --rows 20000 --epochs 2 --queries 4 --arch cifar-cnn``; add
``--arch resnet18`` for the heavier CNN, ``--stacks 1 8 32 64`` for the stack sizes timed).
About two minutes on one H100 with the defaults. ``--smoke-cpu`` runs the same code at toy sizes
on the CPU, fp32 only (bf16 needs CUDA): a check that the script runs, not a measurement.

Workload: synthetic CIFAR-sized data made here (nothing is downloaded): ``--rows`` images
3x32x32 in [0, 1], labels 0..9 from a fixed random linear teacher (learnable, so the losses
mean something); each of ``--models`` reference models trains on a seeded random half.
Measured, each after one untimed warm-up run (CUDA context, cuDNN's algorithm search):

1. ``train``: the CNN (``--arch``), every model through ``trainer.train_models`` one by one
   (``max_stack=1``; stacked CNNs are ``bench/bench_stacked_cnn.py``'s), fp32 vs
   ``precision: bf16`` (autocast); seconds, samples/s, the models' mean last-epoch loss.
2. ``stack``: an MLP on the flattened images (3072 -> 256 relu -> 10, the stackable
   architecture), the same jobs through ``train_models`` with ``max_stack`` each of
   ``--stacks`` (1 = one model at a time through the stacked path's written-out backward), and
   one by one through autograd (``train_model``). This is what ``trainer.CPU_STACK`` (10, set
   on a CPU) should be on a GPU.
3. ``query``: ``signals.query.query_logits`` of the trained CNNs on all rows under
   ``--queries`` queries (plain, mirror, crop-flip-K), all models at once (each chunk
   transformed and copied once for all models) vs one model per call (each model transforms
   and copies every chunk itself, as the code did before), fp32 and bf16; rows x models / s
   and the largest |bf16 - fp32| logit difference.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch


def synthetic_cifar(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` images [rows, 3, 32, 32] float32 in [0, 1], labels from a linear teacher."""
    rng = np.random.default_rng(seed)
    x = rng.random((rows, 3, 32, 32), dtype=np.float32)
    teacher = rng.normal(size=(3 * 32 * 32, 10)).astype(np.float32)
    y = (x.reshape(rows, -1) - 0.5) @ teacher
    return x, y.argmax(1).astype(np.int64)


def halves(rows: int, models: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.sort(rng.permutation(rows)[: rows // 2]) for _ in range(models)]


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, out


def mean_last_loss(models: list) -> float:
    return float(np.mean([m.losses[-1] for m in models]))


def bench_train(
    args: argparse.Namespace,
    device: torch.device,
    x: np.ndarray,
    y: np.ndarray,
    sets: list[np.ndarray],
    precisions: list[str],
) -> tuple[list[dict], dict]:
    from miaudit.train import Recipe, train_models

    results, trained = [], {}
    samples = sum(len(s) for s in sets) * args.epochs
    for precision in precisions:
        recipe = Recipe(
            architecture=args.arch,
            optimizer="sgd",
            lr=0.05,
            epochs=args.epochs,
            batch_size=args.batch_size,
            precision=precision,
        )
        train_models(recipe.replace(epochs=1), x, y, sets[:1], [999], device, 10, False,
                     max_stack=1)  # warm-up
        seconds, models = timed(
            lambda r=recipe: train_models(r, x, y, sets, list(range(len(sets))), device, 10,
                                          False, max_stack=1),
            device,
        )
        trained[precision] = models
        results.append(
            {
                "bench": "train",
                "arch": args.arch,
                "precision": precision,
                "models": len(sets),
                "seconds": seconds,
                "samples_per_second": samples / seconds,
                "mean_last_loss": mean_last_loss(models),
            }
        )
    return results, trained


def bench_stack(
    args: argparse.Namespace,
    device: torch.device,
    x: np.ndarray,
    y: np.ndarray,
    sets: list[np.ndarray],
) -> list[dict]:
    from miaudit.train import Recipe, train_model, train_models

    flat = x.reshape(len(x), -1)
    recipe = Recipe(
        architecture="mlp",
        arch_params={"hidden": 256},
        optimizer="sgd",
        lr=0.05,
        epochs=args.epochs,
        batch_size=args.batch_size,
    )
    samples = sum(len(s) for s in sets) * args.epochs
    seeds = list(range(len(sets)))
    train_models(recipe.replace(epochs=1), flat, y, sets[:2], [998, 999], device, 10, False)
    results = []
    for stack in args.stacks:
        seconds, models = timed(
            lambda k=stack: train_models(
                recipe, flat, y, sets, seeds, device, 10, False, max_stack=k
            ),
            device,
        )
        results.append(
            {
                "bench": "stack",
                "how": f"stacked max_stack={stack}",
                "models": len(sets),
                "seconds": seconds,
                "samples_per_second": samples / seconds,
                "mean_last_loss": mean_last_loss(models),
            }
        )
    seconds, models = timed(
        lambda: [
            train_model(recipe, flat, y, s, k, device, 10, False)
            for s, k in zip(sets, seeds, strict=True)
        ],
        device,
    )
    results.append(
        {
            "bench": "stack",
            "how": "one by one (autograd, train_model)",
            "models": len(sets),
            "seconds": seconds,
            "samples_per_second": samples / seconds,
            "mean_last_loss": mean_last_loss(models),
        }
    )
    return results


def bench_query(
    args: argparse.Namespace, device: torch.device, x: np.ndarray, trained: dict
) -> list[dict]:
    from miaudit.signals.query import augmented_queries, query_logits

    rows = np.arange(len(x))
    queries = augmented_queries(args.queries)
    results, logits = [], {}
    for precision, models in trained.items():
        modules = [m.module for m in models]

        def together(mods: list = modules, p: str = precision) -> np.ndarray:
            return query_logits(
                mods, x, rows, queries, "image", str(device), args.query_batch, False, precision=p
            )

        def one_by_one(mods: list = modules, p: str = precision) -> np.ndarray:
            return np.concatenate(
                [
                    query_logits(
                        [m],
                        x,
                        rows,
                        queries,
                        "image",
                        str(device),
                        args.query_batch,
                        False,
                        precision=p,
                    )
                    for m in mods
                ]
            )

        query_logits(
            modules[:1],
            x[:2048],
            rows[:2048],
            queries,
            "image",
            str(device),
            args.query_batch,
            False,
            precision=precision,
        )  # warm-up
        for how, fn in (("all models at once", together), ("one model per call", one_by_one)):
            seconds, out = timed(fn, device)
            logits[precision] = out
            results.append(
                {
                    "bench": "query",
                    "how": how,
                    "precision": precision,
                    "models": len(modules),
                    "rows": len(rows),
                    "queries": len(queries),
                    "seconds": seconds,
                    "model_rows_per_second": len(modules) * len(rows) / seconds,
                }
            )
    if "fp32" in logits and "bf16" in logits:  # different models (each trained in its own)
        results.append(
            {
                "bench": "query",
                "how": "bf16 models in fp32 vs bf16",
                "max_abs_logit_difference": _bf16_gap(args, device, x, trained),
            }
        )
    return results


def _bf16_gap(
    args: argparse.Namespace, device: torch.device, x: np.ndarray, trained: dict
) -> float:
    """The largest |logit| difference of the bf16-trained models queried in fp32 vs bf16."""
    from miaudit.signals.query import query_logits

    rows = np.arange(min(len(x), 4096))
    modules = [m.module for m in trained["bf16"]]
    both = [
        query_logits(
            modules, x, rows, ["plain"], "image", str(device), args.query_batch, False, precision=p
        )
        for p in ("fp32", "bf16")
    ]
    return float(np.abs(both[0] - both[1]).max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--arch", default="cifar-cnn", choices=["cifar-cnn", "resnet18"])
    parser.add_argument("--stacks", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--queries", type=int, default=4)
    parser.add_argument("--query-batch", type=int, default=1024)
    parser.add_argument("--json", help="write the results (a list of dicts) here")
    parser.add_argument(
        "--smoke-cpu",
        action="store_true",
        help="toy sizes on the CPU, fp32 only: does the script run?",
    )
    args = parser.parse_args(argv)
    if args.smoke_cpu:
        device = torch.device("cpu")
        args.models, args.rows, args.epochs, args.stacks = 3, 64, 1, [1, 3]
        args.queries, args.query_batch = 2, 16
        precisions = ["fp32"]
    elif not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 0
    else:
        device = torch.device("cuda")
        precisions = ["fp32", "bf16"]
    x, y = synthetic_cifar(args.rows)
    sets = halves(args.rows, args.models)
    results, trained = bench_train(args, device, x, y, sets, precisions)
    results += bench_stack(args, device, x, y, sets)
    results += bench_query(args, device, x, trained)
    header = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        **{k: v for k, v in vars(args).items() if k != "json"},
    }
    print(json.dumps(header))
    for row in results:
        print(
            "  ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
            )
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"header": header, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
