"""Summary of the dp-audit study: the claimed ε beside the empirical lower bounds (main table,
per-attack detail, ``bounds.png``) and Privacy Meter 2's published one-run audit beside our
non-DP rows.

Everything here reads the study table (one row per cell x attack, see
:func:`miaudit.studies.dp_audit.work`). Each attack's bound holds at 1 − α on its own; the
largest of K such bounds does not (docs/algorithms.md §16). So every "best over attacks" here
is the Bonferroni best (:func:`bonferroni_best`): each bound of the kind recounted from its
recorded counts at α / K with :mod:`miaudit.privacy`'s own functions, the largest kept, as
``privacy_audit`` does for all bounds of a run. No plain max over attacks is reported.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from miaudit.errors import ConfigError
from miaudit.formatting import fmt_epsilon, markdown_table, mean_std
from miaudit.io import write_text
from miaudit.privacy import epsilon_from_counts, one_run_epsilon_from_counts
from miaudit.studies.rapid.report import FPRS, TPR1, _save
from miaudit.studies.registry import CONFIG_FILE, get_study, load_study_config, resolve_config

__all__ = ["FPRS", "REFERENCE_NUMBERS", "bonferroni_best", "bounds_figure",
           "main_table", "reference_table", "summarize"]

REFERENCE_SOURCE = ("Privacy Meter 2 (github.com/privacytrustlab/ml_privacy_meter), "
                    "documentation/dpaudit.md, table 'Expected Outputs'")
# Its one-run audit (Steinke et al. 2023) with RMIA: CIFAR-10, 1,000 canaries, δ = 1e-5. Its
# audit.py (compute_abstain_attack_results) evaluates a grid of (k₋, k₊) guess pairs (step
# √m: about 500 pairs at m = 1,000), each at p = 0.05, and reports the largest: a max without
# correction, not a 95% bound. Models as its configs/dpaudit/*.yaml name them: WRN-28-2 (100
# epochs) without DP, a small CNN (200 epochs) under DP-SGD; 1 reference model.
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
          "each other; they do not compare one to one. Privacy Meter 2's figure is the max "
          "over a grid of (k₋, k₊) guess pairs (about 500 at m = 1,000), each at 95%, "
          "uncorrected: not a 95% bound; ours are 95% bounds (rmia: its best of the "
          "(k₊, k₋) candidates, each at α / candidates; all attacks: the Bonferroni best).")
REFERENCE_LEGEND = ("Privacy Meter 2, one-run (CIFAR-10: other data; max over guess pairs, "
                    "uncorrected)")
REFERENCE_LABEL = ("Privacy Meter 2: one-run ε (CIFAR-10; max over guess pairs, uncorrected: "
                   "not a 95% bound)")
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


def _missing(value: Any) -> bool:
    return value is None or (not isinstance(value, str) and bool(pd.isna(value)))


# where a row records each bound kind's family α and δ: its own columns (tables since the
# Bonferroni recount), else the cell's (the study audits every bound at its alpha and delta)
_ALPHA_DELTA = {
    "eps_audit": [("eps_audit_alpha", "eps_audit_delta"), ("bound_alpha", "bound_delta")],
    "eps_canary": [("eps_canary_alpha", "eps_canary_delta"),
                   ("one_run_family_alpha", "one_run_delta")],
    "eps_one_run": [("one_run_family_alpha", "one_run_delta")],
}


def _alpha_delta(row: dict[str, Any], column: str) -> tuple[float, float]:
    """The family α and the δ of ``row``'s bound of kind ``column``."""
    for a, d in [*_ALPHA_DELTA[column], ("alpha", "delta")]:
        if not (_missing(row.get(a)) or _missing(row.get(d))):
            return float(row[a]), float(row[d])
    raise ValueError(f"the study table records no alpha and delta for {column}.")


def _tests(row: dict[str, Any], column: str) -> int:
    """How many tests ``row``'s bound of kind ``column`` is (privacy_audit's count): one per
    threshold bound, one per (k₊, k₋) candidate of a one-run bound; 0 without a bound."""
    if _missing(row.get(column)):
        return 0
    if column == "eps_one_run":
        return int(row["one_run_candidates"])
    return 0 if _missing(row.get(f"{column}_n0")) else 1


