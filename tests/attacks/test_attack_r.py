import numpy as np
import pytest
from scipy.special import log_softmax

from miaudit.attacks import TargetView, run_attack
from miaudit.attacks.attack_r import interpolated_survival


def _variant(bank, membership):
    return bank.replace(membership=membership)


def _losses(bank):
    """Query-averaged cross-entropy per model and sample, [M, N]."""
    log_p = log_softmax(bank.logits.astype(np.float64), axis=-1)
    n_idx = np.arange(bank.n_samples)
    return -log_p[:, n_idx, :, bank.labels].transpose(1, 0, 2).mean(-1)


def _out_losses(out_models, losses, n):
    """Sample n's OUT losses, sorted; out_models bool [M, N]: the view's OUT references."""
    return np.sort([losses[r, n] for r in range(len(out_models)) if out_models[r, n]])


@pytest.mark.parametrize("target", [0, 7])
def test_attack_r_matches_interpolated_empirical_cdf(digits_bank, target, visible_sides):
    losses = _losses(digits_bank)
    _, out_models = visible_sides(digits_bank, target)
    want = np.empty(digits_bank.n_samples)
    for n in range(digits_bank.n_samples):
        out = _out_losses(out_models, losses, n)
        assert np.all(np.diff(out) > 0)  # no ties in real losses: np.interp is well defined
        want[n] = 1.0 - np.interp(losses[target, n], out, np.linspace(0, 1, out.size))
    got = run_attack("attack-r", TargetView.of(digits_bank, target)).scores
    # atol: a loss differs from the cache's in the last bits; narrow segments amplify it
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


@pytest.mark.parametrize("alpha", [0.1, 0.3, 0.5, 0.9])
def test_thresholding_at_one_minus_alpha_is_attack_r_at_level_alpha(digits_bank, alpha,
                                                                   visible_sides):
    target = 1
    losses = _losses(digits_bank)
    _, out_models = visible_sides(digits_bank, target)
    got = run_attack("attack-r", TargetView.of(digits_bank, target)).scores
    for n in np.nonzero(digits_bank.audit)[0]:
        threshold = np.quantile(_out_losses(out_models, losses, n), alpha)
        assert (got[n] >= 1 - alpha) == (losses[target, n] <= threshold), n


def test_interpolation_handles_ties_counts_and_padding():
    refs = np.array(
        [
            [1.0, 5.0, 1.0, 7.0, 0.0],
            [2.0, 9.0, 2.0, 9.0, 0.0],
            [2.0, 9.0, 3.0, 9.0, 0.0],
            [4.0, 9.0, 4.0, 9.0, 0.0],
        ]
    )
    mask = np.array(
        [
            [True, True, True, True, False],
            [True, False, True, False, False],
            [True, False, True, False, False],
            [True, False, False, False, False],
        ]
    )  # counts 4, 1, 3, 1, 0
    value = np.array([2.0, 5.0, 2.5, 8.0, 1.0])
    # col 0: segments [1,2], [2,2] (tie, value on it: 1/2), [2,4] -> F = (1 + 0.5 + 0) / 3
    # col 1: single reference equal to the value -> 1/2; col 2: sorted 1,2,3 -> F = 0.75
    # col 3: single reference below the value -> F = 1; col 4: no reference -> NaN
    want = 1 - np.array([1.5 / 3, 0.5, 0.75, 1.0, np.nan])
    np.testing.assert_allclose(interpolated_survival(value, refs, mask), want)


def test_score_is_one_below_and_zero_above_all_out_losses():
    refs = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    mask = np.ones((3, 2), dtype=bool)
    got = interpolated_survival(np.array([0.5, 3.5]), refs, mask)
    np.testing.assert_array_equal(got, [1.0, 0.0])


def test_sample_without_out_reference_is_nan(digits_bank):
    target = 3
    j = int(np.nonzero(digits_bank.audit)[0][9])
    membership = digits_bank.membership.copy()
    membership[:, j] = True
    run = run_attack("attack-r", TargetView.of(_variant(digits_bank, membership), target))
    assert np.isnan(run.scores[j]) and run.n_unscorable == 1
    assert np.isfinite(np.delete(run.scores, j)).all()


def test_scores_ignore_the_target_membership(digits_bank, redrawn_target):
    target = 4
    one, two = (redrawn_target(digits_bank, target, seed) for seed in (4, 5))
    np.testing.assert_array_equal(
        run_attack("attack-r", TargetView.of(one, target)).scores,
        run_attack("attack-r", TargetView.of(two, target)).scores,
    )


def _sorted_survival(value, refs, mask):
    """The definition run literally: sort each sample's OUT losses, sum the clipped segment
    fractions (what attack-r computed before it stopped sorting)."""
    out = np.full(value.shape, np.nan)
    for n in range(value.size):
        losses = np.sort(refs[mask[:, n], n])
        k = losses.size
        if k == 1:
            out[n] = 1.0 - 0.5 * (np.sign(value[n] - losses[0]) + 1.0)
        elif k >= 2:
            lo, hi = losses[:-1], losses[1:]
            with np.errstate(invalid="ignore", divide="ignore"):
                frac = np.clip((value[n] - lo) / (hi - lo), 0.0, 1.0)
            frac[np.isnan(frac)] = 0.5  # a zero-width segment at the value
            out[n] = 1.0 - frac.sum() / (k - 1)
    return out


def test_survival_without_sorting_matches_the_sorted_definition():
    rng = np.random.default_rng(5)
    r, n = 9, 4000
    refs = rng.integers(0, 6, size=(r, n)).astype(np.float64)  # many ties
    refs[:, ::2] += rng.random((r, n // 2))
    mask = rng.random((r, n)) < rng.random(n)  # 0..9 references per sample
    value = np.where(rng.random(n) < 0.3, refs[0], rng.uniform(-1, 8, n))  # some on a loss
    got = interpolated_survival(value, refs, mask)
    want = _sorted_survival(value, refs, mask)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    # The old sum of k-1 clipped fractions rounds differently from one count + one fraction.
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
