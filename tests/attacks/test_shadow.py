import numpy as np
import pytest
import torch

from miaudit.attacks import TargetView
from miaudit.attacks.rapid import rapid_features
from miaudit.attacks.shadow import (
    build_shadow_set,
    build_shadow_split,
    choose_shadows,
    scorer_attack,
    train_scorer,
)
from miaudit.errors import AttackError

FAST = dict(epochs=3, batch_size=128, hidden=(32, 16), dropout=(0.2,), lr=1e-3, weight_decay=0.0)


def test_choose_shadows_validates_the_count(digits_bank):
    view = TargetView.of(digits_bank, 0)
    np.testing.assert_array_equal(choose_shadows(view, None), np.arange(7))
    np.testing.assert_array_equal(choose_shadows(view, 3), np.arange(3))
    with pytest.raises(AttackError, match="n_shadows=9 is invalid"):
        choose_shadows(view, 9)
    with pytest.raises(AttackError, match="at least 8 shadow"):
        choose_shadows(view, None, minimum=8)


def test_shadow_rows_are_balanced_labelled_by_the_shadow_and_leave_one_out(digits_bank):
    view = TargetView.of(digits_bank, 2)
    rows = build_shadow_set(view, rapid_features, max_train_samples=100_000, seed=0)
    assert not digits_bank.population[rows.sample].any()
    for r in range(view.n_references):
        mine = rows.shadow == r
        assert mine.any()
        assert rows.labels[mine].sum() * 2 == mine.sum()  # balanced per shadow
        np.testing.assert_array_equal(
            rows.labels[mine], view.reference_membership[r, rows.sample[mine]]
        )
        # never where the view set the shadow aside (its label there hangs on the target's)
        assert view.reference_available[r, rows.sample[mine]].all()
        # the features are those of the shadow view, where the shadow is the target
        expected, _ = rapid_features(view.as_shadow(r))
        np.testing.assert_array_equal(rows.features[mine], expected[rows.sample[mine]])
        assert len(np.unique(rows.sample[mine])) == mine.sum()


def test_shadow_rows_are_capped_seeded_and_skip_unscorable_samples(digits_bank):
    view = TargetView.of(digits_bank, 0)

    def half_scorable(v):
        features, ok = rapid_features(v)
        return features, ok & (np.arange(v.n_samples) % 2 == 0)

    a = build_shadow_set(view, half_scorable, max_train_samples=700, seed=1)
    b = build_shadow_set(view, half_scorable, max_train_samples=700, seed=1)
    c = build_shadow_set(view, half_scorable, max_train_samples=700, seed=2)
    assert len(a) == 700 and np.all(a.sample % 2 == 0)
    np.testing.assert_array_equal(a.sample, b.sample)
    assert not np.array_equal(a.sample, c.sample)


def test_no_learnable_shadow_is_a_clear_error(digits_bank):
    view = TargetView.of(digits_bank, 0)

    def nothing(v):
        features, _ = rapid_features(v)
        return features, np.zeros(v.n_samples, dtype=bool)

    with pytest.raises(AttackError, match="nothing to learn"):
        build_shadow_set(view, nothing)


def test_trainer_is_seeded_and_leaves_the_global_rng_alone(digits_bank):
    rows = build_shadow_set(TargetView.of(digits_bank, 0), rapid_features, max_train_samples=1000)
    state = torch.random.get_rng_state()
    a = train_scorer(rows.features, rows.labels, seed=0, **FAST)
    assert torch.equal(state, torch.random.get_rng_state())
    b = train_scorer(rows.features, rows.labels, seed=0, **FAST)
    c = train_scorer(rows.features, rows.labels, seed=1, **FAST)
    np.testing.assert_array_equal(a.logit(rows.features), b.logit(rows.features))
    assert not np.allclose(a.logit(rows.features), c.logit(rows.features))
    # standardisation comes from the training rows
    np.testing.assert_allclose(a.mean, rows.features.mean(axis=0))


def test_trainer_learns_shadow_membership_and_scores_nan_rows_as_nan(digits_bank):
    rows = build_shadow_set(TargetView.of(digits_bank, 0), rapid_features, max_train_samples=4000)
    scorer = train_scorer(
        rows.features, rows.labels, **{**FAST, "epochs": 10, "hidden": (64,), "dropout": ()}
    )
    logits = scorer.logit(rows.features)
    assert logits.dtype == np.float64
    assert logits[rows.labels == 1].mean() > logits[rows.labels == 0].mean()
    features = rows.features[:3].copy()
    features[1, 0] = np.nan
    out = scorer.logit(features)
    assert np.isnan(out[1]) and np.isfinite(out[[0, 2]]).all()


def test_trainer_rejects_bad_data():
    with pytest.raises(AttackError, match="NaN"):
        train_scorer(np.array([[np.nan, 1.0], [0.0, 1.0]]), np.array([0.0, 1.0]), **FAST)
    with pytest.raises(AttackError, match="shape"):
        train_scorer(np.zeros((0, 2)), np.zeros(0), **FAST)


