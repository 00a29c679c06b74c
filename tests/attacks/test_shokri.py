import numpy as np
import pytest
from scipy.special import softmax
from sklearn.metrics import roc_auc_score

from miaudit.attacks import TargetView, get_attack, run_attack
from miaudit.attacks.shokri import shokri_featurizer, shokri_score
from miaudit.errors import AttackError

FAST = dict(epochs=10, max_train_samples=3000)


def _variant(bank, **changes):
    return bank.replace(**changes)


def test_features_are_sorted_probabilities_and_the_label(digits_bank):
    view = TargetView.of(digits_bank, 0).as_shadow(4)  # bank model 5 as the shadow target
    features, scorable = shokri_featurizer()(view)
    assert scorable.all() and features.shape == (digits_bank.n_samples, 20)
    for n in (0, 7, 500):
        p = softmax(digits_bank.logits[5, n, 0].astype(np.float64))
        np.testing.assert_allclose(features[n, :10], sorted(p, reverse=True), rtol=1e-12)
        np.testing.assert_array_equal(features[n, 10:], np.eye(10)[digits_bank.labels[n]])
    top3, _ = shokri_featurizer(top_k=3, use_label=False)(view)
    np.testing.assert_array_equal(top3, features[:, :3])


@pytest.mark.parametrize("name", ["shokri", "shokri-per-class"])
def test_shokri_leaks_on_digits(digits_bank, name):
    members = digits_bank.membership[0][digits_bank.audit]
    scores = run_attack(name, TargetView.of(digits_bank, 0), **FAST).scores
    assert np.isfinite(scores).all()
    assert roc_auc_score(members, scores[digits_bank.audit]) > 0.5


def test_per_class_falls_back_to_the_global_classifier(digits_bank):
    view = TargetView.of(digits_bank, 0)
    global_scores = run_attack("shokri", view, **FAST).scores
    all_fallback = run_attack("shokri-per-class", view, **FAST, min_class_rows=10**6).scores
    np.testing.assert_array_equal(all_fallback, global_scores)
    per_class = run_attack("shokri-per-class", view, **FAST).scores
    assert not np.allclose(per_class, global_scores)


def test_scores_ignore_the_target_membership(digits_bank, redrawn_target):
    one, two = (redrawn_target(digits_bank, 0, seed) for seed in (0, 1))
    for name in ("shokri", "shokri-per-class"):
        a = run_attack(name, TargetView.of(one, 0), **FAST).scores
        b = run_attack(name, TargetView.of(two, 0), **FAST).scores
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_seed_determines_the_classifier(digits_bank):
    view = TargetView.of(digits_bank, 0)
    a = run_attack("shokri", view, **FAST, seed=0).scores
    b = run_attack("shokri", view, **FAST, seed=0).scores
    c = run_attack("shokri", view, **FAST, seed=1).scores
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_too_few_shadows_is_a_clear_error(digits_bank):
    bank = _variant(
        digits_bank, logits=digits_bank.logits[:1], membership=digits_bank.membership[:1],
        channels={},
    )
    with pytest.raises(AttackError, match="at least 1 shadow"):
        run_attack("shokri", TargetView.of(bank, 0))
    with pytest.raises(AttackError, match="at least 1 shadow"):
        shokri_score(TargetView.of(bank, 0), **{**get_attack("shokri").defaults, **FAST})


@pytest.mark.parametrize("name", ["shokri", "shokri-per-class"])
def test_threshold_rows_are_public_and_scored_by_the_sample_classifier(digits_bank, name):
    view = TargetView.of(digits_bank, 0)
    result = run_attack(name, view, **FAST)
    rows = result.threshold_rows
    public = ~digits_bank.audit & ~digits_bank.population
    assert rows is not None and rows.scores.size > 0 and public[rows.samples].all()
    assert np.isfinite(rows.scores).all()
    again = run_attack(name, view, **FAST)
    np.testing.assert_array_equal(again.threshold_rows.scores, rows.scores)
    np.testing.assert_array_equal(again.scores, result.scores)
    # early stopping on the held-out rows is there too (off by default), at most `epochs`
    stopped = run_attack(name, view, **{**FAST, "early_stopping": True, "patience": 2})
    assert np.isfinite(stopped.scores).all() and stopped.threshold_rows is not None
