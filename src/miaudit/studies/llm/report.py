"""Summary of the llm study: attack x epochs (AUC, TPR at 1% / 0.1% FPR with intervals and the
non-members they rest on), blind beside them, and the secret canaries per epochs (the one-run
ε bound, exposure in and out of training, greedy extraction).

Everything here reads the study table (one row per cell x attack, see
:func:`miaudit.studies.llm.work`); nothing is recomputed from models.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from miaudit.formatting import fmt_auc, markdown_table, pct_ci
from miaudit.io import write_text
from miaudit.records.columns import ci_columns
from miaudit.studies.rapid.report import FPRS, TPR01, TPR1
from miaudit.studies.text.report import _with_ci, blind_lines

__all__ = ["FPRS", "attack_table", "canary_table", "ordering_lines", "seed_table",
           "summarize"]


# The published claims checked: EZ-MIA (arXiv 2601.12104) and WBC (arXiv 2601.02751) well
# above the base-model loss ratio (lm-base-reference) and the loss at low FPR.
CLAIMED = ("ez-mia", "wbc")
YARDSTICKS = ("lm-base-reference", "lm-loss")
# "Well above": at least twice the yardstick's TPR (EZ-MIA reports 3.8x at 1% FPR on GPT-2,
# WBC 2-3x), in every seed.
CLEAR_RATIO = 2.0
# A reading is a finding with at least this many seeds and expected false positives at 1% FPR
MIN_SEEDS, MIN_EXPECTED_FP = 3, 5


def _groups(table: pd.DataFrame) -> list[tuple[str, int, pd.DataFrame]]:
    """(fine-tuning, epochs, rows) in a fixed order: LoRA before full, epochs ascending."""
    tunings = table["fine_tuning"] if "fine_tuning" in table else pd.Series("lora",
                                                                            index=table.index)
    table = table.assign(fine_tuning=tunings)
    order = {name: k for k, name in enumerate(["lora", "full"])}
    keys = sorted({(t, int(e)) for t, e in zip(table["fine_tuning"], table["epochs"],
                                               strict=True)},
                  key=lambda k: (order.get(k[0], 9), k[0], k[1]))
    return [(t, e, table[(table["fine_tuning"] == t) & (table["epochs"] == e)])
            for t, e in keys]


def _ratio(part: pd.DataFrame, attack: str, yardstick: str, column: str) -> str:
    mine = part.loc[part["attack"] == attack, column].mean()
    theirs = part.loc[part["attack"] == yardstick, column].mean()
    if pd.isna(mine) or pd.isna(theirs) or attack == yardstick:
        return "-"
    return "inf" if theirs == 0 and mine > 0 else "-" if theirs == 0 else f"{mine / theirs:.2f}"


def attack_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (fine-tuning, epochs, attack), strongest TPR at 1% FPR first within each;
    blind last (it reads no model: it measures the split). The ratios are of mean TPRs to
    lm-base-reference's and lm-loss's at the same FPR."""
    out = []
    for tuning, epochs, part in _groups(table):
        order = part.groupby("attack", sort=False)[TPR1].mean().sort_values(ascending=False)
        names = [a for a in order.index if a != "blind"] + (["blind"] if "blind" in order else [])
        nonmembers = int(part["n_nonmembers"].median())
        for attack in names:
            group = part[part["attack"] == attack]
            row = {
                "fine-tuning": tuning, "epochs": int(epochs), "attack": attack,
                "AUC": _with_ci(group, "auc", fmt_auc),
                "TPR@1% FPR": _with_ci(group, TPR1, pct_ci),
                "TPR@0.1% FPR": _with_ci(group, TPR01, pct_ci),
            }
            for yardstick, short in zip(YARDSTICKS, ("base-ref", "loss"), strict=True):
                row[f"x {short} @1% / @0.1%"] = (f"{_ratio(part, attack, yardstick, TPR1)} / "
                                                 f"{_ratio(part, attack, yardstick, TPR01)}")
            row["non-members (expected FP @1% / @0.1%)"] = (
                f"{nonmembers} ({0.01 * nonmembers:g} / {0.001 * nonmembers:g})")
            row["reps"] = int(group["rep"].nunique())
            out.append(row)
    return pd.DataFrame(out)


