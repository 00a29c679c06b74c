"""Summary of the generalization study ("Generalization and Membership Inference Attack: a
Practical Perspective"): the paper's tables with ours beside them, ROC curves of attacker
knowledge, and the many-model scatter with correlation coefficients.

Every figure here is computed from the study table (``results.csv``): one row per (cell,
attacked model, attack). Rates are in percent in the markdown tables, as in the paper; a
"± x" is the sample standard deviation over the attacked models (the M models of a bank, each
attacked with the others as references).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from miaudit.formatting import markdown_table, pct_mean_std
from miaudit.io import atomic_open, write_text
from miaudit.records.columns import tpr_column
from miaudit.report.plots import figure_png
from miaudit.studies.generalization.halves_banks import ROC_FPRS
from miaudit.studies.generalization.paper import (
    AUGMENTATION_STEPS,
    GENERALIZATION_PAPER,
    PAPER_AUGMENTATION,
    PAPER_EARLY_STOPPING,
    PAPER_KNOWLEDGE,
    PAPER_MANY_MODEL,
)
from miaudit.studies.registry import load_study_config

TPR01, TPR1 = tpr_column(0.001), tpr_column(0.01)
GAPS = ("acc_gap", "loss_gap", "test_acc")  # what the many-model study correlates TPR with
_LABELS = {"acc_gap": "train-test accuracy gap", "loss_gap": "test-train loss gap",
           "test_acc": "test accuracy", TPR01: "TPR @ 0.1% FPR", TPR1: "TPR @ 1% FPR",
           "auc": "AUC"}


def _select(table: pd.DataFrame, part: str, attack: str) -> pd.DataFrame:
    if table.empty or "part" not in table:
        return table.iloc[0:0]
    rows = table[(table["part"] == part) & (table["attack"] == attack)]
    if part == "augmentation" and "references" in rows:  # references like the target only
        rows = rows[rows["references"] == "target recipe"]
    return rows


def _knowledge_rows(table: pd.DataFrame, attack: str) -> pd.DataFrame:
    """Augmentation cells that also attacked their targets with plain references."""
    if table.empty or "plain_references" not in table:
        return table.iloc[0:0]
    return table[(table["part"] == "augmentation") & (table["attack"] == attack)
                 & table["plain_references"].eq(True)]


def augmentation_table(table: pd.DataFrame, attack: str) -> pd.DataFrame:
    """§IV-A1: per technique (paper order), ours (mean ± std over attacked models) and the
    paper's train/test accuracy and TPR@0.1% FPR."""
    rows = _select(table, "augmentation", attack)
    out = []
    for technique, (p_train, p_test, p_tpr) in PAPER_AUGMENTATION.items():
        r = rows[rows["technique"] == technique]
        if r.empty:
            continue
        out.append({"technique": technique, "models": len(r),
                    "train acc %": pct_mean_std(r["train_acc"]),
                    "test acc %": pct_mean_std(r["test_acc"]),
                    "TPR@0.1% %": pct_mean_std(r[TPR01]), "TPR@1% %": pct_mean_std(r[TPR1]),
                    "AUC": f"{r['auc'].mean():.3f}",
                    "paper train %": p_train, "paper test %": p_test,
                    "paper TPR@0.1% %": p_tpr})
    return pd.DataFrame(out)


def early_stopping_table(table: pd.DataFrame, attack: str) -> pd.DataFrame:
    """§IV-A2: per checkpoint (last first, like the paper). Our checkpoints are numbered
    1..K by epoch; the paper's row with the same step number is put beside ours when we keep
    as many checkpoints as the paper (6); the paper does not say at which epochs its are."""
    rows = _select(table, "early-stopping", attack)
    if rows.empty:
        return pd.DataFrame()
    epochs = sorted(rows["epoch"].unique())
    paired = len(epochs) == len(PAPER_EARLY_STOPPING)
    out = []
    for step, epoch in reversed(list(enumerate(epochs, start=1))):
        r = rows[rows["epoch"] == epoch]
        paper = PAPER_EARLY_STOPPING.get(step) if paired else None
        out.append({"step": step, "epoch": int(epoch), "models": len(r),
                    "train acc %": pct_mean_std(r["train_acc"]),
                    "test acc %": pct_mean_std(r["test_acc"]),
                    "TPR@0.1% %": pct_mean_std(r[TPR01]), "TPR@1% %": pct_mean_std(r[TPR1]),
                    "AUC": f"{r['auc'].mean():.3f}",
                    "paper train %": paper[0] if paper else None,
                    "paper test %": paper[1] if paper else None,
                    "paper TPR@0.1% %": paper[2] if paper else None})
    return pd.DataFrame(out)