def _guesses(row: dict[str, Any]) -> list[tuple[int, int, int]]:
    """Every (k₊, k₋, v) candidate of the row's one-run bound that certified ε > 0; where the
    table predates ``one_run_guesses``, the reported candidate alone (one of the K tests, so
    its recount is still a valid bound at 1 − α, possibly lower than privacy_audit's)."""
    if not _missing(row.get("one_run_guesses")):
        found = json.loads(row["one_run_guesses"])
        return [(int(kp), int(km), int(v)) for kp, km, v in found if v is not None]
    return [(int(row["one_run_k_plus"]), int(row["one_run_k_minus"]), int(row["one_run_v"]))]


def _recount(row: dict[str, Any], column: str, alpha: float) -> float:
    """``row``'s bound of kind ``column`` recomputed from its counts at ``alpha``: τ, k₊ and k₋
    as chosen; 0 where no candidate can certify ε > 0 at that α (a lower bound of 0 is always
    true)."""
    _, delta = _alpha_delta(row, column)
    if column != "eps_one_run":
        return epsilon_from_counts(int(row[f"{column}_fp"]), int(row[f"{column}_n0"]),
                                   int(row[f"{column}_fn"]), int(row[f"{column}_n1"]),
                                   delta, alpha).epsilon
    best = 0.0
    for k_plus, k_minus, v in _guesses(row):
        try:
            again = one_run_epsilon_from_counts(int(row["one_run_m"]), k_plus + k_minus, v,
                                                delta, alpha)
        except ConfigError:  # this pair cannot certify ε > 0 at the stricter α
            continue
        best = max(best, again.epsilon)
    return best


def bonferroni_best(cell: pd.DataFrame, column: str) -> tuple[float, str, int] | None:
    """One cell's Bonferroni best of its bounds of kind ``column`` over its attacks: each of
    the K tests (one per attack's threshold bound; one per (k₊, k₋) candidate of each one-run
    bound) recounted from its recorded counts at α / K, the largest kept (ties: the first
    attack), so it holds at 1 − α: ``privacy_audit``'s rule on one kind of bound. (ε, attack,
    K); None where no attack has a bound of this kind."""
    rows = [r for r in cell.to_dict("records") if _tests(r, column)]
    if not rows:
        return None
    k = sum(_tests(r, column) for r in rows)
    best: tuple[float, str, int] | None = None
    for r in rows:
        alpha, _ = _alpha_delta(r, column)
        value = _recount(r, column, alpha / k)
        if best is None or value > best[0]:
            best = (value, str(r["attack"]), k)
    return best


def _corrected_per_rep(rows: pd.DataFrame, column: str) -> list[tuple[float, str, int]]:
    """Per repetition (one cell each within an (ε, kind) group): :func:`bonferroni_best`."""
    found = [bonferroni_best(rep, column) for _, rep in rows.groupby("rep", sort=True)]
    return [f for f in found if f is not None]


def _attack_per_rep(rows: pd.DataFrame, column: str) -> list[tuple[float, str]]:
    """Per repetition: one attack's ``column`` (``rows`` hold that attack alone)."""
    return [(float(v), str(a)) for v, a in zip(rows[column].astype("float64"), rows["attack"],
                                               strict=True) if pd.notna(v)]


def _k_text(table: pd.DataFrame, column: str) -> str:
    """'α/12', or 'α/K, K 8–12' where cells compare different numbers of tests."""
    ks = sorted({k for _, _, rows in _groups(table) for _, _, k in
                 _corrected_per_rep(rows, column)})
    if not ks:
        return "α/K"
    return f"α/{ks[0]}" if len(ks) == 1 else f"α/K, K {ks[0]}–{ks[-1]}"


def _level(table: pd.DataFrame) -> str:
    """The confidence 1 − α of the study's bounds, as '95%'."""
    alphas = table["alpha"].dropna().unique() if "alpha" in table else []
    return "95%" if len(alphas) != 1 else f"{100 * (1 - float(alphas[0])):.3g}%"


def _n_attacks(table: pd.DataFrame) -> int:
    return int(table["attack"].nunique())


