"""Summary of the rapid study: the paper's figures (He et al., CCS 2024) as data, our tables
beside them, and the figures (main comparison, #references, #queries, DP-SGD).

Everything here reads the study table (one row per cell x setting x attack, see
:func:`miaudit.studies.rapid.work`); nothing is recomputed from models.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from miaudit.formatting import markdown_table, mean_std, pct_mean_std
from miaudit.io import atomic_open, write_text
from miaudit.records.columns import tpr_column
from miaudit.report.plots import figure_png
from miaudit.studies.rapid.lira import lira_section, lira_table

# the FPRs results.csv records a TPR at (with its interval); tables recorded before the one
# spelling named these columns tpr_0.1% and tpr_1% (miaudit.records.columns reads them)
FPRS = (0.001, 0.01)
TPR01, TPR1 = (tpr_column(f) for f in FPRS)  # "tpr@0.001", "tpr@0.01"

PAPER = ('He et al., "Is Difficulty Calibration All We Need? Towards More Practical Membership '
         'Inference Attacks", ACM CCS 2024, arXiv 2409.00426')
# Every number we have of the paper's results, quoted in the text of a blog summary of it, with
# where it stands there (its sections). That summary's result tables and plots are images (main
# results, DP-SGD, LLMs) whose numbers are not in its text.
PAPER_NUMBERS: list[dict[str, Any]] = [
    {"source": "5. Main Results 1 (text under the main-results figure)", "dataset": "CIFAR-100",
     "attack": "best previous attack", "quantity": "TPR@0.1% FPR", "value": 0.115},
    {"source": "5. Main Results 1 (text under the main-results figure)", "dataset": "CIFAR-100",
     "attack": "rapid", "quantity": "TPR@0.1% FPR", "value": 0.188},
    {"source": "5. Main Results 2 (attack cost)", "dataset": "all", "attack": "rapid",
     "quantity": "reference models used", "value": 4},
    {"source": "5. Main Results 2 (attack cost)", "dataset": "all", "attack": "rapid",
     "quantity": "queries per sample", "value": 8},
    {"source": "5. Main Results 2 (attack cost)", "dataset": "all", "attack": "rapid",
     "quantity": "computation relative to LiRA (about)", "value": 1 / 25},
    {"source": "5. Main Results 4 (LLMs, BERT fine-tuning)", "dataset": "text",
     "attack": "rapid", "quantity": "TPR relative to difficulty calibration (about)",
     "value": 3.0},
]
PAPER_NOT_GIVEN: list[str] = [
    "Main table (CIFAR-10, CIFAR-100, CINIC-10, SVHN, Location, Texas x LiRA-offline, "
    "Canary-offline, Watson, Yeom, RAPID): an image; the text gives only the CIFAR-100 "
    "TPR@0.1% above. No AUC figure at all.",
    "Number-of-queries ablation: no number; the text says 8 queries suffice.",
    "Number-of-reference-models ablation: no number; the text says 4 references suffice, "
    "where LiRA trains 'hundreds'.",
    "DP-SGD: an image only; the text says RAPID keeps a higher success rate than the others.",
    "Cost: no per-attack table; only 'about 1/25 of LiRA's computation'.",
    "RMIA is not among the paper's baselines (miaudit adds it); Canary is not in miaudit.",
]


def paper_table() -> pd.DataFrame:
    """The paper's numbers, one row each (``value`` a fraction or a count)."""
    return pd.DataFrame(PAPER_NUMBERS, columns=["source", "dataset", "attack", "quantity",
                                                "value"])


def _order(values: pd.Series) -> list[Any]:
    return list(pd.unique(values))


def _non_dp(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["epsilon"].isna()] if "epsilon" in table else table


