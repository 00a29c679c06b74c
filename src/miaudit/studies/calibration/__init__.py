"""`miaudit study calibration`: Watson et al., "On the importance of difficulty calibration in
membership inference attacks" (ICLR 2022).

Cells (every one is a pipeline run: ``config_from_dict`` -> ``build_bank``, then attacks on the
bank; nothing is trained or scored outside the pipeline):

- ``main`` (dataset x repetition): Tables 1-3 — gap, loss, gradient-norm and confidence
  attacks, original / calibrated with one reference model / calibrated via forgetting with
  one fine-tuned copy; plus fig. 4 (member:non-member ratios, PR curves) and the ROC/PR curves
  of the loss attacks (fig. 2).
- ``size`` (fig. 3): training-set size of the target, on the figure dataset.
- ``refs`` (fig. 5): number of reference models and shadow-dataset (public pool) size.
- ``dp`` (fig. 6): DP-SGD targets (and references, same recipe as in the paper) at several ε.

Each repetition t uses seed ``seed + t``: a different random private/public split and
member/non-member split, and different model initialisations (the paper's T repetitions).
Accuracy thresholds are chosen on public data only (a reference model plays the target:
Watson's simulation); calibration-via-forgetting has no such shadow in the pipeline, so its
accuracy uses the paper's fixed threshold 1e-4 ("frequently ... slightly greater than 0 (e.g.,
0.0001), which can be used as a default threshold", §4.1).
"""

from __future__ import annotations

from typing import Any

from miaudit.studies.calibration.settings import (
    CONFIGS,
    CURVE_ATTACKS,
    SCORES,
    figure_dataset,
    present_datasets,
)
from miaudit.studies.registry import Study, register_study
from miaudit.studies.sweep import Cell, StudyError

STUDY = "calibration"


def run_config(config: dict[str, Any], dataset: str, seed: int, *, references: int,
               forgetting: int, grad_norm: bool, attacks: list[str],
               split: dict[str, Any] | None = None, recipe: dict[str, Any] | None = None
               ) -> dict[str, Any]:
    """The pipeline RunConfig (as a dict) of one cell: offline design, the target trains on a
    random half of the private (audit) pool, each reference on a random half of the public pool,
    ``forgetting`` copies of the target fine-tuned on the public pool."""
    spec = config["datasets"][dataset]
    split = {**spec["split"], **(split or {})}
    return {
        "name": f"{STUDY}-{dataset}",
        "seed": int(seed),
        "dataset": {"name": dataset},
        "split": {"audit": split["audit"], "public": split["public"], "population": 0},
        "design": "offline",
        "models": 1 + references,
        "recipe": {**spec["recipe"], **(recipe or {})},
        "forgetting": {"models": forgetting, **spec["forgetting"]},
        "signals": {"queries": ["plain"], "grad_norm": grad_norm},
        "attacks": attacks,
        "metrics": {"bootstrap": 0},
        "device": config["device"],
    }


def _main_attacks() -> list[str]:
    return [a for _, orig, cal in SCORES for a in (orig, cal) if a]


def cells(config: dict[str, Any]) -> list[Cell]:
    """Every cell of the study for a resolved config."""
    out = []
    seed0, reps = int(config["seed"]), int(config["repetitions"])
    for dataset in present_datasets(config):
        for t in range(reps):
            run = run_config(config, dataset, seed0 + t, references=2, forgetting=1,
                             grad_norm=config["datasets"][dataset].get("grad_norm", True),
                             attacks=_main_attacks())
            out.append(Cell(STUDY, {"kind": "main", "dataset": dataset, "rep": t, "run": run,
                                    "ratios": config["ratios"]}))
    figure = figure_dataset(config)
    sizes = config["train_size"]
    for size in sizes["sizes"]:
        for t in range(int(sizes["repetitions"])):
            split = {"audit": 2 * size, "public": 2 * size}
            run = run_config(config, figure, seed0 + t, references=2, forgetting=0,
                             grad_norm=False, attacks=["correctness", "loss", "calibrated-loss"],
                             split=split)
            out.append(Cell(STUDY, {"kind": "size", "dataset": figure, "rep": t,
                                    "train_size": size, "run": run}))
    refs = config["references"]
    counts = sorted(int(k) for k in refs["counts"])
    for public in refs["public_sizes"]:
        for t in range(int(refs["repetitions"])):
            run = run_config(config, figure, seed0 + t, references=counts[-1] + 1,
                             forgetting=counts[-1], grad_norm=False,
                             attacks=["loss", "calibrated-loss"], split={"public": public})
            out.append(Cell(STUDY, {"kind": "refs", "dataset": figure, "rep": t,
                                    "public_size": public, "counts": counts, "run": run}))
    dp = config["dp"]
    for epsilon in dp["epsilons"]:
        recipe = dict(dp["recipe"])
        if epsilon is not None:
            recipe["dp"] = {**dp["dp"], "epsilon": epsilon}
        for t in range(int(dp["repetitions"])):
            run = run_config(config, figure, seed0 + t, references=int(dp["references"]),
                             forgetting=0, grad_norm=False, attacks=list(CURVE_ATTACKS),
                             split=dp["split"], recipe=recipe)
            out.append(Cell(STUDY, {"kind": "dp", "dataset": figure, "rep": t,
                                    "epsilon": epsilon, "run": run}))
    return out


def work(cell: Cell) -> list[dict[str, Any]]:
    """Build the cell's bank through the pipeline and evaluate it (see .rows)."""
    from miaudit.studies.calibration import table_rows as calibration_rows

    params = cell.params
    runners = {"main": calibration_rows.main_rows, "size": calibration_rows.size_rows,
               "refs": calibration_rows.refs_rows, "dp": calibration_rows.dp_rows}
    if params["kind"] not in runners:
        raise StudyError(f"unknown calibration cell kind {params['kind']!r}.")
    return runners[params["kind"]](params)


def summarize(table: Any, study_dir: Any) -> None:
    from miaudit.studies.calibration.report import write_summary

    write_summary(table, study_dir)


STUDY_CALIBRATION = register_study(Study(
    name=STUDY,
    description="Watson et al. (ICLR 2022) difficulty calibration: Tables "
    "2-3, figs 3-6",
    configs=CONFIGS,
    cells=cells,
    work=work,
    summarize=summarize,
))
