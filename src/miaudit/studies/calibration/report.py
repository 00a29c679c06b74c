"""Summary of the calibration study: Tables 1-3 beside the paper's, figures 2-6 (PNG).

Everything is read from the study table (``results.csv``); nothing is recomputed. Means and
sample standard deviations are over the T repetitions (random splits and initialisations).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from miaudit.formatting import markdown_table, mean_std
from miaudit.io import atomic_path, write_text
from miaudit.records.columns import tpr_column
from miaudit.studies.calibration.paper import (
    COLUMNS,
    FIGURE_CLAIMS,
    PAPER_ROW,
    STD_NOTE,
    TABLE1,
    TABLE2_AUC,
    TABLE3_ACC,
)
from miaudit.studies.registry import load_study_config

# tables recorded before the one spelling named these tpr_at_0.001 and tpr_at_0.01
# (miaudit.records.columns reads them)
TPR01, TPR1 = tpr_column(0.001), tpr_column(0.01)

METHOD_LABEL = {"orig": "Orig", "cal": "Cal.", "cal-f": "Cal.-F"}
SCORE_LABEL = {"gap": "Gap", "loss": "Loss", "gn": "GN", "confidence": "Conf."}
ATTACK_STYLE = {"correctness": ("gap", "tab:gray", "-"), "loss": ("loss", "tab:blue", "--"),
                "calibrated-loss": ("calibrated loss", "tab:orange", "-")}


def _section(table: pd.DataFrame, name: str) -> pd.DataFrame:
    if table.empty or "section" not in table:
        return table.iloc[0:0]
    return table[table["section"] == name]


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")


def _datasets(main: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(main["dataset"]))


def model_table(table: pd.DataFrame) -> pd.DataFrame:
    """Table 1: target train / test accuracy per dataset, ours beside the paper's."""
    models = _section(table, "model")
    models = models[models["kind"] == "main"]
    rows = []
    for dataset in _datasets(models):
        part = models[models["dataset"] == dataset]
        paper = TABLE1.get(PAPER_ROW.get(dataset, ""), (None, None))
        rows.append({"dataset": dataset, "T": len(part), "members": int(part["n_train"].iloc[0]),
                     "train acc": mean_std(part["train_acc"]), "paper train": paper[0],
                     "test acc": mean_std(part["test_acc"]), "paper test": paper[1]})
    return pd.DataFrame(rows)


