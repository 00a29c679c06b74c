"""`miaudit study smoke`: a tiny real sweep (digits, small MLPs) to check an installation,
an executor or a Ray cluster in a minute, and the tests' fixture for sweeps.

Each cell trains a target and one reference model through the pipeline and scores the loss
and calibrated-loss attacks; the summary is a table of mean AUC per attack and epoch count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from miaudit.formatting import markdown_table
from miaudit.io import write_text
from miaudit.studies.registry import Study, register_study
from miaudit.studies.sweep import Cell


def run_config(params: dict[str, Any]) -> dict[str, Any]:
    """The pipeline config of one smoke cell."""
    return {
        "name": "smoke",
        "seed": int(params["seed"]),
        "dataset": {"name": "digits"},
        "split": {"audit": params["audit"], "public": params["audit"], "population": 0},
        "design": "offline",
        "models": 2,
        "recipe": {"architecture": "mlp", "arch_params": {"hidden": 32}, "epochs":
                   int(params["epochs"]), "batch_size": 32, "lr": 0.1},
        "attacks": ["loss", "calibrated-loss"],
        "metrics": {"bootstrap": 0},
        "device": "cpu",  # models go to the default cache ($MIAUDIT_CACHE_DIR)
    }


def work(cell: Cell) -> list[dict[str, Any]]:
    """Train (or load) the cell's two models, score two attacks: one row per attack."""
    from miaudit.config import config_from_dict
    from miaudit.pipeline import build_bank
    from miaudit.pipeline.evaluate import EvaluationOptions, evaluate_attacks

    cfg = config_from_dict(run_config(cell.params))
    built = build_bank(cfg, progress=False)
    result = evaluate_attacks(built.bank, built.design.target, cfg.attacks, EvaluationOptions(
        metrics=cfg.metrics, seed=cfg.seed, thresholds=False))
    accs = result.meta["models"][built.design.target]
    return [{"attack": o.name, **o.metrics.auc_columns(), "train_acc": accs["train_acc"],
             "test_acc": accs["test_acc"]} for o in result.outcomes]


def cells(config: dict[str, Any]) -> list[Cell]:
    return [Cell("smoke", {"seed": seed, "epochs": epochs, "audit": config["audit"]})
            for epochs in config["epochs"] for seed in range(config["repetitions"])]


def summarize(table: pd.DataFrame, study_dir: Path) -> None:
    if table.empty:
        return
    summary = (table.groupby(["epochs", "attack"])["auc"].agg(["mean", "std", "count"])
               .reset_index())
    summary.to_csv(Path(study_dir) / "summary.csv", index=False)
    write_text(Path(study_dir) / "summary.md", markdown_table(summary, floatfmt=".3f") + "\n")


CONFIGS = {
    "cpu": {"repetitions": 2, "epochs": [2, 10], "audit": 400},
    "paper": {"repetitions": 5, "epochs": [2, 10, 40], "audit": 800},
}

STUDY_SMOKE = register_study(Study(
    name="smoke",
    description="Tiny real sweep on digits (seconds per cell): checks an executor end to end.",
    configs=CONFIGS,
    cells=cells,
    work=work,
    summarize=summarize,
))
