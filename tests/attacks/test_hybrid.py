import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from miaudit.attacks import TargetView, get_attack, run_attack
from miaudit.attacks.hybrid import (
    DEFAULT_EXTRA_ATTACKS,
    FEATURE_PARAMS,
    base_columns,
    confidence_features,
    fit_imputer,
    hybrid_featurizer,
    usable_extra_attacks,
)
from miaudit.attacks.rapid import rapid_features
from miaudit.errors import AttackError

try:
    for _name in DEFAULT_EXTRA_ATTACKS:
        get_attack(_name)
except AttackError as exc:  # the LiRA / RMIA modules are not registered yet
    pytest.skip(f"feature attacks missing: {exc}", allow_module_level=True)

FAST = dict(epochs=3, max_train_samples=2000)


def _variant(bank, **changes):
    return bank.replace(**changes)


def _offline_bank(bank, target=0):
    """No reference trains on an audit sample: the offline setting (no IN references)."""
    membership = bank.membership.copy()
    others = np.arange(bank.n_models) != target
    membership[np.ix_(others, bank.audit)] = False
    return _variant(bank, membership=membership)


def _loop_per_query_calibrated(view):
    """Naive: each sample's and query's target loss minus the mean over OUT references."""
    target, refs, out = view.target_stat("loss"), view.reference_stat("loss"), view.out_mask()
    expected = np.full(target.shape, np.nan)
    for n in range(target.shape[0]):
        chosen = np.flatnonzero(out[:, n])
        for q in range(target.shape[1]):
            if chosen.size:
                expected[n, q] = target[n, q] - refs[chosen, n, q].mean()
    return expected


def test_features_are_rapid_per_query_then_registry_scores(digits_bank):
    shadow = TargetView.of(digits_bank, 0).as_shadow(2)
    names = usable_extra_attacks(TargetView.of(digits_bank, 0), DEFAULT_EXTRA_ATTACKS)
    assert names == list(DEFAULT_EXTRA_ATTACKS)  # balanced design: online is usable
    features, scorable = hybrid_featurizer(names)(shadow)
    queries = digits_bank.n_queries
    assert queries > 1 and base_columns(shadow, per_query=True) == 2 + queries
    assert features.shape[1] == 2 + queries + len(names)
    base, base_ok = rapid_features(shadow)
    np.testing.assert_array_equal(features[:, :2], base)
    np.testing.assert_array_equal(scorable, base_ok)
    np.testing.assert_allclose(features[:, 2:2 + queries], _loop_per_query_calibrated(shadow),
                               rtol=1e-12, atol=1e-12)  # fmt: skip
    # the query mean of the per-query columns is RAPID's calibrated loss
    np.testing.assert_allclose(features[scorable, 2:2 + queries].mean(axis=1),
                               base[scorable, 1], rtol=1e-10, atol=1e-12)  # fmt: skip
    for j, name in enumerate(names):
        spec = get_attack(name)
        # RMIA as the defaults were chosen: the paper's score (FEATURE_PARAMS)
        raw = spec.fn(shadow, **{**spec.defaults, **FEATURE_PARAMS.get(name, {})})
        if name == "rmia":
            assert FEATURE_PARAMS[name] == {"tie_break": "none"}
        np.testing.assert_allclose(features[:, 2 + queries + j],
                                   np.sign(raw) * np.log1p(np.abs(raw)))  # fmt: skip
    without, _ = hybrid_featurizer(names, per_query=False)(shadow)
    np.testing.assert_array_equal(without, np.delete(features, np.s_[2:2 + queries], axis=1))


def test_one_query_banks_get_no_per_query_columns(digits_bank):
    bank = _variant(digits_bank, logits=digits_bank.logits[:, :, :1], channels={})
    view = TargetView.of(bank, 0)
    names = usable_extra_attacks(view, DEFAULT_EXTRA_ATTACKS)
    assert base_columns(view, per_query=True) == 2
    with_flag, _ = hybrid_featurizer(names, per_query=True)(view)
    without, _ = hybrid_featurizer(names, per_query=False)(view)
    np.testing.assert_array_equal(with_flag, without)
    a = run_attack("rapid-hybrid", view, **FAST).scores
    b = run_attack("rapid-hybrid", view, **FAST, per_query=False).scores
    np.testing.assert_array_equal(a, b)


def test_online_feature_is_dropped_without_in_references(digits_bank):
    bank = _offline_bank(digits_bank)
    view = TargetView.of(bank, 0)
    assert usable_extra_attacks(view, DEFAULT_EXTRA_ATTACKS) == ["lira-offline", "rmia"]
    scores = run_attack("rapid-hybrid", view, **FAST).scores
    assert np.isfinite(scores[bank.audit]).all()


def test_rmia_is_dropped_without_population(digits_bank):
    bank = _variant(digits_bank, population=np.zeros(digits_bank.n_samples, dtype=bool))
    names = usable_extra_attacks(TargetView.of(bank, 0), DEFAULT_EXTRA_ATTACKS)
    assert names == ["lira-offline", "lira-online"]


def test_imputer_uses_shadow_medians_and_flags_missing_values():
    train = np.array([[0.0, 1.0, 1.0, np.nan], [0.0, 1.0, 3.0, 5.0], [0.0, 1.0, np.nan, 7.0]])
    transform = fit_imputer(train)
    out = transform(np.array([[2.0, 3.0, np.nan, 4.0], [2.0, 3.0, 9.0, np.nan]]))
    np.testing.assert_array_equal(
        out, [[2.0, 3.0, 2.0, 4.0, 1.0, 0.0], [2.0, 3.0, 9.0, 6.0, 0.0, 1.0]]
    )
    # three loss columns: only the last is an extra feature
    out = fit_imputer(train, base=3)(np.array([[2.0, 3.0, 5.0, np.nan]]))
    np.testing.assert_array_equal(out, [[2.0, 3.0, 5.0, 6.0, 1.0]])


