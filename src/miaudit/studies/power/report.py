"""Summary of the power study: the power table, the per-target table and the figure.

Everything here reads the study table (one row per dataset x seed x attack, see
:func:`miaudit.studies.power.work`); nothing is recomputed from models or scores.

Intervals over targets: the mean of the per-target values with a Student-t interval,
``mean ± t_{(1+c)/2, n-1} · sd / sqrt(n)`` (``c`` the config's confidence, 95% by default;
none with one target), clipped to [0, 1] for AUC and TPRs. It counts what differs between
targets (their training draws and their samples), which the per-target bootstrap CIs (over
samples, in the per-target table) do not. "× anchor" is the ratio of the means over the
targets both attacks scored, ``mean_t TPR_attack(t) / mean_t TPR_anchor(t)``, once per anchor
(RMIA at the library's defaults and at its paper's configuration; each column names the
anchor's parameters); "× best anchor" divides by the stronger anchor of the dataset (the
higher mean TPR@0.1%), the goal's "≥ 2× the TPR@0.1% FPR of RMIA, averaged over ≥ 4 targets".
"AUC − anchor" is the mean of the paired per-target differences with its t-interval (the
first anchor).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from miaudit.formatting import markdown_table
from miaudit.io import atomic_open, write_text
from miaudit.records.columns import tpr_column
from miaudit.report.plots import figure_png
from miaudit.studies.intervals import t_interval
from miaudit.studies.power.anchors import anchor_descriptions, anchor_labels, best_anchor

# tables recorded before the one spelling named these columns tpr_0.1% and tpr_1%
# (miaudit.records.columns reads them)
FPRS = (0.001, 0.01)
TPR01, TPR1 = (tpr_column(f) for f in FPRS)  # "tpr@0.001", "tpr@0.01"
HELD_OUT = (0, 1, 2, 3)
ANCHORS = ("rmia",)  # tables recorded before the study had `anchors` had one, `baseline`
# What an attack's cost holds beyond the models it reads and their training (the table's
# "models", "train s" and "score s" columns).
COST_NOTES = {
    "qmia": "one quantile regression (population rows)",
    "qmia-label": "one quantile regression (population rows); no reference model",
    "rapid": "a scorer network (shadow rows)",
    "rapid-hybrid": "a scorer network (shadow rows)",
}


def _paired(table: pd.DataFrame, attack: str, baseline: str, column: str) -> pd.DataFrame:
    """``column`` of ``attack`` and of ``baseline`` side by side, per seed, on the seeds
    where both have a value."""
    def side(name: str) -> pd.Series:
        rows = table[table["attack"] == name]
        return rows.groupby("seed")[column].mean()

    both = pd.concat({"attack": side(attack), "baseline": side(baseline)}, axis=1)
    return both.dropna()


def times_baseline(table: pd.DataFrame, attack: str, baseline: str,
                   column: str = TPR01) -> float:
    """Mean of ``attack``'s ``column`` over the common targets divided by ``baseline``'s
    (one dataset's rows): inf when the baseline's mean is 0 and the attack's is not."""
    both = _paired(table, attack, baseline, column)
    if both.empty:
        return math.nan
    num, den = float(both["attack"].mean()), float(both["baseline"].mean())
    if den == 0:
        return math.nan if num == 0 else math.inf
    return num / den


def per_target_table(table: pd.DataFrame, baseline: str | list[str] = "rmia") -> pd.DataFrame:
    """One row per dataset, seed and attack with its bootstrap CIs, non-members, cost and the
    TPR@0.1% as a multiple of each anchor's (``baseline``: one or a list) on the same
    target."""
    anchors = [baseline] if isinstance(baseline, str) else list(baseline)
    cols = ["dataset", "seed", "attack", "auc", "auc_lo", "auc_hi", TPR1, f"{TPR1}_lo",
            f"{TPR1}_hi", TPR01, f"{TPR01}_lo", f"{TPR01}_hi", "n_members", "n_nonmembers",
            "cost_models", "cost_queries", "cost_train_s", "cost_score_s", "target_train_acc",
            "target_test_acc"]
    out = table[[c for c in cols if c in table]].copy()
    keys = list(zip(out["dataset"], out["seed"], strict=True))
    for anchor in anchors:
        base = table[table["attack"] == anchor].set_index(["dataset", "seed"])[TPR01]
        ref = np.array([base.get(k, np.nan) for k in keys], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[f"{TPR01} x {anchor}"] = out[TPR01].to_numpy(dtype=float) / ref
    return out.reset_index(drop=True)


def power_table(table: pd.DataFrame, baseline: str | list[str] = "rmia",
                confidence: float = 0.95) -> pd.DataFrame:
    """Per dataset and attack: targets, non-members per target, the means over targets with
    their t-intervals (AUC, TPR@1%, TPR@0.1%), × each anchor at TPR@0.1% and how many targets
    the attack beats it on, the dataset's best anchor and × it, AUC − the first anchor, and the
    mean cost. ``baseline``: the anchor or the list of anchors."""
    anchors = [baseline] if isinstance(baseline, str) else list(baseline)
    first = anchors[0]
    rows = []
    for (dataset, attack), group in table.groupby(["dataset", "attack"], sort=False):
        data = table[table["dataset"] == dataset]
        row: dict[str, Any] = {"dataset": dataset, "attack": attack,
                               "targets": int(group["seed"].nunique()),
                               "nonmembers_min": int(group["n_nonmembers"].min()),
                               "nonmembers_max": int(group["n_nonmembers"].max())}
        for column in ("auc", TPR1, TPR01):  # rates: the interval clipped to [0, 1]
            mean, lo, hi = t_interval(group[column], confidence)
            row[column], row[f"{column}_lo"], row[f"{column}_hi"] = (
                mean, *np.clip([lo, hi], 0.0, 1.0))
        best = best_anchor(data, anchors)
        for anchor in dict.fromkeys([*anchors, best]):
            row[f"x_{anchor}"] = times_baseline(data, attack, anchor)
            pair = _paired(data, attack, anchor, TPR01)
            row[f"beats_{anchor}"] = (
                f"{int((pair['attack'] > pair['baseline']).sum())}/{len(pair)}")
        row["best_anchor"] = best
        row["x_best"], row["beats_best"] = row[f"x_{best}"], row[f"beats_{best}"]
        auc = _paired(data, attack, first, "auc")
        diff = auc["attack"] - auc["baseline"]
        key = f"auc_minus_{first}"
        row[key], row[f"{key}_lo"], row[f"{key}_hi"] = t_interval(diff, confidence)
        row.update({"models": group["cost_models"].median(),
                    "queries": group["cost_queries"].median(),
                    "train_s": group["cost_train_s"].mean(),
                    "score_s": group["cost_score_s"].mean()})
        rows.append(row)
    return pd.DataFrame(rows)


def _num(value: float, fmt: str, scale: float = 1.0) -> str:
    return "–" if not np.isfinite(value) else f"{value * scale:{fmt}}"


def _with_ci(mean: float, lo: float, hi: float, fmt: str, scale: float = 1.0) -> str:
    text = _num(mean, fmt, scale)
    if np.isfinite(lo) and np.isfinite(hi):
        text += f" [{lo * scale:{fmt}}, {hi * scale:{fmt}}]"
    return text


def format_power(frame: pd.DataFrame, baseline: str | list[str] = "rmia",
                 labels: dict[str, str] | None = None) -> pd.DataFrame:
    """The power table as text: means [t-interval], TPRs in %; one "×" column per anchor
    (``labels``: their headers), then × and > the dataset's best anchor."""
    anchors = [baseline] if isinstance(baseline, str) else list(baseline)
    labels = {a: f"× {a} @0.1%" for a in anchors} | (labels or {})
    key = f"auc_minus_{anchors[0]}"
    out = []
    for r in frame.to_dict("records"):
        lo, hi = r["nonmembers_min"], r["nonmembers_max"]
        row = {
            "dataset": r["dataset"], "attack": r["attack"], "targets": r["targets"],
            "non-members/target": f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}",
            "AUC": _with_ci(r["auc"], r["auc_lo"], r["auc_hi"], ".3f"),
            "TPR@1% (%)": _with_ci(r[TPR1], r[f"{TPR1}_lo"], r[f"{TPR1}_hi"], ".2f", 100),
            "TPR@0.1% (%)": _with_ci(r[TPR01], r[f"{TPR01}_lo"], r[f"{TPR01}_hi"], ".2f", 100),
        }
        for anchor in anchors:
            row[labels[anchor]] = _ratio(r[f"x_{anchor}"])
        if len(anchors) > 1:
            row["best anchor"] = r["best_anchor"]
            row["× best"] = _ratio(r["x_best"])
        row[f"> {'best' if len(anchors) > 1 else anchors[0]}"] = r["beats_best"]
        row[f"AUC − {anchors[0]}"] = _with_ci(r[key], r[f"{key}_lo"], r[f"{key}_hi"], "+.3f")
        row.update({"models": _num(r["models"], ".0f"), "queries": _num(r["queries"], ".0f"),
                    "train s": _num(r["train_s"], ".1f"), "score s": _num(r["score_s"], ".2f"),
                    "cost beyond the models": COST_NOTES.get(r["attack"], "–")})
        out.append(row)
    return pd.DataFrame(out)


def _ratio(value: float) -> str:
    return "inf" if value == math.inf else _num(value, ".2f")


def format_per_target(frame: pd.DataFrame, baseline: str | list[str] = "rmia"
                      ) -> pd.DataFrame:
    """The per-target table as text: values [bootstrap CI over samples], TPRs in %, × each
    anchor on the same target."""
    anchors = [baseline] if isinstance(baseline, str) else list(baseline)
    out = []
    for r in frame.to_dict("records"):
        row = {
            "dataset": r["dataset"], "seed": r["seed"], "attack": r["attack"],
            "AUC": _with_ci(r["auc"], _get(r, "auc_lo"), _get(r, "auc_hi"), ".3f"),
            "TPR@1% (%)": _with_ci(r[TPR1], _get(r, f"{TPR1}_lo"), _get(r, f"{TPR1}_hi"),
                                   ".2f", 100),
            "TPR@0.1% (%)": _with_ci(r[TPR01], _get(r, f"{TPR01}_lo"), _get(r, f"{TPR01}_hi"),
                                     ".2f", 100),
        }
        for anchor in anchors:
            row[f"× {anchor}"] = _num(_get(r, f"{TPR01} x {anchor}"), ".2f")
        row.update({"non-members": f"{int(r['n_nonmembers']):,}",
                    "score s": _num(_get(r, "cost_score_s"), ".2f")})
        out.append(row)
    return pd.DataFrame(out)


def _get(row: dict[str, Any], key: str) -> float:
    value = row.get(key)
    return math.nan if value is None or pd.isna(value) else float(value)


def tpr_figure(frame: pd.DataFrame, table: pd.DataFrame, baseline: str | list[str] = "rmia",
               confidence: float = 0.95) -> Figure:
    """TPR@0.1% FPR per attack, one panel per dataset: the mean over targets with its
    t-interval, each target's value, each anchor's mean and twice the best anchor's (the goal:
    one attack at twice RMIA's TPR)."""
    anchors = [baseline] if isinstance(baseline, str) else list(baseline)
    datasets = list(pd.unique(frame["dataset"]))
    n_attacks = int(frame.groupby("dataset")["attack"].nunique().max())
    fig = Figure(figsize=(1.5 + (0.55 * n_attacks + 0.8) * len(datasets), 4.6),
                 layout="constrained")
    axes = fig.subplots(1, len(datasets), squeeze=False)[0]
    for ax, name in zip(axes, datasets, strict=True):
        rows = frame[frame["dataset"] == name].reset_index(drop=True)
        x = np.arange(len(rows))
        mean = rows[TPR01].to_numpy(float) * 100
        lo = np.nan_to_num(mean - rows[f"{TPR01}_lo"].to_numpy(float) * 100)
        hi = np.nan_to_num(rows[f"{TPR01}_hi"].to_numpy(float) * 100 - mean)
        colors = ["0.3" if a in anchors else "C0" for a in rows["attack"]]
        ax.bar(x, mean, 0.7, yerr=[lo, hi], capsize=3, color=colors, alpha=0.8)
        data = table[table["dataset"] == name]
        for i, attack in enumerate(rows["attack"]):
            values = data.loc[data["attack"] == attack, TPR01].to_numpy(float) * 100
            jitter = np.linspace(-0.15, 0.15, values.size) if values.size > 1 else [0.0]
            ax.plot(i + np.asarray(jitter), values, "k.", ms=4)
        for k, anchor in enumerate(anchors):
            base = rows.loc[rows["attack"] == anchor, TPR01]
            if not base.empty:
                ax.axhline(float(base.iloc[0]) * 100, color=f"{0.3 + 0.3 * k:.1f}",
                           ls=("--", "-.")[k % 2], lw=1, label=f"{anchor} (mean)")
        best = str(rows["best_anchor"].iloc[0]) if "best_anchor" in rows else anchors[0]
        base = rows.loc[rows["attack"] == best, TPR01]
        if not base.empty:
            ax.axhline(2 * float(base.iloc[0]) * 100, color="C3", ls=":", lw=1.2,
                       label=f"2 × {best} (best anchor)")
        ax.set_xticks(x, rows["attack"], rotation=45, ha="right", fontsize=8)
        n = int(rows["targets"].max())
        ax.set_title(f"{name} ({n} target{'' if n == 1 else 's'})")
        ax.set_ylabel("TPR at 0.1% FPR (%)")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    fig.suptitle(f"TPR at 0.1% FPR: mean over targets, {confidence:.0%} t-interval; dots: "
                 "each target")
    return fig


def goal_lines(power: pd.DataFrame, anchors: list[str], about: dict[str, str]) -> list[str]:
    """Per dataset: the best anchor (its mean TPR@0.1% against the other anchors') and the
    attack with the highest multiple of it, with whether that is ≥ 2×."""
    lines = []
    for dataset, rows in power.groupby("dataset", sort=False):
        best = str(rows["best_anchor"].iloc[0])
        tpr = rows.set_index("attack")[TPR01]
        shown = ", ".join(f"{a} {_num(float(tpr[a]), '.2f', 100)} %" for a in anchors
                          if a in tpr)
        others = rows[~rows["attack"].isin(anchors)]
        if others.empty or not np.isfinite(others["x_best"]).any():
            lines.append(f"- {dataset}: best anchor {best} ({shown}); no other attack.")
            continue
        top = others.loc[others["x_best"].astype(float).idxmax()]
        verdict = "reaches" if float(top["x_best"]) >= 2 else "does not reach"
        lines.append(f"- {dataset}: best anchor **{best}** ({about.get(best, '')}) "
                     f"(TPR@0.1%: {shown}); the strongest attack against it, "
                     f"**{top['attack']}**, is {_ratio(float(top['x_best']))}× "
                     f"({top['beats_best']} targets above it): {verdict} the 2× goal.")
    return lines


def _config(study_dir: Path) -> dict[str, Any]:
    from miaudit.studies.registry import CONFIG_FILE, load_study_config

    return load_study_config(study_dir) if (study_dir / CONFIG_FILE).exists() else {}


def _absent(config: dict[str, Any], table: pd.DataFrame) -> list[str]:
    scored = set(table["attack"]) if "attack" in table else set()
    return [a for a in config.get("optional_attacks", []) if a not in scored]


def _seed_note(seeds: list[int]) -> str:
    if tuple(sorted(seeds)) == HELD_OUT:
        return ("Targets: seeds 0–3, the held-out evaluation seeds (the settings were chosen on "
                "seeds 100–101; 0–3 were never looked at during development).")
    return (f"Targets: seeds {', '.join(map(str, seeds))} — **not the held-out evaluation "
            "seeds 0–3**: a development or check run, not the reported table.")


def _anchors(config: dict[str, Any]) -> list[str]:
    """The config's anchors (a study run before `anchors` existed has one `baseline`)."""
    anchors = config.get("anchors") or [config.get("baseline", ANCHORS[0])]
    return [str(a) for a in anchors]


def summarize(table: pd.DataFrame, study_dir: Path) -> None:
    """Write summary.md, power.csv (numeric), per_target.csv and tpr_0.1.png."""
    study_dir = Path(study_dir)
    config = _config(study_dir)
    scored = set(table["attack"]) if "attack" in table else set()
    anchors = [a for a in _anchors(config) if a in scored] or _anchors(config)[:1]
    first = anchors[0]
    about = anchor_descriptions(anchors, config.get("attack_params"))
    labels = anchor_labels(anchors, config.get("attack_params"))
    confidence = float(config.get("confidence", 0.95))
    parts = ["# Power study: every attack against RMIA with few references\n"]
    if table.empty:
        write_text(study_dir / "summary.md", parts[0] + "\nNo finished cells yet.\n")
        return
    seeds = sorted(int(s) for s in pd.unique(table["seed"]))
    absent = _absent(config, table)
    n_cells = len(table.drop_duplicates(["dataset", "seed"]))
    parts += [
        f"Command: `miaudit study power --size {config.get('size', 'cpu')}` ({n_cells} "
        f"{'cell' if n_cells == 1 else 'cells'}: "
        f"{', '.join(map(str, pd.unique(table['dataset'])))} × seeds "
        f"{', '.join(map(str, seeds))}).\n",
        _seed_note(seeds),
        f"\nOffline design, {int(table['cost_models'].max())} models per bank (the target + its "
        "references). Means over targets with a "
        f"{confidence:.0%} Student-t interval (n − 1 degrees of freedom). Anchors: "
        + "; ".join(f"`{a}` ({about[a]})" for a in anchors)
        + ". × anchor: the ratio of the mean TPR@0.1% FPR to the anchor's over the same "
        "targets; best anchor: the anchor with the higher mean TPR@0.1% on the dataset, and "
        "× best / > best the attack against it (> best: targets where the attack's TPR@0.1% "
        f"is higher); AUC − {first}: the mean paired difference. Cost: models read, queries "
        "per sample, training seconds of those models, scoring seconds (means over targets), "
        "and what the attack fits beyond the models.",
        "\nOptional attacks not registered when this ran: "
        + (", ".join(absent) if absent else "none") + ".",
    ]
    missing = [a for a in _anchors(config) if a not in scored]
    if missing:
        parts.append(f"\nAnchors not in the table: {', '.join(missing)} (no × column).")
    power = power_table(table, anchors, confidence)
    per_target = per_target_table(table, anchors)
    power.to_csv(study_dir / "power.csv", index=False)
    per_target.to_csv(study_dir / "per_target.csv", index=False)
    acc = table.groupby("dataset", sort=False)[["target_train_acc", "target_test_acc"]].mean()
    acc_lines = [f"- {d}: target accuracy train {r.target_train_acc:.3f}, test "
                 f"{r.target_test_acc:.3f} (mean over targets)"
                 for d, r in acc.iterrows()]
    parts += ["\n## Power table\n", markdown_table(format_power(power, anchors, labels)),
              "\n" + "\n".join(acc_lines),
              "\n## The goal: ≥ 2× the stronger RMIA anchor\n",
              "\n".join(goal_lines(power, anchors, about)),
              "\n## Per target (intervals: bootstrap over samples)\n",
              markdown_table(format_per_target(per_target, anchors))]
    with atomic_open(study_dir / "tpr_0.1.png", "wb") as handle:
        handle.write(figure_png(tpr_figure(power, table, anchors, confidence)))
    parts.append("\n![TPR at 0.1% FPR](tpr_0.1.png)")
    write_text(study_dir / "summary.md", "\n".join(parts) + "\n")
