"""The sequence bank: per-token signals of causal LMs, their validation, save/load,
and the logits derived for a bank without them."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from miaudit.errors import BankError
from miaudit.signals import SignalBank
from miaudit.signals.bank import valid_positions
from miaudit.signals.sequence import sequence_signals, text_sizes


def sequence_arrays(m=4, n=12, t=9, seed=0, garbage=True):
    """Seeded sequence arrays; padding set to NaN/inf/huge garbage unless `garbage` is off."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, t + 1, size=n)
    lengths[0] = t  # one full row
    token = -rng.exponential(2.0, size=(m, n, t)).astype(np.float32)
    mean = -rng.uniform(1.0, 5.0, size=(m, n, t)).astype(np.float32)
    std = rng.uniform(0.2, 3.0, size=(m, n, t)).astype(np.float32)
    if garbage:
        pad = ~valid_positions(lengths, t)
        for array, junk in ((token, np.nan), (mean, np.inf), (std, -1e30)):
            array[:, pad] = junk
    zbytes = rng.integers(20, 200, size=n)
    chars = zbytes * rng.integers(1, 4, size=n) + rng.integers(0, 10, size=n)
    membership = rng.random((m, n)) < 0.5
    return dict(membership=membership, seq_token_logprob=token, seq_mean_logprob=mean,
                seq_std_logprob=std, seq_lengths=lengths, text_zlib_bytes=zbytes,
                text_chars=chars)


def sequence_bank(**kwargs):
    return SignalBank(logits=None, labels=None, **sequence_arrays(**kwargs))


def test_sequence_signals_match_a_naive_loop():
    gen = torch.Generator().manual_seed(0)
    b, t, v = 3, 7, 11
    logits = torch.randn(b, t, v, generator=gen) * 3
    ids = torch.randint(0, v, (b, t), generator=gen)
    lengths = np.array([7, 4, 2])
    token, mean, std = sequence_signals(logits, ids, lengths)
    assert token.shape == mean.shape == std.shape == (b, t - 1)
    assert token.dtype == torch.float32
    for i in range(b):
        for pos in range(t - 1):
            if pos >= lengths[i] - 1:  # padding: zero-filled
                assert token[i, pos] == mean[i, pos] == std[i, pos] == 0
                continue
            logp = torch.log_softmax(logits[i, pos].double(), dim=0)
            p = logp.exp()
            mu = float((p * logp).sum())
            sd = float(((p * (logp - mu) ** 2).sum()).sqrt())
            assert token[i, pos].item() == pytest.approx(float(logp[ids[i, pos + 1]]), abs=1e-5)
            assert mean[i, pos].item() == pytest.approx(mu, abs=1e-5)
            assert std[i, pos].item() == pytest.approx(sd, abs=1e-4)


def test_sequence_signals_handle_a_masked_vocabulary_entry_and_bad_input():
    logits = torch.zeros(1, 3, 4)
    logits[..., 3] = -float("inf")  # a token the model can never emit
    token, mean, std = sequence_signals(logits, torch.tensor([[0, 1, 2]]), [3])
    assert torch.isfinite(mean).all() and torch.isfinite(std).all()
    assert mean[0, 0].item() == pytest.approx(np.log(1 / 3), abs=1e-6)
    assert std[0, 0].item() == pytest.approx(0.0, abs=1e-3)
    with pytest.raises(ValueError, match="lengths"):
        sequence_signals(logits, torch.tensor([[0, 1, 2]]), [1])
    with pytest.raises(ValueError, match=r"\[B, T, V\]"):
        sequence_signals(logits[0], torch.tensor([0, 1, 2]), [3])


def test_text_sizes():
    texts = ["hello hello hello hello", "é", ""]
    zbytes, chars = text_sizes(texts)
    assert chars.tolist() == [23, 1, 0]
    assert zbytes.tolist() == [len(zlib.compress(t.encode("utf-8"))) for t in texts]


def test_sequence_bank_derives_logits_whose_statistics_are_the_sequence_likelihood():
    bank = sequence_bank()
    assert bank.logits_derived and bank.has_sequences and bank.has_text
    assert bank.logits.shape == (4, 12, 1, 2) and (bank.labels == 0).all()
    arrays = sequence_arrays()
    ll = np.zeros((4, 12))
    for m in range(4):
        for n in range(12):
            ll[m, n] = np.mean(arrays["seq_token_logprob"][m, n, : arrays["seq_lengths"][n]],
                               dtype=np.float64)
    np.testing.assert_allclose(bank.sequence_loglik, ll, rtol=1e-6)
    loss = bank.statistics.query_mean("loss", range(4))
    np.testing.assert_allclose(loss, -ll, rtol=1e-4, atol=1e-5)
    prob = bank.statistics.query_mean("prob_true", range(4))
    np.testing.assert_allclose(prob, np.exp(ll), rtol=1e-4)