def seed_table(table: pd.DataFrame) -> pd.DataFrame:
    """Each seed's TPR at 1% FPR with its bootstrap interval, for the claimed attacks and their
    yardsticks at each fine-tuning's last epochs."""
    out = []
    for tuning, epochs, part in _groups(table):
        if epochs != int(part["epochs"].max()) or epochs != max(
                e for t, e, _ in _groups(table) if t == tuning):
            continue
        lo, hi = ci_columns(TPR1)
        for attack in (*CLAIMED, *YARDSTICKS):
            rows = part[part["attack"] == attack].sort_values("rep")
            if rows.empty:
                continue
            row = {"fine-tuning": tuning, "epochs": int(epochs), "attack": attack}
            for r in rows.to_dict("records"):
                ci = None if pd.isna(r.get(lo)) else (r[lo], r[hi])
                row[f"seed {int(r['rep'])}"] = pct_ci(r[TPR1], ci)
            out.append(row)
    return pd.DataFrame(out)


def ordering_lines(table: pd.DataFrame) -> list[str]:
    """Whether EZ-MIA and WBC come out well above lm-base-reference and lm-loss at 1% FPR
    (at least CLEAR_RATIO x the mean, and above in every seed), per fine-tuning at its last
    epochs; the reading stays "not separated" when neither way holds in every seed."""
    lines = []
    last = {}
    for tuning, epochs, part in _groups(table):
        last[tuning] = (epochs, part)
    for tuning, (epochs, part) in last.items():
        nonmembers = int(part["n_nonmembers"].median())
        for attack in CLAIMED:
            mine = part[part["attack"] == attack].set_index("rep")[TPR1]
            if mine.empty:
                continue
            words = []
            for yardstick in YARDSTICKS:
                theirs = part[part["attack"] == yardstick].set_index("rep")[TPR1]
                if theirs.empty:
                    continue
                both = pd.concat([mine, theirs], axis=1, keys=["a", "b"]).dropna()
                ratio = both["a"].mean() / both["b"].mean() if both["b"].mean() > 0 else float(
                    "inf") if both["a"].mean() > 0 else float("nan")
                above, below = bool((both["a"] > both["b"]).all()), bool(
                    (both["a"] < both["b"]).all())
                reading = ("well above (the published ordering)" if above and ratio >= CLEAR_RATIO
                           else "above in every seed, by less than the published margin"
                           if above else "below in every seed (the ordering reverses)"
                           if below else "not separated (the seeds disagree)")
                if len(both) < MIN_SEEDS or 0.01 * nonmembers < MIN_EXPECTED_FP:
                    reading = (f"indicative only ({len(both)} seed(s), {0.01 * nonmembers:g} "
                               f"expected false positives): {reading}")
                words.append(f"{100 * both['a'].mean():.2f}% vs {yardstick} "
                             f"{100 * both['b'].mean():.2f}% (x{ratio:.2f}): {reading}")
            lines.append(f"- {tuning}, {epochs} epochs, {attack} at 1% FPR "
                         f"({len(mine)} seeds, {0.01 * nonmembers:g} expected false positives "
                         f"each): " + "; ".join(words) + ".")
    return lines


