import numpy as np
import pytest
from scipy.special import log_softmax

from miaudit.attacks import TargetView, run_attack

NAMES = ("calibrated-loss", "calibrated-confidence", "calibrated-gradient-norm")


def _variant(bank, membership):
    return bank.replace(membership=membership)


def _direct(bank, target, out_models):
    """Per-sample loops over the raw logits (not the view or the cache); out_models bool
    [M, N]: the view's OUT references (the `visible_sides` fixture)."""
    log_p = log_softmax(bank.logits.astype(np.float64), axis=-1)  # [M, N, Q, C]
    n_idx = np.arange(bank.n_samples)
    loss = log_p[:, n_idx, :, bank.labels].transpose(1, 0, 2).mean(-1)  # -mean_q CE, [M, N]
    conf = log_p.max(-1).mean(-1)  # [M, N]
    grad = -bank.channels["grad_norm"]
    want = {name: np.full(bank.n_samples, np.nan) for name in NAMES}
    for n in range(bank.n_samples):
        out = [r for r in range(bank.n_models) if out_models[r, n]]
        if not out:
            continue
        for name, score in zip(NAMES, (loss, conf, grad), strict=True):
            want[name][n] = score[target, n] - np.mean([score[r, n] for r in out])
    return want


@pytest.mark.parametrize("target", [0, 3])
def test_calibrated_scores_match_direct_computation(digits_bank, target, visible_sides):
    view = TargetView.of(digits_bank, target)
    want = _direct(digits_bank, target, visible_sides(digits_bank, target)[1])
    for name in NAMES:
        got = run_attack(name, view).scores
        np.testing.assert_allclose(got, want[name], rtol=1e-9, atol=1e-9, err_msg=name)


def test_sample_without_out_reference_is_nan(digits_bank):
    target = 1
    membership = digits_bank.membership.copy()
    j = int(np.nonzero(digits_bank.audit)[0][5])
    membership[:, j] = True  # every model (reference) trained on j: no OUT reference
    view = TargetView.of(_variant(digits_bank, membership), target)
    for name in NAMES:
        run = run_attack(name, view)
        assert np.isnan(run.scores[j]), name
        assert run.n_unscorable == 1, name
        assert np.isfinite(np.delete(run.scores, j)).all(), name


def test_scores_ignore_the_target_membership(digits_bank, redrawn_target):
    target = 2
    one, two = (TargetView.of(redrawn_target(digits_bank, target, seed), target)
                for seed in (1, 2))
    for name in NAMES:
        np.testing.assert_array_equal(
            run_attack(name, one).scores, run_attack(name, two).scores, err_msg=name
        )


def test_calibration_removes_per_sample_difficulty(digits_bank):
    """A sample's difficulty (its mean OUT loss) is subtracted: calibrated loss is centred."""
    view = TargetView.of(digits_bank, 0)
    scores = run_attack("calibrated-loss", view).scores[digits_bank.audit]
    raw = run_attack("loss", view).scores[digits_bank.audit]
    assert abs(np.mean(scores)) < abs(np.mean(raw))
