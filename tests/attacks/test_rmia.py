from itertools import pairwise

import numpy as np
import pytest
from scipy.special import softmax

from miaudit.attacks import TargetView, run_attack
from miaudit.attacks.rmia import TIE_BREAK, dominance
from miaudit.attacks.view import side_means
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


def _refs(side, n):
    """The references on one side of sample n: side bool [M, N], a mask of `visible_sides`."""
    return [r for r in range(len(side)) if side[r, n]]


def _direct_offline(bank, target, visible, a=0.3, gamma=2.0):
    """visible: the view's (IN, OUT) reference masks, bool [M, N] each (`visible_sides`)."""
    pr = _pr(bank)
    p_x = np.full(bank.n_samples, np.nan)
    for n in range(bank.n_samples):
        out = _refs(visible[1], n)
        if out:
            p_x[n] = 0.5 * ((1 + a) * np.mean(pr[out, n]) + (1 - a))
    ratio = pr[target] / p_x
    return _score(ratio, ratio[bank.population], gamma)


def _online_ratios(bank, target, visible):
    pr = _pr(bank)
    p_x = np.full(bank.n_samples, np.nan)
    for n in range(bank.n_samples):
        ins, outs = _refs(visible[0], n), _refs(visible[1], n)
        if ins and outs:
            p_x[n] = 0.5 * (np.mean(pr[ins, n]) + np.mean(pr[outs, n]))
    every = visible[0] | visible[1]  # all the references available for the sample
    pop = np.flatnonzero(bank.population)
    return pr[target] / p_x, np.array([pr[target, z] / pr[every[:, z], z].mean() for z in pop])


def _direct_online(bank, target, visible, gamma=2.0):
    return _score(*_online_ratios(bank, target, visible), gamma)


@pytest.mark.parametrize("target", [0, 3])
def test_rmia_with_tie_break_none_is_the_papers_score(digits_bank, target, visible_sides):
    view = TargetView.of(digits_bank, target)
    visible = visible_sides(digits_bank, target)
    np.testing.assert_allclose(
        run_attack("rmia", view, tie_break="none").scores,
        _direct_offline(digits_bank, target, visible), atol=1e-12,
    )
    np.testing.assert_allclose(
        run_attack("rmia-online", view, tie_break="none").scores,
        _direct_online(digits_bank, target, visible), atol=1e-12,
    )


@pytest.mark.parametrize("a,gamma", [(0.0, 1.0), (1.0, 2.0), (0.6, 4.0)])
def test_rmia_parameters_match_direct_computation(digits_bank, a, gamma, visible_sides):
    view = TargetView.of(digits_bank, 1)
    visible = visible_sides(digits_bank, 1)
    got = run_attack("rmia", view, a=a, gamma=gamma, tie_break="none").scores
    np.testing.assert_allclose(got, _direct_offline(digits_bank, 1, visible, a, gamma),
                               atol=1e-12)
    got = run_attack("rmia-online", view, gamma=gamma, tie_break="none").scores
    np.testing.assert_allclose(got, _direct_online(digits_bank, 1, visible, gamma), atol=1e-12)


@pytest.mark.parametrize("tie_break", ["none", "ratio"])
def test_larger_gamma_never_raises_a_score(digits_bank, tie_break):
    view = TargetView.of(digits_bank, 0)
    for name in ("rmia", "rmia-online"):
        scores = np.array([run_attack(name, view, gamma=g, tie_break=tie_break).scores
                           for g in (1.0, 2.0, 4.0)])
        audit = scores[:, digits_bank.audit]
        assert (np.diff(audit, axis=0) <= 0).all(), name
        assert (np.diff(audit, axis=0) < 0).any(), name