def _summary(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean ± std over repetitions of AUC and TPRs (in %) per ``keys``, in table order."""
    out = []
    for key, group in rows.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        out.append({**dict(zip(keys, key, strict=True)),
                    "AUC": mean_std(group["auc"]),
                    "TPR@0.1% (%)": pct_mean_std(group[TPR01]),
                    "TPR@1% (%)": pct_mean_std(group[TPR1]),
                    "reps": int(group["rep"].nunique()),
                    "non-members/rep": int(group["n_nonmembers"].median())})
    return pd.DataFrame(out)


def main_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per dataset and attack at the main setting (no DP), with the targets' accuracies."""
    rows = _non_dp(table)
    rows = rows[rows["main"].astype(bool)]
    out = _summary(rows, ["dataset", "attack"])
    if out.empty:
        return out
    acc = rows.groupby("dataset", sort=False).agg(
        train=("target_train_acc", "mean"), test=("target_test_acc", "mean"))
    out["target acc train/test"] = [f"{acc.loc[d, 'train']:.3f} / {acc.loc[d, 'test']:.3f}"
                                    for d in out["dataset"]]
    return out


def ablation_table(table: pd.DataFrame, axis: str) -> pd.DataFrame:
    """The number-of-references (``axis="n_references"``) or number-of-queries ablation."""
    rows = _non_dp(table)
    if axis == "n_references":
        rows = rows[rows["n_queries"] == rows.groupby("cell")["n_queries"].transform("max")]
    else:
        rows = rows[rows["n_references"] == rows["main_references"]]
        rows = rows[rows.groupby("dataset")["n_queries"].transform("nunique") > 1]
    return _summary(rows.sort_values([axis], kind="stable"), ["dataset", axis, "attack"])


def _augment(value: Any) -> list[Any]:
    """A cell's ``setup.recipe.augment`` as a list (results.csv holds its repr; absent: [])."""
    if isinstance(value, str):
        value = ast.literal_eval(value)
    return list(value) if isinstance(value, (list, tuple)) else []


def query_notes(table: pd.DataFrame) -> list[str]:
    """Per dataset of the number-of-queries ablation: its queries in order and whether each
    replays the recipe's training augmentation (the paper queries with it)."""
    from miaudit.signals.query import untrained_queries

    rows = _non_dp(table)
    if "query_names" not in rows or "setup.recipe.augment" not in rows:
        return []
    rows = rows[rows.groupby("dataset")["n_queries"].transform("nunique") > 1]
    notes = []
    for dataset, group in rows.groupby("dataset", sort=False):
        last = group.loc[group["n_queries"].idxmax()]
        queries = str(last["query_names"]).split(",")
        augment = _augment(last["setup.recipe.augment"])
        shown = [a if isinstance(a, str) else
                 ", ".join(f"{k}={v}" for k, v in a.items()) for a in augment] or ["none"]
        untrained = untrained_queries(queries, augment)
        verdict = ("every query replays it" if not untrained else
                   f"not trained on: {', '.join(untrained)}")
        notes.append(f"- {dataset}: queries {', '.join(queries)}; training augmentation "
                     f"[{'; '.join(shown)}]: {verdict}.")
    return notes


def dp_table(table: pd.DataFrame) -> pd.DataFrame:
    """Main setting of the DP datasets: no DP (ε = inf) beside each DP-SGD ε."""
    if "epsilon" not in table or table["epsilon"].isna().all():
        return pd.DataFrame()
    dp_sets = set(table.loc[table["epsilon"].notna(), "dataset"])
    rows = table[table["main"].astype(bool) & table["dataset"].isin(dp_sets)].copy()
    rows["ε"] = rows["epsilon"].fillna(math.inf)
    rows = rows.sort_values(["dataset", "ε"], ascending=[True, False], kind="stable")
    out = _summary(rows, ["dataset", "ε", "attack"])
    extra = rows.groupby(["dataset", "ε"], sort=False).agg(
        spent=("epsilon_spent", "mean"), train=("target_train_acc", "mean"),
        test=("target_test_acc", "mean"))
    keys = list(zip(out["dataset"], out["ε"], strict=True))
    out["ε spent"] = [extra.loc[k, "spent"] for k in keys]
    out["target acc train/test"] = [f"{extra.loc[k, 'train']:.3f} / {extra.loc[k, 'test']:.3f}"
                                    for k in keys]
    return out


def cost_table(table: pd.DataFrame) -> pd.DataFrame:
    """Cost of each attack at the main setting (no DP): models, queries, seconds (means)."""
    rows = _non_dp(table)
    rows = rows[rows["main"].astype(bool)]
    if rows.empty:
        return pd.DataFrame()
    out = rows.groupby(["dataset", "attack"], sort=False).agg(
        models=("cost_models", "median"), queries=("cost_queries", "median"),
        train_s=("cost_train_s", "mean"), score_s=("cost_score_s", "mean")).reset_index()
    out["total_s"] = out["train_s"] + out["score_s"]
    lira = out[out["attack"] == "lira-offline"].set_index("dataset")["total_s"]
    out["total / lira-offline"] = [t / lira[d] if d in lira.index else np.nan
                                   for d, t in zip(out["dataset"], out["total_s"], strict=True)]
    return out.astype({"models": int, "queries": int})


# (column, axis label, scale) of the figures' rows
_METRICS = [(TPR01, "TPR at 0.1% FPR (%)", 100), (TPR1, "TPR at 1% FPR (%)", 100),
            ("auc", "AUC", 1)]


def _save(fig: Figure, path: Path) -> None:
    with atomic_open(path, "wb") as handle:
        handle.write(figure_png(fig))


def _line_figure(table: pd.DataFrame, axis: str, xlabel: str, title: str) -> Figure | None:
    """TPR@0.1% and AUC (mean ± std over reps) against ``axis``, one column per dataset."""
    rows = _non_dp(table)
    if axis == "n_references":
        rows = rows[rows["n_queries"] == rows.groupby("cell")["n_queries"].transform("max")]
    else:
        rows = rows[rows["n_references"] == rows["main_references"]]
    datasets = [d for d in _order(rows["dataset"])
                if rows.loc[rows["dataset"] == d, axis].nunique() > 1]
    if not datasets:
        return None
    fig = Figure(figsize=(4.2 * len(datasets), 8.4), layout="constrained")
    axes = fig.subplots(len(_METRICS), len(datasets), squeeze=False)
    for j, name in enumerate(datasets):
        data = rows[rows["dataset"] == name]
        ticks = sorted(data[axis].unique())
        for attack in _order(data["attack"]):
            stats = (data[data["attack"] == attack].groupby(axis)[[m for m, _, _ in _METRICS]]
                     .agg(["mean", "std"]).sort_index())
            style = {"lw": 2.4, "color": "k"} if attack == "rapid" else {"lw": 1.2}
            for i, (metric, _, scale) in enumerate(_METRICS):
                axes[i, j].errorbar(stats.index, stats[(metric, "mean")] * scale,
                                    yerr=stats[(metric, "std")].fillna(0) * scale,
                                    marker="o", capsize=2, label=attack, **style)
        axes[0, j].set_title(f"{name}")
        for i, (_, label, _) in enumerate(_METRICS):
            axes[i, j].set_xscale("log", base=2)
            axes[i, j].set_xticks(ticks, [str(int(t)) for t in ticks])
            axes[i, j].minorticks_off()
            axes[i, j].set_xlabel(xlabel)
            axes[i, j].set_ylabel(label)
            axes[i, j].grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(title)
    return fig


def _bar_figure(table: pd.DataFrame) -> Figure | None:
    """Main setting: TPR@0.1% and AUC per dataset and attack (mean, std over reps)."""
    rows = _non_dp(table)
    rows = rows[rows["main"].astype(bool)]
    if rows.empty:
        return None
    datasets, attacks = _order(rows["dataset"]), _order(rows["attack"])
    fig = Figure(figsize=(1.6 + 2.2 * len(datasets), 8.4), layout="constrained")
    axes = fig.subplots(len(_METRICS), 1)
    width = 0.8 / len(attacks)
    for k, attack in enumerate(attacks):
        data = rows[rows["attack"] == attack].groupby("dataset")[[m for m, _, _ in _METRICS]]
        mean, std = data.mean().reindex(datasets), data.std().reindex(datasets).fillna(0)
        x = np.arange(len(datasets)) + (k - (len(attacks) - 1) / 2) * width
        for i, (metric, _, scale) in enumerate(_METRICS):
            axes[i].bar(x, mean[metric] * scale, width, yerr=std[metric] * scale, capsize=2,
                        label=attack, color="k" if attack == "rapid" else None)
    for i, (_, label, _) in enumerate(_METRICS):
        axes[i].set_xticks(np.arange(len(datasets)), datasets)
        axes[i].set_ylabel(label)
        axes[i].grid(alpha=0.3, axis="y")
        axes[i].set_ylim(0.5 if i == len(_METRICS) - 1 else 0, None)
    axes[0].legend(fontsize=7, ncols=3)
    fig.suptitle("RAPID vs reference-model attacks (main setting, mean ± std over reps)")
    return fig


def _dp_figure(table: pd.DataFrame) -> Figure | None:
    dp = table[table["main"].astype(bool)].copy() if "epsilon" in table else pd.DataFrame()
    if dp.empty or dp["epsilon"].isna().all():
        return None
    dp = dp[dp["dataset"].isin(set(dp.loc[dp["epsilon"].notna(), "dataset"]))]
    finite = sorted(dp["epsilon"].dropna().unique())
    inf_x = max(finite) * 10  # where "no DP" is drawn
    dp["x"] = dp["epsilon"].fillna(inf_x)
    datasets = _order(dp["dataset"])
    fig = Figure(figsize=(4.2 * len(datasets), 8.4), layout="constrained")
    axes = fig.subplots(len(_METRICS), len(datasets), squeeze=False)
    for j, name in enumerate(datasets):
        data = dp[dp["dataset"] == name]
        for attack in _order(data["attack"]):
            stats = (data[data["attack"] == attack].groupby("x")[[m for m, _, _ in _METRICS]]
                     .mean())
            style = {"lw": 2.4, "color": "k"} if attack == "rapid" else {"lw": 1.2}
            for i, (metric, _, scale) in enumerate(_METRICS):
                axes[i, j].plot(stats.index, stats[metric] * scale, marker="o", label=attack,
                                **style)
        for i, (_, label, _) in enumerate(_METRICS):
            axes[i, j].set_xscale("log")
            axes[i, j].set_xticks([*finite, inf_x], [f"{e:g}" for e in finite] + ["no DP"])
            axes[i, j].minorticks_off()
            axes[i, j].set_xlabel("DP-SGD ε (δ = 1e-5)")
            axes[i, j].set_ylabel(label)
            axes[i, j].grid(alpha=0.3)
        axes[0, j].set_title(name)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("Attacks against DP-SGD targets (mean over reps)")
    return fig


def summarize(table: pd.DataFrame, study_dir: Path) -> None:
    """Write summary.md (paper beside ours), one CSV per table, and the PNG figures."""
    study_dir = Path(study_dir)
    paper = paper_table()
    paper.to_csv(study_dir / "paper.csv", index=False)
    parts = [f"# RAPID study ({PAPER})\n\nPaper figures as quoted in the text of a summary of "
             "the paper (source: its section):\n",
             markdown_table(paper, floatfmt=".3g"), "\nNot given in that text:\n",
             "\n".join(f"- {line}" for line in PAPER_NOT_GIVEN)]
    if table.empty:
        write_text(study_dir / "summary.md", "\n".join(parts) + "\n\nNo finished cells yet.\n")
        return
    sections = [
        ("main", "Main setting (no DP): mean ± std over repetitions", main_table(table)),
        ("references", "Number of reference models (all queries)",
         ablation_table(table, "n_references")),
        ("queries", "Number of queries (main number of references)",
         ablation_table(table, "n_queries")),
        ("dp", "DP-SGD targets (ε = inf: no DP)", dp_table(table)),
        ("cost", "Cost per attack at the main setting (seconds: means over repetitions; train "
                 "= the models the attack uses)", cost_table(table)),
    ]
    for name, title, frame in sections:
        if frame.empty:
            continue
        frame.to_csv(study_dir / f"{name}.csv", index=False)
        parts += [f"\n## {title}\n", markdown_table(frame, floatfmt=".3g")]
        if name == "queries":
            parts += ["", *query_notes(table)]
    lira = lira_table(table)
    if not lira.empty:
        lira.to_csv(study_dir / "lira.csv", index=False)
        parts += lira_section(table)
    figures = {
        "main": _bar_figure(table),
        "references": _line_figure(table, "n_references", "reference models",
                                   "Number of reference models (mean ± std over reps)"),
        "queries": _line_figure(table, "n_queries", "queries per sample",
                                "Number of queries (mean ± std over reps)"),
        "dp": _dp_figure(table),
    }
    for name, fig in figures.items():
        if fig is not None:
            _save(fig, study_dir / f"{name}.png")
            parts.append(f"\n![{name}]({name}.png)")
    write_text(study_dir / "summary.md", "\n".join(parts) + "\n")
