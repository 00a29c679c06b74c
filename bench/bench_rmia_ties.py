"""RMIA's ties and its `tie_break` (EXPERIMENTS.md, "RMIA ties: tie-break by the continuous
ratio"; docs/algorithms.md §6).

For each bank: the share of audited samples tied at the modal RMIA score, and AUC, TPR@1 % and
TPR@0.1 % of `rmia` with `tie_break: none` (the paper's score) and `tie_break: ratio`, of
`informia` (which ranks as the ratio), optionally of `rapid-hybrid` with RMIA's feature either
way, and of both RMIA variants on random subsets of the population (`--populations`).

    # the power study's development banks (never the held-out seeds 0-3)
    MIAUDIT_DATA_DIR=... MIAUDIT_CACHE_DIR=/tmp/rmia-cache OMP_NUM_THREADS=1 \\
        .venv/bin/python bench/bench_rmia_ties.py power texas-health 100 101 --hybrid
    # a `miaudit run` config (the demo's by default), one bank per seed
    .venv/bin/python bench/bench_rmia_ties.py run --seeds 0 1 2
    .venv/bin/python bench/bench_rmia_ties.py run --seeds 0 --set split.population=297 \\
        --set split.public=250
    # a saved bank (e.g. a `miaudit audit` run directory's bank.npz; its target is model 0)
    .venv/bin/python bench/bench_rmia_ties.py bank runs/audit/bank.npz

`--json FILE` appends one JSON line per bank. Single-threaded (torch and BLAS): the figures
are AUC and TPR, never timings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from miaudit import metrics  # noqa: E402
from miaudit.attacks import TargetView, get_attack, run_attack  # noqa: E402
from miaudit.signals import SignalBank  # noqa: E402

FPRS = (0.001, 0.01)
HELD_OUT = {0, 1, 2, 3}  # the power study's reported targets: never measured here


def modal_share(scores: np.ndarray) -> tuple[float, int]:
    """Share of the (non-NaN) scores equal to the most frequent score, and how many distinct."""
    s = scores[~np.isnan(scores)]
    values, counts = np.unique(s, return_counts=True)
    return float(counts.max() / s.size), int(values.size)


def figures(scores: np.ndarray, members: np.ndarray) -> dict[str, float]:
    m = metrics.evaluate(scores, members, fprs=FPRS, n_bootstrap=0)
    share, distinct = modal_share(scores)
    return {"auc": m["auc"], "tpr_1": 100 * m["tpr_at_fpr"]["0.01"],
            "tpr_0.1": 100 * m["tpr_at_fpr"]["0.001"], "tied": share, "distinct": distinct}


def _hybrid(view: TargetView, tie_break: str) -> np.ndarray:
    """rapid-hybrid with RMIA's feature computed with `tie_break` (it calls rmia with rmia's
    registered defaults, so the default is switched for the call)."""
    params = get_attack("rmia").params
    saved = params["tie_break"]
    params["tie_break"] = tie_break
    try:
        return run_attack("rapid-hybrid", view).scores
    finally:
        params["tie_break"] = saved


def measure(bank: SignalBank, target: int, populations: list[int], hybrid: bool,
            seed: int = 0) -> dict[str, Any]:
    view = TargetView.of(bank, target)
    audit = bank.audit
    members = bank.membership[target][audit]
    out: dict[str, Any] = {"n_audit": int(audit.sum()), "n_members": int(members.sum()),
                           "n_population": int(bank.population.sum()), "rows": {}}
    rows = out["rows"]
    for tb in ("none", "ratio"):
        rows[f"rmia/{tb}"] = figures(run_attack("rmia", view, tie_break=tb).scores[audit],
                                     members)
    rows["informia"] = figures(run_attack("informia", view).scores[audit], members)
    if bank.membership[[m for m in range(bank.n_models) if m != target]][:, audit].any():
        try:
            for tb in ("none", "ratio"):
                scores = run_attack("rmia-online", view, tie_break=tb).scores[audit]
                rows[f"rmia-online/{tb}"] = figures(scores, members)
        except Exception as exc:  # noqa: BLE001 - e.g. no IN references (offline design)
            out["online"] = str(exc)
    if hybrid:
        for tb in ("none", "ratio"):
            rows[f"rapid-hybrid/rmia-{tb}"] = figures(_hybrid(view, tb)[audit], members)
    pop = np.flatnonzero(bank.population)
    rng = np.random.default_rng(seed)
    for k in populations:
        if k >= pop.size:
            continue
        mask = np.zeros(bank.n_samples, dtype=bool)
        mask[rng.choice(pop, size=k, replace=False)] = True
        sub = TargetView.of(bank.replace(population=mask), target)
        for tb in ("none", "ratio"):
            rows[f"rmia/{tb}/Z={k}"] = figures(
                run_attack("rmia", sub, tie_break=tb).scores[audit], members)
    return out


def print_bank(label: str, result: dict[str, Any]) -> None:
    print(f"\n{label}: {result['n_audit']} audited ({result['n_members']} members), "
          f"|Z| = {result['n_population']}")
    print(f"  {'scores':28s} {'AUC':>7s} {'TPR@1%':>7s} {'TPR@0.1%':>8s} {'tied':>7s} "
          f"{'distinct':>8s}")
    for name, f in result["rows"].items():
        print(f"  {name:28s} {f['auc']:7.4f} {f['tpr_1']:7.2f} {f['tpr_0.1']:8.2f} "
              f"{100 * f['tied']:6.1f}% {f['distinct']:8d}")
    if "online" in result:
        print(f"  (rmia-online: {result['online']})")


def _emit(path: str | None, record: dict[str, Any]) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")


def _set(cfg: dict[str, Any], assignment: str) -> None:
    key, _, value = assignment.partition("=")
    *parents, last = key.split(".")
    node = cfg
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = yaml.safe_load(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("power", help="the power study's development banks")
    p.add_argument("dataset")
    p.add_argument("seeds", type=int, nargs="+")
    r = sub.add_parser("run", help="a miaudit run config (default: the demo's)")
    r.add_argument("--config", help="YAML run config (default: miaudit's demo.yaml)")
    r.add_argument("--seeds", type=int, nargs="+", default=[0])
    r.add_argument("--set", action="append", default=[], help="key.path=YAML value")
    b = sub.add_parser("bank", help="a saved bank.npz")
    b.add_argument("path")
    b.add_argument("--target", type=int, default=0)
    for q in (p, r, b):
        q.add_argument("--hybrid", action="store_true", help="also rapid-hybrid, both ways")
        q.add_argument("--populations", type=int, nargs="*", default=[],
                       help="also RMIA on random population subsets of these sizes")
        q.add_argument("--json", help="append one JSON line per bank")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    if args.mode == "bank":
        result = measure(SignalBank.load(args.path), args.target, args.populations,
                         args.hybrid)
        print_bank(args.path, result)
        _emit(args.json, {"bank": args.path, **result})
        return 0

    from miaudit.config import config_from_dict
    from miaudit.pipeline import build_bank

    if args.mode == "power":
        held = HELD_OUT.intersection(args.seeds)
        if held:
            sys.exit(f"seeds {sorted(held)} are the power study's held-out targets; use the "
                     "development seeds (100, 101; Fashion-MNIST 100-102).")
        from miaudit.studies.power import SETUPS, run_config

        configs = [(f"{args.dataset} seed {s}", run_config({
            "dataset": args.dataset, "seed": s, "setup": SETUPS[args.dataset], "models": 7,
            "attacks": ["rmia"], "bootstrap": 0, "confidence": 0.95, "device": "cpu"}))
            for s in args.seeds]
    else:
        path = Path(args.config) if args.config else Path(str(
            resources.files("miaudit.experiments") / "configs" / "demo.yaml"))
        base = yaml.safe_load(path.read_text(encoding="utf-8"))
        configs = []
        for s in args.seeds:
            cfg = {**base, "seed": s, "device": "cpu"}
            for assignment in args.set:
                _set(cfg, assignment)
            configs.append((f"{path.name} seed {s} {' '.join(args.set)}".strip(), cfg))
    for label, raw in configs:
        cfg = config_from_dict(raw)
        built = build_bank(cfg, progress=False)
        result = measure(built.bank, built.design.target, args.populations, args.hybrid,
                         seed=cfg.seed)
        print_bank(label, result)
        _emit(args.json, {"bank": label, **result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