def knowledge_table(table: pd.DataFrame, attack: str) -> pd.DataFrame:
    """§IV-B: per target technique, the attack with references trained like the target and
    with plain references (Recipe.plain: no augmentation)."""
    rows = _knowledge_rows(table, attack)
    out = []
    for technique in dict.fromkeys(rows["technique"]) if not rows.empty else []:
        r = rows[rows["technique"] == technique]
        known, plain = r[r["references"] == "target recipe"], r[r["references"] == "plain"]
        ratio = (known[TPR01].mean() / plain[TPR01].mean()
                 if plain[TPR01].mean() > 0 else float("nan"))
        out.append({"target technique": technique, "models": len(known),
                    "TPR@0.1% %, refs like target": pct_mean_std(known[TPR01]),
                    "TPR@0.1% %, plain refs": pct_mean_std(plain[TPR01]),
                    "ratio": f"{ratio:.2f}" if math.isfinite(ratio) else "-",
                    "TPR@1% %, like target / plain": (f"{pct_mean_std(known[TPR1])} / "
                                                      f"{pct_mean_std(plain[TPR1])}"),
                    "AUC like target / plain": f"{known['auc'].mean():.3f} / "
                                               f"{plain['auc'].mean():.3f}",
                    "paper": _paper_knowledge(technique)})
    return pd.DataFrame(out)


def _paper_knowledge(technique: str) -> str:
    """The paper's statement for ``technique``, or for its analogue: a single technique is
    compared with the paper's single policy, a combination with its "All Techniques"."""
    if technique in PAPER_KNOWLEDGE:
        return PAPER_KNOWLEDGE[technique]
    steps = AUGMENTATION_STEPS.get(technique, [])
    analogue = "CIFAR-Policy" if len(steps) <= 1 else "All Techniques"
    return f"(analogue of {analogue}) {PAPER_KNOWLEDGE[analogue]}"


def many_model_points(table: pd.DataFrame, attack: str) -> pd.DataFrame:
    """One row per (recipe, model) of the many-model study, for ``attack``."""
    return _select(table, "many-model", attack).reset_index(drop=True)


def _corr(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, float]:
    """Pearson r, its p, Spearman rho, its p; NaN where a side is constant or n < 3."""
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return (math.nan,) * 4
    pearson = stats.pearsonr(x, y)
    spearman = stats.spearmanr(x, y)
    return (float(pearson.statistic), float(pearson.pvalue), float(spearman.statistic),
            float(spearman.pvalue))


def correlations(points: pd.DataFrame, ys: Sequence[str] = (TPR01, TPR1, "auc"),
                 xs: Sequence[str] = GAPS) -> pd.DataFrame:
    """Pearson and Spearman coefficients of each metric ``y`` with each ``x`` over all points,
    and the mean Spearman rho within each fixed training set (the column ``model``: the same
    rows under every recipe), the paper's controlled comparison."""
    out = []
    for y in ys:
        for x in xs:
            r, rp, rho, rhop = _corr(points[x].to_numpy(float), points[y].to_numpy(float))
            within = [_corr(g[x].to_numpy(float), g[y].to_numpy(float))[2]
                      for _, g in points.groupby("model")] if "model" in points else []
            within = [w for w in within if math.isfinite(w)]
            out.append({"metric": y, "against": x, "points": len(points), "pearson r": r,
                        "pearson p": rp, "spearman rho": rho, "spearman p": rhop,
                        "training sets": len(within),
                        "spearman rho within a training set (mean)":
                            float(np.mean(within)) if within else math.nan})
    return pd.DataFrame(out)


