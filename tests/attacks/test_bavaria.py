import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import logsumexp

from miaudit.attacks import TargetView, run_attack
from miaudit.attacks.bavaria import log_t_cdf, log_t_pdf, marginal_loglik
from miaudit.attacks.lira import SIGMA_FLOOR
from miaudit.errors import AttackError

NAMES = ("bavaria-n", "bavaria-t", "bavaria-n-online", "bavaria-t-online")


def _phi(bank):
    z = bank.logits.astype(np.float64)
    n_idx = np.arange(bank.n_samples)
    true = z[:, n_idx, :, bank.labels].transpose(1, 0, 2)
    others = z.copy()
    others[:, n_idx, :, bank.labels] = -np.inf
    return true - logsumexp(others, axis=-1)


def _sides(bank, visible):
    """Per sample: IN and OUT reference ids in bank order, equal counts over the audit samples.
    visible: the view's (IN, OUT) masks, bool [M, N] each (the `visible_sides` fixture)."""
    in_models, out_models = visible
    ins = [np.flatnonzero(in_models[:, n]).tolist() for n in range(bank.n_samples)]
    outs = [np.flatnonzero(out_models[:, n]).tolist() for n in range(bank.n_samples)]
    audit = np.nonzero(bank.audit)[0]
    k_in = min(len(ins[n]) for n in audit if ins[n])
    k_out = min(len(outs[n]) for n in audit if outs[n])
    return [s[:k_in] for s in ins], [s[:k_out] for s in outs]


def _pooled(phi, side, j):
    devs = [phi[s, i, j] - phi[s, i, j].mean() for i, s in enumerate(side) if len(s) >= 2]
    return max(np.concatenate(devs).std(), SIGMA_FLOOR) ** 2


def _direct(bank, target, prior, visible):
    """Scores one sample and query at a time; prior(s, side, j) -> (nu0, s0^2), s 0: IN, 1: OUT."""
    phi = _phi(bank)
    x = phi[target]
    sides = _sides(bank, visible)
    n, q = x.shape
    want = {name: np.full((n, q), np.nan) for name in NAMES}
    for j in range(q):
        priors = [prior(s, side, j) for s, side in enumerate(sides)]
        for i in range(n):
            fits = []
            for side, (nu0, s0) in zip(sides, priors, strict=True):
                vals = phi[side[i], i, j]
                if not len(vals):
                    fits.append(None)
                    continue
                k, m, ss = len(vals), vals.mean(), ((vals - vals.mean()) ** 2).sum()
                v = s0 if np.isinf(nu0) else (nu0 * s0 + ss) / (nu0 + k)
                v = max(v, SIGMA_FLOOR**2)
                fits.append((m, v, nu0 + k, np.sqrt(v * (1 + 1 / k))))
            fin, fout = fits
            if fout is None:
                continue
            m, v, dof, scale = fout
            want["bavaria-n"][i, j] = stats.norm.logcdf(x[i, j], m, np.sqrt(v))
            want["bavaria-t"][i, j] = stats.t.logcdf(x[i, j], dof, m, scale)
            if fin is None:
                continue
            want["bavaria-n-online"][i, j] = (stats.norm.logpdf(x[i, j], fin[0], np.sqrt(fin[1]))
                                              - stats.norm.logpdf(x[i, j], m, np.sqrt(v)))
            want["bavaria-t-online"][i, j] = (stats.t.logpdf(x[i, j], fin[2], fin[0], fin[3])
                                              - stats.t.logpdf(x[i, j], dof, m, scale))
    return {name: w.mean(axis=1) for name, w in want.items()}


@pytest.mark.parametrize("target,strength", [(0, 3.0), (5, 0.5)])
def test_bavaria_with_a_fixed_prior_matches_direct_computation(digits_bank, target, strength,
                                                              visible_sides):
    phi = _phi(digits_bank)
    want = _direct(digits_bank, target, lambda s, side, j: (strength, _pooled(phi, side, j)),
                   visible_sides(digits_bank, target))
    view = TargetView.of(digits_bank, target)
    for name in NAMES:
        got = run_attack(name, view, prior_strength=strength).scores
        np.testing.assert_allclose(got, want[name], rtol=1e-7, atol=1e-9, err_msg=name)


def test_bavaria_default_uses_the_empirical_bayes_prior(digits_bank, visible_sides):
    view = TargetView.of(digits_bank, 1)
    got = {name: run_attack(name, view).scores for name in NAMES}
    fitted = {s: view.memo(("bavaria-prior", s, True, None), lambda: None) for s in (0, 1)}
    visible = visible_sides(digits_bank, 1)
    sides = _sides(digits_bank, visible)

    def prior(s, side, j):
        return fitted[s].strength[j], fitted[s].variance[j]

    want = _direct(digits_bank, 1, prior, visible)
    for name in NAMES:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-7, atol=1e-9, err_msg=name)
    # the fitted prior maximises the marginal likelihood of the OUT side's sums of squares
    phi, out = _phi(digits_bank), sides[1]
    ss = np.array([((phi[s, i, 0] - phi[s, i, 0].mean()) ** 2).sum() for i, s in enumerate(out)
                   if len(s) >= 2])
    k = np.array([len(s) for s in out if len(s) >= 2])
    best = (np.log(fitted[1].strength[0]), np.log(fitted[1].variance[0]))
    top = marginal_loglik(*best, ss, k)
    for d0, d1 in ((0.1, 0), (-0.1, 0), (0, 0.1), (0, -0.1)):
        assert marginal_loglik(best[0] + d0, best[1] + d1, ss, k) <= top + 1e-6


