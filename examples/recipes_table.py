"""The recipe tables: how training recipes change leakage ("Generalization and
Membership Inference Attack: a Practical Perspective"), one audit per row.

    python examples/recipes_table.py augment       # none / crop / mirror / cutout / AA / all
    python examples/recipes_table.py checkpoints   # the `none` recipe at epochs 1..30
    python examples/recipes_table.py knowledge     # references: target's recipe vs plain
    python examples/recipes_table.py dp            # DP-SGD at epsilon 1..1000 vs none
    python examples/recipes_table.py regularise    # dropout / label smoothing vs none

Every row is ``miaudit.pipeline.run`` on the example config with one field changed (the
recipe name, the checkpoints, the reference recipe or ``recipe.dp``), into ``runs/recipes/``;
models come from the cache when present, so a rerun only re-scores. Prints a Markdown table
(train/test accuracy of the target, LiRA offline fixed-variance AUC and TPR at 0.1 % and 1 %
FPR with 95 % bootstrap CIs).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

from miaudit.config import RunConfig, load_config
from miaudit.pipeline import run
from miaudit.records.outcomes import AttackMetrics

HERE = Path(__file__).resolve().parent
ATTACK = "lira-offline-fixed-variance"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def cells(metrics: AttackMetrics) -> list[str]:
    """AUC, TPR@0.1% [CI], TPR@1% [CI] of one attack's metrics."""
    out = [f"{metrics.auc:.3f}"]
    for fpr in (0.001, 0.01):
        figure = metrics.tpr_at(fpr)
        out.append(f"{pct(figure.tpr)} [{pct(figure.ci_low)}, {pct(figure.ci_high)}]")
    return out


def audit(cfg: RunConfig, name: str, out: Path) -> tuple[dict[str, Any], Any]:
    cfg = copy.deepcopy(cfg)
    cfg.name, cfg.output = name, str(out / name)
    result, _ = run(cfg, progress=sys.stderr.isatty(), echo=False)
    target = result.meta["models"][result.meta["target"]]
    print(f"  {name}: trained {result.meta['models_trained']}, cached "
          f"{result.meta['models_from_cache']}, {result.meta['seconds']} s", file=sys.stderr)
    return target, result


HEAD = ["train acc", "test acc", f"{ATTACK} AUC", "TPR@0.1% FPR [CI]", "TPR@1% FPR [CI]"]


def table(first: list[str], rows: list[list[str]]) -> str:
    head = first + HEAD[: len(rows[0]) - len(first)] if rows else first
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def augment_table(out: Path) -> str:
    cfg = load_config(HERE / "fashion-mnist-recipes.yaml")
    rows = []
    for name in ("none", "crop", "mirror", "cutout", "autoaugment", "all"):
        cfg.recipe = name
        acc, result = audit(cfg, f"augment-{name}", out)
        rows.append([name, f"{acc['train_acc']:.3f}", f"{acc['test_acc']:.3f}",
                     *cells(result.outcome(ATTACK).metrics)])
    return table(["augmentation"], rows) + footer(result)


def regularise_table(out: Path) -> str:
    cfg = load_config(HERE / "fashion-mnist-recipes.yaml")
    rows = []
    for name in ("none", "dropout", "label-smoothing"):
        cfg.recipe = name
        acc, result = audit(cfg, f"augment-{name}" if name == "none" else name, out)
        rows.append([name, f"{acc['train_acc']:.3f}", f"{acc['test_acc']:.3f}",
                     *cells(result.outcome(ATTACK).metrics)])
    return table(["recipe"], rows) + footer(result)


def checkpoints_table(out: Path) -> str:
    cfg = load_config(HERE / "fashion-mnist-recipes.yaml")
    cfg.checkpoints.epochs = [1, 2, 3, 5, 10, 20]
    _, result = audit(cfg, "checkpoints-none", out)
    rows = []
    for row in result.meta["checkpoints"]:
        lira = row["attacks"][ATTACK]
        rows.append([row["checkpoint"], f"{row['epoch']:g}", f"{row['train_acc']:.3f}",
                     f"{row['test_acc']:.3f}", *cells(AttackMetrics.from_dict(lira))])
    return table(["checkpoint", "epoch"], rows) + footer(result)


def knowledge_table(out: Path) -> str:
    cfg = load_config(HERE / "fashion-mnist-recipes.yaml")
    rows = []
    for target in ("autoaugment", "all"):
        for reference in ("target", "plain"):
            cfg.recipe, cfg.reference_recipe = target, reference
            acc, result = audit(cfg, f"knowledge-{target}-{reference}", out)
            rows.append([target, reference, f"{acc['train_acc']:.3f}", f"{acc['test_acc']:.3f}",
                         *cells(result.outcome(ATTACK).metrics)])
    return table(["target augmentation", "references"], rows) + footer(result)


def dp_table(out: Path) -> str:
    cfg = load_config(HERE / "fashion-mnist-dp.yaml")
    base = dict(cfg.recipe)
    rows = []
    for eps in (None, 1, 10, 100, 1000):
        cfg.recipe = base if eps is None else {**base, "dp": {"epsilon": eps}}
        acc, result = audit(cfg, f"fashion-mnist-dp-{eps or 'none'}", out)
        privacy = result.meta["target_privacy"] or {}
        spent = privacy.get("epsilon_spent")
        rows.append([
            "none" if eps is None else str(eps),
            "-" if spent is None else f"{spent:.3f}",
            privacy.get("accountant", "-"),
            "-" if not privacy else f"{privacy['noise_multiplier']:.3f}",
            f"{acc['train_acc']:.3f}", f"{acc['test_acc']:.3f}",
            *cells(result.outcome(ATTACK).metrics),
        ])  # fmt: skip
    return table(["ε target", "ε spent", "accountant", "noise σ"], rows) + footer(result)


def footer(result: Any) -> str:
    m = result.outcome(ATTACK).metrics
    return (f"\n\n{m['n_members']} members / {m['n_nonmembers']} non-members of the target in "
            f"the audit pool (TPR@0.1% FPR rests on {m['n_nonmembers'] / 1000:g} expected false "
            "positives); 95% bootstrap CIs.")


TABLES = {"augment": augment_table, "checkpoints": checkpoints_table, "dp": dp_table,
          "knowledge": knowledge_table, "regularise": regularise_table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", choices=sorted(TABLES))
    parser.add_argument("--out", default="runs/recipes", help="folder of the row runs")
    args = parser.parse_args()
    print(TABLES[args.table](Path(args.out)))


if __name__ == "__main__":  # guard: the trainer may spawn worker processes
    main()
