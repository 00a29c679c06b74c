"""QMIA (Bertran et al., NeurIPS 2023): the attack against the same fit done step by step, its
power on a bank with a planted leak, and that its regressor learns from population rows only."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.metrics import roc_auc_score

from miaudit.attacks import TargetView, get_attack, run_attack
from miaudit.attacks.qmia import qmia_features
from miaudit.errors import AttackError
from miaudit.signals import SignalBank


def _naive_score(logits, label, score):
    """The target's score on one sample from its logits [Q, C], one query at a time."""
    values = []
    for z in np.asarray(logits, dtype=np.float64):
        others = [z[c] for c in range(z.size) if c != label]
        if score == "hinge":
            rest = max(others)
        else:
            top = max(others)
            rest = top + np.log(sum(np.exp(o - top) for o in others))
        values.append(z[label] - rest)
    return sum(values) / len(values)


def _naive_log_probs(logits):
    """Mean over queries of the log-softmax over classes, one query at a time."""
    rows = []
    for z in np.asarray(logits, dtype=np.float64):
        top = z.max()
        rows.append(z - top - np.log(np.exp(z - top).sum()))
    return np.mean(rows, axis=0)


def _naive_features(bank, out_models, features, score):
    """out_models bool [M, N]: the view's OUT references (the `visible_sides` fixture)."""
    rows = []
    for n in range(bank.n_samples):
        row = [float(bank.labels[n])]
        if features == "references":
            out = [r for r in range(bank.n_models) if out_models[r, n]]
            if out:
                row.append(np.mean([_naive_score(bank.logits[r, n], bank.labels[n], score)
                                    for r in out]))
                row.extend(np.mean([_naive_log_probs(bank.logits[r, n]) for r in out], axis=0))
            else:
                row.extend([np.nan] * (1 + bank.n_classes))
        rows.append(row)
    return np.array(rows)


def _naive_qmia(bank, target, out_models, alpha=0.05, score="hinge", features="references",
                seed=0, max_iter=100):
    """The paper's recipe written out: the target's score on every sample, the regressor's
    inputs, a pinball-loss fit at level 1 - alpha on the population rows only, and the margin
    score - predicted quantile."""
    x = _naive_features(bank, out_models, features, score)
    s = np.array([_naive_score(bank.logits[target, n], bank.labels[n], score)
                  for n in range(bank.n_samples)])
    defined = ~np.isnan(x).any(axis=1)
    fit_rows = [n for n in range(bank.n_samples) if bank.population[n] and defined[n]]
    regressor = HistGradientBoostingRegressor(
        loss="quantile", quantile=1 - alpha, max_iter=max_iter, early_stopping=False,
        random_state=seed, categorical_features=[0])
    regressor.fit(x[fit_rows], s[fit_rows])
    margin = np.full(bank.n_samples, np.nan)
    margin[defined] = s[defined] - regressor.predict(x[defined])
    return margin, x


@pytest.fixture(scope="module")
def naive(digits_bank, visible_sides):
    return {key: _naive_qmia(digits_bank, key[0], visible_sides(digits_bank, key[0])[1],
                             score=key[1], features=key[2])
            for key in ((0, "hinge", "references"), (3, "phi", "references"),
                        (0, "hinge", "label"))}


@pytest.mark.parametrize("target,score,features", [(0, "hinge", "references"),
                                                   (3, "phi", "references"),
                                                   (0, "hinge", "label")])
def test_qmia_matches_the_fit_done_step_by_step(digits_bank, naive, target, score, features):
    margin, x = naive[(target, score, features)]
    view = TargetView.of(digits_bank, target)
    np.testing.assert_allclose(qmia_features(view, features, score), x, rtol=1e-12,
                               atol=1e-12)
    name = "qmia" if features == "references" else "qmia-label"
    got = run_attack(name, view, score=score).scores
    np.testing.assert_allclose(got, margin, rtol=1e-9, atol=1e-9)
    assert np.isfinite(got[digits_bank.audit]).all()