def _naive_tie_broken(ratio_x, ratio_z, gamma):
    """The documented tie-broken score, one sample at a time: (count + u) / Z, u where
    t = ratio_x / gamma lies between the population ratios around it."""
    zs = sorted(float(z) for z in ratio_z if not np.isnan(z))
    out = []
    for r in ratio_x:
        if np.isnan(r):
            out.append(np.nan)
            continue
        t = r / gamma
        # the paper's numerator, |{z : r / z > gamma}| (r / 0 = inf for r > 0)
        count = sum(1 for z in zs if z == 0 or r / z > gamma) if t > 0 else 0
        if count == len(zs):
            u = 1.0 - zs[-1] / t
        else:
            lo = zs[count - 1] if count else 0.0
            hi = zs[count]
            u = (t - lo) / (hi - lo) if hi > lo else 0.0
        out.append((count + u) / len(zs))
    return np.array(out)


def _ratios(seed=0):
    """Population and sample ratios with repeated values, zeros, ties and NaNs."""
    rng = np.random.default_rng(seed)
    ratio_z = np.concatenate([rng.exponential(size=60), [0.0, 0.5, 0.5, 1.0, 1.0, np.nan]])
    ratio_x = np.concatenate([rng.exponential(size=400), rng.choice(ratio_z[:-1], 40) * 2.0,
                              [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 50.0, np.nan]])
    return rng.permutation(ratio_x), ratio_z


@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.0, 3.0])
def test_tie_break_matches_a_naive_loop(gamma):
    ratio_x, ratio_z = _ratios()
    got = dominance(ratio_x, ratio_z, gamma, tie_break="ratio")
    np.testing.assert_allclose(got, _naive_tie_broken(ratio_x, ratio_z, gamma), rtol=1e-12,
                               atol=1e-15)
    # the order is the one of sorting by (paper's count, ratio): equal keys tie, others never
    paper = dominance(ratio_x, ratio_z, gamma, tie_break="none")
    ok = np.flatnonzero(~np.isnan(ratio_x))
    keys = sorted(ok, key=lambda i: (paper[i], ratio_x[i]))
    for i, j in pairwise(keys):
        if (paper[i], ratio_x[i]) == (paper[j], ratio_x[j]):
            assert got[i] == got[j]
        else:
            assert got[i] < got[j], (ratio_x[i], ratio_x[j])


@pytest.mark.parametrize("gamma", [0.5, 2.0])
def test_tie_break_never_reorders_different_counts(gamma):
    ratio_x, ratio_z = _ratios(1)
    paper = dominance(ratio_x, ratio_z, gamma, tie_break="none")
    broken = dominance(ratio_x, ratio_z, gamma, tie_break="ratio")
    ok = ~np.isnan(paper)
    size = np.count_nonzero(~np.isnan(ratio_z))
    # within one count step above the paper's score
    assert (broken[ok] >= paper[ok]).all()
    assert (broken[ok] <= paper[ok] + 1 / size + 1e-12).all()
    p, b = paper[ok], broken[ok]
    lower = p[:, None] < p[None, :]
    assert (b[:, None] <= b[None, :])[lower].all()
    assert (b[:, None] < b[None, :])[lower].mean() > 0.99  # ties across counts: only at steps
    # and it breaks the paper's ties: the largest tie group shrinks to the exactly equal ratios
    _, counts = np.unique(p, return_counts=True)
    _, broken_counts = np.unique(b, return_counts=True)
    _, ratio_counts = np.unique(ratio_x[ok], return_counts=True)
    assert broken_counts.max() == ratio_counts.max() < counts.max()


@pytest.mark.parametrize("tie_break", ["none", "ratio"])
def test_dominance_nan_handling(tie_break):
    ratio_x = np.array([0.5, np.nan, 2.0, 0.0])
    ratio_z = np.array([np.nan, 0.2, 1.0, np.nan])
    got = dominance(ratio_x, ratio_z, 1.0, tie_break=tie_break)
    assert np.isnan(got).tolist() == [False, True, False, False]
    np.testing.assert_array_equal(got, dominance(ratio_x, ratio_z[[1, 2]], 1.0, tie_break))
    assert np.isnan(dominance(ratio_x, np.array([np.nan, np.nan]), 1.0, tie_break)).all()
    with pytest.raises(AttackError, match="tie_break must be one of"):
        dominance(ratio_x, ratio_z, 1.0, tie_break="rank")


