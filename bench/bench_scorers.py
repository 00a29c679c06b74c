"""Scorer attacks' cost: score + public-data threshold on real offline banks.

Not run in CI. Usage (from the repository root):

    .venv/bin/python bench/bench_scorers.py --build [--seeds 0 1 2] [--root DIR]
    .venv/bin/python bench/bench_scorers.py [--seeds 0 1 2] [--root DIR]
        [--attacks rapid rapid-hybrid shokri shokri-per-class] [--no-threshold] [--json FILE]

`--build` trains, through the pipeline (content-cached models), one LetterRecognition-like bank
per seed: purchase-celeba's first 20,000 rows k-means clustered into 26 classes (LetterRecognition
has 20,000 rows and 26 classes), 8,000 audited (the target trains on a random half), 10,000
public (6 references, each on a random half: they double as shadow models) and 2,000
population; offline design, 7 MLPs (hidden 256, SGD lr 0.1, 40 epochs, batch 64), the plain
query. The bank goes to ROOT/seed{S}/bank.npz.

Without `--build` it evaluates each scorer attack on each bank's target 0 the way
`miaudit run` / `miaudit attack` do (`pipeline.evaluate.evaluate_bank`, no bootstrap): the
seconds of scoring and of the public-data threshold, and AUC, TPR@0.1% and TPR@1% FPR on the
audit samples. `--no-threshold` skips the threshold (scores only); `--scorer-seeds S ...`
repeats it with each attack's own `seed` set to S (the spread a scorer's randomness makes).
It runs on any checkout whose `evaluate_bank` reports `score_seconds` / `threshold_seconds`
(the "before" figures were taken with PYTHONPATH on an untouched checkout). `uptime` is
printed before and after.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ATTACKS = ["rapid", "rapid-hybrid", "shokri", "shokri-per-class"]
ROOT = Path("/tmp/miaudit-bench-scorers")


def config(seed: int) -> dict:
    """The LetterRecognition-like run of one seed (its bank is the measured one)."""
    return {
        "name": f"bench-scorers-{seed}",
        "seed": seed,
        "dataset": {"name": "purchase-celeba", "options": {"n_rows": 20000, "n_classes": 26}},
        "split": {"audit": 8000, "public": 10000, "population": 2000},
        "design": "offline",
        "models": 7,
        "recipe": {"architecture": "mlp", "arch_params": {"hidden": 256}, "optimizer": "sgd",
                   "lr": 0.1, "epochs": 40, "batch_size": 64},
        "signals": {"queries": ["plain"]},
        "attacks": ["loss"],
        "metrics": {"fprs": [0.001, 0.01], "bootstrap": 0},
    }


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def build(seeds: list[int], root: Path) -> None:
    from miaudit.api import run

    for seed in seeds:
        run(config(seed), out=root / f"seed{seed}", progress=False)
        print(f"built {root / f'seed{seed}' / 'bank.npz'}", flush=True)


def measure(
    seeds: list[int], root: Path, attacks: list[str], threshold: bool, scorer_seed: int | None
) -> list[dict]:
    from miaudit.config import MetricsConfig
    from miaudit.pipeline.evaluate import evaluate_bank
    from miaudit.signals import SignalBank

    rows = []
    metric_cfg = MetricsConfig(fprs=[0.001, 0.01], bootstrap=0)
    for seed in seeds:
        bank = SignalBank.load(root / f"seed{seed}" / "bank.npz")
        for name in attacks:
            params = {} if scorer_seed is None else {name: {"seed": scorer_seed}}
            result = evaluate_bank(bank, 0, [name], attack_params=params, metric_cfg=metric_cfg,
                                   thresholds=threshold, progress=False)
            outcome = result.outcomes[0]
            m, cost = outcome.metrics, outcome.cost
            row = {
                "seed": seed, "attack": name, "scorer_seed": scorer_seed,
                "score_s": cost.score_seconds,
                "threshold_s": cost.threshold_seconds,
                "auc": m.auc,
                **m.tpr_columns(metric_cfg.fprs),  # tpr@0.001, tpr@0.01
                "threshold": m.threshold,
                "balanced_accuracy": m.balanced_accuracy,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="store_true")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--attacks", nargs="+", default=ATTACKS)
    parser.add_argument("--no-threshold", action="store_true")
    parser.add_argument("--scorer-seeds", type=int, nargs="+", default=[None],
                        help="the attacks' own `seed` (rows, init, batches); default theirs")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    print("uptime before:", uptime(), flush=True)
    if args.build:
        build(args.seeds, args.root)
    else:
        rows = []
        for scorer_seed in args.scorer_seeds:
            rows += measure(args.seeds, args.root, args.attacks, not args.no_threshold,
                            scorer_seed)
        if args.json:
            with args.json.open("a") as handle:
                for row in rows:
                    handle.write(json.dumps(row) + "\n")
    print("uptime after:", uptime(), flush=True)


if __name__ == "__main__":
    sys.exit(main())
