"""Summary of the text study: one table per model family (fine-tuned encoder, causal LMs),
the blind baseline's check, and RAPID's "about 3x difficulty calibration" claim (He et al.,
CCS 2024, on BERT fine-tuning) beside our ratio.

Everything here reads the study table (one row per cell x attack, see
:func:`miaudit.studies.text.work`); nothing is recomputed from models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from miaudit.io import write_text
from miaudit.records.outcomes import ci_columns
from miaudit.report.formatting import (
    fmt_auc,
    fmt_ci,
    markdown_table,
    mean_std,
    pct_ci,
    pct_mean_std,
)
from miaudit.studies.rapid.report import FPRS, PAPER, PAPER_NUMBERS, TPR01, TPR1

__all__ = ["FPRS", "attack_table", "claim_table", "summarize"]

TABLE_TITLES = {
    "encoder": "Fine-tuned text classifiers (ham/spam)",
    "lm": "Causal language models trained on the mails",
}
# RAPID's attack and the difficulty calibration it is measured against, per table.
CLAIM_PAIRS = {"encoder": ("rapid", "calibrated-loss"), "lm": ("lm-rapid", "lm-calibrated")}
PAPER_RATIO = next(p["value"] for p in PAPER_NUMBERS
                   if p["quantity"] == "TPR relative to difficulty calibration (about)")


def _with_ci(rows: pd.DataFrame, column: str, fmt: Any) -> str:
    """One repetition: the value and its bootstrap interval; several: mean ± std."""
    if len(rows) > 1:
        return pct_mean_std(rows[column]) if fmt is pct_ci else mean_std(rows[column])
    row = rows.iloc[0]
    lo, hi = ci_columns(column)
    ci = None if pd.isna(row.get(lo)) else (row[lo], row[hi])
    if fmt is pct_ci:
        return pct_ci(row[column], ci)
    return fmt_auc(row[column]) + fmt_ci(ci, fmt_auc)


def _fit_text(rows: pd.DataFrame, who: str) -> str:
    train, test = rows[f"{who}_train"].mean(), rows[f"{who}_test"].mean()
    if pd.isna(train):
        return "-"
    return f"{train:.3f} / {test:.3f}" if rows["fit"].iloc[0] == "acc" else \
        f"{train:.1f} / {test:.1f}"


def attack_table(table: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The attacks of ``kind``'s setups, strongest TPR at 1% FPR first within each setup."""
    rows = table[table["table"] == kind]
    out = []
    for model, part in rows.groupby("model", sort=False):
        order = part.groupby("attack", sort=False)[TPR1].mean().sort_values(ascending=False)
        for attack in order.index:
            group = part[part["attack"] == attack]
            out.append({
                "model": model, "attack": attack,
                "AUC": _with_ci(group, "auc", fmt_auc),
                "TPR@1% FPR": _with_ci(group, TPR1, pct_ci),
                "TPR@0.1% FPR": _with_ci(group, TPR01, pct_ci),
                "non-members": int(group["n_nonmembers"].median()),
                "reps": int(group["rep"].nunique()),
            })
    return pd.DataFrame(out)


def model_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per setup: what was trained, how well it fits, and the wall times (means over reps)."""
    out = []
    for model, part in table.groupby("model", sort=False):
        cells = part.drop_duplicates("rep")
        fit = "accuracy" if cells["fit"].iloc[0] == "acc" else "perplexity"
        out.append({
            "model": model, "fit": fit,
            "target train / test": _fit_text(cells, "target"),
            "references train / test": _fit_text(cells, "references"),
            "references": int(cells["n_references"].iloc[0]),
            "queries": cells["queries"].iloc[0],
            "max length": int(cells["max_length"].iloc[0]),
            "tokenizer": cells["tokenizer"].iloc[0],
            "train wall (s)": round(float(cells["train_wall_s"].mean()), 1),
            "query wall (s)": round(float(cells["query_s"].mean()), 1),
            "models trained / cached": f"{int(cells['models_trained'].sum())} / "
                                       f"{int(cells['models_from_cache'].sum())}",
        })
    return pd.DataFrame(out)


def _ratio(num: float, den: float) -> float:
    return float(num / den) if den > 0 else (np.inf if num > 0 else np.nan)


def claim_table(table: pd.DataFrame) -> pd.DataFrame:
    """RAPID's TPR over calibrated loss's, per setup and FPR (means over repetitions), beside
    the paper's ~3x (stated for BERT fine-tuning only)."""
    out = []
    for (kind, model), part in table.groupby(["table", "model"], sort=False):
        rapid, calibrated = CLAIM_PAIRS[kind]
        means = part.groupby("attack")[[TPR1, TPR01]].mean()
        if rapid not in means.index or calibrated not in means.index:
            continue
        for fpr, column in zip(FPRS, (TPR01, TPR1), strict=True):
            out.append({
                "model": model, "FPR": f"{100 * fpr:g}%",
                "expected false positives": float(fpr * part["n_nonmembers"].median()),
                "RAPID": rapid, "RAPID TPR": means.loc[rapid, column],
                "calibration": calibrated, "calibration TPR": means.loc[calibrated, column],
                "ratio (ours)": _ratio(means.loc[rapid, column], means.loc[calibrated, column]),
                "ratio (paper, BERT)": PAPER_RATIO if kind == "encoder" else None,
            })
    return pd.DataFrame(out)


def blind_lines(table: pd.DataFrame) -> list[str]:
    """Whether the model-free baseline stays at chance: it must on an i.i.d. split."""
    lines = []
    for model, part in table[table["attack"] == "blind"].groupby("model", sort=False):
        row = part.iloc[0]
        lo, hi = (row.get(c) for c in ci_columns("auc"))
        inside = pd.isna(lo) or lo <= 0.5 <= hi
        verdict = ("at chance: no member/non-member shift in the split" if inside else
                   "NOT at chance: the split has a distribution shift, fix it before trusting "
                   "any attack here")
        lines.append(f"- {model}: blind AUC {_with_ci(part, 'auc', fmt_auc)}, {verdict}.")
    return lines


def _claim_text(frame: pd.DataFrame) -> str:
    lines = []
    for values in frame.to_dict("records"):
        ratio = values["ratio (ours)"]
        shown = "-" if ratio is None or np.isnan(ratio) else f"{ratio:.2f}x"
        low = values["expected false positives"] < 10
        lines.append(f"- {values['model']} at {values['FPR']} FPR: ours {shown}"
                     + (" (fewer than 10 expected false positives: indicative only)"
                        if low else ""))
    return "\n".join(lines)


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
    parts += ["## Models\n", markdown_table(models, floatfmt=".1f")]
    for kind, title in TABLE_TITLES.items():
        frame = attack_table(table, kind)
        if frame.empty:
            continue
        frame.to_csv(study_dir / f"{kind}.csv", index=False)
        parts += [f"\n## {title}\n",
                  "One repetition: value [95% bootstrap CI]; several: mean ± std over them. "
                  "TPR in %.\n", markdown_table(frame)]
    claim = claim_table(table)
    if not claim.empty:
        claim.to_csv(study_dir / "claim.csv", index=False)
        parts += ["\n## RAPID over difficulty calibration (TPR ratio)\n",
                  markdown_table(claim, floatfmt=".3g"), "", _claim_text(claim)]
    blind = blind_lines(table)
    if blind:
        parts += ["\n## Blind baseline (Das et al. 2024)\n", *blind]
    write_text(study_dir / "summary.md", "\n".join(parts) + "\n")
