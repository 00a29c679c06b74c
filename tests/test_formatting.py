"""The one formatter per kind of number, and the one markdown-table writer that the study
summaries and checkpoints.md share."""

from __future__ import annotations

import math

import pandas as pd

from miaudit.formatting import (
    ci_words,
    fmt_ci,
    fmt_pct,
    markdown_table,
    mean_std,
    pct,
    pct_ci,
    pct_mean_std,
)
from miaudit.metrics import evaluate
from miaudit.pipeline.checkpoint_audit import checkpoints_table


def test_percentages():
    assert [fmt_pct(v) for v in (0.048, 0.0012, None, math.nan)] == ["4.8", "0.12", "-", "-"]
    assert pct(0.048) == "4.8%" and pct(None) == "-"
    assert pct_ci(0.048, [0.041, 0.0523]) == "4.8% [4.1, 5.2]"
    assert pct_ci(0.0012, None) == "0.12%" and pct_ci(None, None) == "-"
    assert fmt_ci((0.5, 0.625), lambda v: f"{v:.3f}") == " [0.500, 0.625]"
    assert fmt_ci(None, pct) == "" and fmt_ci([None, None], pct) == ""


def test_interval_in_words():
    assert ci_words([0.041, 0.052], "95% CI") == "95% CI 4.1% to 5.2%"
    assert ci_words((0.61, 0.7), fmt=lambda v: f"{v:.3f}") == "CI 0.610 to 0.700"
    assert ci_words(None) == "no CI"
    assert ci_words(None, missing="no confidence interval") == "no confidence interval"


def test_mean_std():
    assert mean_std([0.5, 0.7, math.nan]) == "0.600 ± 0.141"
    assert mean_std(pd.Series([0.25])) == "0.250" and mean_std([]) == "-"
    assert mean_std([math.nan]) == "-"
    # percent, 2 decimals, as the studies' TPR columns
    assert pct_mean_std([0.01, 0.03]) == "2.00 ± 1.41"
    assert pct_mean_std(pd.Series([0.0123])) == "1.23" and pct_mean_std([]) == "-"


def test_markdown_table_from_a_frame_or_rows():
    frame = pd.DataFrame({"attack": ["loss", "lira"], "auc": [0.61234, math.nan],
                          "reps": [3, 4]})
    expected = ("| attack | auc | reps |\n|---|---|---|\n"
                "| loss | 0.612 | 3 |\n| lira | - | 4 |")
    assert markdown_table(frame) == expected
    rows = [["loss", 0.61234, 3], ["lira", None, 4]]
    assert markdown_table(rows, header=["attack", "auc", "reps"]) == expected
    assert markdown_table(rows, ".2f", header=["attack", "auc", "reps"]).splitlines()[2] == (
        "| loss | 0.61 | 3 |")
    assert markdown_table(frame.iloc[0:0]) == "| attack | auc | reps |\n|---|---|---|"


def _rows(members):
    import numpy as np

    rng = np.random.default_rng(0)
    scores = rng.normal(size=members.size) + members
    met = evaluate(scores, members, fprs=[0.001, 0.1], n_bootstrap=0)
    keep = ("auc", "auc_ci", "tpr_at_fpr", "tpr_at_fpr_ci", "n_members", "n_nonmembers")
    attacks = {"loss": {k: met[k] for k in keep}}
    return met, [{"checkpoint": "epoch1", "step": 10, "epoch": 1.0, "train_acc": 0.9,
                  "test_acc": 0.8, "epsilon_spent": None, "attacks": attacks}]


def test_checkpoints_table_writes_tprs_as_the_results_table():
    import numpy as np

    members = np.arange(200) % 2 == 0
    met, rows = _rows(members)
    text = checkpoints_table(rows, [0.001, 0.1])
    lines = text.splitlines()
    assert lines[0] == "| checkpoint | epoch | train acc | test acc | loss AUC | " \
                       "loss TPR@0.1% FPR | loss TPR@10% FPR |"
    assert lines[1] == "|---|---|---|---|---|---|---|"
    tprs = [pct(met["tpr_at_fpr"][k]) for k in ("0.001", "0.1")]
    assert lines[2] == f"| epoch1 | 1 | 0.900 | 0.800 | {met['auc']:.3f} | {tprs[0]} | {tprs[1]} |"
    assert lines[-1] == ("100 members and 100 non-members of the target in the audit pool; "
                         "CIs are bootstrap intervals.")
    assert text.endswith(".\n")
    assert checkpoints_table([], [0.001]) == "| checkpoint | epoch | train acc | test acc |\n" \
                                             "|---|---|---|---|\n"
