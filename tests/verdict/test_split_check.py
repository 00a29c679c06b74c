"""The model-free split check: about 0.5 on a random split of real data, clearly above chance
on a shifted one, never scoring a row with a classifier that saw its membership, and its
one-sided test read off a DeLong interval."""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.neighbors import KNeighborsClassifier

from miaudit import metrics
from miaudit.config import MetricsConfig
from miaudit.records.outcomes import AttackOutcome
from miaudit.verdict import split_check as module
from miaudit.verdict.split_check import (
    SHIFT_P_VALUE,
    auc_p_value,
    model_free_evidence,
    split_check,
    split_shifted,
)
from miaudit.verdict.split_record import SplitSkipped, split_record

CFG = MetricsConfig(bootstrap=50)


@pytest.fixture(scope="module")
def digits():
    return load_digits(return_X_y=True)


def test_a_random_split_of_real_data_is_exchangeable(digits):
    x, y = digits
    members = np.random.default_rng(3).random(len(y)) < 0.5
    record = split_check(members, features=x, labels=y, metric_cfg=CFG, seed=0)
    assert not record.shifted and record.p_value > SHIFT_P_VALUE
    assert 0.42 < record.auc < 0.58
    assert record.metrics.auc_ci is None  # the pooled figure carries no interval
    assert [h.n_members + h.n_nonmembers for h in record.halves] == [899, 898]
    assert record.p_value == min(1.0, 2 * min(h.p_value for h in record.halves))
    assert record.classifier == "gradient-boosted trees"
    assert record.features == "the 64 feature values and the label"
    assert record.rows == len(y) and record.subsampled_from is None


def test_members_from_an_easier_slice_are_told_apart(digits):
    x, y = digits
    rng = np.random.default_rng(4)
    # members mostly from classes 0-4 and from the darker images: a slice, not a random draw
    ink = x.sum(axis=1)
    easy = (y < 5) | (ink > np.median(ink))
    members = rng.random(len(y)) < np.where(easy, 0.75, 0.2)
    record = split_check(members, features=x, labels=y, metric_cfg=CFG, seed=0)
    assert record.shifted and record.p_value < 1e-6
    assert record.auc > 0.6
    assert all(h.auc_ci[0] > 0.5 for h in record.halves)


def test_no_row_is_scored_by_a_classifier_that_saw_its_membership():
    # a unique feature per row: a 1-nearest-neighbour classifier recalls every row it was fit
    # on (in-sample AUC 1), and knows nothing of the others
    n = 400
    members = np.random.default_rng(5).random(n) < 0.5
    x = np.arange(n, dtype=np.float64)[:, None] * 1000.0
    in_sample = KNeighborsClassifier(1).fit(x, members).predict_proba(x)[:, 1]
    assert metrics.auc(in_sample, members) == 1.0
    scores, halves = module._cross_fitted(x, members, lambda: KNeighborsClassifier(1), seed=0)
    assert len(halves) == 2 and sorted(np.concatenate(halves).tolist()) == list(range(n))
    assert abs(metrics.auc(scores, members) - 0.5) < 0.1
    for rows in halves:  # each half's scores are its (mid-)ranks, scaled into (0, 1)
        assert scores[rows].min() > 0 and scores[rows].max() < 1
        assert scores[rows].mean() == pytest.approx(0.5)


def test_texts_use_their_words_and_statistics():
    rng = np.random.default_rng(6)
    n = 300
    members = rng.random(n) < 0.5
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    same = np.array([" ".join(rng.choice(words, 8)) for _ in range(n)])
    record = split_check(members, texts=same, labels=None, metric_cfg=CFG)
    assert not record.shifted and record.classifier == "logistic regression"
    assert record.features == "hashed TF-IDF words and word pairs, 9 text statistics"
    # members written in another period: dated 2024, non-members 2019
    dated = np.array([f"{t} posted {'2024' if m else '2019'}" for t, m in zip(same, members,
                                                                             strict=True)])
    shifted = split_check(members, texts=dated, labels=np.zeros(n, dtype=np.int64),
                          metric_cfg=CFG)
    assert shifted.shifted and shifted.auc > 0.95
    assert shifted.features.endswith("and the label")


def test_large_audits_are_subsampled_keeping_the_member_share():
    n = 3000
    members = np.zeros(n, dtype=bool)
    members[:600] = True
    x = np.random.default_rng(7).normal(size=(n, 3))
    record = split_check(members, features=x, labels=None, metric_cfg=CFG, max_rows=1000)
    assert record.rows == 1000 and record.subsampled_from == n
    assert sum(h.n_members for h in record.halves) == 200  # a fifth, as in the audit


