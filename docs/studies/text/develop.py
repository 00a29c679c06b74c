"""The text study's development step: which fine-tuning recipe makes each classifier leak.

Run once on the development seed (100; never a reported seed: the study's repetitions use
seeds 0, 1, 2, ...). Each candidate trains the target alone (no references) on the study's
split and is scored with Yeom's loss attack. The measures, fixed before any run: the loss
attack's AUC (the choice) and the target's train/test accuracy gap (a check), with the
target's training time (the study's time budget: <= 45 min for 3 repetitions of both cells on
2 cores). RAPID's ratio is never looked at here.

    PYTHONPATH=src .venv/bin/python docs/studies/text/develop.py [minilm|text-cnn ...]
    PYTHONPATH=src .venv/bin/python docs/studies/text/develop.py minilm:250x10  # one

Prints one line per candidate and writes docs/studies/text/development.csv (candidates
already in it are skipped). Wall times depend on the machine's load when measured.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

from miaudit.config import config_from_dict
from miaudit.pipeline import build_bank, evaluate_bank, model_accuracies
from miaudit.studies.text import SETUPS

DEV_SEED = 100
# (setup, members, epochs): members = audit rows the target trains on (the rest of the
# 1,250-row audit pool are non-members); None = the earlier recipe's random half of 2,000.
CANDIDATES = {
    "minilm": [(250, 4), (250, 6), (500, 3), (250, 10)],
    "text-cnn": [(250, 20), (250, 40), (1000, 20)],
}


def run(setup_name: str, members: int, epochs: int) -> dict:
    setup = SETUPS[setup_name]
    split = {**setup["split"], "members": members}
    if members >= split["audit"] - 250:  # keep >= 1,000 non-members... and the pools valid
        split = {**split, "audit": members + 1000, "public": max(split["public"], members + 1)}
    cfg = config_from_dict({
        "name": f"text-dev-{setup_name}", "seed": DEV_SEED, "dataset": dict(setup["dataset"]),
        "split": split, "design": "offline", "models": 1,
        "recipe": {**setup["recipe"], "epochs": epochs}, "signals": {"queries": ["plain"]},
        "attacks": ["loss"], "metrics": {"fprs": [0.01], "bootstrap": 0}, "device": "cpu"})
    start = time.perf_counter()
    built = build_bank(cfg, progress=False)
    wall = time.perf_counter() - start
    result = evaluate_bank(built.bank, 0, ["loss"], {}, cfg.metrics, seed=DEV_SEED,
                           thresholds=False, progress=False)
    fit = model_accuracies(built.bank)[0]
    m = result.outcomes[0].metrics
    return {"setup": setup_name, "members": members, "non-members": m.counts()["n_nonmembers"],
            "epochs": epochs, "train_acc": fit["train_acc"], "test_acc": fit["test_acc"],
            "gap": fit["train_acc"] - fit["test_acc"], "loss_auc": m.auc_columns()["auc"],
            "loss_tpr@1%": m.tpr_columns([0.01])["tpr@0.01"],
            "train_s": float(built.models[0].train_seconds),
            "query_s": built.info.query_seconds, "wall_s": wall}


def main(names: list[str]) -> None:
    out = Path(__file__).with_name("development.csv")
    rows = pd.read_csv(out).to_dict("records") if out.exists() else []
    todo = []
    for arg in names or list(CANDIDATES):
        name, _, one = arg.partition(":")
        todo += ([(name, *map(int, one.split("x")))] if one else
                 [(name, m, e) for m, e in CANDIDATES[name]])
    for name, members, epochs in todo:
        if any((r["setup"], r["members"], r["epochs"]) == (name, members, epochs)
               for r in rows):
            continue  # measured already (delete development.csv to measure again)
        row = run(name, members, epochs)
        print(row, flush=True)
        rows = pd.read_csv(out).to_dict("records") if out.exists() else []
        rows = [r for r in rows if (r["setup"], r["members"], r["epochs"])
                != (name, members, epochs)] + [row]
        pd.DataFrame(rows).to_csv(out, index=False)


if __name__ == "__main__":
    main(sys.argv[1:])
