"""Summary of the dp-audit study: the claimed ε beside the empirical lower bounds (main table,
per-attack detail, ``bounds.png``) and Privacy Meter 2's published one-run audit beside our
non-DP rows.

Everything here reads the study table (one row per cell x attack, see
:func:`miaudit.studies.dp_audit.work`); no bound is recomputed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from miaudit.io import write_text
from miaudit.report.formatting import fmt_epsilon, markdown_table, mean_std
from miaudit.studies.rapid.report import FPRS, TPR1, TPR_SPELLING, _save
from miaudit.studies.registry import CONFIG_FILE, get_study, load_study_config, resolve_config

__all__ = ["FPRS", "REFERENCE_NUMBERS", "TPR_SPELLING", "main_table", "reference_table",
           "summarize"]

REFERENCE_SOURCE = ("Privacy Meter 2 (github.com/privacytrustlab/ml_privacy_meter), "
                    "documentation/dpaudit.md, table 'Expected Outputs'")
# Its one-run audit (Steinke et al. 2023) with RMIA: CIFAR-10, 1,000 canaries, δ = 1e-5, the
# best over several numbers of guesses. Models as its configs/dpaudit/*.yaml name them: WRN-28-2
# (100 epochs) without DP, a small CNN (200 epochs) under DP-SGD; 1 reference model.
REFERENCE_NUMBERS: list[dict[str, Any]] = [
    {"canaries": kind, "training": training, "claimed_epsilon": claimed,
     "empirical_epsilon": value, "dataset": "CIFAR-10", "model": model, "m": 1000,
     "delta": 1e-5, "attack": "RMIA", "source": REFERENCE_SOURCE}
    for kind, training, claimed, value, model in [
        ("mislabelled", "non-DP", None, 5.4814, "WRN-28-2"),
        ("mislabelled", "DP-SGD", 68.51, 0.4181, "CNN"),
        ("natural", "non-DP", None, 4.5571, "WRN-28-2"),
        ("natural", "DP-SGD", 68.51, 0.1258, "CNN"),
    ]
]
CAVEAT = ("Different data and model: CIFAR-10 (WRN-28-2 without DP, a CNN under DP-SGD at "
          "ε 68.51; RMIA with 1 reference model) vs {ours} here. The numbers stand beside "
          "each other; they do not compare one to one.")
OURS = {"fashion-mnist": "Fashion-MNIST", "mlp": "MLP"}


def ours(table: pd.DataFrame) -> str:
    """Our setup in words for the caveat: 'Fashion-MNIST MLP' for the default one."""
    names = []
    for column in ("spec.dataset.name", "spec.recipe.architecture"):
        values = pd.unique(table[column]) if column in table else []
        names.append("/".join(OURS.get(str(v), str(v)) for v in values))
    return " ".join(n for n in names if n) or "our setup"

# the bound columns of the study table, and how the tables and the figure name them
BOUNDS = {"eps_audit": "threshold, audit samples", "eps_canary": "threshold, canaries",
          "eps_one_run": "one-run, canaries"}
# privacy_audit's names of the bounds (metrics keys), as the main table words them
BOUND_WORDS = {"epsilon_lower_bound": "threshold, audit", "canary_epsilon_lower_bound":
               "threshold, canaries", "one_run": "one-run"}
NO_DP = "none"


def reference_frame() -> pd.DataFrame:
    return pd.DataFrame(REFERENCE_NUMBERS)


def _groups(table: pd.DataFrame) -> list[tuple[float | None, str, pd.DataFrame]]:
    """(target ε or None, kind, rows) by increasing ε, no DP last, kinds in table order."""
    eps = table["epsilon"].astype("float64")
    order = sorted(eps.dropna().unique()) + ([None] if eps.isna().any() else [])
    out = []
    for kind in pd.unique(table["kind"]):
        for e in order:
            rows = table[(table["kind"] == kind) & (eps.isna() if e is None else eps == e)]
            if not rows.empty:
                out.append((e, kind, rows))
    return out


def _eps_label(e: float | None) -> str:
    return NO_DP if e is None else f"{e:g}"


def _best_per_rep(rows: pd.DataFrame, column: str) -> list[tuple[float, str]]:
    """Per repetition: the largest ``column`` over attacks and the attack with it."""
    out = []
    for _, rep in rows.groupby("rep", sort=True):
        values = rep[column].astype("float64")
        if values.notna().any():
            i = values.idxmax()
            out.append((float(values[i]), str(rep.loc[i, "attack"])))
    return out


def _best_text(found: list[tuple[float, str]]) -> str:
    """'1.82 (rmia)' for one repetition; 'mean ± std (attacks)' for several; no attack named
    where none certifies ε > 0."""
    if not found:
        return "-"
    values = [v for v, _ in found]
    attacks = list(dict.fromkeys(a for v, a in found if v > 0))
    shown = fmt_epsilon(values[0]) if len(values) == 1 else mean_std(values, digits=2)
    return f"{shown} ({', '.join(attacks)})" if attacks else shown


def _cells(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (the per-cell columns repeat on each attack's row)."""
    return rows.drop_duplicates("cell")


