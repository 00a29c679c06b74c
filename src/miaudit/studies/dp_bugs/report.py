"""Summary of the dp-bugs study: per claimed ε, the implementation × threat-model table
(claimed ε, the one-run ε-DP bound, the f-DP one, refuted or not), the bugs caught, and the
wall time; ``summary.md`` and ``dp-bugs.csv`` in the study folder.

Everything here reads the study table (one row per cell × threat model, see
:func:`miaudit.studies.dp_bugs.work`); nothing is recomputed or chosen after the fact. A row's
bounds are the best of the study's fixed (k₊, k₋) candidates, each at α / candidates, so each
holds at 1 − α on its own. "Caught" counts a planted bug whose ε-DP bound exceeds the claim
under *some* threat model: three tests per run, so a correct run is refuted by chance with
probability at most 3α; the correct implementation's rows are the check that it was not.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from miaudit.formatting import markdown_table
from miaudit.io import write_text

__all__ = ["main_table", "summarize", "caught"]

CORRECT = "correct"
COLUMNS = {
    "implementation": "implementation", "threat_model": "threat model",
    "claimed_epsilon": "claimed ε", "eps_one_run": "ε-DP bound", "fdp_epsilon": "f-DP ε",
    "refuted": "refuted", "refuted_fdp": "refuted (f-DP)", "ceiling": "ε-DP ceiling",
    "v": "v", "r": "r",
    "m": "m", "sigma_hat": "σ̂ / σ",
}


def main_table(table: pd.DataFrame) -> pd.DataFrame:
    """The study's rows in cell order, the columns of :data:`COLUMNS` (σ̂ as a ratio to the
    claimed σ: below 1, the run's own noise is smaller than the accountant's)."""
    out = table.copy()
    out["sigma_hat"] = out["sigma_hat"] / out["noise_multiplier"]
    out = out[["epsilon", *COLUMNS]].rename(columns={"epsilon": "target ε", **COLUMNS})
    for col in ("refuted", "refuted (f-DP)"):
        out[col] = out[col].map(lambda v: "**yes**" if bool(v) else "no")
    return out


def caught(table: pd.DataFrame, eps: float, column: str = "refuted") -> list[str]:
    """The implementations (not the correct one) at target ``eps`` refuted by some threat
    model (``column``: ``refuted`` or ``refuted_fdp``)."""
    rows = table[(table["epsilon"] == eps) & (table["implementation"] != CORRECT)]
    hit = rows.groupby("implementation", sort=False)[column].any()
    return [name for name, flag in hit.items() if bool(flag)]


def _findings(table: pd.DataFrame) -> list[str]:
    lines = []
    for eps in sorted(table["epsilon"].unique()):
        rows = table[table["epsilon"] == eps]
        bugs = [i for i in pd.unique(rows["implementation"]) if i != CORRECT]
        lines.append(f"- **claimed ε {eps:g}**: {len(caught(table, eps))} of {len(bugs)} "
                     f"planted bugs refuted by the ε-DP bound "
                     f"({', '.join(caught(table, eps)) or 'none'}); "
                     f"{len(caught(table, eps, 'refuted_fdp'))} by the f-DP one "
                     f"({', '.join(caught(table, eps, 'refuted_fdp')) or 'none'}).")
        top = rows.groupby("threat_model", sort=False)["ceiling"].first()
        if (top <= eps).any():
            lines.append("  - the ε-DP bound cannot exceed " + ", ".join(
                f"{c:.2f} ({tm})" for tm, c in top.items()) + " in this design (all guesses "
                "right): a claim above that is out of its reach, however much a run leaks.")
        ok = rows[rows["implementation"] == CORRECT]
        for _, r in ok.iterrows():
            verdict = ("**above the claim: a bug to find**" if r["refuted"] or r["refuted_fdp"]
                       else "below the claim, as a lower bound must be")
            lines.append(f"  - correct, {r['threat_model']}: ε-DP bound {r['eps_one_run']:.2f}, "
                         f"f-DP ε {r['fdp_epsilon']:.2f} ({verdict}).")
    return lines


def summarize(table: pd.DataFrame, study_dir: Path) -> None:
    """Write summary.md and dp-bugs.csv into ``study_dir``."""
    study_dir = Path(study_dir)
    parts = ["# dp-bugs: planted DP-SGD bugs against one-run audits\n"]
    if table.empty:
        write_text(study_dir / "summary.md", parts[0] + "\nNo finished cells yet.\n")
        return
    main = main_table(table)
    main.to_csv(study_dir / "dp-bugs.csv", index=False)
    first = table.iloc[0]
    cells = table.drop_duplicates("cell")
    parts += [
        f"Setup `{first['setup']}`: {first['spec.dataset']} MLP "
        f"({first['spec.recipe.arch_params.hidden']} hidden), {first['spec.train_rows']} "
        f"training rows, {int(first['steps'])} DP-SGD steps at sample rate "
        f"{first['sample_rate']:.3g}, {first['accountant']} accountant, δ {first['delta']:g}, "
        f"seed {first['seed']}; m = {first['spec.gradient_canaries']} white-box gradient "
        f"canaries (raw norm {first['canary_norm']:g}·C) and {first['spec.input_canaries']} "
        f"black-box mislabelled rows, each in the run with probability ½, in the same run. "
        f"{len(cells)} cells, {cells['cell_wall_s'].sum() / 60:.1f} min of cell time "
        f"(training {cells['train_s'].sum() / 60:.1f} min).\n",
        "Bounds hold at 1 − α = "
        f"{1 - first['alpha']:.2f} each (the best of {_candidates(table)} (k₊, k₋) candidates, "
        "each at α / candidates). ε-DP bound: Steinke, Nasr & Jagielski 2023, sound for any "
        "mechanism; *refuted* when it exceeds the claimed ε. f-DP ε: Mahloujifar et al. 2025's "
        "μ lower bound as ε at δ, which assumes a Gaussian trade-off curve; *refuted (f-DP)* "
        "when it exceeds the claim. White-box, every iterate: the per-step likelihood ratio of "
        "the privatised gradient on each canary's coordinate, the other rows' clipped sum "
        "subtracted (DP's adversary knows them), each step's σ read off the run; final "
        "model: θ₀ − θ_T there; black-box: the final model's loss on each mislabelled row. "
        "v of r guesses right (ε-DP bound's candidate); ε-DP ceiling: the most the design "
        "can certify (all r guesses right); "
        "σ̂ / σ: the noise the run shows against the accountant's.\n",
        "## Findings\n", "\n".join(_findings(table)) + "\n",
    ]
    for eps in sorted(table["epsilon"].unique()):
        rows = main[main["target ε"] == eps].drop(columns=["target ε"])
        parts += [f"\n## Claimed ε {eps:g}\n", markdown_table(rows, floatfmt=".3g")]
    write_text(study_dir / "summary.md", "\n".join(parts) + "\n")


def _candidates(table: pd.DataFrame) -> str:
    values = table["candidates"].dropna().unique()
    return str(int(values[0])) if len(values) == 1 else "the"
