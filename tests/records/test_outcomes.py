"""Typed results: AttackMetrics round-trips the metrics dict exactly, the records are frozen
and built once, metrics.json reads back equal, the TPR columns have one spelling (older ones
read as it), and AuditResult.to_frame holds the records' own numbers, on metrics from
miaudit.metrics.evaluate and a real bank."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest

from miaudit import metrics
from miaudit.config import MetricsConfig
from miaudit.pipeline import evaluate_bank
from miaudit.records.columns import (
    canonical_tpr_column,
    canonical_tpr_columns,
    ci_columns,
    tpr_column,
)
from miaudit.records.outcomes import (
    FRAME_COLUMNS,
    AttackCost,
    AttackMetrics,
    AttackOutcome,
    AuditResult,
    rate_key,
    read_metrics_entry,
)
from miaudit.records.privacy import EPSILON_LOWER_BOUND, GAUSSIAN_DP_LOWER_BOUND
from miaudit.report import write_report
from miaudit.report.write import metrics_document, read_metrics


def _scores(seed: int = 0, n: int = 600) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    members = rng.random(n) < 0.5
    scores = rng.normal(size=n) + 0.8 * members
    scores[:4] = np.nan  # unscorable samples
    scores[10:20] = 1.5  # ties
    return scores, members


@pytest.mark.parametrize("kwargs", [
    {},
    {"n_bootstrap": 0},
    {"threshold": 0.25, "fprs": (0.01, 0.001, 0.1), "recalls": (0.9, 0.5, 0.2)},
    {"n_bootstrap": 30, "confidence": 0.9, "seed": 3, "fprs": (0.05,)},
])
def test_attack_metrics_round_trip_evaluate_exactly(kwargs):
    d = metrics.evaluate(*_scores(), **kwargs)
    typed = AttackMetrics.from_dict(d)
    assert typed.to_dict() == d
    # same keys in the same order, same floats: metrics.json could be written from either
    assert json.dumps(typed.to_dict()) == json.dumps(d)
    assert typed.auc == d["auc"] and len(typed.tpr) == len(d["tpr_at_fpr"])
    for item in typed.tpr:
        key = repr(item.fpr)
        assert item.tpr == d["tpr_at_fpr"][key]
        assert item.indicative == (d["fpr_support"][key]["warning"] is not None)
        assert item.expected_false_positives == d["fpr_support"][key]["expected_false_positives"]
        assert (item.ci is None) == (d["tpr_at_fpr_ci"][key] is None)


def test_attack_metrics_accessors():
    d = metrics.evaluate(*_scores(1), threshold=0.3, n_bootstrap=20)
    typed = AttackMetrics.from_dict(d)
    figure = typed.tpr_at(0.001)
    assert figure.tpr == d["tpr_at_fpr"]["0.001"]
    assert [figure.ci_low, figure.ci_high] == d["tpr_at_fpr_ci"]["0.001"]
    assert figure.indicative  # 300-odd non-members: 0.3 expected false positives
    assert typed.tpr_at(0.01).indicative == (d["n_nonmembers"] * 0.01 < 10)
    assert typed.balanced_accuracy == d["balanced_accuracy"] and typed.threshold == 0.3
    assert typed.n_unscorable == 4
    with pytest.raises(KeyError, match="reported"):
        typed.tpr_at(0.5)
    cost = AttackCost.from_dict({"models_trained": 3, "queries_per_sample": 2.0})
    assert cost.models == 3 and cost.score_seconds is None


def test_one_accessor_for_a_tpr_and_its_interval():
    d = metrics.evaluate(*_scores(2), fprs=(0.01, 0.001), n_bootstrap=20)
    typed = AttackMetrics.from_dict(d)
    assert typed.fprs == (0.01, 0.001)  # in the order asked for
    for key in d["tpr_at_fpr"]:  # the dict's key, or the rate itself
        assert typed.tpr_at(key) == typed.tpr_at(float(key)) == typed.find_tpr(key)
        assert list(typed.tpr_at(key).ci) == d["tpr_at_fpr_ci"][key]
        assert rate_key(float(key)) == rate_key(key) == key
    assert typed.find_tpr(0.5) is None and typed.find_tpr(None) is None
    # a dict without an AUC (an attack that was not evaluated) loads, with nothing in it
    empty = AttackMetrics.from_dict({})
    assert empty.auc is None and empty.tpr == () and empty.find_tpr(0.001) is None


def test_flat_columns_are_spelled_once():
    assert tpr_column(0.001) == "tpr@0.001" and tpr_column(0.01) == "tpr@0.01"
    assert tpr_column(0.0005) == "tpr@0.0005" and tpr_column(1e-5) == "tpr@1e-05"
    assert ci_columns("auc") == ("auc_lo", "auc_hi")
    d = metrics.evaluate(*_scores(3), fprs=(0.001, 0.01), n_bootstrap=10)
    typed = AttackMetrics.from_dict(d)
    assert typed.auc_columns() == {"auc": d["auc"]}
    assert typed.auc_columns(ci=True) == {"auc": d["auc"], "auc_lo": d["auc_ci"][0],
                                          "auc_hi": d["auc_ci"][1]}
    row = typed.tpr_columns((0.001, 0.01), ci=True)
    assert list(row) == ["tpr@0.001", "tpr@0.001_lo", "tpr@0.001_hi",
                         "tpr@0.01", "tpr@0.01_lo", "tpr@0.01_hi"]
    assert row["tpr@0.01"] == d["tpr_at_fpr"]["0.01"]
    assert [row["tpr@0.01_lo"], row["tpr@0.01_hi"]] == d["tpr_at_fpr_ci"]["0.01"]
    assert typed.tpr_columns((0.01,)) == {"tpr@0.01": d["tpr_at_fpr"]["0.01"]}
    assert typed.counts() == {k: d[k] for k in ("n_members", "n_nonmembers", "n_unscorable")}
    no_ci = AttackMetrics.from_dict(metrics.evaluate(*_scores(3), n_bootstrap=0))
    assert no_ci.auc_columns(ci=True)["auc_lo"] is None
    assert no_ci.tpr_columns((0.001,), ci=True)["tpr@0.001_hi"] is None
    with pytest.raises(KeyError, match="reported"):
        typed.tpr_columns((0.5,))


@pytest.mark.parametrize(("old", "new"), [
    ("tpr_0.1%", "tpr@0.001"), ("tpr_1%", "tpr@0.01"), ("tpr_0.1%_lo", "tpr@0.001_lo"),
    ("tpr_1%_hi", "tpr@0.01_hi"), ("tpr_0.05%", "tpr@0.0005"), ("tpr_10%", "tpr@0.1"),
    ("tpr_0.1% x rmia", "tpr@0.001 x rmia"),  # the power study's per-target column
    ("tpr_at_0.001", "tpr@0.001"), ("tpr_at_0.01_lo", "tpr@0.01_lo"), ("tpr_at_1e-05", "tpr@1e-05"),
    ("tpr@0.001", "tpr@0.001"), ("tpr@0.01_hi", "tpr@0.01_hi"),  # the spelling itself stays
    ("auc", "auc"), ("auc_lo", "auc_lo"), ("tpr", "tpr"), ("tpr_atx", "tpr_atx"),
    ("n_members", "n_members"), ("cost_train_s", "cost_train_s"),
])
def test_older_tpr_spellings_read_as_the_one_spelling(old, new):
    assert canonical_tpr_column(old) == new


def test_an_old_results_row_and_table_read_as_new_ones(tmp_path):
    old = {"attack": "rmia", "auc": 0.6, "tpr_1%": 0.05, "tpr_1%_lo": 0.04, "tpr_1%_hi": 0.06,
           "tpr_at_0.001": 0.01, "n_members": 10}
    row = canonical_tpr_columns(old)
    assert list(row) == ["attack", "auc", "tpr@0.01", "tpr@0.01_lo", "tpr@0.01_hi",
                         "tpr@0.001", "n_members"]
    assert list(row.values()) == list(old.values()) and "tpr_1%" in old  # the input is kept
    frame = pd.DataFrame([old]).rename(columns=canonical_tpr_column)
    assert list(frame.columns) == list(row)


@pytest.fixture(scope="module")
def result(digits_bank) -> AuditResult:
    """A real result: three attacks on the digits bank (references, public thresholds)."""
    return evaluate_bank(digits_bank, 0, ["loss", "calibrated-loss", "lira-offline"],
                         metric_cfg=MetricsConfig(bootstrap=30, fprs=[0.001, 0.01, 0.1]),
                         train_seconds=[1.0] * digits_bank.n_models, progress=False)


def test_outcomes_are_typed_once_and_frozen(result):
    outcome = result.outcome("loss")
    assert isinstance(outcome.metrics, AttackMetrics) and isinstance(outcome.cost, AttackCost)
    assert outcome.metrics is outcome.metrics  # a field, not a parse on every access
    assert outcome.cost.models == 1 and outcome.cost.train_seconds == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.name = "renamed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.metrics = outcome.metrics  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.metrics.auc = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.metrics.tpr[0].tpr = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.cost.models = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.metrics.epsilon_lower_bound.reason = "x"  # type: ignore[misc,union-attr]
    renamed = dataclasses.replace(outcome, name="loss.copy")  # a changed copy instead
    assert renamed.metrics is outcome.metrics and outcome.name == "loss"


def test_an_outcome_takes_records_and_from_dicts_types_the_dicts():
    scores, members = _scores(4)
    d = metrics.evaluate(scores, members, n_bootstrap=0)
    with pytest.raises(TypeError, match="from_dicts"):
        AttackOutcome("a", scores, d)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="AttackCost"):
        AttackOutcome("a", scores, AttackMetrics.from_dict(d), {"models": 1})  # type: ignore[arg-type]
    outcome = AttackOutcome.from_dicts("a", scores, d, {"models_trained": 3})
    assert outcome.metrics == AttackMetrics.from_dict(d) and outcome.cost == AttackCost(models=3)
    assert AttackOutcome.from_dicts("a", scores, d).cost == AttackCost()
    assert outcome.metrics_entry() == {**d, "cost": {"models": 3}}
    assert "cost" not in AttackOutcome.from_dicts("a", scores, d).metrics_entry()


def test_a_cost_writes_the_pipelines_order_and_only_what_was_recorded():
    cost = AttackCost(models=2, queries_per_sample=1.0, score_seconds=0.5,
                      threshold_seconds=0.1, train_seconds=3.0)
    assert list(cost.to_dict()) == ["models", "queries_per_sample", "score_seconds",
                                    "threshold_seconds", "train_seconds"]
    assert AttackCost(models=0).to_dict() == {"models": 0} and AttackCost().to_dict() == {}
    assert AttackCost.from_dict(cost.to_dict()) == cost


def test_metrics_json_is_written_from_the_records_and_reads_back_equal(result, tmp_path):
    doc = metrics_document(result)
    for outcome in result.outcomes:
        assert doc[outcome.name] == outcome.metrics_entry()
        assert json.dumps(doc[outcome.name]) == json.dumps(outcome.metrics_entry())
        assert list(doc[outcome.name]["cost"]) == ["models", "queries_per_sample",
                                                   "score_seconds", "threshold_seconds",
                                                   "train_seconds"]
        assert read_metrics_entry(doc[outcome.name]) == (outcome.metrics, outcome.cost)
    paths = write_report(result, tmp_path)
    read = read_metrics(paths["metrics"])
    assert list(read) == [o.name for o in result.outcomes]
    for outcome in result.outcomes:
        assert read[outcome.name] == (outcome.metrics, outcome.cost)
    # written again from what was read: the same bytes
    again = AuditResult(result.indices, result.members,
                        [AttackOutcome(name, o.scores, *read[name])
                         for name, o in zip(read, result.outcomes, strict=True)])
    assert json.dumps(metrics_document(again), indent=2) + "\n" == paths["metrics"].read_text()


def _one(frame: pd.DataFrame, attack: str, metric: str, **at: float) -> pd.Series:
    rows = frame[(frame.attack == attack) & (frame.metric == metric)]
    for column, value in at.items():
        rows = rows[rows[column] == value]
    assert len(rows) == 1, (attack, metric, at)
    return rows.iloc[0]


def _same(value: float, expected) -> bool:
    return math.isnan(value) if expected is None else value == expected


def test_to_frame_holds_the_dicts_numbers(result):
    frame = result.to_frame()
    assert list(frame.columns) == list(FRAME_COLUMNS)
    assert list(dict.fromkeys(frame.attack)) == [o.name for o in result.outcomes]
    for o in result.outcomes:
        m = o.metrics.to_dict()
        auc = _one(frame, o.name, "auc")
        assert auc.value == m["auc"] and [auc.ci_low, auc.ci_high] == m["auc_ci"]
        assert pd.isna(auc.indicative) and math.isnan(auc.fpr)
        for key, tpr in m["tpr_at_fpr"].items():
            row = _one(frame, o.name, "tpr", fpr=float(key))
            assert row.value == tpr
            assert [row.ci_low, row.ci_high] == m["tpr_at_fpr_ci"][key]
            support = m["fpr_support"][key]
            assert row.expected_false_positives == support["expected_false_positives"]
            assert bool(row.indicative) == (support["warning"] is not None)
        assert _same(_one(frame, o.name, "balanced_accuracy").value, m["balanced_accuracy"])
        assert _same(_one(frame, o.name, "threshold").value, m["threshold"])
        for key, precision in m["precision_at_recall"].items():
            assert _one(frame, o.name, "precision", recall=float(key)).value == precision
        for count in ("n_members", "n_nonmembers", "n_unscorable"):
            assert _one(frame, o.name, count).value == m[count]
        for key, value in o.cost.to_dict().items():
            assert _one(frame, o.name, f"cost.{key}").value == value
        bound = _one(frame, o.name, EPSILON_LOWER_BOUND).value
        assert bound == m[EPSILON_LOWER_BOUND]["epsilon"] and bound >= 0
        mu = _one(frame, o.name, GAUSSIAN_DP_LOWER_BOUND).value  # the frame holds μ, not ε
        assert mu == m[GAUSSIAN_DP_LOWER_BOUND]["mu"] and mu >= 0
    # per attack: auc, 3 tprs, bal.acc, threshold, 2 precisions, 3 counts, the ε and μ lower
    # bounds (no canaries: no one-run bound), the cost keys
    assert len(frame) == sum(10 + len(o.metrics.tpr) + len(o.cost.to_dict())
                             for o in result.outcomes)
    # the indicative flag: 500 non-members at 0.1% rest on 0.5 expected false positives
    flags = frame[frame.metric == "tpr"].set_index(["attack", "fpr"]).indicative
    assert flags.loc[("loss", 0.001)] and not flags.loc[("loss", 0.1)]
