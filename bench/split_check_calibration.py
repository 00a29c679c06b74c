"""The split check's calibration on random splits and its power on shifted ones, on real data.

Not run in CI. Usage (from the repository root):

    .venv/bin/python bench/split_check_calibration.py [--trials 200] [--shifts 0.1 0.2 0.3]
        [--rows 20000] [--json FILE]

On sklearn digits (1,797 rows, 64 pixels, 10 classes) it draws membership in three ways and runs
`miaudit.verdict.split_check.split_check` on each draw, as `miaudit audit` does:

- **random**: each row a member with probability ½, independently of what it is (the null):
  the share of draws with p < 0.05, 0.01 and 0.001 must be at most about those levels;
- **shifted s**: rows of an "easy" slice (classes 0-4, or above-median ink) are members with
  probability ½ + s, the others with ½ − s: the share flagged shifted (p < 0.001) is the
  check's power, with the mean pooled AUC;
- it also times one check on ``--rows`` rows of 784 Gaussian features (the PCA path), as a
  large image audit would run it. `uptime` is printed before and after: time it idle.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time

import numpy as np
from sklearn.datasets import load_digits

from miaudit.config import MetricsConfig
from miaudit.verdict.split_check import SHIFT_P_VALUE, split_check

CFG = MetricsConfig(bootstrap=0)


def _draws(kind: str, shift: float, x: np.ndarray, y: np.ndarray, trials: int,
           seed: int) -> dict:  # fmt: skip
    rng = np.random.default_rng(seed)
    ink = x.sum(axis=1)
    easy = (y < 5) | (ink > np.median(ink))
    p_values, aucs, seconds = [], [], []
    for t in range(trials):
        share = 0.5 if kind == "random" else np.where(easy, 0.5 + shift, 0.5 - shift)
        members = rng.random(len(y)) < share
        start = time.perf_counter()
        record = split_check(members, features=x, labels=y, metric_cfg=CFG, seed=t)
        seconds.append(time.perf_counter() - start)
        p_values.append(record.p_value)
        aucs.append(record.auc)
    p = np.asarray(p_values)
    return {"kind": kind, "shift": shift, "trials": trials,
            "p<0.05": float((p < 0.05).mean()), "p<0.01": float((p < 0.01).mean()),
            "shifted (p<0.001)": float((p < SHIFT_P_VALUE).mean()),
            "mean AUC": float(np.mean(aucs)), "seconds per check": float(np.median(seconds))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--shifts", type=float, nargs="*", default=[0.05, 0.1, 0.2])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--json")
    args = parser.parse_args()
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    x, y = load_digits(return_X_y=True)
    rows = [_draws("random", 0.0, x, y, args.trials, 0)]
    rows += [_draws("shifted", s, x, y, max(args.trials // 4, 10), 1) for s in args.shifts]
    big = np.random.default_rng(2).normal(size=(args.rows, 784)).astype(np.float32)
    labels = np.random.default_rng(3).integers(0, 10, args.rows)
    members = np.random.default_rng(4).random(args.rows) < 0.5
    start = time.perf_counter()
    record = split_check(members, features=big, labels=labels, metric_cfg=CFG, seed=0)
    timing = {"rows": args.rows, "features": 784, "seconds": time.perf_counter() - start,
              "auc": record.auc, "p_value": record.p_value}
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print("| membership | trials | p < 0.05 | p < 0.01 | shifted (p < 0.001) | mean AUC | "
          "s per check |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        label = "random" if r["kind"] == "random" else f"easy slice ½ ± {r['shift']:g}"
        print(f"| {label} | {r['trials']} | {r['p<0.05']:.3f} | {r['p<0.01']:.3f} | "
              f"{r['shifted (p<0.001)']:.3f} | {r['mean AUC']:.3f} | "
              f"{r['seconds per check']:.2f} |")
    print(f"\none check on {timing['rows']:,} rows x 784 features: {timing['seconds']:.1f} s "
          f"(AUC {timing['auc']:.3f}, p {timing['p_value']:.2g})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"draws": rows, "timing": timing}, handle, indent=2)


if __name__ == "__main__":
    main()