def gap_and_accuracy_fit(points: pd.DataFrame, y: str = TPR01) -> dict[str, float]:
    """Least squares of ``y`` on standardised accuracy gap and test accuracy: the paper's
    "at equal gap, higher test accuracy -> higher TPR" is a positive test-accuracy weight."""
    data = points[["acc_gap", "test_acc", y]].dropna().to_numpy(float)
    if len(data) < 4 or np.any(data[:, :2].std(axis=0) == 0):
        return {"n": len(data)}
    z = (data[:, :2] - data[:, :2].mean(axis=0)) / data[:, :2].std(axis=0)
    design = np.column_stack([np.ones(len(z)), z])
    coef, *_ = np.linalg.lstsq(design, data[:, 2], rcond=None)
    fitted = design @ coef
    r2 = 1 - ((data[:, 2] - fitted) ** 2).sum() / ((data[:, 2] - data[:, 2].mean()) ** 2).sum()
    return {"n": len(data), "intercept": float(coef[0]), "acc_gap (per std)": float(coef[1]),
            "test_acc (per std)": float(coef[2]), "r2": float(r2)}


def scatter_figure(points: pd.DataFrame, y: str = TPR01) -> Figure:
    """The generalization paper's figures 5-7: ``y`` against accuracy gap (colour: test
    accuracy), against test accuracy (colour: accuracy gap) and against loss gap (colour: test
    accuracy)."""
    fig = Figure(figsize=(15, 4.4))
    panels = (("acc_gap", "test_acc", "Fig. 5"), ("test_acc", "acc_gap", "Fig. 6"),
              ("loss_gap", "test_acc", "Fig. 7"))
    for i, (x, colour, name) in enumerate(panels):
        ax = fig.add_subplot(1, 3, i + 1)
        sc = ax.scatter(points[x], points[y] * 100, c=points[colour], cmap="viridis", s=12,
                        alpha=0.8, edgecolors="none")
        fig.colorbar(sc, ax=ax, label=_LABELS[colour])
        r, _, rho, _ = _corr(points[x].to_numpy(float), points[y].to_numpy(float))
        ax.set_title(f"{name} analogue: r = {r:.2f}, rho = {rho:.2f} (n = {len(points)})",
                     fontsize=9)
        ax.set_xlabel(_LABELS[x])
        ax.set_ylabel(f"{_LABELS[y]} (%)")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def knowledge_figure(table: pd.DataFrame, attack: str) -> Figure | None:
    """The generalization paper's figures 3-4: mean ROC (over attacked models, through the
    recorded FPRs) of each target technique with references like the target and plain
    references."""
    rows = _knowledge_rows(table, attack)
    if rows.empty:
        return None
    techniques = list(dict.fromkeys(rows["technique"]))
    cols = min(2, len(techniques))
    rows_ = math.ceil(len(techniques) / cols)
    fig = Figure(figsize=(5.2 * cols, 4.4 * rows_))
    fprs = np.array(ROC_FPRS)
    for i, technique in enumerate(techniques):
        ax = fig.add_subplot(rows_, cols, i + 1)
        for refs, style in (("target recipe", "-"), ("plain", "--")):
            r = rows[(rows["technique"] == technique) & (rows["references"] == refs)]
            tpr = np.array([r[tpr_column(f)].mean() for f in ROC_FPRS])
            ax.plot(fprs, np.maximum(tpr, 1e-4), style, marker="o", ms=3,
                    label=f"references: {refs}, TPR@0.1% = {100 * r[TPR01].mean():.2f}%")
        ax.plot(fprs, fprs, ":", color="grey", label="chance")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("FPR")
        ax.set_ylabel("TPR (mean over attacked models)")
        ax.set_title(f"target trained with {technique}", fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def early_stopping_figure(table: pd.DataFrame, attack: str) -> Figure | None:
    rows = _select(table, "early-stopping", attack)
    if rows.empty:
        return None
    g = rows.groupby("epoch")[["train_acc", "test_acc", TPR01, TPR1]].mean() * 100
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(g.index, g["train_acc"], "o-", label="train accuracy")
    ax.plot(g.index, g["test_acc"], "s-", label="test accuracy")
    ax.set_xlabel("checkpoint epoch")
    ax.set_ylabel("accuracy (%)")
    twin = ax.twinx()
    twin.plot(g.index, g[TPR01], "^--", color="C3", label="TPR @ 0.1% FPR")
    twin.plot(g.index, g[TPR1], "v:", color="C4", label="TPR @ 1% FPR")
    twin.set_ylabel(f"{attack} TPR (%)")
    lines = ax.get_lines() + twin.get_lines()
    ax.legend(lines, [str(line.get_label()) for line in lines], fontsize=8, loc="center right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _write_png(path: Path, fig: Figure | None) -> None:
    if fig is not None:
        with atomic_open(path, "wb") as handle:
            handle.write(figure_png(fig))


def write_summary(table: pd.DataFrame, study_dir: Path) -> None:
    """Write summary.md (every table, the paper's beside ours), the tables as CSV and the
    figures (PNG) into ``study_dir``."""
    if table.empty:
        return
    config: dict[str, Any] = load_study_config(study_dir)
    attack = config["headline_attack"]
    support = table["n_nonmembers"].min() if "n_nonmembers" in table else None
    sections = [f"# Study: generalization ({GENERALIZATION_PAPER}), size {config['size']}\n",
                f"Attack in the tables and figures: `{attack}`; {config['models']} models per "
                f"bank, each attacked with the other {config['models'] - 1} as references "
                f"({config['models'] - 2} per sample: the view sets one aside so that they "
                "say nothing of the target's membership, docs/algorithms.md §11). "
                f"TPR@0.1% FPR per attacked model rests on {support} non-members "
                f"({0.001 * support:g} expected false positives) and TPR@1% on "
                f"{0.01 * support:g}.\n" if support else ""]
    aug = augmentation_table(table, attack)
    if not aug.empty:
        aug.to_csv(study_dir / "augmentation.csv", index=False)
        sections += ["## Augmentation (§IV-A1)\n", markdown_table(aug, ".2f") + "\n"]
    early = early_stopping_table(table, attack)
    if not early.empty:
        early.to_csv(study_dir / "early_stopping.csv", index=False)
        sections += ["## Early stopping (§IV-A2)\n", markdown_table(early, ".2f") + "\n"]
        _write_png(study_dir / "early_stopping.png", early_stopping_figure(table, attack))
    know = knowledge_table(table, attack)
    if not know.empty:
        know.to_csv(study_dir / "knowledge.csv", index=False)
        sections += ["## Attacker knowledge of the training technique (§IV-B)\n",
                     markdown_table(know, ".2f") + "\n"]
        _write_png(study_dir / "knowledge_roc.png", knowledge_figure(table, attack))
    points = many_model_points(table, attack)
    if not points.empty:
        corr = correlations(points)
        corr.to_csv(study_dir / "many_model_correlations.csv", index=False)
        fit = gap_and_accuracy_fit(points)
        recipes = points["cell"].nunique() if "cell" in points else len(points)
        sections += [
            "## Many models, one training set per model index (§IV-C)\n",
            f"{len(points)} attacked models: {recipes} recipes x {points['model'].nunique()} "
            "fixed training sets.\n",
            markdown_table(corr, ".3g") + "\n",
            "Least squares of TPR@0.1% on standardised accuracy gap and test accuracy: "
            + ", ".join(f"{k} = {v:.4g}" for k, v in fit.items()) + "\n",
            "Paper: " + "; ".join(f"{k}: {v}" for k, v in PAPER_MANY_MODEL.items()) + "\n",
        ]
        _write_png(study_dir / "many_model_tpr0.1.png", scatter_figure(points, TPR01))
        _write_png(study_dir / "many_model_tpr1.png", scatter_figure(points, TPR1))
    write_text(study_dir / "summary.md", "\n".join(s for s in sections if s))
