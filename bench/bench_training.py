"""Training speed: train an audit's 10 models and run RMIA on them, end to end.

Not run in CI. Usage (from the repository root; `miaudit data fetch purchase-celeba` first):

    .venv/bin/python bench/bench_training.py --mode fast [--workers N] [--out result.json]
    .venv/bin/python bench/bench_training.py --mode baseline [--epochs 10] [--threads N]
    .venv/bin/python bench/bench_training.py --mode flops

Workload: purchase-celeba (first 60,000 CelebA attribute rows, KMeans(100) labels);
a seeded permutation puts 45,000 rows in the pool and 15,000 in the population. 10 models in 5
pairs: pair p splits the pool into two random halves of 22,500, model 2p trains on one and
2p+1 on the other; model m uses seed m (+ `--seed`). MLP 40 -> 128 tanh -> 100, plain SGD lr 0.1 (no
momentum, constant rate), batch 256, 100 epochs, cross-entropy. Model 0 is the target; the
bank holds the target and the 8 models of the 4 reference pairs (model 1, the target's pair,
is trained but not attacked with), so every pool sample is OUT for exactly 4 references: RMIA
offline with 4 references. Audit: 10,000 pool rows, 5,000 of them the target's members;
population: 10,000 of the 15,000. Scores come from the registry's `rmia` (defaults).

`--mode baseline` is the usual way (Privacy Meter 2): one model at a time through a shuffling
DataLoader, evaluating loss and accuracy on the held-out half after every epoch, torch's
default threads. `--epochs E` scales it down; its training time is then also extrapolated
linearly to 100 epochs (reported as such). `--mode fast` trains through the library's cache
(`ModelCache.get_or_train_many` in a fresh temporary directory, so everything trains), then
asks again to show that nothing trains twice. `--mode flops` measures the machine's matmul
FLOP/s for the model's shapes and a large square matmul, one thread per core.
"""

from __future__ import annotations

import time

T_PROCESS = time.perf_counter()  # before the heavy imports: end-to-end includes them

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from miaudit.attacks import TargetView, run_attack  # noqa: E402
from miaudit.data import load_dataset  # noqa: E402
from miaudit.metrics import evaluate  # noqa: E402
from miaudit.models import build_model  # noqa: E402
from miaudit.signals import SignalBank  # noqa: E402
from miaudit.signals.query import query_logits  # noqa: E402
from miaudit.train import ModelCache, Recipe  # noqa: E402
from miaudit.train.trainer import cpu_threads  # noqa: E402

MiB = 2**20
N_MODELS, POOL, AUDIT, POPULATION, FULL_EPOCHS = 10, 45_000, 10_000, 10_000, 100
ARCH = {"hidden": 128, "activation": "tanh"}


def recipe(epochs: int) -> Recipe:
    """The workload's recipe: plain SGD (no momentum), constant lr 0.1, batch 256."""
    return Recipe(
        architecture="mlp", arch_params=ARCH, optimizer="sgd", lr=0.1, momentum=0.0,
        nesterov=False, weight_decay=0.0, schedule="constant", epochs=epochs, batch_size=256,
    )  # fmt: skip