def corrected_label(table: pd.DataFrame, column: str) -> str:
    """How the tables and the figure name a kind's Bonferroni best: 'threshold, audit samples:
    Bonferroni best of 4 attacks, α/4'."""
    return (f"{BOUNDS[column]}: Bonferroni best of {_n_attacks(table)} attacks, "
            f"{_k_text(table, column)}")


def all_bounds_label(table: pd.DataFrame) -> str:
    """How the tables and the figure name privacy_audit's best of every bound of a cell."""
    ks = sorted({int(k) for k in _cells(table)["bounds_compared"].dropna()})
    k = "α/K" if not ks else f"α/{ks[0]}" if len(ks) == 1 else f"α/K, K {ks[0]}–{ks[-1]}"
    return f"all bounds: Bonferroni best, {k}"


def _best_text(found: list[tuple[float, str]] | list[tuple[float, str, int]]) -> str:
    """'1.82 (rmia)' for one repetition; 'mean ± std (attacks)' for several; no attack named
    where none certifies ε > 0."""
    if not found:
        return "-"
    values = [f[0] for f in found]
    attacks = list(dict.fromkeys(f[1] for f in found if f[0] > 0))
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


def _refutes_text(cells: pd.DataFrame) -> str:
    """'no', 'yes', or 'yes in 1 of 3 reps' (each repetition's verdict is its own 95%
    statement; 'yes in any of n' is not one)."""
    hits, n = int(cells["refutes_claim"].eq(True).sum()), len(cells)
    if not hits:
        return "no"
    return "yes" if n == 1 else f"yes in {hits} of {n} reps"


def main_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per (ε, canary kind): the claim, the Bonferroni best of each kind of bound over the
    attacks (:func:`bonferroni_best`: 1 − α for that kind), privacy_audit's Bonferroni best of
    all bounds (1 − α for the cell), the target's accuracy and the counts."""
    out = []
    labels = {column: corrected_label(table, column) for column in BOUNDS}
    every = all_bounds_label(table)
    for e, kind, rows in _groups(table):
        cells = _cells(rows)
        best = [(float(c["best_epsilon"]),
                 f"{c['best_attack']}, {BOUND_WORDS.get(c['best_bound'], c['best_bound'])}")
                for c in cells.to_dict("records") if pd.notna(c["best_epsilon"])]
        out.append({
            "target ε": _eps_label(e), "claimed ε (accountant)": _claimed_text(cells),
            "canaries": kind,
            **{f"{labels[column]} (attack)": _best_text(_corrected_per_rep(rows, column))
               for column in BOUNDS},
            f"{every} (attack, bound)": _best_text(best),
            "bounds compared": int(cells["bounds_compared"].median()),
            "refutes claim": "-" if cells["refutes_claim"].isna().all() else
                             _refutes_text(cells),
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
    one_run = corrected_label(table, "eps_one_run").replace(f"{BOUNDS['eps_one_run']}:",
                                                            "one-run ε,")
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
            REFERENCE_LABEL: f"{ref['empirical_epsilon']:.3g}",
            "ours: target ε": "-" if rows.empty else _eps_label(e),
            "ours: claimed ε": "-" if rows.empty else _claimed_text(_cells(rows)),
            f"ours: one-run ε, rmia ({_level(table)})": "-" if rmia.empty else _best_text(
                _attack_per_rep(rmia, "eps_one_run")),
            f"ours: {one_run} (attack)": "-" if rows.empty else _best_text(
                _corrected_per_rep(rows, "eps_one_run")),
        })
    return pd.DataFrame(out)