def _claimed_text(cells: pd.DataFrame) -> str:
    claimed = cells["claimed_epsilon"].astype("float64")
    if claimed.isna().all():
        return "-"
    accountant = ", ".join(str(a) for a in pd.unique(cells["accountant"].dropna()))
    return f"{fmt_epsilon(claimed.mean())}" + (f" ({accountant})" if accountant else "")


def main_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per (ε, canary kind): the claim, the best bound of each kind over attacks (each at
    1 − α on its own), the Bonferroni best of all, the target's accuracy and the counts."""
    out = []
    for e, kind, rows in _groups(table):
        cells = _cells(rows)
        best = [(float(c["best_epsilon"]),
                 f"{c['best_attack']}, {BOUND_WORDS.get(c['best_bound'], c['best_bound'])}")
                for c in cells.to_dict("records") if pd.notna(c["best_epsilon"])]
        out.append({
            "target ε": _eps_label(e), "claimed ε (accountant)": _claimed_text(cells),
            "canaries": kind,
            **{f"best {words} (attack)": _best_text(_best_per_rep(rows, column))
               for column, words in BOUNDS.items()},
            "best of all, Bonferroni": _best_text(best),
            "bounds compared": int(cells["bounds_compared"].median()),
            "refutes claim": "yes" if cells["refutes_claim"].eq(True).any() else "no",
            "train / test acc": f"{cells['target_train_acc'].mean():.3f} / "
                                f"{cells['target_test_acc'].mean():.3f}",
            "m (included)": f"{int(cells['m'].iloc[0])} "
                            f"({mean_std(cells['canaries_included'], digits=0)})",
            "non-members": int(rows["n_nonmembers"].median()),
            "reps": int(cells["rep"].nunique()),
        })
    return pd.DataFrame(out)


def _count_pair(row: dict[str, Any], prefix: str) -> tuple[str, str]:
    if pd.isna(row.get(f"{prefix}_n0")):
        return "-", "-"
    return (f"{int(row[f'{prefix}_fp'])} / {int(row[f'{prefix}_n0'])}",
            f"{int(row[f'{prefix}_fn'])} / {int(row[f'{prefix}_n1'])}")


def _int(value: Any) -> str:
    return "-" if pd.isna(value) else str(int(value))


