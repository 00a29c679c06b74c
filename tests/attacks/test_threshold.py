import numpy as np
import pytest
from scipy.special import log_softmax, softmax
from sklearn.metrics import roc_auc_score

from miaudit.attacks import TargetView, run_attack
from miaudit.errors import AttackError


def _direct(bank, target):
    z = bank.logits[target].astype(np.float64)  # [N, Q, C]
    y = bank.labels
    log_p = log_softmax(z, axis=-1)
    p = softmax(z, axis=-1)
    n = np.arange(len(y))
    ce = -log_p[n, :, y]  # [N, Q]
    mentr = np.zeros(ce.shape)
    for c in range(z.shape[-1]):
        term = np.where(
            (y == c)[:, None],
            -(1 - p[..., c]) * log_p[..., c],
            -p[..., c] * np.log(1 - p[..., c]),
        )
        mentr += term
    return {
        "loss": -ce.mean(1),
        "confidence": log_p.max(-1).mean(1),
        "entropy": (p * log_p).sum(-1).mean(1),
        "modified-entropy": -mentr.mean(1),
        "correctness": (z[:, 0].argmax(-1) == y).astype(float),
        "gradient-norm": -bank.channels["grad_norm"][target],
    }


@pytest.mark.parametrize("target", [0, 3])
def test_threshold_scores_match_direct_computation(digits_bank, target):
    view = TargetView.of(digits_bank, target)
    expected = _direct(digits_bank, target)
    for name, want in expected.items():
        got = run_attack(name, view).scores
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, err_msg=name)


def test_threshold_attacks_leak_on_overfit_models(digits_bank):
    view = TargetView.of(digits_bank, 0)
    members = digits_bank.membership[0][digits_bank.audit]
    for name in ("loss", "correctness"):
        scores = run_attack(name, view).scores[digits_bank.audit]
        assert scores[members].mean() > scores[~members].mean(), name
        assert roc_auc_score(members, scores) > 0.5, name


def test_unknown_attack_suggests_a_close_name(digits_bank):
    with pytest.raises(AttackError, match="Did you mean loss"):
        run_attack("los", TargetView.of(digits_bank, 0))


def test_unknown_parameter_is_rejected(digits_bank):
    with pytest.raises(AttackError, match="no parameter"):
        run_attack("loss", TargetView.of(digits_bank, 0), temperature=2.0)


def test_target_out_of_range(digits_bank):
    with pytest.raises(AttackError, match="out of range"):
        TargetView.of(digits_bank, 99)


def test_view_hides_target_membership(digits_bank, redrawn_target):
    view = TargetView.of(digits_bank, 2)
    assert view.reference_membership.shape == (7, digits_bank.n_samples)
    # the references' membership as it is, but where the view set one aside
    np.testing.assert_array_equal(
        view.reference_membership,
        np.delete(digits_bank.membership, 2, axis=0) & view.reference_available,
    )
    # two banks that differ only in the target's membership (neither balanced, so nothing is
    # set aside) give views that know the same: the references' membership, whole
    one, two = (TargetView.of(redrawn_target(digits_bank, 2, seed), 2) for seed in (0, 1))
    for seen in (one, two):
        assert seen.reference_available.all()
        np.testing.assert_array_equal(seen.reference_membership,
                                      np.delete(digits_bank.membership, 2, axis=0))
    shadow = view.as_shadow(0)
    assert 2 not in shadow.reference_ids and shadow.target == view.reference_ids[0]
