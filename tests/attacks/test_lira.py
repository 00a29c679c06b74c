import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import norm
from sklearn.metrics import roc_auc_score

from miaudit.attacks import TargetView, run_attack
from miaudit.attacks.lira import SIGMA_FLOOR, fit_gaussians
from miaudit.signals import SignalBank

NAMES = (
    "lira-online",
    "lira-online-fixed-variance",
    "lira-offline",
    "lira-offline-fixed-variance",
    "lira-offline-two-sided",
)


def _variant(bank, membership=None, logits=None):
    return SignalBank(
        logits=bank.logits if logits is None else logits,
        labels=bank.labels,
        membership=bank.membership if membership is None else membership,
        population=bank.population,
        audit=bank.audit,
        channels=bank.channels,
    )


def _phi(bank):
    z = bank.logits.astype(np.float64)  # [M, N, Q, C]
    n_idx = np.arange(bank.n_samples)
    true = z[:, n_idx, :, bank.labels].transpose(1, 0, 2)  # [M, N, Q]
    others = z.copy()
    others[:, n_idx, :, bank.labels] = -np.inf
    return true - logsumexp(others, axis=-1)


def _sides(visible, equal_counts):
    """Per sample: the reference ids IN and OUT, in bank order, truncated like the ref code.
    visible: (IN, OUT) masks, bool [M, N] each (the view's: the `visible_sides` fixture)."""
    ins = [np.flatnonzero(side).tolist() for side in visible[0].T]
    outs = [np.flatnonzero(side).tolist() for side in visible[1].T]
    if equal_counts:
        k_in = min(len(s) for s in ins if s)
        k_out = min(len(s) for s in outs if s)
        ins, outs = [s[:k_in] for s in ins], [s[:k_out] for s in outs]
    return ins, outs


def _fit(phi, sides, fixed):
    n, q = phi.shape[1:]
    mu, sd = np.full((n, q), np.nan), np.full((n, q), np.nan)
    for i, side in enumerate(sides):
        if side:
            mu[i] = phi[side, i].mean(axis=0)
            sd[i] = phi[side, i].std(axis=0)  # ddof 0
    if fixed:
        for j in range(q):
            devs = [phi[s, i, j] - mu[i, j] for i, s in enumerate(sides) if len(s) >= 2]
            pooled = np.concatenate(devs).std() if devs else np.nan
            sd[:, j] = np.where(np.isnan(mu[:, j]), np.nan, pooled)
    return mu, np.maximum(sd, SIGMA_FLOOR)


def _direct(bank, target, visible, equal_counts=True):
    phi = _phi(bank)
    ins, outs = _sides(visible, equal_counts)
    x = phi[target]
    want = {}
    for fixed, suffix in ((False, ""), (True, "-fixed-variance")):
        mu_in, sd_in = _fit(phi, ins, fixed)
        mu_out, sd_out = _fit(phi, outs, fixed)
        online = norm.logpdf(x, mu_in, sd_in) - norm.logpdf(x, mu_out, sd_out)
        want["lira-online" + suffix] = online.mean(1)
        want["lira-offline" + suffix] = norm.logcdf(x, mu_out, sd_out).mean(1)
        if not fixed:
            want["lira-offline-two-sided"] = -norm.logpdf(x, mu_out, sd_out).mean(1)
    return want


@pytest.mark.parametrize("target", [0, 5])
def test_lira_scores_match_direct_computation(digits_bank, target, visible_sides):
    view = TargetView.of(digits_bank, target)
    want = _direct(digits_bank, target, visible_sides(digits_bank, target))
    for name in NAMES:
        got = run_attack(name, view).scores
        np.testing.assert_allclose(got, want[name], rtol=1e-8, atol=1e-8, err_msg=name)


def test_lira_without_equal_counts_matches_direct_computation(digits_bank, visible_sides):
    view = TargetView.of(digits_bank, 0)
    want = _direct(digits_bank, 0, visible_sides(digits_bank, 0), equal_counts=False)
    for name in NAMES:
        got = run_attack(name, view, equal_counts=False).scores
        np.testing.assert_allclose(got, want[name], rtol=1e-8, atol=1e-8, err_msg=name)