def test_sequence_bank_round_trips_through_save_and_load(tmp_path):
    bank = sequence_bank()
    path = bank.save(tmp_path / "bank.npz")
    with np.load(path) as data:
        files = set(data.files)
    assert "logits" not in files and "labels" not in files  # derived, never stored
    assert {"seq_token_logprob", "seq_mean_logprob", "seq_std_logprob", "seq_lengths",
            "text_zlib_bytes", "text_chars", "membership"} <= files
    loaded = SignalBank.load(path)
    assert loaded.logits_derived
    for key in ("seq_token_logprob", "seq_mean_logprob", "seq_std_logprob"):
        np.testing.assert_array_equal(getattr(loaded, key), getattr(bank, key))  # NaN padding
    for key in ("seq_lengths", "text_zlib_bytes", "text_chars", "membership", "audit"):
        np.testing.assert_array_equal(getattr(loaded, key), getattr(bank, key))
    np.testing.assert_array_equal(loaded.logits, bank.logits)


def test_replace_keeps_derived_logits_derived():
    bank = sequence_bank()
    copy = bank.replace(membership=~bank.membership)
    assert copy.logits_derived
    np.testing.assert_array_equal(copy.logits, bank.logits)
    shorter = bank.replace(seq_lengths=np.ones(12, dtype=int))
    np.testing.assert_allclose(shorter.sequence_loglik, bank.seq_token_logprob[:, :, 0],
                               rtol=1e-6)


def test_a_classifier_bank_may_carry_sequences_and_saves_as_before(tmp_path, digits_bank):
    path = digits_bank.save(tmp_path / "bank.npz")
    with np.load(path) as data:
        assert not any(k.startswith(("seq_", "text_")) for k in data.files)
        assert {"logits", "labels", "membership"} <= set(data.files)
    assert not digits_bank.has_sequences and not digits_bank.logits_derived
    m, n = digits_bank.membership.shape
    arrays = sequence_arrays(m=m, n=n)
    arrays.pop("membership")
    both = digits_bank.replace(**arrays)
    assert not both.logits_derived and both.has_sequences
    np.testing.assert_array_equal(both.logits, digits_bank.logits)
    again = SignalBank.load(both.save(tmp_path / "both.npz"))
    np.testing.assert_array_equal(again.logits, digits_bank.logits)
    np.testing.assert_array_equal(again.seq_lengths, arrays["seq_lengths"])


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(seq_lengths=None), "seq_lengths"),
        (dict(seq_token_logprob=np.zeros((4, 12))), r"\[M, N, T\]"),
        (dict(seq_token_logprob=np.zeros((3, 12, 9))), r"\[M, N, T\]"),
        (dict(seq_lengths=np.zeros(12, dtype=int)), "outside 1..9"),
        (dict(seq_lengths=np.full(12, 10)), "outside 1..9"),
        (dict(seq_lengths=np.full(11, 3)), r"shape \[N\]"),
        (dict(seq_lengths=np.full(12, 2.5)), "integers"),
        (dict(seq_mean_logprob=np.zeros((4, 12, 8))), "shape of seq_token_logprob"),
        (dict(seq_std_logprob=None), "come together"),
        (dict(text_chars=None), "text arrays come together"),
        (dict(text_zlib_bytes=np.zeros(12, dtype=int)), "text_zlib_bytes must be >= 1"),
    ],
)
def test_sequence_bank_validation(change, message):
    arrays = {**sequence_arrays(), **change}
    with pytest.raises(BankError, match=message):
        SignalBank(None, None, **arrays)


def test_non_finite_or_positive_values_at_valid_positions_are_rejected():
    arrays = sequence_arrays()
    arrays["seq_token_logprob"][2, 0, 0] = np.nan  # row 0 is full: a valid position
    with pytest.raises(BankError, match=r"NaN or infinite \(models \[2\]\)"):
        SignalBank(None, None, **arrays)
    arrays = sequence_arrays()
    arrays["seq_token_logprob"][1, 0, 3] = 2.0
    with pytest.raises(BankError, match="positive log-probabilities"):
        SignalBank(None, None, **arrays)
    arrays = sequence_arrays()
    arrays["seq_std_logprob"][1, 0, 3] = -0.5
    with pytest.raises(BankError, match="negative standard deviations"):
        SignalBank(None, None, **arrays)


def test_logits_may_be_left_out_only_with_sequences(tmp_path):
    with pytest.raises(BankError, match="only a sequence bank"):
        SignalBank(None, None, np.zeros((2, 3), dtype=bool))
    np.savez(tmp_path / "bad.npz", membership=np.zeros((2, 3), dtype=bool))
    with pytest.raises(BankError, match="lacks required arrays"):
        SignalBank.load(tmp_path / "bad.npz")
