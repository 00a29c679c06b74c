"""The attacks' view of a bank: its memo, blockwise means, and blocks changing nothing."""

import numpy as np
import pytest
import torch

from miaudit.attacks import TargetView, run_attack
from miaudit.attacks.view import mean_over_out, side_means
from miaudit.signals import statistics

BANK_ATTACKS = (
    "attack-r",
    "calibrated-confidence",
    "calibrated-loss",
    "confidence",
    "entropy",
    "lira-offline",
    "lira-offline-fixed-variance",
    "lira-offline-two-sided",
    "lira-online",
    "lira-online-fixed-variance",
    "loss",
    "modified-entropy",
    "rmia",
    "rmia-online",
)


def test_memo_computes_once_per_view_and_not_for_a_shadow(digits_bank):
    view = TargetView.of(digits_bank, 2)
    calls = []
    first = view.memo("k", lambda: calls.append(1) or np.arange(3))
    assert view.memo("k", lambda: calls.append(1) or None) is first and calls == [1]
    shadow = view.as_shadow(0)
    assert shadow.memo("k", lambda: "fresh") == "fresh"
    assert view.memo("k", lambda: None) is first


def test_membership_and_out_mask_are_read_only(digits_bank):
    view = TargetView.of(digits_bank, 1)
    for mask in (view.reference_membership, view.out_mask(), view.as_shadow(3).out_mask()):
        with pytest.raises(ValueError):
            mask[0, 0] = not mask[0, 0]
    np.testing.assert_array_equal(view.out_mask(), ~view.reference_membership)
    n_in, n_out = view.side_counts()
    np.testing.assert_array_equal(n_in, view.reference_membership.sum(axis=0))
    np.testing.assert_array_equal(n_out, (~view.reference_membership).sum(axis=0))


@pytest.mark.parametrize("target", [0, 5])
def test_side_means_equal_means_of_the_whole_arrays(digits_bank, target, monkeypatch, two_threads):
    monkeypatch.setattr(statistics, "_BLOCK_BYTES", 2000)  # many blocks
    view = TargetView.of(digits_bank, target)
    members = view.reference_membership
    for name in ("loss", "prob_true", "log_confidence"):
        values = view.reference_query_mean(name)
        means = side_means(view, name)
        np.testing.assert_array_equal(means.members, mean_over_out(values, members))
        np.testing.assert_array_equal(means.non_members, mean_over_out(values, ~members))
        np.testing.assert_array_equal(means.every, values.mean(axis=0))


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("target", [0, 3])
def test_blocks_of_samples_change_no_score(digits_bank, target, threads, monkeypatch):
    """Every attack computed a few samples at a time (the statistics pass on one or two worker
    threads) equals it computed in one block."""
    whole = {n: run_attack(n, TargetView.of(digits_bank, target)).scores for n in BANK_ATTACKS}
    monkeypatch.setattr(statistics, "_BLOCK_BYTES", 3000)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        bank = digits_bank.replace()  # a fresh statistics cache, filled in small blocks
        view = TargetView.of(bank, target)
        got = {name: run_attack(name, view).scores for name in BANK_ATTACKS}
    finally:
        torch.set_num_threads(before)
    for name in BANK_ATTACKS:
        np.testing.assert_array_equal(got[name], whole[name], err_msg=name)