def _planted_bank(n=1200, n_population=400, m=5, classes=5, effect=1.5, seed=0):
    """Target (model 0) and m - 1 offline references on a classification task whose samples
    differ in difficulty d_n (the same for every model), with the true-class logit raised by
    `effect` on a model's members. Members of the target: half of the audit rows; the
    references train on public rows only."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    difficulty = rng.normal(0.0, 2.0, n)
    population = np.zeros(n, dtype=bool)
    population[n - n_population:] = True
    audit = np.zeros(n, dtype=bool)
    audit[:n // 2] = True
    public = ~audit & ~population
    membership = np.zeros((m, n), dtype=bool)
    membership[0, :n // 4] = True
    membership[1:, public] = rng.random((m - 1, public.sum())) < 0.5
    logits = rng.normal(0.0, 0.5, size=(m, n, 1, classes))
    logits[:, np.arange(n), 0, labels] += difficulty + effect * membership
    return SignalBank(logits=logits.astype(np.float32), labels=labels, membership=membership,
                      population=population, audit=audit)


def test_qmia_finds_a_planted_leak_and_calibrates_difficulty():
    """Members are more confident: both variants find them; the references' view of each
    sample lets `qmia` remove the per-sample difficulty the label alone cannot."""
    bank = _planted_bank()
    view = TargetView.of(bank, 0)
    members = bank.membership[0][bank.audit]
    auc = {name: roc_auc_score(members, run_attack(name, view).scores[bank.audit])
           for name in ("qmia", "qmia-label")}
    assert auc["qmia"] > 0.8, auc
    assert 0.55 < auc["qmia-label"] < auc["qmia"] - 0.1, auc
    no_leak = _planted_bank(effect=0.0)
    scores = run_attack("qmia", TargetView.of(no_leak, 0)).scores[no_leak.audit]
    assert abs(roc_auc_score(no_leak.membership[0][no_leak.audit], scores) - 0.5) < 0.08


def test_the_regressor_learns_from_population_rows_only():
    """Changing the target's or a reference's outputs on an audit row changes that row's
    score and no other (the regressor never saw it); changing them on a population row
    changes the regressor, hence other rows' scores."""
    bank = _planted_bank(n=600, n_population=200)
    base = run_attack("qmia", TargetView.of(bank, 0)).scores
    audit_row, population_row = 5, int(np.flatnonzero(bank.population)[3])
    for model in (0, 2):
        logits = bank.logits.copy()
        logits[model, audit_row] += np.float32(3.0) * (np.arange(bank.n_classes) == 0)
        changed = run_attack("qmia", TargetView.of(bank.replace(logits=logits), 0)).scores
        others = np.arange(bank.n_samples) != audit_row
        np.testing.assert_array_equal(changed[others], base[others])
        assert changed[audit_row] != base[audit_row]
    logits = bank.logits.copy()
    logits[0, population_row] += np.float32(5.0)
    logits[0, population_row, 0, bank.labels[population_row]] += np.float32(5.0)
    changed = run_attack("qmia", TargetView.of(bank.replace(logits=logits), 0)).scores
    assert (changed[bank.audit] != base[bank.audit]).any()


def test_qmia_ignores_the_target_membership(digits_bank, redrawn_target):
    one, two = (TargetView.of(redrawn_target(digits_bank, 0, seed), 0) for seed in (3, 4))
    for name in ("qmia", "qmia-label"):
        np.testing.assert_array_equal(run_attack(name, one).scores,
                                      run_attack(name, two).scores, err_msg=name)


def test_no_out_reference_scores_nan_and_the_label_variant_needs_none(digits_bank):
    audit = np.flatnonzero(digits_bank.audit)
    membership = digits_bank.membership.copy()
    membership[:, audit[4]] = True  # every reference trained on it
    view = TargetView.of(digits_bank.replace(membership=membership), 0)
    scores = run_attack("qmia", view).scores
    assert np.isnan(scores[audit]).tolist() == [k == 4 for k in range(audit.size)]
    assert np.isfinite(run_attack("qmia-label", view).scores[audit]).all()
    alone = SignalBank(logits=digits_bank.logits[:1], labels=digits_bank.labels,
                       membership=digits_bank.membership[:1],
                       population=digits_bank.population, audit=digits_bank.audit)
    alone_view = TargetView.of(alone, 0)
    label_only = run_attack("qmia-label", alone_view).scores
    np.testing.assert_array_equal(label_only,
                                  run_attack("qmia-label", TargetView.of(digits_bank, 0)).scores)
    with pytest.raises(AttackError, match="reference model"):
        run_attack("qmia", alone_view)
    with pytest.raises(AttackError, match="at least one reference model"):
        run_attack("qmia-label", alone_view, features="references")


def test_qmia_parameters_and_cost(digits_bank):
    view = TargetView.of(digits_bank, 1)
    for bad in (0.0, 0.5, -0.1):
        with pytest.raises(AttackError, match="'alpha' must be a number in"):
            run_attack("qmia", view, alpha=bad)
    with pytest.raises(AttackError, match="'score' must be one of"):
        run_attack("qmia", view, score="loss")
    a = run_attack("qmia", view, alpha=0.01).scores
    assert not np.allclose(a, run_attack("qmia", view, alpha=0.25).scores)
    np.testing.assert_array_equal(a, run_attack("qmia", view, alpha=0.01).scores)
    # the cost: no shadow model trained, one OUT reference at most; the label variant none
    qmia, label = get_attack("qmia"), get_attack("qmia-label")
    assert qmia.needs.out_references == 1 and qmia.needs.shadows == 0
    assert label.needs.out_references == 0 and label.needs.in_references == 0
    assert qmia.needs.population and label.needs.population
    bank = SignalBank(logits=digits_bank.logits, labels=digits_bank.labels,
                      membership=digits_bank.membership,
                      population=np.zeros(digits_bank.n_samples, dtype=bool),
                      audit=digits_bank.audit)
    with pytest.raises(AttackError, match="population"):
        run_attack("qmia-label", TargetView.of(bank, 0))