def test_missing_side_gives_nan_exactly_there(digits_bank):
    target = 4
    audit = np.nonzero(digits_bank.audit)[0]
    no_out, no_in = int(audit[3]), int(audit[7])
    membership = digits_bank.membership.copy()
    membership[:, no_out] = True
    membership[:, no_in] = False
    view = TargetView.of(_variant(digits_bank, membership), target)
    for name in NAMES:
        scores = run_attack(name, view).scores
        expect_nan = {no_out} | ({no_in} if name.startswith("lira-online") else set())
        got_nan = set(np.nonzero(np.isnan(scores[digits_bank.audit]))[0].tolist())
        assert {int(audit[i]) for i in got_nan} == expect_nan, name


def test_sigma_is_floored_when_references_agree(digits_bank, visible_sides):
    target, j = 0, int(np.nonzero(digits_bank.audit)[0][0])
    logits = digits_bank.logits.copy()
    logits[1:, j] = logits[1, j]  # every reference has the same outputs on sample j
    bank = _variant(digits_bank, logits=logits)
    view = TargetView.of(bank, target)
    fit = fit_gaussians(view.reference_stat("phi"), view.out_mask())
    np.testing.assert_array_equal(fit.std[j], SIGMA_FLOOR)
    want = _direct(bank, target, visible_sides(bank, target))
    for name in ("lira-online", "lira-offline", "lira-offline-two-sided"):
        got = run_attack(name, view).scores
        assert np.isfinite(got[j]), name
        np.testing.assert_allclose(got[j], want[name][j], rtol=1e-8, err_msg=name)


def test_single_reference_per_side_is_floored():
    values = np.array([[[1.0, 2.0]], [[3.0, 5.0]]])  # R=2, N=1, Q=2
    fit = fit_gaussians(values, np.array([[True], [False]]))
    np.testing.assert_array_equal(fit.mean, [[1.0, 2.0]])
    np.testing.assert_array_equal(fit.std, [[SIGMA_FLOOR, SIGMA_FLOOR]])


def test_fixed_variance_falls_back_to_the_spread_of_all_values():
    # Every sample has one reference on the side: no within-sample spread to pool.
    values = np.array([[[1.0], [4.0], [9.0]], [[0.0], [0.0], [0.0]]])  # R=2, N=3, Q=1
    mask = np.array([[True, True, True], [False, False, False]])
    fit = fit_gaussians(values, mask, fixed_variance=True)
    np.testing.assert_allclose(fit.std[:, 0], np.std([1.0, 4.0, 9.0]))


def test_one_sided_offline_is_monotone_in_phi_and_two_sided_is_not(digits_bank, redrawn_target):
    target = 2
    # the target's row redrawn: no reference set aside, so moving the target's outputs moves
    # phi_t alone, not which references a balanced bank's view would set aside
    bank = redrawn_target(digits_bank, target, 0)
    rows = np.arange(bank.n_samples)
    one, two = [], []
    for delta in (-2.0, -1.0, 0.0, 1.0, 2.0):
        logits = bank.logits.copy()
        logits[target, rows, :, bank.labels] += delta  # phi_t increases by delta
        view = TargetView.of(_variant(bank, logits=logits), target)
        one.append(run_attack("lira-offline", view).scores)
        two.append(run_attack("lira-offline-two-sided", view).scores)
    one, two = np.array(one)[:, bank.audit], np.array(two)[:, bank.audit]
    assert (np.diff(one, axis=0) > 0).all()
    assert (np.diff(two, axis=0) < 0).any()


def test_scores_ignore_the_target_membership(digits_bank, redrawn_target):
    target = 6
    one, two = (TargetView.of(redrawn_target(digits_bank, target, seed), target)
                for seed in (2, 3))
    for name in NAMES:
        np.testing.assert_array_equal(
            run_attack(name, one).scores, run_attack(name, two).scores, err_msg=name
        )


