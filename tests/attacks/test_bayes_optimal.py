import numpy as np
import pytest
from scipy.special import softmax

from miaudit.attacks import TargetView, run_attack
from miaudit.attacks.rmia import dominance
from miaudit.errors import AttackError


def _pr(bank):
    """Pr(x|theta) per model and sample: true-class probability, mean over queries. [M, N]"""
    p = softmax(bank.logits.astype(np.float64), axis=-1)
    n_idx = np.arange(bank.n_samples)
    return p[:, n_idx, :, bank.labels].transpose(1, 0, 2).mean(-1)


def _direct(bank, target, temperature, out_models):
    """Sablayrolles' score with tau by Monte Carlo over OUT references, one sample at a time:
    -l_t/T - log mean_OUT exp(-l_r/T), l = -log Pr(x|theta). out_models bool [M, N]: the
    view's OUT references."""
    pr = _pr(bank)
    want = np.full(bank.n_samples, np.nan)
    for n in range(bank.n_samples):
        out = [r for r in range(bank.n_models) if out_models[r, n]]
        if out:
            loss_t = -np.log(pr[target, n])
            tau = -temperature * np.log(np.mean([np.exp(np.log(pr[r, n]) / temperature)
                                                 for r in out]))
            want[n] = (tau - loss_t) / temperature
    return want


@pytest.mark.parametrize("target,temperature", [(0, 1.0), (3, 0.5), (5, 2.0)])
def test_base_matches_direct_computation(digits_bank, target, temperature, visible_sides):
    view = TargetView.of(digits_bank, target)
    got = run_attack("base", view, temperature=temperature).scores
    _, out_models = visible_sides(digits_bank, target)
    np.testing.assert_allclose(got, _direct(digits_bank, target, temperature, out_models),
                               rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("gamma", [1.0, 2.0, 4.0])
def test_base_at_temperature_one_is_rmia_with_a_one(digits_bank, gamma):
    """The paper's equivalence: at T = 1, exp(BASE) is offline RMIA's ratio with a = 1, and
    RMIA's score is the fraction of population ratios it dominates by gamma."""
    view = TargetView.of(digits_bank, 2)
    base = run_attack("base", view).scores
    rmia = run_attack("rmia", view, a=1.0, gamma=gamma).scores
    ratio = np.exp(base)
    np.testing.assert_allclose(rmia, dominance(ratio, ratio[digits_bank.population], gamma),
                               atol=1e-12)
    order = np.argsort(base[digits_bank.audit])
    assert (np.diff(rmia[digits_bank.audit][order]) >= 0).all()  # same ranking, with ties


def test_missing_out_reference_gives_nan_exactly_there(digits_bank):
    audit = np.nonzero(digits_bank.audit)[0]
    membership = digits_bank.membership.copy()
    membership[:, audit[4]] = True
    view = TargetView.of(digits_bank.replace(membership=membership), 1)
    scores = run_attack("base", view).scores
    assert np.nonzero(np.isnan(scores[audit]))[0].tolist() == [4]


def test_base_needs_out_references_and_a_positive_temperature(digits_bank):
    membership = np.ones_like(digits_bank.membership)
    membership[:, digits_bank.population] = False
    view = TargetView.of(digits_bank.replace(membership=membership), 0)
    with pytest.raises(AttackError, match="cannot run"):
        run_attack("base", view)
    with pytest.raises(AttackError, match="'temperature' must be a number > 0"):
        run_attack("base", TargetView.of(digits_bank, 0), temperature=0.0)


def test_base_is_finite_where_probabilities_underflow(digits_bank):
    logits = digits_bank.logits.copy()
    n = int(np.nonzero(digits_bank.audit)[0][0])
    logits[:, n, :, :] = 0.0
    logits[:, n, :, (digits_bank.labels[n] + 1) % 10] = 2000.0  # p_y = exp(-2000) everywhere
    view = TargetView.of(digits_bank.replace(logits=logits), 0)
    scores = run_attack("base", view).scores
    assert np.isfinite(scores[n])
    np.testing.assert_allclose(scores[n], 0.0, atol=1e-9)  # identical losses: ratio 1


def test_scores_ignore_the_target_membership(digits_bank, redrawn_target):
    target = 6
    one, two = (TargetView.of(redrawn_target(digits_bank, target, seed), target)
                for seed in (4, 5))
    np.testing.assert_array_equal(run_attack("base", one).scores,
                                  run_attack("base", two).scores)