def canary_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per epochs: the target's perplexity on members / non-members, the best one-run ε over
    the attacks (each attack's bound at its own α; see the run's privacy audit for the
    Bonferroni-corrected best), exposure (sampled, capped at log2 of the candidates drawn;
    extrapolated) of the canaries in and out of training, and how many greedy decoding wrote
    out."""
    out = []
    for tuning, epochs, part in _groups(table):
        cells = part.drop_duplicates("rep")
        models = part[part["attack"] != "blind"]
        best = models.loc[models["canary_eps"].fillna(0).idxmax()] if len(models) else None
        out.append({
            "fine-tuning": tuning, "epochs": int(epochs),
            "ppl members / non-members": f"{cells['target_train_ppl'].mean():.2f} / "
                                         f"{cells['target_test_ppl'].mean():.2f}",
            "canaries in / out": f"{cells['canaries_in'].mean():.3g} / "
                                 f"{cells['canaries_out'].mean():.3g}",
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
    """Write summary.md, attacks.csv, seeds.csv and canaries.csv."""
    study_dir = Path(study_dir)
    parts = ["# LLM study\n\nSmolLM2-135M fine-tuned on SpamAssassin ham mails, with LoRA and "
             "in full (every weight); the base model is the reference (no reference model "
             "trained unless `references` > 0). Members: the target's half of the audit pool; "
             "non-members: the other half.\n"]
    if table.empty:
        write_text(study_dir / "summary.md", "\n".join(parts) + "\nNo finished cells yet.\n")
        return
    attacks = attack_table(table)
    attacks.to_csv(study_dir / "attacks.csv", index=False)
    seeds = seed_table(table)
    seeds.to_csv(study_dir / "seeds.csv", index=False)
    canaries = canary_table(table)
    canaries.to_csv(study_dir / "canaries.csv", index=False)
    nonmembers = int(table["n_nonmembers"].median())
    expected = {fpr: fpr * nonmembers for fpr in sorted(FPRS, reverse=True)}
    support = "; ".join(
        f"at {100 * fpr:g}% FPR on {count:g} expected false positives"
        + (" (fewer than 10: indicative only)" if count < 10 else "")
        for fpr, count in expected.items())
    parts += ["## Attacks per epochs\n",
              "One repetition: value [95% bootstrap CI]; several: mean ± std over them (each "
              "seed's interval: seeds.csv and the next table). TPR in %. On "
              f"{nonmembers:,} non-members the TPR rests {support}. `x base-ref` and `x loss`: "
              "the attack's mean TPR over lm-base-reference's and lm-loss's at the same FPR.\n",
              markdown_table(attacks)]
    if not seeds.empty:
        parts += ["\n## Each seed at the last epochs: TPR@1% FPR [95% bootstrap CI]\n",
                  markdown_table(seeds)]
    ordering = ordering_lines(table)
    if ordering:
        parts += ["\n## The published ordering\n",
                  "EZ-MIA (TPR@1% 66.3% vs 17.5% for the best prior attack, GPT-2 fully "
                  "fine-tuned on WikiText) and WBC (2-3x prior attacks' TPR at low FPR) claim "
                  f"to be well above the loss ratio to the base model. Read here as: at least "
                  f"{CLEAR_RATIO:g}x the yardstick's mean TPR at 1% FPR and above it in every "
                  f"seed; with fewer than {MIN_SEEDS} seeds or {MIN_EXPECTED_FP} expected false "
                  "positives, indicative only.\n", *ordering]
    parts += ["\n## Secret canaries per epochs (Carlini et al. 2019)\n",
              "Exposure = log2 |R| - log2 rank of the secret among its format's candidates; "
              "the sampled figure cannot exceed log2 of the candidates drawn (the cap), the "
              "extrapolated one (a skew-normal fit) can. Canaries out of training are the "
              "yardstick.\n", markdown_table(canaries, floatfmt=".1f")]
    tuning = table["fine_tuning"] if "fine_tuning" in table else "lora"
    blind = blind_lines(table.assign(model=[
        f"{t}, {e} epoch{'s' if e != 1 else ''}"
        for t, e in zip(pd.Series(tuning, index=table.index), table["epochs"], strict=True)]))
    if blind:
        parts += ["\n## Blind baseline (Das et al. 2024)\n", *blind]
    write_text(study_dir / "summary.md", "\n".join(parts) + "\n")