def detail_table(table: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Every attack of every cell of ``kind``: each bound with the counts it rests on."""
    out = []
    for e, _, rows in [g for g in _groups(table) if g[1] == kind]:
        for row in rows.to_dict("records"):
            audit_fp, audit_fn = _count_pair(row, "eps_audit")
            canary_fp, canary_fn = _count_pair(row, "eps_canary")
            out.append({
                "target ε": _eps_label(e), "rep": int(row["rep"]), "attack": row["attack"],
                "AUC": row["auc"], "TPR@1% (%)": 100 * row[TPR1],
                "ε audit": row["eps_audit"], "FP / n₀": audit_fp, "FN / n₁": audit_fn,
                "ε canaries": row["eps_canary"], "FP / n₀ (c)": canary_fp,
                "FN / n₁ (c)": canary_fn, "ε one-run": row["eps_one_run"],
                "m": _int(row["one_run_m"]), "k₊": _int(row["one_run_k_plus"]),
                "k₋": _int(row["one_run_k_minus"]), "r": _int(row["one_run_r"]),
                "v": _int(row["one_run_v"]),
                "α": "-" if pd.isna(row["one_run_alpha"]) else f"{row['one_run_alpha']:.3g}",
                "δ": "-" if pd.isna(row["one_run_delta"]) else f"{row['one_run_delta']:g}",
            })
    return pd.DataFrame(out)


def _nearest_dp(table: pd.DataFrame, claimed: float) -> float | None:
    """The target ε of our DP cells nearest ``claimed`` on a log scale."""
    finite = table["epsilon"].dropna().astype("float64").unique()
    if not len(finite):
        return None
    return float(min(finite, key=lambda e: abs(math.log(e / claimed))))


def reference_table(table: pd.DataFrame) -> pd.DataFrame:
    """Privacy Meter 2's one-run bounds beside ours for the same canary kind: non-DP beside
    our non-DP cells, its DP-SGD model beside our DP cells nearest its claimed ε."""
    out = []
    for ref in REFERENCE_NUMBERS:
        kind = ref["canaries"]
        e = None if ref["claimed_epsilon"] is None else _nearest_dp(table,
                                                                   ref["claimed_epsilon"])
        eps = table["epsilon"].astype("float64")
        rows = table[(table["kind"] == kind) & (eps.isna() if e is None else eps == e)]
        if ref["claimed_epsilon"] is not None and e is None:
            rows = rows.iloc[0:0]
        rmia = rows[rows["attack"] == "rmia"]
        out.append({
            "canaries": kind, "training": ref["training"],
            "Privacy Meter 2: claimed ε": "-" if ref["claimed_epsilon"] is None else
                                          f"{ref['claimed_epsilon']:g}",
            "Privacy Meter 2: one-run ε (CIFAR-10)": f"{ref['empirical_epsilon']:.3g}",
            "ours: target ε": "-" if rows.empty else _eps_label(e),
            "ours: claimed ε": "-" if rows.empty else _claimed_text(_cells(rows)),
            "ours: one-run ε, rmia": "-" if rmia.empty else _best_text(
                _best_per_rep(rmia, "eps_one_run")),
            "ours: one-run ε, best attack": "-" if rows.empty else _best_text(
                _best_per_rep(rows, "eps_one_run")),
        })
    return pd.DataFrame(out)


def _series(rows: pd.DataFrame, column: str) -> tuple[float, float]:
    """Mean and std over repetitions of the per-repetition best (Bonferroni best: per cell)."""
    if column == "best_epsilon":
        values = _cells(rows)[column].astype("float64").dropna().tolist()
    else:
        values = [v for v, _ in _best_per_rep(rows, column)]
    if not values:
        return math.nan, 0.0
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def bounds_figure(table: pd.DataFrame) -> Figure | None:
    """Empirical ε lower bounds against the claimed ε (log x, "no DP" at the right end), one
    panel per canary kind, the diagonal y = x drawn; Privacy Meter 2's points marked."""
    groups = _groups(table)
    if not groups:
        return None
    claimed = table["claimed_epsilon"].astype("float64").dropna()
    finite = sorted(claimed.unique()) if not claimed.empty else []
    reference_x = [r["claimed_epsilon"] for r in REFERENCE_NUMBERS if r["claimed_epsilon"]]
    inf_x = max([*finite, *reference_x]) * 10  # where "no DP" is drawn, right of every claim
    kinds = list(pd.unique(table["kind"]))
    fig = Figure(figsize=(5.2 * len(kinds), 4.6), layout="constrained")
    axes = fig.subplots(1, len(kinds), squeeze=False)[0]
    lines = {**BOUNDS, "best_epsilon": "best of all (Bonferroni)"}
    markers = dict(zip(lines, ("s", "^", "o", "D"), strict=True))
    top = max([*finite, *reference_x,
               *(v for v in table[list(lines)].max(numeric_only=True) if pd.notna(v))])
    for ax, kind in zip(axes, kinds, strict=True):
        points = []
        for e, _, rows in [g for g in groups if g[1] == kind]:
            x = inf_x if e is None else float(_cells(rows)["claimed_epsilon"].mean())
            points.append((x, {c: _series(rows, c) for c in lines}))
        points.sort(key=lambda p: p[0])
        for column, words in lines.items():
            style = {"color": "k", "lw": 2.2} if column == "best_epsilon" else {"lw": 1.2}
            dp = [(x, *p[column]) for x, p in points if x != inf_x]
            nodp = [(x, *p[column]) for x, p in points if x == inf_x]
            drawn = None
            if dp:  # the DP claims joined; "no DP" is a point of its own (no claim to join)
                x, mean, std = zip(*dp, strict=True)
                drawn = ax.errorbar(x, mean, yerr=std, marker=markers[column], capsize=2,
                                    label=words, **style)
            if nodp:
                x, mean, std = zip(*nodp, strict=True)
                color = drawn.lines[0].get_color() if drawn else style.get("color")
                ax.errorbar(x, mean, yerr=std, marker=markers[column], capsize=2, ls="none",
                            color=color, label=None if drawn else words)
        diag = np.array([min([*finite, *reference_x]) / 1.5, inf_x / 3])
        ax.plot(diag, diag, color="0.5", ls="--", lw=1, label="y = x (the claim)")
        for ref in (r for r in REFERENCE_NUMBERS if r["canaries"] == kind):
            x = inf_x if ref["claimed_epsilon"] is None else ref["claimed_epsilon"]
            ax.plot([x], [ref["empirical_epsilon"]], marker="X", ms=9, ls="none",
                    color="tab:red", label="Privacy Meter 2, one-run (CIFAR-10: other data)"
                    if ref["claimed_epsilon"] is None else None)
        ax.set_xscale("log")
        ax.set_xticks([*finite, inf_x], [f"{t:.3g}" for t in finite] + ["no DP"])
        ax.minorticks_off()
        ax.set_yscale("symlog", linthresh=1.0)  # 0 drawn, the diagonal visible up to 100
        ax.set_ylim(-0.05, top * 1.5)
        ax.set_xlabel("claimed ε (the accountant's; δ as audited)")
        ax.set_ylabel("empirical ε lower bound (95%)")
        ax.set_title(f"{kind} canaries")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Empirical ε lower bounds vs the DP-SGD claim (best attack per bound)")
    return fig


def _header(table: pd.DataFrame, study_dir: Path) -> list[str]:
    """The command, wall time and counts of the study."""
    lines = []
    if (study_dir / CONFIG_FILE).exists():
        config = load_study_config(study_dir)
        size = config.get("size", "cpu")
        default = resolve_config(get_study("dp-audit"), size)
        changed = [k for k in config if config[k] != default.get(k)]
        command = f"miaudit study dp-audit --size {size}"
        lines.append(f"Command: `{command}`" + (
            f" with `--config` overriding {', '.join(changed)}." if changed else "."))
    if table.empty:
        return lines
    cells = _cells(table)
    lines.append(
        f"{len(cells)} cells ({cells['kind'].nunique()} canary kinds x "
        f"{cells['epsilon'].astype('float64').fillna(math.inf).nunique()} ε settings x "
        f"{cells['rep'].nunique()} repetitions), {len(table)} rows; wall time "
        f"{cells['cell_wall_s'].sum():.0f} s summed over cells as each first ran (training "
        f"{cells['train_wall_s'].sum():.0f} s); models trained {int(cells['models_trained'].sum())}"
        f", from the cache {int(cells['models_from_cache'].sum())}.")
    return lines


def summarize(table: pd.DataFrame, study_dir: Path) -> None:
    """Write summary.md, main.csv, one detail CSV per canary kind, reference.csv and
    bounds.png."""
    study_dir = Path(study_dir)
    reference_frame().to_csv(study_dir / "reference.csv", index=False)
    parts = ["# DP audit: empirical ε against the DP-SGD claim\n", *_header(table, study_dir)]
    if table.empty:
        write_text(study_dir / "summary.md", "\n\n".join(parts) + "\n\nNo finished cells yet.\n")
        return
    main = main_table(table)
    main.to_csv(study_dir / "main.csv", index=False)
    parts += [
        "\n## Claimed ε vs empirical lower bounds\n",
        "Each bound is a 95% lower bound (docs/algorithms.md §16): best of its kind over the "
        "attacks, each holding at 95% on its own; 'best of all' is every bound recounted at "
        "α / K (Bonferroni) and holds at 95% for the cell. A bound above the claimed ε would "
        "refute the claim; one below it cannot confirm it.\n",
        markdown_table(main),
    ]
    for kind in pd.unique(table["kind"]):
        detail = detail_table(table, kind)
        detail.to_csv(study_dir / f"detail-{kind}.csv", index=False)
        parts += [f"\n## Per attack: {kind} canaries\n",
                  "ε audit: threshold bound on the audit samples (FP / n₀, FN / n₁ on the half "
                  "that did not choose τ); ε canaries: the same on the canaries; ε one-run: the "
                  "best (k₊, k₋) candidate, r guesses, v right, α per candidate.\n",
                  markdown_table(detail, floatfmt=".3g")]
    reference = reference_table(table)
    reference.to_csv(study_dir / "reference-vs-ours.csv", index=False)
    parts += ["\n## Privacy Meter 2's published one-run audit beside ours\n",
              f"Source: {REFERENCE_SOURCE} (m = 1,000, δ = 1e-5, RMIA). "
              f"{CAVEAT.format(ours=ours(table))}\n",
              markdown_table(reference)]
    fig = bounds_figure(table)
    if fig is not None:
        _save(fig, study_dir / "bounds.png")
        parts.append("\n![bounds](bounds.png)")
    write_text(study_dir / "summary.md", "\n".join(parts) + "\n")