def test_the_record_reads_back_from_its_json(digits):
    """summary.json holds the record's to_dict (its keys in the order the check has always
    written them); split_record types it again, equal to the record."""
    x, y = digits
    members = np.random.default_rng(3).random(len(y)) < 0.5
    record = split_check(members[:600], features=x[:600], labels=y[:600], metric_cfg=CFG)
    doc = json.loads(json.dumps(record.to_dict()))
    assert list(doc) == ["classifier", "features", "folds", "rows", "subsampled_from",
                         "metrics", "halves", "confidence", "p_value", "shift_p_value",
                         "shifted", "seconds"]
    assert list(doc["halves"][0]) == ["auc", "auc_ci", "n_members", "n_nonmembers", "p_value"]
    assert doc["metrics"]["tpr_at_fpr"] == record.metrics.to_dict()["tpr_at_fpr"]
    assert split_record(doc) == record and split_record(record) is record
    skipped = split_check(members[:30] & (y[:30] < 3), features=x[:30])
    assert isinstance(skipped, SplitSkipped) and split_record(skipped.to_dict()) == skipped
    assert split_record(None) is None
    with pytest.raises(TypeError, match="SplitCheck"):
        split_record("shifted")


def test_too_few_rows_or_no_features_skip_with_the_reason():
    members = np.array([True] * 4 + [False] * 40)
    assert "needs at least 10 members" in split_check(
        members, features=np.zeros((44, 2))).skipped
    assert "not available" in split_check(np.arange(40) % 2 == 0).skipped


def test_the_p_value_reads_the_logit_scale_delong_interval():
    rng = np.random.default_rng(8)
    members = rng.random(2000) < 0.5
    scores = rng.normal(size=2000) + 0.15 * members
    met = metrics.evaluate(scores, members, n_bootstrap=1, confidence=0.95)
    p = auc_p_value(met["auc"], met["auc_ci"], 0.95)
    lo, hi = met["auc_ci"]
    se = (math.log(hi / (1 - hi)) - math.log(lo / (1 - lo))) / (2 * 1.959963984540054)
    z = math.log(met["auc"] / (1 - met["auc"])) / se
    assert p == pytest.approx(1 - NormalDist().cdf(z))
    # at the interval's own level the test and the interval agree: lower end 0.5 <=> p = α/2
    assert (lo > 0.5) == (p < 0.025)
    assert auc_p_value(0.4, (0.35, 0.45), 0.95) > 0.99
    assert auc_p_value(1.0, (1.0, 1.0), 0.95) == 0.0 and auc_p_value(0.5, None, 0.95) is None


def test_a_model_free_attack_counts_as_evidence_and_an_attack_on_the_model_does_not():
    members = np.arange(1000) % 2 == 0
    separated = metrics.evaluate(members + np.random.default_rng(9).normal(size=1000),
                                 members, n_bootstrap=20)
    blind = AttackOutcome.from_dicts("blind", np.zeros(1000), separated, cost={"models": 0})
    loss = AttackOutcome.from_dicts("loss", np.zeros(1000), separated, cost={"models": 1})
    found = model_free_evidence(None, [loss, blind], 0.95)
    assert [e.source for e in found] == ["the model-free attack blind"]
    assert found[0].shifted and split_shifted(None, [loss, blind], 0.95) is True
    assert split_shifted(None, [loss], 0.95) is None  # nothing model-free: not checked


def test_the_check_fits_on_one_thread_even_in_a_fresh_process():
    """threadpool_limits reaches only the pools already loaded: scikit-learn's own OpenMP
    library, loaded inside the limit, kept every core (a check 100x slower under load)."""
    import subprocess
    import sys

    code = (
        "import numpy as np, threadpoolctl\n"
        "from miaudit.verdict import split_check as sc\n"
        "seen = []\n"
        "fit = sc._cross_fitted\n"
        "def spy(*a, **k):\n"
        "    seen.extend(i['num_threads'] for i in threadpoolctl.threadpool_info())\n"
        "    return fit(*a, **k)\n"
        "sc._cross_fitted = spy\n"
        "rng = np.random.default_rng(0)\n"
        "sc.split_check(rng.random(200) < 0.5, features=rng.normal(size=(200, 3)))\n"
        "print(max(seen))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "1"