@pytest.mark.parametrize("gamma", [1.0, 2.0])
def test_online_tie_break_matches_a_naive_loop(digits_bank, gamma, visible_sides):
    """rmia-online shares `dominance`, so its tie-break is the same rule on its own ratios."""
    view = TargetView.of(digits_bank, 4)
    ratio_x, ratio_z = _online_ratios(digits_bank, 4, visible_sides(digits_bank, 4))
    got = run_attack("rmia-online", view, gamma=gamma, tie_break="ratio").scores
    np.testing.assert_allclose(got, _naive_tie_broken(ratio_x, ratio_z, gamma), rtol=1e-9,
                               atol=1e-12)
    audit = digits_bank.audit & ~np.isnan(got)
    paper = run_attack("rmia-online", view, gamma=gamma, tie_break="none").scores
    assert np.unique(got[audit]).size == np.unique(ratio_x[audit]).size
    assert np.unique(got[audit]).size > np.unique(paper[audit]).size


def test_tie_break_ranks_as_the_ratio_and_informia(digits_bank):
    """The paper's count is a non-decreasing step function of the ratio, so ordering by
    (count, ratio) is ordering by the ratio: tie-broken RMIA ranks the samples exactly as
    informia does, whatever gamma and the population."""
    view = TargetView.of(digits_bank, 2)
    info = run_attack("informia", view).scores
    ok = np.isfinite(info)
    for gamma in (1.0, 2.0, 8.0):
        rmia = run_attack("rmia", view, gamma=gamma, tie_break="ratio").scores
        assert np.array_equal(np.isnan(rmia), ~ok)
        order = np.argsort(info[ok], kind="stable")
        assert (np.diff(rmia[ok][order]) >= 0).all()
        assert np.array_equal(np.diff(rmia[ok][order]) > 0, np.diff(info[ok][order]) > 0)
    assert TIE_BREAK == "ratio"  # the default (EXPERIMENTS.md, "RMIA ties")
    np.testing.assert_array_equal(run_attack("rmia", view).scores,
                                  run_attack("rmia", view, tie_break="ratio").scores)
    with pytest.raises(AttackError, match="tie_break"):
        run_attack("rmia-online", view, tie_break="random")


def test_parameter_a_moves_pr_x_towards_the_out_mean(digits_bank):
    """a = 1: Pr(x) is the OUT mean; a = 0: halfway between it and 1. The ratios of x and z
    shift differently, so scores change; larger a lowers Pr(x) for Pr_out < 1."""
    view = TargetView.of(digits_bank, 0)
    s0 = run_attack("rmia", view, a=0.0).scores
    s1 = run_attack("rmia", view, a=1.0).scores
    assert not np.allclose(s0, s1)
    with pytest.raises(AttackError, match=r"'a' must be a number in \[0, 1\]"):
        run_attack("rmia", view, a=1.5)
    with pytest.raises(AttackError, match="'gamma' must be a number > 0"):
        run_attack("rmia", view, gamma=0.0)


def test_dominance_matches_the_pairwise_matrix_with_ties_and_zeros():
    rng = np.random.default_rng(0)
    ratio_z = np.concatenate([rng.exponential(size=300), [0.0, 0.0, 1.0, 1.0]])
    ratio_x = np.concatenate([rng.exponential(size=200), [0.0, 2.0, 4.0, np.nan]])
    for gamma in (0.5, 1.0, 2.0):
        np.testing.assert_array_equal(
            dominance(ratio_x, ratio_z, gamma, tie_break="none"), _score(ratio_x, ratio_z, gamma)
        )


