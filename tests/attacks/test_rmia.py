import numpy as np
import pytest
from scipy.special import softmax

from miaudit.attacks import TargetView, run_attack
from miaudit.attacks.rmia import dominance
from miaudit.errors import AttackError
from miaudit.signals import SignalBank


def _variant(bank, membership):
    return bank.replace(membership=membership)


def _pr(bank):
    """Pr(x|theta) per model and sample: true-class probability, mean over queries. [M, N]"""
    p = softmax(bank.logits.astype(np.float64), axis=-1)
    n_idx = np.arange(bank.n_samples)
    return p[:, n_idx, :, bank.labels].transpose(1, 0, 2).mean(-1)


def _score(ratio_x, ratio_z, gamma):
    """Direct: the N x Z matrix of likelihood ratios."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lr = ratio_x[:, None] / ratio_z[None, :]
    return np.where(np.isnan(ratio_x), np.nan, (lr > gamma).mean(axis=1))


def _direct_offline(bank, target, a=0.3, gamma=2.0):
    pr = _pr(bank)
    refs = [m for m in range(bank.n_models) if m != target]
    p_x = np.full(bank.n_samples, np.nan)
    for n in range(bank.n_samples):
        out = [r for r in refs if not bank.membership[r, n]]
        if out:
            p_x[n] = 0.5 * ((1 + a) * np.mean(pr[out, n]) + (1 - a))
    ratio = pr[target] / p_x
    return _score(ratio, ratio[bank.population], gamma)


def _direct_online(bank, target, gamma=2.0):
    pr = _pr(bank)
    refs = [m for m in range(bank.n_models) if m != target]
    p_x = np.full(bank.n_samples, np.nan)
    for n in range(bank.n_samples):
        ins = [r for r in refs if bank.membership[r, n]]
        outs = [r for r in refs if not bank.membership[r, n]]
        if ins and outs:
            p_x[n] = 0.5 * (np.mean(pr[ins, n]) + np.mean(pr[outs, n]))
    pop = bank.population
    ratio_z = pr[target, pop] / pr[refs][:, pop].mean(axis=0)
    return _score(pr[target] / p_x, ratio_z, gamma)


@pytest.mark.parametrize("target", [0, 3])
def test_rmia_matches_direct_computation(digits_bank, target):
    view = TargetView.of(digits_bank, target)
    np.testing.assert_allclose(
        run_attack("rmia", view).scores, _direct_offline(digits_bank, target), atol=1e-12
    )
    np.testing.assert_allclose(
        run_attack("rmia-online", view).scores, _direct_online(digits_bank, target), atol=1e-12
    )


@pytest.mark.parametrize("a,gamma", [(0.0, 1.0), (1.0, 2.0), (0.6, 4.0)])
def test_rmia_parameters_match_direct_computation(digits_bank, a, gamma):
    view = TargetView.of(digits_bank, 1)
    got = run_attack("rmia", view, a=a, gamma=gamma).scores
    np.testing.assert_allclose(got, _direct_offline(digits_bank, 1, a, gamma), atol=1e-12)
    got = run_attack("rmia-online", view, gamma=gamma).scores
    np.testing.assert_allclose(got, _direct_online(digits_bank, 1, gamma), atol=1e-12)


def test_larger_gamma_never_raises_a_score(digits_bank):
    view = TargetView.of(digits_bank, 0)
    for name in ("rmia", "rmia-online"):
        scores = np.array([run_attack(name, view, gamma=g).scores for g in (1.0, 2.0, 4.0)])
        audit = scores[:, digits_bank.audit]
        assert (np.diff(audit, axis=0) <= 0).all(), name
        assert (np.diff(audit, axis=0) < 0).any(), name


def test_parameter_a_moves_pr_x_towards_the_out_mean(digits_bank):
    """a = 1: Pr(x) is the OUT mean; a = 0: halfway between it and 1. The ratios of x and z
    shift differently, so scores change; larger a lowers Pr(x) for Pr_out < 1."""
    view = TargetView.of(digits_bank, 0)
    s0 = run_attack("rmia", view, a=0.0).scores
    s1 = run_attack("rmia", view, a=1.0).scores
    assert not np.allclose(s0, s1)
    with pytest.raises(AttackError, match="a must lie"):
        run_attack("rmia", view, a=1.5)
    with pytest.raises(AttackError, match="gamma must be positive"):
        run_attack("rmia", view, gamma=0.0)


def test_dominance_matches_the_pairwise_matrix_with_ties_and_zeros():
    rng = np.random.default_rng(0)
    ratio_z = np.concatenate([rng.exponential(size=300), [0.0, 0.0, 1.0, 1.0]])
    ratio_x = np.concatenate([rng.exponential(size=200), [0.0, 2.0, 4.0, np.nan]])
    for gamma in (0.5, 1.0, 2.0):
        np.testing.assert_array_equal(
            dominance(ratio_x, ratio_z, gamma), _score(ratio_x, ratio_z, gamma)
        )


def test_missing_references_give_nan_exactly_there(digits_bank):
    target = 2
    audit = np.nonzero(digits_bank.audit)[0]
    no_out, no_in = int(audit[1]), int(audit[2])
    membership = digits_bank.membership.copy()
    membership[:, no_out] = True
    membership[:, no_in] = False
    view = TargetView.of(_variant(digits_bank, membership), target)
    offline = run_attack("rmia", view).scores
    online = run_attack("rmia-online", view).scores
    assert np.nonzero(np.isnan(offline[audit]))[0].tolist() == [1]
    assert np.nonzero(np.isnan(online[audit]))[0].tolist() == [1, 2]


def test_scores_ignore_the_target_membership(digits_bank):
    target = 5
    membership = digits_bank.membership.copy()
    membership[target] = np.random.default_rng(3).random(digits_bank.n_samples) < 0.5
    membership[target, digits_bank.population] = False
    original = TargetView.of(digits_bank, target)
    shuffled = TargetView.of(_variant(digits_bank, membership), target)
    for name in ("rmia", "rmia-online", "informia"):
        np.testing.assert_array_equal(
            run_attack(name, original).scores, run_attack(name, shuffled).scores, err_msg=name
        )


def test_rmia_needs_a_population(digits_bank):
    bank = SignalBank(
        logits=digits_bank.logits,
        labels=digits_bank.labels,
        membership=digits_bank.membership,
        population=np.zeros(digits_bank.n_samples, dtype=bool),
        audit=digits_bank.audit,
    )
    with pytest.raises(AttackError, match="population"):
        run_attack("rmia", TargetView.of(bank, 0))


def _direct_informia(bank, target, a=0.3):
    pr = _pr(bank)
    refs = [m for m in range(bank.n_models) if m != target]
    bits = np.full(bank.n_samples, np.nan)
    for n in range(bank.n_samples):
        out = [r for r in refs if not bank.membership[r, n]]
        if out:
            bits[n] = np.log2(pr[target, n] / (0.5 * ((1 + a) * np.mean(pr[out, n]) + (1 - a))))
    return bits - np.nanmean(bits[bank.population])


@pytest.mark.parametrize("a", [0.0, 0.3, 1.0])
def test_informia_matches_direct_computation(digits_bank, a):
    for target in (0, 3):
        got = run_attack("informia", TargetView.of(digits_bank, target), a=a).scores
        np.testing.assert_allclose(got, _direct_informia(digits_bank, target, a), rtol=1e-12,
                                   atol=1e-12)  # fmt: skip


def test_informia_ranks_as_rmia_ratio_and_centres_the_population(digits_bank):
    view = TargetView.of(digits_bank, 1)
    info = run_attack("informia", view).scores
    assert abs(np.nanmean(info[digits_bank.population])) < 1e-12
    # gamma -> 0+ makes RMIA's score the population CDF of the ratio: the same order wherever
    # RMIA does not tie
    rmia = run_attack("rmia", view, gamma=1e-12).scores
    audit = digits_bank.audit & np.isfinite(info)
    order = np.argsort(info[audit], kind="stable")
    assert np.all(np.diff(rmia[audit][order]) >= 0)
    with pytest.raises(AttackError, match="a must lie"):
        run_attack("informia", view, a=1.5)
