"""Summary of the text study: the classifiers' table (fine-tuned MiniLM, text-CNN) and the
causal LMs' (when run), over repetitions; RAPID's "about 3x difficulty calibration" claim (He
et al., CCS 2024, on BERT fine-tuning) beside our ratio and its interval across repetitions;
the blind baseline's check.

Intervals: with several repetitions (seeds), every figure is the mean over them with a 95%
Student-t interval (n - 1 degrees of freedom) across repetitions; with one, the value and its
per-sample bootstrap interval. RAPID / calibration: the per-repetition ratio of the two TPRs
at one FPR (the same target, split and references), and the Student-t interval of the mean of
those ratios (:func:`ratio_interval`); the ratio of the mean TPRs is shown beside it. A
repetition whose calibration TPR is 0 has no finite ratio: the interval is then not given.

Everything here reads the study table (one row per cell x attack, see
:func:`miaudit.studies.text.work`); nothing is recomputed from models.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from miaudit.formatting import (
    fmt_auc,
    fmt_ci,
    fmt_pct,
    markdown_table,
    mean_std,
    pct_ci,
    pct_mean_std,
)
from miaudit.io import write_text
from miaudit.records.columns import ci_columns
from miaudit.studies.intervals import t_interval
from miaudit.studies.rapid.report import FPRS, PAPER, PAPER_NUMBERS, TPR01, TPR1

__all__ = ["FPRS", "attack_table", "claim_table", "ratio_interval", "repetition_table",
           "summarize", "t_interval"]

TABLE_TITLES = {
    "encoder": "Fine-tuned text classifiers (ham/spam)",
    "lm": "Causal language models trained on the mails",
}
# RAPID's attack and the difficulty calibration it is measured against, per table.
CLAIM_PAIRS = {"encoder": ("rapid", "calibrated-loss"), "lm": ("lm-rapid", "lm-calibrated")}
PAPER_RATIO = next(p["value"] for p in PAPER_NUMBERS
                   if p["quantity"] == "TPR relative to difficulty calibration (about)")
CONFIDENCE = 0.95


def ratio(num: float, den: float) -> float:
    """``num / den``; inf for a positive ``num`` over 0, NaN for 0 / 0."""
    return float(num / den) if den > 0 else (math.inf if num > 0 else math.nan)


def ratio_interval(num: Any, den: Any, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """RAPID / calibration across repetitions: ``num[i] / den[i]`` per repetition, their mean
    and Student-t interval (NaN when any repetition's ratio is not finite, or n < 2), and the
    ratio of the means."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    per_rep = [ratio(a, b) for a, b in zip(num, den, strict=True)]
    finite = all(math.isfinite(r) for r in per_rep)
    mean, lo, hi = t_interval(per_rep, confidence) if finite else (math.nan,) * 3
    return {"ratios": per_rep, "mean": mean, "lo": lo, "hi": hi, "n": len(per_rep),
            "of_means": ratio(float(num.mean()), float(den.mean())) if num.size else math.nan}


def _fmt_x(value: float) -> str:
    return f"{value:.2f}x" if math.isfinite(value) else ("inf" if value == math.inf else "-")


def _figure(rows: pd.DataFrame, column: str, rate: bool) -> str:
    """Several repetitions: mean [t interval]; one: the value [bootstrap interval]."""
    fmt = fmt_pct if rate else fmt_auc
    if len(rows) > 1:
        mean, lo, hi = t_interval(rows[column])
        text = (fmt_pct(mean) + "%") if rate else fmt_auc(mean)
        return text + ("" if math.isnan(lo) else fmt_ci((lo, hi), fmt))
    row = rows.iloc[0]
    lo_column, hi_column = ci_columns(column)
    ci = None if pd.isna(row.get(lo_column)) else (row[lo_column], row[hi_column])
    return pct_ci(row[column], ci) if rate else fmt_auc(row[column]) + fmt_ci(ci, fmt_auc)


def _fit_text(rows: pd.DataFrame, who: str) -> str:
    train, test = rows[f"{who}_train"].mean(), rows[f"{who}_test"].mean()
    if pd.isna(train):
        return "-"
    return f"{train:.3f} / {test:.3f}" if rows["fit"].iloc[0] == "acc" else \
        f"{train:.1f} / {test:.1f}"


def attack_table(table: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The attacks of ``kind``'s setups over repetitions, strongest mean TPR at 1% FPR first
    within each setup; each TPR with the members and non-members it rests on (per rep)."""
    rows = table[table["table"] == kind]
    out = []
    for model, part in rows.groupby("model", sort=False):
        order = part.groupby("attack", sort=False)[TPR1].mean().sort_values(ascending=False)
        for attack in order.index:
            group = part[part["attack"] == attack]
            out.append({
                "model": model, "attack": attack,
                "AUC": _figure(group, "auc", rate=False),
                "TPR@1% FPR": _figure(group, TPR1, rate=True),
                "TPR@0.1% FPR": _figure(group, TPR01, rate=True),
                "members / non-members": f"{int(group['n_members'].median())} / "
                                         f"{int(group['n_nonmembers'].median())}",
                "reps": int(group["seed"].nunique()),
            })
    return pd.DataFrame(out)


def repetition_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (setup, seed) with a claim pair: the target's fit and each repetition's
    loss AUC, RAPID's and calibration's TPRs and their ratio at both FPRs."""
    out = []
    for (kind, model), part in table.groupby(["table", "model"], sort=False):
        rapid, calibrated = CLAIM_PAIRS[kind]
        for seed, cell in part.groupby("seed", sort=True):
            by = cell.set_index("attack")
            if rapid not in by.index or calibrated not in by.index:
                continue
            row = {"model": model, "seed": int(seed),
                   "target train / test": _fit_text(cell.iloc[:1], "target")}
            loss = "loss" if "loss" in by.index else ("lm-loss" if "lm-loss" in by.index
                                                      else None)
            row["loss AUC"] = float(by.loc[loss, "auc"]) if loss else math.nan
            for fpr, column in ((FPRS[1], TPR1), (FPRS[0], TPR01)):
                label = f"{100 * fpr:g}%"
                num, den = float(by.loc[rapid, column]), float(by.loc[calibrated, column])
                row[f"RAPID @{label}"] = fmt_pct(num)
                row[f"calibration @{label}"] = fmt_pct(den)
                row[f"ratio @{label}"] = _fmt_x(ratio(num, den))
            out.append(row)
    return pd.DataFrame(out)


def claim_table(table: pd.DataFrame) -> pd.DataFrame:
    """RAPID's TPR over calibrated loss's, per setup and FPR, across repetitions
    (:func:`ratio_interval`), beside the paper's ~3x (stated for BERT fine-tuning only)."""
    out = []
    for (kind, model), part in table.groupby(["table", "model"], sort=False):
        rapid, calibrated = CLAIM_PAIRS[kind]
        wide = part.pivot_table(index="seed", columns="attack", values=[TPR1, TPR01])
        if (TPR1, rapid) not in wide.columns or (TPR1, calibrated) not in wide.columns:
            continue
        for fpr, column in ((FPRS[1], TPR1), (FPRS[0], TPR01)):  # 1% first
            pair = wide[[(column, rapid), (column, calibrated)]].dropna()
            num, den = pair[(column, rapid)].to_numpy(), pair[(column, calibrated)].to_numpy()
            r = ratio_interval(num, den)
            nonmembers = float(part["n_nonmembers"].median())
            out.append({
                "model": model, "FPR": f"{100 * fpr:g}%", "reps": r["n"],
                "non-members per rep": int(nonmembers),
                "expected false positives per rep": float(fpr * nonmembers),
                "RAPID": rapid, "RAPID TPR": float(num.mean()),
                "calibration": calibrated, "calibration TPR": float(den.mean()),
                "ratio per rep": ", ".join(_fmt_x(v) for v in r["ratios"]),
                "ratio (mean)": r["mean"], "ratio lo": r["lo"], "ratio hi": r["hi"],
                "ratio of means": r["of_means"],
                "ratio (paper, BERT)": PAPER_RATIO if kind == "encoder" else None,
            })
    return pd.DataFrame(out)


def _claim_text(frame: pd.DataFrame) -> str:
    lines = []
    for v in frame.to_dict("records"):
        lo, hi = v["ratio lo"], v["ratio hi"]
        if math.isnan(v["ratio (mean)"]):
            shown = (f"no interval (a repetition's calibration TPR is 0; per rep "
                     f"{v['ratio per rep']}), ratio of means {_fmt_x(v['ratio of means'])}")
        else:
            shown = (f"{_fmt_x(v['ratio (mean)'])}"
                     + ("" if math.isnan(lo) else f" [{lo:.2f}, {hi:.2f}]")
                     + f" (mean of {v['reps']} per-repetition ratios, 95% t interval; ratio "
                     f"of means {_fmt_x(v['ratio of means'])})")
        paper = v["ratio (paper, BERT)"]
        where = ""
        if paper is not None and not (pd.isna(paper) or math.isnan(lo)):
            where = ("; the paper's ~3x is inside it" if lo <= paper <= hi else
                     "; the paper's ~3x is above it" if hi < paper else
                     "; the paper's ~3x is below it")
        low = v["expected false positives per rep"] < 10
        lines.append(f"- {v['model']} at {v['FPR']} FPR ({v['non-members per rep']} "
                     f"non-members per rep): {shown}{where}"
                     + (" (fewer than 10 expected false positives per repetition: indicative "
                        "only)" if low else "") + ".")
    return "\n".join(lines)


def model_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per setup: what was trained, how well it fits, and the wall times (means over reps)."""
    out = []
    for model, part in table.groupby("model", sort=False):
        cells = part.drop_duplicates("seed")
        fit = "accuracy" if cells["fit"].iloc[0] == "acc" else "perplexity"
        epochs = cells.get("setup.recipe.epochs")
        out.append({
            "model": model, "fit": fit, "reps (seeds)": ", ".join(
                str(int(s)) for s in sorted(cells["seed"].unique())),
            "target trains on": int(part["n_members"].median()),
            "epochs": "-" if epochs is None else int(epochs.iloc[0]),
            "target train / test": _fit_text(cells, "target"),
            "references train / test": _fit_text(cells, "references"),
            "references": int(cells["n_references"].iloc[0]),
            "queries": cells["queries"].iloc[0],
            "max length": int(cells["max_length"].iloc[0]),
            "train wall (s)": round(float(cells["train_wall_s"].mean()), 1),
            "query wall (s)": round(float(cells["query_s"].mean()), 1),
            "models trained / cached": f"{int(cells['models_trained'].sum())} / "
                                       f"{int(cells['models_from_cache'].sum())}",
        })
    return pd.DataFrame(out)


def blind_lines(table: pd.DataFrame) -> list[str]:
    """Whether the model-free baseline stays at chance (its per-sample bootstrap interval
    holds 0.5) in every repetition: it must on an i.i.d. split. (The llm study's summary
    words its one repetition per setup with it too.)"""
    lines = []
    for model, part in table[table["attack"] == "blind"].groupby("model", sort=False):
        lo_col, hi_col = ci_columns("auc")
        inside = [pd.isna(r.get(lo_col)) or r[lo_col] <= 0.5 <= r[hi_col]
                  for r in part.to_dict("records")]
        n, bad = len(inside), len(inside) - sum(inside)
        verdict = ("at chance: no member/non-member shift in the split" if not bad else
                   "NOT at chance: the split has a distribution shift, fix it before trusting "
                   "any attack here")
        if n > 1:
            verdict += f" ({'all' if not bad else bad} of {n} repetitions)"
        lines.append(f"- {model}: blind AUC {_figure(part, 'auc', rate=False)}, {verdict}.")
    return lines


def _with_ci(rows: pd.DataFrame, column: str, fmt: Any) -> str:
    """One repetition: the value and its bootstrap interval; several: mean ± std (the llm
    study's tables; this study's own use :func:`_figure`)."""
    if len(rows) > 1:
        return pct_mean_std(rows[column]) if fmt is pct_ci else mean_std(rows[column])
    row = rows.iloc[0]
    lo, hi = ci_columns(column)
    ci = None if pd.isna(row.get(lo)) else (row[lo], row[hi])
    if fmt is pct_ci:
        result: str = pct_ci(row[column], ci)
        return result
    return fmt_auc(row[column]) + fmt_ci(ci, fmt_auc)


def summarize(table: pd.DataFrame, study_dir: Path) -> None:
    """Write summary.md and one CSV per table."""
    study_dir = Path(study_dir)
    parts = [f"# Text study\n\nThe claim checked: {PAPER}, Main Results 4 (LLMs, BERT "
             f"fine-tuning): RAPID reaches about {PAPER_RATIO:g}x the TPR of difficulty "
             "calibration. The summary we quote gives no FPR, dataset or absolute TPR for it.\n"]
    if table.empty:
        write_text(study_dir / "summary.md", "\n".join(parts) + "\nNo finished cells yet.\n")
        return
    models = model_table(table)
    models.to_csv(study_dir / "models.csv", index=False)
    parts += ["## Models\n", "Means over the repetitions.\n",
              markdown_table(models, floatfmt=".1f")]
    for kind, title in TABLE_TITLES.items():
        frame = attack_table(table, kind)
        if frame.empty:
            continue
        frame.to_csv(study_dir / f"{kind}.csv", index=False)
        parts += [f"\n## {title}\n",
                  "Several repetitions: mean [95% Student-t interval across repetitions]; one: "
                  "value [95% per-sample bootstrap interval]. TPR in %.\n", markdown_table(frame)]
    claim = claim_table(table)
    if not claim.empty:
        claim.to_csv(study_dir / "claim.csv", index=False)
        reps = repetition_table(table)
        reps.to_csv(study_dir / "repetitions.csv", index=False)
        parts += ["\n## RAPID over difficulty calibration (TPR ratio)\n",
                  "Per repetition (TPR in %):\n", markdown_table(reps, floatfmt=".3f"),
                  "\nAcross repetitions:\n", markdown_table(claim, floatfmt=".3g"), "",
                  _claim_text(claim)]
    blind = blind_lines(table)
    if blind:
        parts += ["\n## Blind baseline (Das et al. 2024)\n", *blind]
    write_text(study_dir / "summary.md", "\n".join(parts) + "\n")