def test_missing_online_features_are_imputed_not_dropped(digits_bank):
    # Some design samples IN for no reference: lira-online is NaN there in every view, but
    # RAPID's features exist, so the hybrid still scores them.
    membership = digits_bank.membership.copy()
    chosen = np.flatnonzero(digits_bank.audit)[:30]
    membership[1:, chosen] = False
    bank = _variant(digits_bank, membership=membership)
    view = TargetView.of(bank, 0)
    spec = get_attack("lira-online")
    assert np.isnan(spec.fn(view, **spec.defaults)[chosen]).all()
    scores = run_attack("rapid-hybrid", view, **FAST).scores
    assert np.isfinite(scores[bank.audit]).all()


def test_hybrid_leaks_and_ignores_the_target_membership(digits_bank, redrawn_target):
    members = digits_bank.membership[0][digits_bank.audit]
    a = run_attack("rapid-hybrid", TargetView.of(digits_bank, 0), **FAST).scores
    assert roc_auc_score(members, a[digits_bank.audit]) > 0.5
    one, two = (redrawn_target(digits_bank, 0, seed) for seed in (0, 1))
    b = run_attack("rapid-hybrid", TargetView.of(one, 0), **FAST).scores
    c = run_attack("rapid-hybrid", TargetView.of(two, 0), **FAST).scores
    np.testing.assert_array_equal(b, c)


def test_seed_determines_the_scorer(digits_bank):
    view = TargetView.of(digits_bank, 0)
    a = run_attack("rapid-hybrid", view, **FAST, seed=0).scores
    b = run_attack("rapid-hybrid", view, **FAST, seed=0).scores
    c = run_attack("rapid-hybrid", view, **FAST, seed=1).scores
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_samples_without_an_out_reference_are_nan(digits_bank):
    membership = digits_bank.membership.copy()
    audit = np.flatnonzero(digits_bank.audit)[:25]
    membership[:, audit] = True
    result = run_attack(
        "rapid-hybrid", TargetView.of(_variant(digits_bank, membership=membership), 0), **FAST
    )
    assert np.isnan(result.scores[audit]).all() and result.n_unscorable == 25


def test_too_few_shadows_is_a_clear_error(digits_bank):
    bank = _variant(
        digits_bank, logits=digits_bank.logits[:2], membership=digits_bank.membership[:2],
        channels={},
    )
    with pytest.raises(AttackError, match="at least 2 shadow"):
        run_attack("rapid-hybrid", TargetView.of(bank, 0))


def _loop_confidence(view):
    """Naive: per sample and query, phi_t, phi_t - mean of the OUT references' phi, and that
    over sqrt(std^2 + s0^2) (std ddof 0, s0 the per-query median of the stds), query means."""
    phi, refs, out = view.target_stat("phi"), view.reference_stat("phi"), view.out_mask()
    n, q = phi.shape
    mean = np.full((n, q), np.nan)
    std = np.full((n, q), np.nan)
    for i in range(n):
        chosen = np.flatnonzero(out[:, i])
        if chosen.size:
            mean[i] = refs[chosen, i].mean(axis=0)
            std[i] = np.maximum(refs[chosen, i].std(axis=0), 1e-6)
    s0 = np.array([np.median(std[np.isfinite(std[:, j]), j]) for j in range(q)])
    z = (phi - mean) / np.sqrt(std ** 2 + s0 ** 2 + 1e-12)
    return np.column_stack([phi.mean(1), (phi - mean).mean(1), z.mean(1)])


def test_confidence_features_equal_a_naive_loop(digits_bank):
    view = TargetView.of(digits_bank, 0).as_shadow(1)
    features = confidence_features(view)
    assert features.shape[1] == 4  # the bank has population rows: QMIA's margin last
    np.testing.assert_allclose(features[:, :3], _loop_confidence(view), rtol=1e-9, atol=1e-12)
    qmia = run_attack("qmia", view, score="phi").scores
    np.testing.assert_array_equal(features[:, 3], qmia)


def test_no_qmia_margin_without_population(digits_bank):
    bank = _variant(digits_bank, population=np.zeros(digits_bank.n_samples, dtype=bool))
    view = TargetView.of(bank, 0)
    assert confidence_features(view).shape[1] == 3
    assert base_columns(view, per_query=False, confidence=True) == 2 + 3


def test_confidence_columns_follow_the_loss_columns(digits_bank):
    view = TargetView.of(digits_bank, 0)
    names = usable_extra_attacks(view, DEFAULT_EXTRA_ATTACKS)
    plain, _ = hybrid_featurizer(names, per_query=True)(view)
    with_phi, _ = hybrid_featurizer(names, per_query=True, confidence=True)(view)
    loss = base_columns(view, per_query=True)
    assert base_columns(view, per_query=True, confidence=True) == loss + 4
    np.testing.assert_array_equal(with_phi[:, :loss], plain[:, :loss])
    np.testing.assert_allclose(with_phi[:, loss:loss + 4], confidence_features(view))
    np.testing.assert_array_equal(with_phi[:, loss + 4:], plain[:, loss:])
    # on by default, and switching it off changes the scores
    a = run_attack("rapid-hybrid", view, **FAST).scores
    b = run_attack("rapid-hybrid", view, **FAST, confidence=False).scores
    assert not np.allclose(a, b, equal_nan=True)
