"""Summary of the llm study: attack x epochs (AUC, TPR at 1% / 0.1% FPR with intervals and the
non-members they rest on), blind beside them, and the secret canaries per epochs (the one-run
ε bound, exposure in and out of training, greedy extraction).

Everything here reads the study table (one row per cell x attack, see
:func:`miaudit.studies.llm.work`); nothing is recomputed from models.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from miaudit.io import write_text
from miaudit.report.formatting import fmt_auc, markdown_table, pct_ci
from miaudit.studies.rapid.report import FPRS, TPR01, TPR1
from miaudit.studies.text.report import _with_ci, blind_lines

__all__ = ["FPRS", "attack_table", "canary_table", "summarize"]


def attack_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (epochs, attack), strongest TPR at 1% FPR first within each epochs; blind
    last (it reads no model: it measures the split)."""
    out = []
    for epochs, part in table.groupby("epochs", sort=True):
        order = part.groupby("attack", sort=False)[TPR1].mean().sort_values(ascending=False)
        names = [a for a in order.index if a != "blind"] + (["blind"] if "blind" in order else [])
        for attack in names:
            group = part[part["attack"] == attack]
            out.append({
                "epochs": int(epochs), "attack": attack,
                "AUC": _with_ci(group, "auc", fmt_auc),
                "TPR@1% FPR": _with_ci(group, TPR1, pct_ci),
                "TPR@0.1% FPR": _with_ci(group, TPR01, pct_ci),
                "non-members": int(group["n_nonmembers"].median()),
                "reps": int(group["rep"].nunique()),
            })
    return pd.DataFrame(out)


def canary_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per epochs: the target's perplexity on members / non-members, the best one-run ε over
    the attacks (each attack's bound at its own α; see the run's privacy audit for the
    Bonferroni-corrected best), exposure (sampled, capped at log2 of the candidates drawn;
    extrapolated) of the canaries in and out of training, and how many greedy decoding wrote
    out."""
    out = []
    for epochs, part in table.groupby("epochs", sort=True):
        cells = part.drop_duplicates("rep")
        models = part[part["attack"] != "blind"]
        best = models.loc[models["canary_eps"].fillna(0).idxmax()] if len(models) else None
        out.append({
            "epochs": int(epochs),
            "ppl members / non-members": f"{cells['target_train_ppl'].mean():.2f} / "
                                         f"{cells['target_test_ppl'].mean():.2f}",
            "canaries in / out": f"{int(cells['canaries_in'].mean())} / "
                                 f"{int(cells['canaries_out'].mean())}",
            "best one-run ε (attack)": "-" if best is None or pd.isna(best["canary_eps"])
            else f"{best['canary_eps']:.2f} ({best['attack']})" if best["canary_eps"] > 0
            else "0 (none certifies ε > 0)",
            "exposure in / out (median)": f"{cells['exposure_in_median'].mean():.2f} / "
                                          f"{cells['exposure_out_median'].mean():.2f}",
            "exposure cap": f"{cells['exposure_cap'].iloc[0]:.2f}",
            "extrapolated in / out": f"{cells['exposure_in_extrapolated_median'].mean():.2f} / "
                                     f"{cells['exposure_out_extrapolated_median'].mean():.2f}",
            "extracted in / out": f"{int(cells['extracted_in'].sum())} / "
                                  f"{int(cells['extracted_out'].sum())}",
            "train (s)": round(float(cells["target_train_s"].mean()), 1),
            "query (s)": round(float(cells["query_s"].mean()), 1),
            "query + score (s)": round(float(cells["epochs_wall_s"].mean()), 1),
        })
    return pd.DataFrame(out)


def summarize(table: pd.DataFrame, study_dir: Path) -> None:
    """Write summary.md, attacks.csv and canaries.csv."""
    study_dir = Path(study_dir)
    parts = ["# LLM study\n\nSmolLM2-135M LoRA-fine-tuned on SpamAssassin ham mails; the base "
             "model is the reference (no reference model trained unless `references` > 0). "
             "Members: the target's half of the audit pool; non-members: the other half.\n"]
    if table.empty:
        write_text(study_dir / "summary.md", "\n".join(parts) + "\nNo finished cells yet.\n")
        return
    attacks = attack_table(table)
    attacks.to_csv(study_dir / "attacks.csv", index=False)
    canaries = canary_table(table)
    canaries.to_csv(study_dir / "canaries.csv", index=False)
    nonmembers = int(table["n_nonmembers"].median())
    expected = {fpr: fpr * nonmembers for fpr in sorted(FPRS, reverse=True)}
    support = "; ".join(
        f"at {100 * fpr:g}% FPR on {count:g} expected false positives"
        + (" (fewer than 10: indicative only)" if count < 10 else "")
        for fpr, count in expected.items())
    parts += ["## Attacks per epochs\n",
              "One repetition: value [95% bootstrap CI]; several: mean ± std over them. TPR in "
              f"%. On {nonmembers:,} non-members the TPR rests {support}.\n",
              markdown_table(attacks),
              "\n## Secret canaries per epochs (Carlini et al. 2019)\n",
              "Exposure = log2 |R| - log2 rank of the secret among its format's candidates; "
              "the sampled figure cannot exceed log2 of the candidates drawn (the cap), the "
              "extrapolated one (a skew-normal fit) can. Canaries out of training are the "
              "yardstick.\n", markdown_table(canaries, floatfmt=".1f")]
    blind = blind_lines(table.assign(model=table["epochs"].map(
        lambda e: f"{e} epoch{'s' if e != 1 else ''}")))
    if blind:
        parts += ["\n## Blind baseline (Das et al. 2024)\n", *blind]
    write_text(study_dir / "summary.md", "\n".join(parts) + "\n")