def test_marginal_loglik_matches_numerical_integration():
    """Up to a constant free of the prior: log int p(S | s2) p(s2) ds2, S ~ s2 chi2_{k-1}."""
    ss, k = np.array([0.7, 3.1]), np.array([3, 5])

    def direct(nu0, s0):
        prior = stats.invgamma(nu0 / 2, scale=nu0 * s0 / 2)
        total = 0.0
        for s, kk in zip(ss, k, strict=True):
            def density(v, s=s, kk=kk):
                return stats.chi2.pdf(s / v, kk - 1) / v * prior.pdf(v)

            f = integrate.quad(density, 0, np.inf, limit=200)[0]
            total += np.log(f)
        return total

    settings = [(2.0, 0.5), (6.0, 1.3)]
    got = [marginal_loglik(np.log(a), np.log(b), ss, k) for a, b in settings]
    want = [direct(a, b) for a, b in settings]
    np.testing.assert_allclose(got[1] - got[0], want[1] - want[0], rtol=1e-6)


@pytest.mark.parametrize("target", [0, 4])
def test_prior_strength_limits_are_lira(digits_bank, target):
    """BaVarIA-n: an infinitely strong prior is LiRA's fixed variance, no prior per-sample LiRA."""
    view = TargetView.of(digits_bank, target)
    pairs = [("bavaria-n", "lira-offline"), ("bavaria-n-online", "lira-online")]
    for ours, lira in pairs:
        for strength, suffix in ((np.inf, "-fixed-variance"), (0.0, "")):
            got = run_attack(ours, view, prior_strength=strength).scores
            want = run_attack(lira + suffix, view).scores
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, err_msg=(ours, strength))


def test_missing_side_gives_nan_exactly_there(digits_bank):
    audit = np.nonzero(digits_bank.audit)[0]
    membership = digits_bank.membership.copy()
    membership[:, audit[3]] = True  # no OUT reference
    membership[:, audit[7]] = False  # no IN reference
    view = TargetView.of(digits_bank.replace(membership=membership), 2)
    for name in NAMES:
        scores = run_attack(name, view).scores
        expect = [3, 7] if name.endswith("online") else [3]
        assert np.nonzero(np.isnan(scores[audit]))[0].tolist() == expect, name


def test_needs_and_parameter_errors(digits_bank):
    membership = np.zeros_like(digits_bank.membership)
    membership[0] = digits_bank.membership[0]  # the references are all OUT: the offline design
    offline = TargetView.of(digits_bank.replace(membership=membership), 0)
    assert np.isfinite(run_attack("bavaria-t", offline).scores[digits_bank.audit]).all()
    for name in ("bavaria-n-online", "bavaria-t-online"):
        with pytest.raises(AttackError, match="cannot run"):
            run_attack(name, offline)
    with pytest.raises(AttackError, match="prior_strength"):
        run_attack("bavaria-n", TargetView.of(digits_bank, 0), prior_strength=-1.0)


def test_student_t_helpers_match_scipy_and_stay_finite_in_the_tails():
    z = np.array([-30.0, -3.0, -0.2, 0.0, 0.4, 2.5, 12.0])
    dof = np.array([3.0, 5.0, 9.0, 4.0, np.inf, 7.0, 6.0])
    want = np.where(np.isinf(dof), stats.norm.logcdf(z), stats.t.logcdf(z, np.where(
        np.isinf(dof), 1.0, dof)))
    np.testing.assert_allclose(log_t_cdf(z, dof), want, rtol=1e-9)
    pdf = log_t_pdf(z, 0.3, 1.7, dof)
    want_pdf = np.where(np.isinf(dof), stats.norm.logpdf(z, 0.3, 1.7),
                        stats.t.logpdf(z, np.where(np.isinf(dof), 1.0, dof), 0.3, 1.7))
    np.testing.assert_allclose(pdf, want_pdf, rtol=1e-9)
    extreme = log_t_cdf(np.array([-1e200, 1e200, 60.0]), np.array([3.0, 3.0, 3.0]))
    assert np.isfinite(extreme).all() and extreme[1] == 0.0 and extreme[2] < 0.0


def test_scores_ignore_the_target_membership(digits_bank, redrawn_target):
    target = 6
    one, two = (TargetView.of(redrawn_target(digits_bank, target, seed), target)
                for seed in (2, 3))
    for name in NAMES:
        np.testing.assert_array_equal(run_attack(name, one).scores,
                                      run_attack(name, two).scores, err_msg=name)