def usage() -> dict[str, float]:
    """CPU seconds (this process + finished children) and peak RSS (MiB) of both."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return {
        "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
        "peak_rss_mib": me.ru_maxrss / 1024,
        "peak_rss_children_mib": kids.ru_maxrss / 1024,
    }


def design(n_rows: int, seed: int = 0) -> dict[str, Any]:
    """Pool/population split, the 10 training sets, audit and population rows."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n_rows)
    pool, population = perm[:POOL], perm[POOL:]
    train_sets = []
    for _ in range(N_MODELS // 2):
        halves = rng.permutation(pool)
        train_sets += [np.sort(halves[: POOL // 2]), np.sort(halves[POOL // 2 :])]
    members = np.zeros(n_rows, dtype=bool)
    members[train_sets[0]] = True
    inside, outside = pool[members[pool]], pool[~members[pool]]
    audit = np.concatenate(
        [
            rng.choice(inside, AUDIT // 2, replace=False),
            rng.choice(outside, AUDIT // 2, replace=False),
        ]
    )
    pop_rows = rng.choice(population, POPULATION, replace=False)
    return {"train_sets": train_sets, "audit": audit, "population": pop_rows}


def train_baseline(
    x: np.ndarray, y: np.ndarray, sets: list[np.ndarray], epochs: int, seed: int
) -> list:
    """Privacy Meter 2's way: a DataLoader per model, evaluation after every epoch."""
    modules = []
    for m, rows in enumerate(sets):
        torch.manual_seed(seed + m)
        held_out = sets[m ^ 1]  # the other half of the pool: the model's pair's training set
        train = DataLoader(
            TensorDataset(torch.from_numpy(x[rows]), torch.from_numpy(y[rows])),
            batch_size=256, shuffle=True,
        )  # fmt: skip
        test = DataLoader(
            TensorDataset(torch.from_numpy(x[held_out]), torch.from_numpy(y[held_out])),
            batch_size=256, shuffle=False,
        )  # fmt: skip
        model = build_model("mlp", (x.shape[1],), 100, **ARCH)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        start = time.perf_counter()
        for _ in range(epochs):
            model.train()
            for xb, yb in train:
                optimizer.zero_grad()
                loss = F.cross_entropy(model(xb), yb)
                loss.backward()
                optimizer.step()
            model.eval()
            correct, total_loss = 0, 0.0
            with torch.no_grad():
                for xb, yb in test:
                    out = model(xb)
                    total_loss += F.cross_entropy(out, yb, reduction="sum").item()
                    correct += int((out.argmax(1) == yb).sum())
        print(f"  model {m}: {time.perf_counter() - start:.1f}s, held-out acc "
              f"{correct / len(held_out):.3f}", flush=True)  # fmt: skip
        modules.append(model.eval())
    return modules


def train_fast(
    x: np.ndarray, y: np.ndarray, sets: list[np.ndarray], epochs: int, workers, seed: int
):
    """The library's path: the cache's batched entry point in an empty temporary cache."""
    with tempfile.TemporaryDirectory(prefix="miaudit-bench-") as root:
        cache = ModelCache(root)
        jobs = [(rows, seed + m) for m, rows in enumerate(sets)]
        kw = {"features": x, "labels": y, "num_classes": 100, "progress": False}
        models = cache.get_or_train_many("bench", jobs, recipe(epochs), workers=workers, **kw)
        trained = cache.stats.misses
        start = time.perf_counter()
        again = cache.get_or_train_many("bench", jobs, recipe(epochs), workers=workers, **kw)
        second = {
            "seconds": time.perf_counter() - start,
            "hits": cache.stats.hits,
            "trained": cache.stats.misses - trained,
            "same_weights": all(
                all(
                    torch.equal(v, b.module.state_dict()[k])
                    for k, v in a.module.state_dict().items()
                )
                for a, b in zip(models, again, strict=True)
            ),
        }
    second["train_seconds_each"] = [round(m.train_seconds, 2) for m in models]
    return [m.module for m in models], trained, second


def attack(features, labels, modules, plan) -> dict[str, Any]:
    """Query target + the 4 reference pairs on audit + population rows, run RMIA, evaluate.

    Both modes run this part identically, with one thread, so that they differ in training only.
    """
    rows = np.concatenate([plan["audit"], plan["population"]])
    bank_models = [0, *range(2, N_MODELS)]
    with cpu_threads(1):  # same in both modes; 2 threads take ~7 s instead of ~0.3 s under load
        logits = query_logits(
            [modules[m] for m in bank_models], features, rows, ["plain"], "tabular", progress=False
        )
    membership = np.zeros((len(bank_models), len(rows)), dtype=bool)
    for i, m in enumerate(bank_models):
        membership[i] = np.isin(rows, plan["train_sets"][m])
    population = np.zeros(len(rows), dtype=bool)
    population[len(plan["audit"]) :] = True
    bank = SignalBank(logits, labels[rows], membership, population=population, audit=~population)
    scores = run_attack("rmia", TargetView.of(bank, 0)).scores
    audit = ~population
    result = evaluate(scores[audit], membership[0, audit], n_bootstrap=0)
    out_refs = (~membership[1:, audit]).sum(0)
    return {
        "scores_and_members": (scores[audit], membership[0, audit]),
        "auc": result["auc"],
        "tpr_at_1pct_fpr": result["tpr_at_fpr"]["0.01"],
        "tpr_at_0.1pct_fpr": result["tpr_at_fpr"]["0.001"],
        "out_references_per_sample": sorted({int(v) for v in out_refs}),
        "n_members": result["n_members"],
        "n_nonmembers": result["n_nonmembers"],
    }


def accuracy(module, x, y) -> float:
    with torch.no_grad():
        return float((module(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def matmul_flops(reps: int = 5) -> dict[str, float]:
    """GFLOP/s of one thread (wall and CPU time, median of ``reps``): the GEMMs of one
    training step of the model at batch 256 (forward and backward), and 2048^3."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    b, fin, h, c = 256, 40, 128, 100
    x, w1, w2 = torch.randn(b, fin), torch.randn(h, fin), torch.randn(c, h)
    hid, g2, g1 = torch.randn(b, h), torch.randn(b, c), torch.randn(b, h)
    step = [  # (op, flop): forward x W1^T, h W2^T; backward g2^T h, g2 W2, g1^T x
        (lambda: torch.mm(x, w1.t()), 2 * b * fin * h),
        (lambda: torch.mm(hid, w2.t()), 2 * b * h * c),
        (lambda: torch.mm(g2.t(), hid), 2 * b * h * c),
        (lambda: torch.mm(g2, w2), 2 * b * h * c),
        (lambda: torch.mm(g1.t(), x), 2 * b * fin * h),
    ]
    big_a, big_b = torch.randn(2048, 2048), torch.randn(2048, 2048)

    def rate(fn, flop: int, n: int) -> tuple[float, float]:
        fn()
        runs = []
        for _ in range(reps):
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(n):
                fn()
            runs.append((time.perf_counter() - w0, time.process_time() - c0))
        wall = sorted(r[0] for r in runs)[reps // 2]
        cpu = sorted(r[1] for r in runs)[reps // 2]
        return flop * n / wall / 1e9, flop * n / cpu / 1e9

    def whole_step():
        for op, _ in step:
            op()

    model_wall, model_cpu = rate(whole_step, sum(f for _, f in step), 500)
    big_wall, big_cpu = rate(lambda: torch.mm(big_a, big_b), 2 * 2048**3, 3)
    torch.set_num_threads(2)
    big2_wall, _ = rate(lambda: torch.mm(big_a, big_b), 2 * 2048**3, 3)
    torch.set_num_threads(before)
    return {
        "model_gemms_gflops_wall": model_wall,
        "model_gemms_gflops_cpu": model_cpu,
        "square_2048_gflops_wall": big_wall,
        "square_2048_gflops_cpu": big_cpu,
        "square_2048_2_threads_gflops_wall": big2_wall,
    }


def training_rates(epochs: int = 3) -> dict[str, dict[str, float]]:
    """Steady training throughput on one core (1 thread), the workload's data and recipe:
    ``train_model`` (one model, autograd) and stacked groups of K models; samples/s by wall
    and by CPU time, and 6 x params x samples/s in GFLOP/s."""
    from miaudit.train import train_model
    from miaudit.train.stacked import train_stacked

    dataset = load_dataset("purchase-celeba")
    x, y = torch.from_numpy(dataset.features), torch.from_numpy(dataset.labels)
    sets = design(len(x))["train_sets"]
    params = sum(p.numel() for p in build_model("mlp", (40,), 100, **ARCH).parameters())
    out = {}
    with cpu_threads(1):
        train_stacked(recipe(1), x, y, sets[:1], [0], num_classes=100)  # warm up
        for name, k in [
            ("train_model", 1),
            ("stacked_K1", 1),
            ("stacked_K5", 5),
            ("stacked_K10", 10),
        ]:
            w0, c0 = time.perf_counter(), time.process_time()
            if name == "train_model":
                train_model(recipe(epochs), x, y, sets[0], 0, num_classes=100, progress=False)
            else:
                train_stacked(recipe(epochs), x, y, sets[:k], list(range(k)), num_classes=100)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            samples = k * (POOL // 2) * epochs
            out[name] = {
                "samples_per_s": samples / wall,
                "samples_per_cpu_s": samples / cpu,
                "gflops_per_cpu_s": 6 * params * samples / cpu / 1e9,
            }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["fast", "baseline", "flops"], required=True)
    parser.add_argument("--epochs", type=int, default=FULL_EPOCHS)
    parser.add_argument("--workers", type=int, default=None, help="fast: worker processes")
    parser.add_argument("--threads", type=int, default=None, help="baseline: torch threads")
    parser.add_argument("--seed", type=int, default=0, help="model m uses seed SEED + m")
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    info = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "mode": args.mode,
        "load_average_at_start": os.getloadavg(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
    }
    if args.mode == "flops":
        info["flops"] = matmul_flops()
        info["training_one_core"] = training_rates()
        return report(info, args.out)
    if args.mode == "baseline" and args.threads is not None:
        torch.set_num_threads(args.threads)
    info["torch_threads"] = torch.get_num_threads()
    t0 = time.perf_counter()
    dataset = load_dataset("purchase-celeba")
    x, y = dataset.features, dataset.labels
    plan = design(len(x))
    t_data = time.perf_counter()
    cpu_before = usage()["cpu_s"]
    if args.mode == "baseline":
        modules = train_baseline(x, y, plan["train_sets"], args.epochs, args.seed)
    else:
        modules, trained, second = train_fast(
            x, y, plan["train_sets"], args.epochs, args.workers, args.seed
        )
        info["model_train_seconds"] = second.pop("train_seconds_each")  # a group's share each
        info.update(models_trained=trained, second_request=second)
    t_train = time.perf_counter()
    cpu_train = usage()["cpu_s"] - cpu_before
    info["attack"] = attack(x, y, modules, plan)
    t_end = time.perf_counter()
    scores, members = info["attack"].pop("scores_and_members")
    info["attack"]["auc_ci95_bootstrap"] = evaluate(scores, members, n_bootstrap=200)["auc_ci"]
    train_s = t_train - t_data
    samples = N_MODELS * (POOL // 2) * args.epochs
    params = sum(p.numel() for p in modules[0].parameters())
    target_rows = plan["train_sets"][0]
    held_out = np.setdiff1d(np.arange(len(x)), target_rows)
    info.update(
        epochs=args.epochs,
        seed=args.seed,
        params=params,
        end_to_end_s=t_end - T_PROCESS,
        imports_s=t0 - T_PROCESS,
        data_s=t_data - t0,
        train_s=train_s,
        train_cpu_s=cpu_train,
        per_model_s=train_s / N_MODELS,
        query_and_attack_s=t_end - t_train,
        samples_per_s=samples / train_s,
        samples_per_cpu_s=samples / cpu_train,
        train_gflops_wall=6 * params * samples / train_s / 1e9,
        train_gflops_per_cpu_s=6 * params * samples / cpu_train / 1e9,
        target_train_acc=accuracy(modules[0], x[target_rows], y[target_rows]),
        target_test_acc=accuracy(modules[0], x[held_out], y[held_out]),
        load_average_at_end=os.getloadavg(),
        **usage(),
    )
    if args.epochs != FULL_EPOCHS:
        scale = FULL_EPOCHS / args.epochs
        info["extrapolated_to_100_epochs"] = {
            "train_s": train_s * scale,
            "per_model_s": train_s * scale / N_MODELS,
            "end_to_end_s": info["end_to_end_s"] + train_s * (scale - 1),
            "note": "training time scaled linearly by 100/epochs; the attack is that of "
            f"{args.epochs}-epoch models",
        }
    report(info, args.out)


def report(info: dict[str, Any], out: str | None) -> None:
    text = json.dumps(info, indent=2, default=float)
    print(text)
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
