"""The LiRA cell of the rapid study: CIFAR-10 at the size of Carlini et al.'s experiments
("Membership Inference Attacks From First Principles", IEEE S&P 2022), 64 reference models,
online and offline, with the figures of the authors' code beside ours.

The setup (:data:`LIRA_SETUP`, ``cifar10-lira`` in the paper config's ``setups``): all 60,000
CIFAR-10 images, 25,000 audited, 25,000 public, 10,000 population (RMIA's z samples, never
trained on); the ``online`` design: every audited and public image is IN for 32 of the 65
models, so each model trains on about 24,600 images, as in LiRA's experiments (half of the
50,000 training images). Model 0 is the target, 1-64 its references. Recipe: airbench94 (K. Jordan,
arXiv:2404.00498; :data:`miaudit.train.airbench.AIRBENCH94_RECIPE`), a model in seconds on a
GPU. Queries: plain and mirror, the views its alternating flip trains on (the two queries of
the authors' demo).

The figures beside ours (:data:`REFERENCE_CODE`) are those the README of the authors' code
prints for its demo (tensorflow/privacy, ``research/mi_lira_2021/README.md``): 16 wide ResNets
on CIFAR-10 (about 91% accuracy), each model attacked in turn with the other 15, pooled. They
are not the paper's Table 1 (256 shadow models), whose numbers are not quoted here because
they could not be checked against the paper's text. Our cell differs: 64 references, one
target, airbench94, 25,000 audited images. The authors' offline score is two-sided (the
negative log density under the OUT Gaussian: ``lira-offline-two-sided``); the paper's test is
one-sided (``lira-offline``); both are scored.

The cell runs with ``docs/studies/rapid/lira-cell.yaml`` (the command is in that file and in
``docs/studies/rapid/lira-cell.md``); no GPU figure has been recorded yet.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from miaudit.records.columns import tpr_column
from miaudit.signals.query import training_queries
from miaudit.train.airbench import AIRBENCH94_RECIPE

LIRA_SETUP: dict[str, Any] = {
    "dataset": "cifar10",
    "design": "online",
    "split": {"audit": 25000, "public": 25000, "population": 10000},
    "recipe": dict(AIRBENCH94_RECIPE),
    "queries": training_queries(AIRBENCH94_RECIPE["augment"], 2),  # plain, mirror
}
# The attacks the cell scores: LiRA's four variants (and the reference code's offline score),
# RMIA offline and online, RAPID, Watson's calibrated loss and Yeom's loss.
LIRA_ATTACKS = ["lira-online", "lira-online-fixed-variance", "lira-offline",
                "lira-offline-fixed-variance", "lira-offline-two-sided", "rmia", "rmia-online",
                "rapid", "calibrated-loss", "loss"]

REFERENCE_SOURCE = ("Carlini et al., \"Membership Inference Attacks From First Principles\", "
                    "IEEE S&P 2022: the README of the authors' code (tensorflow/privacy, "
                    "research/mi_lira_2021), its CIFAR-10 demo: 16 wide ResNets (~91% "
                    "accuracy), each attacked with the other 15, pooled")
# (the README's attack name, the attack of ours it corresponds to, AUC, TPR at 0.1% FPR)
REFERENCE_CODE: list[dict[str, Any]] = [
    {"theirs": "Ours (online)", "attack": "lira-online", "auc": 0.6676, "tpr": 0.0169},
    {"theirs": "Ours (online, fixed variance)", "attack": "lira-online-fixed-variance",
     "auc": 0.6856, "tpr": 0.0593},
    {"theirs": "Ours (offline)", "attack": "lira-offline-two-sided", "auc": 0.5488,
     "tpr": 0.0130},
    # theirs is two-sided with one variance; ours with one variance is the one-sided test
    {"theirs": "Ours (offline, fixed variance)", "attack": "lira-offline-fixed-variance",
     "auc": 0.5549, "tpr": 0.0299},
    {"theirs": "Global threshold", "attack": "loss", "auc": 0.5921, "tpr": 0.0009},
]
THEIR_REFERENCES = 15  # each of their 16 models attacked with the other 15
TPR01 = tpr_column(0.001)


def online_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of online-design cells (the LiRA cell), without DP."""
    if "setup.design" not in table:
        return table.iloc[0:0]
    rows = table[table["setup.design"] == "online"]
    return rows[rows["epsilon"].isna()] if "epsilon" in rows else rows


def lira_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per online dataset and attack, with all queries, at the number of references closest
    to the reference code's 15 and at the most: ours (mean over repetitions) beside the
    reference code's figure for that attack."""
    rows = online_rows(table)
    if rows.empty:
        return pd.DataFrame()
    rows = rows[rows["n_queries"] == rows.groupby("dataset")["n_queries"].transform("max")]
    theirs = {r["attack"]: r for r in REFERENCE_CODE}
    out = []
    for dataset, data in rows.groupby("dataset", sort=False):
        counts = sorted(data["n_references"].unique())
        closest = min(counts, key=lambda r: (abs(r - THEIR_REFERENCES), r))
        for attack, group in data.groupby("attack", sort=False):
            ref = theirs.get(attack)
            for n_refs in dict.fromkeys([closest, counts[-1]]):
                at = group[group["n_references"] == n_refs]
                out.append({
                    "dataset": dataset, "attack": attack, "references": int(n_refs),
                    "queries": int(at["n_queries"].iloc[0]), "reps": int(at["rep"].nunique()),
                    "AUC": float(at["auc"].mean()),
                    "TPR@0.1% (%)": 100 * float(at[TPR01].mean()),
                    "non-members/rep": int(at["n_nonmembers"].median()),
                    "reference code": ref["theirs"] if ref else "",
                    "their AUC": ref["auc"] if ref else np.nan,
                    "their TPR@0.1% (%)": 100 * ref["tpr"] if ref else np.nan,
                })
    return pd.DataFrame(out)


def lira_section(table: pd.DataFrame) -> list[str]:
    """The summary's markdown lines for the LiRA cell (none when it has not run)."""
    from miaudit.formatting import markdown_table

    frame = lira_table(table)
    if frame.empty:
        return []
    return [f"\n## LiRA cell (online design) beside {REFERENCE_SOURCE}\n",
            markdown_table(frame, floatfmt=".3g"), "",
            "Their figures: 16 models, every model attacked with the other 15; ours: one "
            "target, the references above, the recipe and data of the cell (see "
            "`miaudit.studies.rapid.lira`). Their offline score is two-sided "
            "(lira-offline-two-sided); with one variance ours is the paper's one-sided test. "
            "Their 'Global threshold' is a loss threshold (our loss)."]