def _auc(bank, target, name, **params):
    scores = run_attack(name, TargetView.of(bank, target), **params).scores[bank.audit]
    return roc_auc_score(bank.membership[target][bank.audit], scores)


def test_online_lira_beats_the_loss_attack(digits_bank):
    targets = range(digits_bank.n_models)
    lira = np.mean([_auc(digits_bank, t, "lira-online") for t in targets])
    loss = np.mean([_auc(digits_bank, t, "loss") for t in targets])
    assert lira > loss + 0.02, (lira, loss)


def test_unequal_reference_counts_bias_online_lira_below_chance(digits_bank):
    """Why equal_counts is the default, and why a view of a balanced bank sets a reference
    aside: leaving the target out of a balanced bank gives its members one IN reference fewer,
    and per-sample variances fitted to all of them then depend on membership (online LiRA on
    those sides, computed here, is below chance). The view's sides have the same counts
    whatever the target's membership: lira-online without equal counts is above chance."""
    targets = range(digits_bank.n_models)
    audit, membership = digits_bank.audit, digits_bank.membership
    leaky = []
    for t in targets:
        others = (np.arange(digits_bank.n_models) != t)[:, None]
        scores = _direct(digits_bank, t, (membership & others, ~membership & others),
                         equal_counts=False)["lira-online"]
        leaky.append(roc_auc_score(membership[t][audit], scores[audit]))
    assert np.mean(leaky) < 0.5
    unequal = np.mean([_auc(digits_bank, t, "lira-online", equal_counts=False) for t in targets])
    assert unequal > 0.5


def test_equal_count_mask_keeps_the_first_k_references():
    from miaudit.attacks.lira import equal_count_mask

    rng = np.random.default_rng(3)
    mask = rng.random((11, 500)) < 0.6
    mask[:, :4] = False  # samples with no reference keep none
    count = mask.sum(axis=0)
    k = int(count[count > 0].min())
    np.testing.assert_array_equal(equal_count_mask(mask), mask & (np.cumsum(mask, axis=0) <= k))


def test_fixed_variance_fallback_in_blocks_matches_one_block(digits_bank, monkeypatch,
                                                            redrawn_target):
    """With one OUT reference per sample the fixed variance falls back to the overall spread;
    summed over blocks of samples (on two threads) it equals the one-block value."""
    import torch

    from miaudit.attacks import lira
    from miaudit.signals import statistics

    n = digits_bank.n_samples
    membership = np.ones((digits_bank.n_models, n), dtype=bool)
    membership[np.arange(n) % 8, np.arange(n)] = False  # each sample OUT for one model
    bank = digits_bank.replace(
        membership=membership, population=np.zeros(n, dtype=bool), audit=np.ones(n, dtype=bool)
    )
    # balanced (each sample IN for 7 of 8), a view would set the one OUT reference aside:
    # the target's row redrawn, nothing is
    bank = redrawn_target(bank, 0, 0)
    view = TargetView.of(bank, 0)
    assert view.out_mask().sum(axis=0).max() == 1  # no sample has two OUT references
    want = fit_gaussians(view.reference_stat("phi"), lira._sides(view, True)[1], True)
    monkeypatch.setattr(statistics, "_BLOCK_BYTES", 3000)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        got = lira._fit(TargetView.of(bank.replace(), 0), 1, True, True)
    finally:
        torch.set_num_threads(before)
    np.testing.assert_array_equal(got.mean, want.mean)
    np.testing.assert_allclose(got.std, want.std, rtol=1e-12)


def test_equal_count_mask_takes_k_over_the_scored_samples_only():
    """Offline design: a public sample OUT for one reference must not cut every audit
    sample down to one reference (k comes from the scored samples)."""
    from miaudit.attacks.lira import equal_count_mask

    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 1], [1, 1, 0, 0]], dtype=bool)  # counts 3,3,1,1
    audit = np.array([True, True, False, False])
    kept = equal_count_mask(mask, audit)
    np.testing.assert_array_equal(kept.sum(axis=0), [3, 3, 1, 1])
    np.testing.assert_array_equal(equal_count_mask(mask).sum(axis=0), [1, 1, 1, 1])
