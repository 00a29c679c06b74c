"""The attacks' view of a bank: its memo, blockwise means, blocks changing nothing, and the
references it sets aside in a balanced design so that their membership says nothing about the
target's (docs/algorithms.md §14)."""

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
    shadow = view.as_shadow(3)
    for mask in (view.reference_membership, view.reference_available, view.out_mask(),
                 shadow.reference_membership, shadow.reference_available, shadow.out_mask()):
        with pytest.raises(ValueError):
            mask[0, 0] = not mask[0, 0]
    available = view.reference_available
    np.testing.assert_array_equal(view.out_mask(), available & ~view.reference_membership)
    n_in, n_out = view.side_counts()
    np.testing.assert_array_equal(n_in, view.reference_membership.sum(axis=0))
    np.testing.assert_array_equal(n_out, (available & ~view.reference_membership).sum(axis=0))


@pytest.mark.parametrize("target", [0, 5])
def test_side_means_equal_means_of_the_whole_arrays(digits_bank, target, monkeypatch, two_threads,
                                                    visible_sides):
    monkeypatch.setattr(statistics, "_BLOCK_BYTES", 2000)  # many blocks
    view = TargetView.of(digits_bank, target)
    in_models, out_models = visible_sides(digits_bank, target)
    members, non_members = in_models[view.reference_ids], out_models[view.reference_ids]
    whole = ~view.set_aside  # samples where every reference is available
    assert whole.any() and view.set_aside.any()
    for name in ("loss", "prob_true", "log_confidence"):
        values = view.reference_query_mean(name)
        means = side_means(view, name)
        np.testing.assert_array_equal(means.members, mean_over_out(values, members))
        np.testing.assert_array_equal(means.non_members, mean_over_out(values, non_members))
        np.testing.assert_array_equal(means.every, mean_over_out(values, members | non_members))
        np.testing.assert_array_equal(means.every[whole], values.mean(axis=0)[whole])


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


# --- the references set aside in a balanced design (miaudit.attacks.independence) ----------


def test_balanced_design_sets_one_reference_aside_per_audit_sample(digits_bank):
    """digits_bank: every design sample IN for 4 of the 8 models. Left out of the references,
    a target member leaves 3 IN references and a non-member 4: the view sets one aside per
    sample, so every audit sample has 3 IN and 3 OUT available, whatever the target's
    membership. Population samples (no model varies on them) keep every reference."""
    view = TargetView.of(digits_bank, 0)
    audit, population = digits_bank.audit, digits_bank.population
    member = digits_bank.membership[0]
    raw = np.delete(digits_bank.membership, 0, axis=0).sum(axis=0)
    assert set(raw[audit & member]) == {3} and set(raw[audit & ~member]) == {4}  # the leak
    aside = ~view.reference_available
    np.testing.assert_array_equal(aside[:, audit].sum(axis=0), 1)
    assert view.set_aside[audit].all()
    assert not view.set_aside[population].any() and view.reference_available[:, population].all()
    n_in, n_out = view.side_counts()
    for side in (member, ~member):
        np.testing.assert_array_equal(n_in[audit & side], 3)
        np.testing.assert_array_equal(n_out[audit & side], 3)
    # a function of the bank and the target: the same on every build
    np.testing.assert_array_equal(TargetView.of(digits_bank, 0).reference_available,
                                  view.reference_available)


def test_the_reference_set_aside_is_on_the_side_opposite_the_target(digits_bank):
    for target in (0, 5):
        view = TargetView.of(digits_bank, target)
        audit = np.flatnonzero(digits_bank.audit)
        aside = ~view.reference_available[:, audit]
        trained = digits_bank.membership[view.reference_ids][:, audit]
        assert (aside.sum(axis=0) == 1).all()
        # an OUT reference set aside where the target is IN, an IN one where it is OUT
        np.testing.assert_array_equal((aside & trained).any(axis=0),
                                      ~digits_bank.membership[target, audit])


