import numpy as np
import pytest
from scipy.special import softmax

from miaudit.attacks import TargetView, run_attack
from miaudit.errors import ConfigError
from miaudit.signals import SignalBank
from miaudit.signals.defences import FLOOR, apply_defence, list_defences

SPECS = [
    {"name": "top-k", "k": 1},
    {"name": "top-k", "k": 3},
    {"name": "top-k", "k": 3, "renormalise": True},
    {"name": "round", "decimals": 1},
    {"name": "round", "decimals": 0},
    "label-only",
]


def _logits(seed=0, shape=(200, 3, 10), scale=4.0):
    return (np.random.default_rng(seed).normal(size=shape) * scale).astype(np.float32)


def test_registry_lists_the_three_defences():
    assert list_defences() == ["label-only", "round", "top-k"]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_defended_logits_are_finite_float32_and_keep_the_argmax(spec):
    z = _logits()
    out = apply_defence(z, spec)
    assert out.dtype == np.float32 and out.shape == z.shape
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out.argmax(-1), z.argmax(-1))
    # The argmax is unique (no tie left for np.argmax to break by index).
    top = np.take_along_axis(out, z.argmax(-1)[..., None], -1)
    assert ((out == top).sum(-1) == 1).all()


def test_top_k_releases_exactly_the_k_largest_probabilities():
    z = _logits(1, (50, 10))
    p = softmax(z.astype(np.float64), axis=-1)
    out = apply_defence(z, {"name": "top-k", "k": 3})
    released = out > np.log(FLOOR) + 1
    assert (released.sum(-1) == 3).all()
    kth = np.sort(p, -1)[:, -3:]
    np.testing.assert_allclose(np.sort(np.exp(out[released]).reshape(50, 3), -1), kth, rtol=1e-5)
    # not renormalised by default; renormalised on request
    assert (np.exp(out[released]).reshape(50, 3).sum(-1) < 1).all()
    renorm = apply_defence(z, {"name": "top-k", "k": 3, "renormalise": True})
    np.testing.assert_allclose(np.exp(renorm[released]).reshape(50, 3).sum(-1), 1, rtol=1e-5)
    top1 = apply_defence(z, {"name": "top-k", "k": 1})
    np.testing.assert_array_equal(top1.argmax(-1), z.argmax(-1))


def test_round_hand_example():
    p = np.array([0.613, 0.287, 0.096, 0.004])
    out = apply_defence(np.log(p), {"name": "round", "decimals": 1})
    np.testing.assert_allclose(out, np.log([0.6, 0.3, 0.1, FLOOR]).astype(np.float32), rtol=1e-6)
    out2 = apply_defence(np.log(p), {"name": "round", "decimals": 2})
    np.testing.assert_allclose(np.exp(out2[:3]), [0.61, 0.29, 0.10], rtol=1e-5)


def test_round_tie_keeps_the_model_label():
    p = np.array([0.48, 0.52 - 1e-9, 1e-9])  # both round to 0.5; class 1 is the argmax
    out = apply_defence(np.log(p), {"name": "round", "decimals": 1})
    assert out.argmax() == 1 and out[1] > out[0]
    np.testing.assert_allclose(np.exp(out[:2]), [0.5, 0.5], rtol=1e-5)


def test_label_only_is_one_hot():
    z = _logits(2, (40, 10))
    out = apply_defence(z, "label-only")
    one_hot = np.eye(10)[z.argmax(-1)]
    np.testing.assert_array_equal(out == 0, one_hot == 1)
    np.testing.assert_allclose(out[one_hot == 0], np.log(np.float32(FLOOR)), rtol=1e-6)
    np.testing.assert_array_equal(apply_defence(z, {"name": "label-only"}), out)


@pytest.mark.parametrize(
    "spec",
    [
        "nope",
        {"name": "top-k", "k": 0},
        {"name": "top-k", "k": 11},
        {"name": "top-k", "k": 2.5},
        {"name": "round", "decimals": -1},
        {"name": "top-k", "kk": 2},
        {"k": 2},
        3,
    ],
    ids=str,
)
def test_bad_specs_raise_config_error(spec):
    with pytest.raises(ConfigError):
        apply_defence(_logits(), spec)


def test_none_is_no_defence():
    z = _logits()
    np.testing.assert_array_equal(apply_defence(z, None), z)


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_threshold_attacks_run_on_a_defended_bank(digits_bank, spec):
    defended = SignalBank(
        logits=apply_defence(digits_bank.logits, spec),
        labels=digits_bank.labels,
        membership=digits_bank.membership,
        population=digits_bank.population,
        audit=digits_bank.audit,
    )
    view, raw_view = TargetView.of(defended, 1), TargetView.of(digits_bank, 1)
    for name in ("loss", "confidence", "entropy", "modified-entropy"):
        scores = run_attack(name, view).scores
        assert np.isfinite(scores).all(), name
    np.testing.assert_array_equal(
        run_attack("correctness", view).scores, run_attack("correctness", raw_view).scores
    )
    np.testing.assert_array_equal(
        run_attack("augmentation-consistency", view).scores,
        run_attack("augmentation-consistency", raw_view).scores,
    )