def test_missing_references_give_nan_exactly_there(digits_bank):
    target = 2
    audit = np.nonzero(digits_bank.audit)[0]
    no_out, no_in = int(audit[1]), int(audit[2])
    membership = digits_bank.membership.copy()
    membership[:, no_out] = True
    membership[:, no_in] = False
    view = TargetView.of(_variant(digits_bank, membership), target)
    for tie_break in ("none", "ratio"):
        offline = run_attack("rmia", view, tie_break=tie_break).scores
        online = run_attack("rmia-online", view, tie_break=tie_break).scores
        assert np.nonzero(np.isnan(offline[audit]))[0].tolist() == [1]
        assert np.nonzero(np.isnan(online[audit]))[0].tolist() == [1, 2]


def test_scores_ignore_the_target_membership(digits_bank, redrawn_target):
    target = 5
    one, two = (TargetView.of(redrawn_target(digits_bank, target, seed), target)
                for seed in (3, 4))
    for name in ("rmia", "rmia-online", "informia"):
        np.testing.assert_array_equal(
            run_attack(name, one).scores, run_attack(name, two).scores, err_msg=name
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


def _direct_informia(bank, target, out_models, a=0.3):
    pr = _pr(bank)
    bits = np.full(bank.n_samples, np.nan)
    for n in range(bank.n_samples):
        out = _refs(out_models, n)
        if out:
            bits[n] = np.log2(pr[target, n] / (0.5 * ((1 + a) * np.mean(pr[out, n]) + (1 - a))))
    return bits - np.nanmean(bits[bank.population])


@pytest.mark.parametrize("a", [0.0, 0.3, 1.0])
def test_informia_matches_direct_computation(digits_bank, a, visible_sides):
    for target in (0, 3):
        got = run_attack("informia", TargetView.of(digits_bank, target), a=a).scores
        out_models = visible_sides(digits_bank, target)[1]
        np.testing.assert_allclose(got, _direct_informia(digits_bank, target, out_models, a),
                                   rtol=1e-12, atol=1e-12)  # fmt: skip


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
    with pytest.raises(AttackError, match=r"'a' must be a number in \[0, 1\]"):
        run_attack("informia", view, a=1.5)


# --- temperature: Pr(x|theta) = mean_q softmax(z_q / T)[y] -------------------------------


def _naive_pr(bank, temperature):
    """The tempered true-class probability, one model, sample and query at a time: the
    softmax written out (shifted by the largest tempered logit), then the mean over queries.
    [M, N]"""
    m_count, n_count, q_count, _ = bank.logits.shape
    pr = np.zeros((m_count, n_count))
    for m in range(m_count):
        for n in range(n_count):
            total = 0.0
            for q in range(q_count):
                z = bank.logits[m, n, q].astype(np.float64) / temperature
                e = np.exp(z - z.max())
                total += e[bank.labels[n]] / e.sum()
            pr[m, n] = total / q_count
    return pr


@pytest.fixture(scope="module")
def naive_pr(digits_bank):
    return {t: _naive_pr(digits_bank, t) for t in (1.0, 2.0, 0.5)}


def _naive_offline_ratio(bank, pr, target, visible, a):
    ratio = np.full(bank.n_samples, np.nan)
    for n in range(bank.n_samples):
        out = _refs(visible[1], n)
        if out:
            ratio[n] = pr[target, n] / (0.5 * ((1 + a) * np.mean(pr[out, n]) + (1 - a)))
    return ratio


def _naive_online_ratios(bank, pr, target, visible):
    ratio_x = np.full(bank.n_samples, np.nan)
    for n in range(bank.n_samples):
        ins, outs = _refs(visible[0], n), _refs(visible[1], n)
        if ins and outs:
            ratio_x[n] = pr[target, n] / (0.5 * (np.mean(pr[ins, n]) + np.mean(pr[outs, n])))
    pop = np.flatnonzero(bank.population)
    ratio_z = np.array([pr[target, z] / np.mean(pr[_refs(visible[0] | visible[1], z), z])
                        for z in pop])
    return ratio_x, ratio_z


@pytest.mark.parametrize("temperature", [1.0, 2.0, 0.5])
@pytest.mark.parametrize("target", [0, 5])
def test_temperature_matches_a_naive_loop(digits_bank, naive_pr, temperature, target,
                                          visible_sides):
    """rmia, rmia-online and informia at temperature T against the paper's formulas on the
    naive tempered probabilities: the paper's count (tie_break none), the tie-broken score
    and informia's bits."""
    bank, pr, view = digits_bank, naive_pr[temperature], TargetView.of(digits_bank, target)
    a, gamma = 0.3, 2.0
    visible = visible_sides(bank, target)
    ratio = _naive_offline_ratio(bank, pr, target, visible, a)
    ratio_z = ratio[bank.population]
    got = run_attack("rmia", view, temperature=temperature, tie_break="none").scores
    np.testing.assert_allclose(got, _score(ratio, ratio_z, gamma), atol=1e-12)
    got = run_attack("rmia", view, temperature=temperature, tie_break="ratio").scores
    np.testing.assert_allclose(got, _naive_tie_broken(ratio, ratio_z, gamma), rtol=1e-9,
                               atol=1e-12)
    bits = np.log2(ratio)
    np.testing.assert_allclose(run_attack("informia", view, temperature=temperature).scores,
                               bits - np.nanmean(bits[bank.population]), rtol=1e-10,
                               atol=1e-10)
    ratio_x, ratio_z = _naive_online_ratios(bank, pr, target, visible)
    got = run_attack("rmia-online", view, temperature=temperature, tie_break="none").scores
    np.testing.assert_allclose(got, _score(ratio_x, ratio_z, gamma), atol=1e-12)


def test_temperature_one_is_todays_score_exactly(digits_bank, naive_pr):
    """T = 1 reads the cached statistic, the scores of before the parameter existed; the
    tempered path (any other T) at T = 1 gives the same probabilities to the last bit, and
    a T within rounding of 1 the same scores. The default stays 1 (bench/rmia_temperature.md:
    T = 2 lowered TPR@0.1 % on 7 of 11 offline development banks)."""
    from miaudit.attacks.rmia import TEMPERATURE_DEFAULT, _tempered

    assert TEMPERATURE_DEFAULT == 1.0
    np.testing.assert_allclose(naive_pr[1.0], _pr(digits_bank), rtol=1e-12, atol=1e-15)

    view = TargetView.of(digits_bank, 1)
    target, means = _tempered(view, 1.0)
    np.testing.assert_array_equal(target, view.target_query_mean("prob_true"))
    cached = side_means(view, "prob_true")
    for side in ("members", "non_members", "every"):
        np.testing.assert_allclose(getattr(means, side), getattr(cached, side), rtol=1e-15)
    for name in ("rmia", "rmia-online", "informia"):
        np.testing.assert_array_equal(run_attack(name, view, temperature=1.0).scores,
                                      run_attack(name, view).scores)
        np.testing.assert_allclose(run_attack(name, view, temperature=1.0 + 1e-15).scores,
                                   run_attack(name, view, temperature=1.0).scores, atol=1e-9)


def test_temperature_changes_scores_and_ignores_target_membership(digits_bank, redrawn_target):
    target = 5
    original = TargetView.of(digits_bank, target)
    one, two = (TargetView.of(redrawn_target(digits_bank, target, seed), target)
                for seed in (3, 4))
    for name in ("rmia", "rmia-online", "informia"):
        hot = run_attack(name, original, temperature=2.0).scores
        assert not np.allclose(hot, run_attack(name, original, temperature=1.0).scores,
                               equal_nan=True), name
        np.testing.assert_array_equal(run_attack(name, one, temperature=2.0).scores,
                                      run_attack(name, two, temperature=2.0).scores,
                                      err_msg=name)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_temperature_must_be_positive_and_finite(digits_bank, bad):
    view = TargetView.of(digits_bank, 0)
    for name in ("rmia", "rmia-online", "informia"):
        with pytest.raises(AttackError, match="'temperature' must be a number > 0"):
            run_attack(name, view, temperature=bad)