def test_membership_and_out_mask_are_false_where_a_reference_is_set_aside(digits_bank):
    view = TargetView.of(digits_bank, 3)
    for seen in (view, view.as_shadow(2)):
        unavailable = ~seen.reference_available
        assert unavailable.any()
        assert not seen.reference_membership[unavailable].any()
        assert not seen.out_mask()[unavailable].any()
        # where available, the references' membership as the bank holds it
        truth = digits_bank.membership[seen.reference_ids]
        np.testing.assert_array_equal(seen.reference_membership,
                                      truth & seen.reference_available)


def test_an_unbalanced_target_row_sets_nothing_aside(digits_bank):
    membership = digits_bank.membership.copy()
    free = ~digits_bank.population
    rng = np.random.default_rng(7)
    membership[1] = free & (rng.random(digits_bank.n_samples) < 0.5)
    bank = digits_bank.replace(membership=membership)
    view = TargetView.of(bank, 1)
    assert not view.set_aside.any() and view.reference_available.all()
    np.testing.assert_array_equal(view.reference_membership, np.delete(membership, 1, axis=0))
    np.testing.assert_array_equal(view.out_mask(), ~view.reference_membership)


def test_a_shadow_view_is_balanced_again_and_sets_one_more_aside(digits_bank):
    """In the view of target 0 every audit sample has 3 IN of 6 available references; with
    reference r as the target (where r is available), one more is set aside on the side
    opposite r's: 2 IN and 2 OUT of the 4 others left, whatever r's membership."""
    view = TargetView.of(digits_bank, 0)
    audit = digits_bank.audit
    for r in (0, 4):
        shadow = view.as_shadow(r)
        usable = audit & view.reference_available[r]
        assert usable.any() and (audit & ~usable).any()
        np.testing.assert_array_equal(shadow.set_aside[audit], usable[audit])
        n_in, n_out = shadow.side_counts()
        own = view.reference_membership[r]
        for side in (own, ~own):
            np.testing.assert_array_equal(n_in[usable & side], 2)
            np.testing.assert_array_equal(n_out[usable & side], 2)
        # the second reference set aside is one the view had left available
        left = view.reference_available[np.arange(view.n_references) != r]
        np.testing.assert_array_equal((left & ~shadow.reference_available)[:, usable].sum(0), 1)


def test_identical_samples_have_the_same_references_available(digits_bank):
    audit = np.flatnonzero(digits_bank.audit)
    i, j = int(audit[10]), int(audit[20])
    logits, labels = digits_bank.logits.copy(), digits_bank.labels.copy()
    membership = digits_bank.membership.copy()
    logits[:, j], labels[j], membership[:, j] = logits[:, i], labels[i], membership[:, i]
    bank = digits_bank.replace(logits=logits, labels=labels, membership=membership)
    for target in (0, 6):
        view = TargetView.of(bank, target)
        for seen in (view, view.as_shadow(1)):
            assert seen.set_aside[i] and seen.set_aside[j]
            np.testing.assert_array_equal(seen.reference_available[:, i],
                                          seen.reference_available[:, j])
            np.testing.assert_array_equal(seen.reference_membership[:, i],
                                          seen.reference_membership[:, j])


def test_the_offline_design_sets_nothing_aside_on_audit_rows(digits_bank):
    """References all OUT on the audit rows (the offline setting): their membership there is
    constant, so there is nothing to read and nothing is set aside, in any view."""
    membership = digits_bank.membership.copy()
    others = np.arange(digits_bank.n_models) != 0
    membership[np.ix_(others, digits_bank.audit)] = False
    view = TargetView.of(digits_bank.replace(membership=membership), 0)
    audit = digits_bank.audit
    for seen in (view, view.as_shadow(2)):
        assert not seen.set_aside[audit].any()
        assert seen.reference_available[:, audit].all()
    np.testing.assert_array_equal(view.side_counts()[1][audit], view.n_references)