def score_table(table: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Table 2 (metric auc) or 3 (acc): a row of ours (mean ± std) and a row of the paper's
    per dataset; and the tidy numbers (dataset, score, method, mean, std, n, paper)."""
    main = _section(table, "main")
    paper = TABLE2_AUC if metric == "auc" else TABLE3_ACC
    wide, tidy = [], []
    for dataset in _datasets(main):
        part = main[main["dataset"] == dataset]
        ours: dict[str, Any] = {"dataset": dataset, "source": f"ours (T={part['rep'].nunique()})"}
        theirs: dict[str, Any] = {"dataset": dataset, "source": "paper"}
        row = paper.get(PAPER_ROW.get(dataset, ""))
        for score, method in COLUMNS:
            label = f"{SCORE_LABEL[score]} {METHOD_LABEL[method]}" if score != "gap" else "Gap"
            values = part[(part["score"] == score) & (part["method"] == method)][metric]
            ours[label] = mean_std(values)
            theirs[label] = "-" if row is None else f"{row[(score, method)]:.3f}"
            finite = values.dropna()
            tidy.append({"dataset": dataset, "score": score, "method": method,
                         "mean": finite.mean() if len(finite) else None,
                         "std": finite.std(ddof=1) if len(finite) > 1 else None,
                         "n": len(finite), "paper": None if row is None else row[(score, method)]})
        wide += [ours, theirs]
    return pd.DataFrame(wide), pd.DataFrame(tidy)


def low_fpr_table(table: pd.DataFrame) -> pd.DataFrame:
    """TPR at 1% and 0.1% FPR of the loss attacks (not in the paper), with the number of
    non-members each figure rests on."""
    main = _section(table, "main")
    rows = []
    for dataset in _datasets(main):
        part = main[(main["dataset"] == dataset) & (main["score"].isin(["loss", "gn"]))]
        for _, group in part.groupby(["score", "method"], sort=False):
            rows.append({"dataset": dataset, "attack": group["attack"].iloc[0],
                         "TPR@1%": mean_std(group[TPR1]),
                         "TPR@0.1%": mean_std(group[TPR01]),
                         "non-members": int(group["n_nonmembers"].iloc[0])})
    return pd.DataFrame(rows)


def _mean_curve(rows: pd.DataFrame, x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    curve = rows.groupby(x)[y].mean()
    return curve.index.to_numpy(float), curve.to_numpy(float)


def curves_figure(table: pd.DataFrame, path: Path) -> bool:
    """Fig. 2 analogue per dataset: ROC (log-log) and PR of loss vs calibrated loss."""
    main = table[(table["kind"] == "main")]
    roc, pr = _section(main, "roc"), _section(main, "pr")
    if roc.empty:
        return False
    pr = pr[pr["ratio"] == 1.0]
    datasets = _datasets(roc)
    fig = Figure(figsize=(3.2 * len(datasets), 6.2), layout="constrained")
    for j, dataset in enumerate(datasets):
        ax_roc = fig.add_subplot(2, len(datasets), j + 1)
        ax_pr = fig.add_subplot(2, len(datasets), len(datasets) + j + 1)
        for attack in ("loss", "calibrated-loss"):
            label, color, style = ATTACK_STYLE[attack]
            x, y = _mean_curve(roc[(roc["dataset"] == dataset) & (roc["attack"] == attack)],
                               "fpr", "tpr")
            ax_roc.plot(x, np.maximum(y, 1e-4), style, color=color, label=label)
            x, y = _mean_curve(pr[(pr["dataset"] == dataset) & (pr["attack"] == attack)],
                               "recall", "precision")
            ax_pr.plot(x, y, style, color=color, label=label)
        ax_roc.plot([1e-3, 1], [1e-3, 1], ":", color="black", lw=0.8)
        ax_roc.set(xscale="log", yscale="log", xlim=(1e-3, 1), ylim=(1e-3, 1), title=dataset,
                   xlabel="FPR", ylabel="TPR")
        ax_pr.axhline(0.5, ls=":", color="black", lw=0.8)
        ax_pr.set(xlabel="recall", ylabel="precision", ylim=(0.4, 1.0))
        ax_roc.legend(fontsize=7)
    _save(fig, path)
    return True


def _errorbars(ax: Any, part: pd.DataFrame, x: str, y: str, **style: Any) -> None:
    stats = part.groupby(x)[y].agg(["mean", "std"]).reset_index()
    ax.errorbar(stats[x], stats["mean"], yerr=stats["std"].fillna(0), capsize=3, **style)


def _log_ticks(ax: Any, values: pd.Series, label: Any) -> None:
    """Ticks at the measured x values only (a log axis' own labels collide here)."""
    ticks = sorted(float(v) for v in values.dropna().unique())
    ax.set_xticks(ticks, [label(v) for v in ticks])
    ax.minorticks_off()


def size_figure(table: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Fig. 3: AUC and accuracy of gap / loss / calibrated loss vs training-set size."""
    rows = _section(table, "size")
    if rows.empty:
        return rows
    fig = Figure(figsize=(9, 3.4), layout="constrained")
    for i, metric in enumerate(("auc", "acc")):
        ax = fig.add_subplot(1, 2, i + 1)
        for attack, (label, color, style) in ATTACK_STYLE.items():
            _errorbars(ax, rows[rows["attack"] == attack], "train_size", metric, color=color,
                       ls=style, marker="o", label=label)
        ax.set(xscale="log", xlabel="target training-set size", ylabel=metric.upper()
               if metric == "auc" else "balanced accuracy")
        _log_ticks(ax, rows["train_size"], lambda v: f"{v:g}")
        ax.legend(fontsize=8)
    fig.suptitle(f"{rows['dataset'].iloc[0]}: training-set size (fig. 3)")
    _save(fig, path)
    return _pivot(rows, "train_size", ("auc", "acc"))


def _pivot(rows: pd.DataFrame, x: str, metrics: tuple[str, ...], by: str = "attack"
           ) -> pd.DataFrame:
    out = []
    for (value, name), group in rows.groupby([x, by], sort=True):
        value = int(value) if float(value).is_integer() else value  # CSV made ints floats
        out.append({x: value, by: name, **{m: mean_std(group[m]) for m in metrics},
                    "T": len(group)})
    return pd.DataFrame(out)


def ratio_figure(table: pd.DataFrame, dataset: str, path: Path) -> pd.DataFrame:
    """Fig. 4: accuracy vs member:non-member ratio, and PR curves at each ratio."""
    ratios = _section(table, "ratio")
    ratios = ratios[ratios["dataset"] == dataset]
    if ratios.empty:
        return ratios
    pr = _section(table, "pr")
    pr = pr[(pr["dataset"] == dataset) & (pr["kind"] == "main")]
    fig = Figure(figsize=(9, 3.4), layout="constrained")
    ax = fig.add_subplot(1, 2, 1)
    for attack in ("loss", "calibrated-loss"):
        label, color, style = ATTACK_STYLE[attack]
        _errorbars(ax, ratios[ratios["attack"] == attack], "ratio", "acc", color=color,
                   ls=style, marker="o", label=label)
    ax.set(xscale="log", xlabel="members : non-members", ylabel="accuracy")
    _log_ticks(ax, ratios["ratio"], lambda v: f"1:{1 / v:g}")
    ax.legend(fontsize=8)
    ax = fig.add_subplot(1, 2, 2)
    shades = dict(zip(sorted(pr["ratio"].unique(), reverse=True),
                      np.linspace(0.9, 0.3, pr["ratio"].nunique()), strict=True))
    for attack in ("loss", "calibrated-loss"):
        _, color, style = ATTACK_STYLE[attack]
        for ratio, alpha in shades.items():
            x, y = _mean_curve(pr[(pr["attack"] == attack) & (pr["ratio"] == ratio)],
                               "recall", "precision")
            ax.plot(x, y, style, color=color, alpha=alpha,
                    label=f"{'cal.' if attack != 'loss' else 'loss'} 1:{1 / ratio:g}")
    ax.set(xlabel="recall", ylabel="precision", ylim=(0, 1))
    ax.legend(fontsize=6, ncol=2)
    fig.suptitle(f"{dataset}: member:non-member ratio (fig. 4)")
    _save(fig, path)
    out = _pivot(ratios, "ratio", ("acc", "auc"))
    at = pr[np.isclose(pr["recall"], 0.1)]  # precision at 10% recall, per ratio and attack
    out["precision@10% recall"] = [
        mean_std(at[np.isclose(at["ratio"], r) & (at["attack"] == a)]["precision"])
        for r, a in zip(out["ratio"], out["attack"], strict=True)]
    out["ratio"] = [f"1:{1 / r:g}" for r in out["ratio"]]
    return out.rename(columns={"ratio": "members:non-members"})


def refs_figure(table: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Fig. 5: calibrated loss AUC / accuracy vs number of reference models, per public size."""
    rows = _section(table, "refs")
    if rows.empty:
        return rows
    fig = Figure(figsize=(9, 3.4), layout="constrained")
    sizes = sorted(rows["public_size"].unique())
    colors = dict(zip(sizes, ["tab:green", "tab:blue", "tab:purple", "tab:red", "tab:brown"],
                      strict=False))
    for i, metric in enumerate(("auc", "acc")):
        ax = fig.add_subplot(1, 2, i + 1)
        for size in sizes:
            for method, style in (("cal", "-"), ("cal-f", "--")):
                part = rows[(rows["public_size"] == size) & (rows["method"] == method)]
                _errorbars(ax, part, "k", metric, color=colors.get(size), ls=style, marker="o",
                           label=f"{METHOD_LABEL[method]} public {int(size)}")
        ax.set(xscale="log", xlabel="reference models", ylabel=metric.upper() if metric ==
               "auc" else "balanced accuracy")
        _log_ticks(ax, rows["k"], lambda v: f"{v:g}")
        ax.legend(fontsize=6)
    fig.suptitle(f"{rows['dataset'].iloc[0]}: number of reference models (fig. 5)")
    _save(fig, path)
    public = rows["public_size"].astype(int).astype(str)
    rows = rows.assign(setting=rows["method"] + " public " + public)
    return _pivot(rows, "k", ("auc", "acc"), by="setting")


def dp_figure(table: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Fig. 6: ROC and PR curves of loss / calibrated loss against DP-SGD targets."""
    rows = _section(table, "dp")
    if rows.empty:
        return rows
    dp = table[table["kind"] == "dp"]
    finite = sorted(float(e) for e in dp["epsilon"].dropna().unique())
    eps_values = ([float("nan")] if dp["epsilon"].isna().any() else []) + finite
    fig = Figure(figsize=(9, 3.6), layout="constrained")
    ax_roc, ax_pr = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    palette = ["tab:red", "tab:green", "tab:purple", "tab:brown", "tab:pink"]
    for i, eps in enumerate(eps_values):
        sel = dp["epsilon"].isna() if pd.isna(eps) else dp["epsilon"] == eps
        for attack in ("loss", "calibrated-loss"):
            _, color, style = ATTACK_STYLE[attack]
            if pd.isna(eps):  # the undefended model: dotted, gray (loss) / black (cal.)
                color, style = ("gray" if attack == "loss" else "black"), ":"
            else:
                color = palette[i % len(palette)]
            name = f"{'loss' if attack == 'loss' else 'cal.'} " + (
                "no DP" if pd.isna(eps) else f"ε={eps:g}")
            part = dp[sel & (dp["attack"] == attack)]
            x, y = _mean_curve(_section(part, "roc"), "fpr", "tpr")
            ax_roc.plot(x, np.maximum(y, 1e-4), style, color=color, label=name)
            x, y = _mean_curve(_section(part, "pr"), "recall", "precision")
            ax_pr.plot(x, y, style, color=color, label=name)
    ax_roc.plot([1e-3, 1], [1e-3, 1], ":", color="gray", lw=0.8)
    ax_roc.set(xscale="log", yscale="log", xlim=(1e-3, 1), ylim=(1e-3, 1), xlabel="FPR",
               ylabel="TPR")
    ax_pr.set(xlabel="recall", ylabel="precision", ylim=(0.4, 1.0))
    ax_pr.legend(fontsize=6, ncol=2)
    fig.suptitle(f"{rows['dataset'].iloc[0]}: DP-SGD targets (fig. 6)")
    _save(fig, path)
    models = _section(dp, "model")
    out = []
    for eps in eps_values:
        sel = dp["epsilon"].isna() if pd.isna(eps) else dp["epsilon"] == eps
        m = models[sel.loc[models.index]]
        entry: dict[str, Any] = {"epsilon": "none" if pd.isna(eps) else f"{eps:g}",
                 "ε spent": mean_std(m["epsilon_spent"]) if "epsilon_spent" in m else "-",
                 "train acc": mean_std(m["train_acc"]), "test acc": mean_std(m["test_acc"])}
        for attack in ("loss", "calibrated-loss"):
            part = rows[sel.loc[rows.index] & (rows["attack"] == attack)]
            entry[f"{attack} AUC"] = mean_std(part["auc"])
            entry[f"{attack} TPR@1%"] = mean_std(part[TPR1])
        entry["T"] = len(m)
        out.append(entry)
    return pd.DataFrame(out)


def _md(frame: pd.DataFrame) -> str:
    return markdown_table(frame) if not frame.empty else "(no cells of this kind ran)"


def write_summary(table: pd.DataFrame, study_dir: str | Path) -> None:
    """Write summary.md, table2_auc.csv / table3_acc.csv and the figures into study_dir."""
    study_dir = Path(study_dir)
    config = load_study_config(study_dir)
    if table.empty:
        write_text(study_dir / "summary.md", "# Calibration study\n\nNo finished cells yet.\n")
        return
    parts = [f"# Calibration study (Watson et al., ICLR 2022), size `{config['size']}`\n",
             "Means ± sample std over T repetitions (random splits and initialisations). "
             "Paper numbers are transcribed from the paper's text; `-` where the paper has no "
             "such row.\n"]
    parts += ["## Target models (Table 1)\n", _md(model_table(table)), ""]
    for metric, title in (("auc", "AUC (Table 2)"), ("acc", "Attack accuracy (Table 3)")):
        wide, tidy = score_table(table, metric)
        tidy.to_csv(study_dir / f"table{2 if metric == 'auc' else 3}_{metric}.csv", index=False)
        parts += [f"## {title}\n", _md(wide), "",
                  f"{STD_NOTE[metric]}. Accuracy is balanced accuracy at a threshold chosen on "
                  "public data (a reference model plays the target); Cal.-F uses the paper's "
                  "fixed threshold 1e-4.\n" if metric == "acc" else f"{STD_NOTE[metric]}.\n"]
    parts += ["## Low-FPR view (not in the paper)\n", _md(low_fpr_table(table)), ""]
    figures = []
    if curves_figure(table, study_dir / "fig2_curves.png"):
        figures.append("fig2_curves.png: ROC (log) and PR of loss vs calibrated loss per dataset")
    for key, title, frame, name in (
        ("fig3", "Training-set size (fig. 3)", size_figure(table, study_dir / "fig3_size.png"),
         "fig3_size.png"),
        ("fig4", "Member:non-member ratio (fig. 4)",
         ratio_figure(table, _figure_dataset(table), study_dir / "fig4_ratio.png"),
         "fig4_ratio.png"),
        ("fig5", "Number of reference models (fig. 5)",
         refs_figure(table, study_dir / "fig5_references.png"), "fig5_references.png"),
        ("fig6", "DP-SGD (fig. 6)", dp_figure(table, study_dir / "fig6_dp.png"),
         "fig6_dp.png"),
    ):
        parts += [f"## {title}\n", f"Figure: `{name}`. Paper (text only): {FIGURE_CLAIMS[key]}\n",
                  _md(frame), ""]
        if not frame.empty:
            figures.append(name)
    parts += ["## Files\n"] + [f"- {f}" for f in figures] + [""]
    write_text(study_dir / "summary.md", "\n".join(parts))


def _figure_dataset(table: pd.DataFrame) -> str:
    """The figure dataset (of the size / refs / dp cells) if its main cells ran, else the
    first dataset with main cells."""
    ratios = _section(table, "ratio")
    sized = table[table["kind"].isin(["size", "refs", "dp"])]
    if not sized.empty and (ratios["dataset"] == sized["dataset"].iloc[0]).any():
        return str(sized["dataset"].iloc[0])
    return str(ratios["dataset"].iloc[0]) if not ratios.empty else ""
