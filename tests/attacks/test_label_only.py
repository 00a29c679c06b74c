import numpy as np
import pytest

from miaudit.attacks import TargetView, get_attack, run_attack
from miaudit.errors import AttackError
from miaudit.signals import SignalBank


def test_registered_as_label_only_family():
    for name in ("augmentation-consistency", "boundary-distance", "calibrated-boundary-distance"):
        assert get_attack(name).family == "label-only"


@pytest.mark.parametrize("target", [0, 5])
def test_augmentation_consistency_matches_direct_computation(digits_bank, target):
    z = digits_bank.logits[target]  # [N, Q, C]
    want = np.mean([z[:, q].argmax(-1) == digits_bank.labels for q in range(z.shape[1])], 0)
    got = run_attack("augmentation-consistency", TargetView.of(digits_bank, target)).scores
    np.testing.assert_array_equal(got, want)
    assert set(np.unique(got)) <= {0.0, 0.5, 1.0}


@pytest.fixture(scope="module")
def boundary_bank(digits_bank):
    rng = np.random.default_rng(0)
    distance = rng.gamma(2.0, 1.0, size=digits_bank.membership.shape)
    return SignalBank(
        logits=digits_bank.logits,
        labels=digits_bank.labels,
        membership=digits_bank.membership,
        population=digits_bank.population,
        audit=digits_bank.audit,
        channels={"boundary_distance": distance},
    )


def _conventional(bank, m):
    correct = bank.logits[m, :, 0].argmax(-1) == bank.labels
    return np.where(correct, bank.channels["boundary_distance"][m], 0.0)


@pytest.mark.parametrize("target", [0, 3])
def test_boundary_distance_matches_direct_computation(boundary_bank, target):
    view = TargetView.of(boundary_bank, target)
    want = _conventional(boundary_bank, target)
    np.testing.assert_array_equal(run_attack("boundary-distance", view).scores, want)
    assert (want == 0).any()  # the digits MLPs misclassify some samples

    per_model = np.stack([_conventional(boundary_bank, m) for m in range(8)])
    others = [m for m in range(8) if m != target]
    out = ~boundary_bank.membership[others]
    mean_out = np.array(
        [per_model[others][out[:, n], n].mean() if out[:, n].any() else np.nan
         for n in range(boundary_bank.n_samples)]
    )
    got = run_attack("calibrated-boundary-distance", view).scores
    np.testing.assert_allclose(got, want - mean_out, rtol=1e-12, atol=1e-12)


def test_boundary_attacks_need_the_channel(digits_bank):
    # The hint names the config switch for this channel, not another channel's.
    with pytest.raises(AttackError, match=r"signals\.boundary_distance: true"):
        run_attack("boundary-distance", TargetView.of(digits_bank, 0))
