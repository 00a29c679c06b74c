"""The sequence bank's `seq_top1_correct` [M, N, T] (EZ-MIA's error zone): optional, validated,
padding cleared to False, saved and loaded with the bank."""

from __future__ import annotations

import numpy as np
import pytest

from miaudit.errors import BankError
from miaudit.signals import SignalBank
from miaudit.signals.bank import TOP1_KEY, valid_positions


def _arrays(m=3, n=10, t=7, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, t + 1, size=n)
    lengths[0] = t
    token = -rng.exponential(2.0, size=(m, n, t)).astype(np.float32)
    token[:, ~valid_positions(lengths, t)] = np.nan  # padding: never read
    top1 = rng.random((m, n, t)) < 0.4
    return dict(membership=rng.random((m, n)) < 0.5, seq_token_logprob=token,
                seq_lengths=lengths), top1


def test_it_is_optional_and_its_padding_is_cleared():
    arrays, top1 = _arrays()
    assert SignalBank(None, None, **arrays).seq_top1_correct is None
    top1[:] = True  # padding too: cleared
    bank = SignalBank(None, None, seq_top1_correct=top1, **arrays)
    valid = valid_positions(arrays["seq_lengths"], top1.shape[2])
    assert bank.seq_top1_correct.dtype == bool
    assert bank.seq_top1_correct[:, valid].all() and not bank.seq_top1_correct[:, ~valid].any()
    assert TOP1_KEY == "seq_top1_correct"


def test_zero_one_values_are_read_as_booleans():
    arrays, top1 = _arrays()
    as_int = top1.astype(np.int8)
    as_float = top1.astype(np.float32)
    as_float[:, ~valid_positions(arrays["seq_lengths"], top1.shape[2])] = np.nan  # padding
    expected = SignalBank(None, None, seq_top1_correct=top1, **arrays).seq_top1_correct
    for value in (as_int, as_float):
        got = SignalBank(None, None, seq_top1_correct=value, **arrays).seq_top1_correct
        np.testing.assert_array_equal(got, expected)


def test_a_wrong_shape_or_value_is_refused():
    arrays, top1 = _arrays()
    with pytest.raises(BankError, match="seq_top1_correct must have the shape"):
        SignalBank(None, None, seq_top1_correct=top1[0], **arrays)
    bad = top1.astype(np.int64)
    bad[0, 0, 0] = 2
    with pytest.raises(BankError, match="must be boolean"):
        SignalBank(None, None, seq_top1_correct=bad, **arrays)
    with pytest.raises(BankError, match="no sequence signals"):
        m, n = arrays["membership"].shape
        SignalBank(np.zeros((m, n, 1, 2), np.float32), np.zeros(n, np.int64),
                   arrays["membership"], seq_top1_correct=top1)


def test_it_survives_save_and_load(tmp_path):
    arrays, top1 = _arrays()
    bank = SignalBank(None, None, seq_top1_correct=top1, **arrays)
    for compressed in (False, True):
        loaded = SignalBank.load(bank.save(tmp_path / f"bank{compressed}.npz", compressed))
        assert loaded.seq_top1_correct.dtype == bool
        np.testing.assert_array_equal(loaded.seq_top1_correct, bank.seq_top1_correct)
    without = SignalBank.load(SignalBank(None, None, **arrays).save(tmp_path / "plain.npz"))
    assert without.seq_top1_correct is None
    # a model subset of the bank keeps the rows of its models
    again = bank.replace(membership=bank.membership[:2],
                         seq_token_logprob=bank.seq_token_logprob[:2],
                         seq_top1_correct=bank.seq_top1_correct[:2])
    np.testing.assert_array_equal(again.seq_top1_correct, bank.seq_top1_correct[:2])