def _series(rows: pd.DataFrame, column: str) -> tuple[float, float]:
    """Mean and std over repetitions of each repetition's Bonferroni best (of all bounds:
    privacy_audit's, per cell; of one kind: :func:`bonferroni_best`)."""
    if column == "best_epsilon":
        values = _cells(rows)[column].astype("float64").dropna().tolist()
    else:
        values = [f[0] for f in _corrected_per_rep(rows, column)]
    if not values:
        return math.nan, 0.0
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def bounds_figure(table: pd.DataFrame) -> Figure | None:
    """Empirical ε lower bounds against the claimed ε (log x, "no DP" at the right end), one
    panel per canary kind, the diagonal y = x drawn; Privacy Meter 2's points marked. Every
    line is a Bonferroni best over the attacks (each a 95% bound on its own); Privacy Meter 2's
    points are its published uncorrected max."""
    groups = _groups(table)
    if not groups:
        return None
    claimed = table["claimed_epsilon"].astype("float64").dropna()
    finite = sorted(claimed.unique()) if not claimed.empty else []
    reference_x = [r["claimed_epsilon"] for r in REFERENCE_NUMBERS if r["claimed_epsilon"]]
    inf_x = max([*finite, *reference_x]) * 10  # where "no DP" is drawn, right of every claim
    kinds = list(pd.unique(table["kind"]))
    reps = int(table["rep"].nunique())
    ylabel = f"empirical ε lower bound\n(each line {_level(table)} on its own" + (
        f"; mean ± std over {reps} repetitions)" if reps > 1 else ")")
    fig = Figure(figsize=(5.2 * len(kinds), 4.6), layout="constrained")
    axes = fig.subplots(1, len(kinds), squeeze=False)[0]
    lines = {**{column: corrected_label(table, column) for column in BOUNDS},
             "best_epsilon": all_bounds_label(table)}
    markers = dict(zip(lines, ("s", "^", "o", "D"), strict=True))
    # the plain per-attack bounds only set the scale (no corrected best exceeds them)
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
                    color="tab:red", label=REFERENCE_LEGEND
                    if ref["claimed_epsilon"] is None else None)
        ax.set_xscale("log")
        ax.set_xticks([*finite, inf_x], [f"{t:.3g}" for t in finite] + ["no DP"])
        ax.minorticks_off()
        ax.set_yscale("symlog", linthresh=1.0)  # 0 drawn, the diagonal visible up to 100
        ax.set_ylim(-0.05, top * 1.5)
        ax.set_xlabel("claimed ε (the accountant's; δ as audited)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{kind} canaries")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Empirical ε lower bounds vs the DP-SGD claim (per bound: the Bonferroni best "
                 "over attacks)")
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


def explanation(table: pd.DataFrame) -> str:
    """The main table's paragraph: what each column is, in the columns' own words."""
    kinds = "; ".join(f"'{corrected_label(table, c)}'" for c in BOUNDS)
    reps, level = int(table["rep"].nunique()), _level(table)
    return (
        f"Each attack's bound holds at {level} on its own (docs/algorithms.md §16); the largest "
        f"of several does not (a plain max over attacks, uncorrected, is not a {level} bound). "
        f"So each kind's column is the Bonferroni best over the {_n_attacks(table)} attacks: "
        "every bound of the kind recounted from its counts at α / K (K its tests in the cell: "
        "one per attack for a threshold bound, one per (k₊, k₋) candidate of each attack for "
        f"the one-run bound), the largest kept, a {level} bound for that kind ({kinds}). "
        f"'{all_bounds_label(table)}' recounts all bounds of the cell at α / K (K = bounds "
        f"compared; privacy_audit): the {level} bound of the cell, the one that decides "
        f"'refutes claim'. Each column holds at {level} on its own, not all four at once."
        + (f" With {reps} repetitions: mean ± std over repetitions of each repetition's bound "
           "(the mean is a summary, not a bound); 'refutes claim' counts the repetitions that "
           "refute." if reps > 1 else "")
        + " A bound above the claimed ε would refute the claim; one below it cannot confirm "
        "it.\n")


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
        explanation(table),
        markdown_table(main),
    ]
    for kind in pd.unique(table["kind"]):
        detail = detail_table(table, kind)
        detail.to_csv(study_dir / f"detail-{kind}.csv", index=False)
        parts += [f"\n## Per attack: {kind} canaries\n",
                  f"Each attack's bounds, each a {_level(table)} lower bound on its own. ε "
                  "audit: threshold bound on the audit samples (FP / n₀, FN / n₁ on the half "
                  "that did not choose τ); ε canaries: the same on the canaries; ε one-run: the "
                  "best of the (k₊, k₋) candidates, each at α / candidates (Bonferroni, so "
                  f"{_level(table)} for the attack), r guesses, v right, α per candidate.\n",
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