def test_scorer_attack_marks_unscorable_target_samples_nan(digits_bank):
    view = TargetView.of(digits_bank, 0)

    def some_unscorable(v):
        features, ok = rapid_features(v)
        return features, ok & (np.arange(v.n_samples) >= 10)

    scores = scorer_attack(
        view, some_unscorable, n_shadows=2, max_train_samples=500, seed=0, **FAST
    ).scores
    assert np.isnan(scores[:10]).all() and np.isfinite(scores[10:]).all()


def _public(bank):
    canary = np.zeros(bank.n_samples, dtype=bool) if bank.canary is None else bank.canary
    return ~bank.audit & ~bank.population & ~canary


def test_held_out_rows_are_public_balanced_and_never_trained_on(digits_bank):
    view = TargetView.of(digits_bank, 2)
    train, held = build_shadow_split(view, rapid_features, holdout=0.2, seed=0)
    assert len(held) > 0 and _public(digits_bank)[held.sample].all()
    for r in range(view.n_references):
        mine = held.shadow == r
        assert held.labels[mine].sum() * 2 == mine.sum()  # balanced per shadow
        np.testing.assert_array_equal(
            held.labels[mine], view.reference_membership[r, held.sample[mine]]
        )
        assert view.reference_available[r, held.sample[mine]].all()
        expected, _ = rapid_features(view.as_shadow(r))
        np.testing.assert_array_equal(held.features[mine], expected[held.sample[mine]])
        trained = set(train.sample[train.shadow == r])
        assert trained.isdisjoint(held.sample[mine])  # (shadow, sample) pairs never both
    # holdout 0: nothing held out and build_shadow_set's training rows
    plain, nothing = build_shadow_split(view, rapid_features, holdout=0.0, seed=0)
    assert len(nothing) == 0
    np.testing.assert_array_equal(plain.sample, build_shadow_set(view, rapid_features).sample)
    with pytest.raises(AttackError, match="holdout"):
        build_shadow_split(view, rapid_features, holdout=1.0)


def test_early_stopping_keeps_the_epoch_a_naive_loop_picks_on_held_out_rows(digits_bank):
    view = TargetView.of(digits_bank, 0)
    train, held = build_shadow_split(
        view, rapid_features, holdout=0.2, max_train_samples=1500, seed=0
    )
    params = {**FAST, "epochs": 8, "batch_size": 256, "lr": 3e-3}
    stopped = train_scorer(
        train.features, train.labels, validation=(held.features, held.labels), patience=2,
        **params,
    )
    # Naive: train k = 1, 2, ... epochs without held-out rows (the same trajectory's prefix),
    # the held-out BCE of each; stop after 2 epochs without a new best, keep the best.
    losses = []
    for k in range(1, params["epochs"] + 1):
        scorer = train_scorer(train.features, train.labels, **{**params, "epochs": k})
        p = 1 / (1 + np.exp(-scorer.logit(held.features)))
        losses.append(-np.mean(held.labels * np.log(p) + (1 - held.labels) * np.log(1 - p)))
        if k - (int(np.argmin(losses)) + 1) >= 2:
            break
    best = int(np.argmin(losses)) + 1
    assert stopped.epochs == best
    again = train_scorer(train.features, train.labels, **{**params, "epochs": best})
    np.testing.assert_allclose(
        stopped.logit(held.features), again.logit(held.features), rtol=1e-5, atol=1e-6
    )


def test_early_stopping_reads_only_the_held_out_rows(digits_bank):
    view = TargetView.of(digits_bank, 0)
    train, held = build_shadow_split(view, rapid_features, holdout=0.2, seed=0)
    args = (train.features, train.labels)
    params = {**FAST, "epochs": 6, "patience": 2}
    a = train_scorer(*args, validation=(held.features, held.labels), **params)
    b = train_scorer(*args, validation=(held.features.copy(), held.labels.copy()), **params)
    np.testing.assert_array_equal(a.logit(held.features), b.logit(held.features))
    # no held-out rows, or patience 0: the fixed epochs
    empty = (held.features[:0], held.labels[:0])
    assert train_scorer(*args, validation=empty, **params).epochs == 6
    whole = {**params, "patience": 0}
    assert train_scorer(*args, validation=(held.features, held.labels), **whole).epochs == 6


def test_scorer_attack_returns_held_out_scores_for_the_threshold(digits_bank):
    view = TargetView.of(digits_bank, 0)
    result = scorer_attack(
        view, rapid_features, n_shadows=3, max_train_samples=1000, seed=0, holdout=0.2,
        patience=2, **FAST,
    )
    rows = result.threshold_rows
    assert rows is not None and rows.scores.size > 0
    assert _public(digits_bank)[rows.samples].all()
    assert np.isfinite(rows.scores).all() and 0 < rows.members.mean() < 1
    no_holdout = scorer_attack(
        view, rapid_features, n_shadows=3, max_train_samples=1000, seed=0, **FAST
    )
    assert no_holdout.threshold_rows is None  # the pipeline then reruns the attack
