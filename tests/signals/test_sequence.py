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
    token, mean, std, top1 = sequence_signals(logits, ids, lengths)
    assert token.shape == mean.shape == std.shape == top1.shape == (b, t - 1)
    assert top1.dtype == torch.bool
    assert token.dtype == torch.float32
    for i in range(b):
        for pos in range(t - 1):
            if pos >= lengths[i] - 1:  # padding: zero-filled
                assert token[i, pos] == mean[i, pos] == std[i, pos] == 0
                assert not top1[i, pos]
                continue
            assert bool(top1[i, pos]) == (int(logits[i, pos].argmax()) == int(ids[i, pos + 1]))
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
    token, mean, std, _ = sequence_signals(logits, torch.tensor([[0, 1, 2]]), [3])
    assert torch.isfinite(mean).all() and torch.isfinite(std).all()
    assert mean[0, 0].item() == pytest.approx(np.log(1 / 3), abs=1e-6)
    assert std[0, 0].item() == pytest.approx(0.0, abs=1e-3)
    with pytest.raises(ValueError, match="lengths"):
        sequence_signals(logits, torch.tensor([[0, 1, 2]]), [1])
    with pytest.raises(ValueError, match=r"\[B, T, V\]"):
        sequence_signals(logits[0], torch.tensor([0, 1, 2]), [3])


def test_chunks_change_nothing(monkeypatch):
    """Positions a chunk at a time, or from hidden states and a head: the same signals as
    all positions at once from the full logits."""
    import miaudit.signals.sequence as sequence

    gen = torch.Generator().manual_seed(1)
    b, t, h, v = 4, 9, 6, 13
    hidden = torch.randn(b, t, h, generator=gen)
    torch.manual_seed(1)
    head = torch.nn.Linear(h, v, bias=False)
    ids = torch.randint(0, v, (b, t), generator=gen)
    lengths = np.array([9, 5, 2, 7])
    with torch.no_grad():
        ids[0, 1:4] = head(hidden[0, :3]).argmax(-1)  # three positions right at top-1
        whole = sequence_signals(head(hidden), ids, lengths)
        monkeypatch.setattr(sequence, "CHUNK_FLOATS", 2 * v)  # two positions per chunk
        for found in (sequence_signals(head(hidden), ids, lengths),
                      sequence.hidden_sequence_signals(hidden, head, ids, lengths)):
            for a, c in zip(whole, found, strict=True):
                assert a.dtype == c.dtype
                np.testing.assert_allclose(a.numpy(), c.numpy(), atol=1e-5)
        token = sequence.hidden_sequence_signals(hidden, head, ids, lengths, full=False)
        assert len(token) == 1
        np.testing.assert_allclose(token[0].numpy(), whole.token.numpy(), atol=1e-5)
    assert whole.top1.any() and not whole.top1.all()


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


def _tiny_lms(count, positions):
    from miaudit.models.text import gpt_small

    torch.manual_seed(0)
    return [gpt_small((8,), 1, n_layer=1, n_embd=16, n_head=2, vocab_size=30,
                      n_positions=positions) for _ in range(count)]


def _token_ids():
    ids = np.zeros((7, 8), dtype=np.float32)  # right-padded with pad id 0
    for i, length in enumerate([2, 3, 8, 5, 8, 4, 6]):
        ids[i, :length] = 1 + (np.arange(length) * (i + 2)) % 29
    return ids


def test_draw_prefix_is_seeded_and_drops_padding():
    from miaudit.signals.sequence import draw_prefix

    ids = _token_ids()
    prefix = draw_prefix(ids, np.array([4, 5, 6]), 2, seed=3, pad_id=0)
    np.testing.assert_array_equal(prefix, draw_prefix(ids, np.array([4, 5, 6]), 2, 3, 0))
    assert prefix.dtype == np.int64 and (prefix != 0).all()
    assert len(prefix) in {8 + 4, 8 + 6, 4 + 6}
    with pytest.raises(ValueError, match="public texts"):
        draw_prefix(ids, np.array([4]), 2, seed=0, pad_id=0)


def test_prefix_conditioned_base_and_token_id_channels_match_naive_forwards():
    """ReCaLL's channel equals a naive forward of prefix + text (one text, no padding)
    sliced to the text's tokens; the base model's is its plain token log-probs; token ids
    are the scored tokens. Batched and right-padded on the bank's side."""
    from miaudit.attacks import TargetView, run_attack
    from miaudit.signals.assemble import SignalSpec, assemble_bank, query_signals
    from miaudit.signals.sequence import draw_prefix

    *lms, base = _tiny_lms(3, positions=24)
    ids = _token_ids()
    public, rows = np.array([5, 6]), np.array([3, 0, 2, 1, 4])
    prefix = draw_prefix(ids, public, 2, seed=0, pad_id=int(lms[0].pad_id))
    spec = SignalSpec(batch_size=2, token_ids=True)
    signals = query_signals(lms, ids, np.zeros(7, dtype=np.int64), rows, "tokens", spec,
                            progress=False, base=base, prefix_ids=prefix)  # fmt: skip
    width = ids.shape[1] - 1
    assert signals.seq_prefix_token_logprob.shape == (2, 5, width)
    for k, row in enumerate(rows):
        text = ids[row][ids[row] != 0].astype(np.int64)
        x = torch.from_numpy(np.concatenate([prefix, text]))[None]
        for m, lm in enumerate(lms):
            with torch.no_grad():
                logp = torch.log_softmax(lm(x)[0].double(), -1).numpy()
            expected = [logp[len(prefix) + t, text[t + 1]] for t in range(len(text) - 1)]
            got = signals.seq_prefix_token_logprob[m, k]
            np.testing.assert_allclose(got[: len(text) - 1], expected, rtol=1e-4, atol=1e-5)
            assert (got[len(text) - 1 :] == 0).all()
        with torch.no_grad():
            logp = torch.log_softmax(base(torch.from_numpy(text)[None])[0].double(), -1)
        expected = [logp[t, text[t + 1]].item() for t in range(len(text) - 1)]
        np.testing.assert_allclose(signals.seq_base_token_logprob[k, : len(text) - 1],
                                   expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(signals.seq_token_ids[k, : len(text) - 1], text[1:])
        assert (signals.seq_token_ids[k, len(text) - 1 :] == -1).all()
    assert int(signals.seq_vocab_size) == 30
    assert signals.take([1]).seq_prefix_token_logprob.shape == (1, 5, width)
    population = np.array([False, False, False, True, True])
    bank = assemble_bank(signals, np.zeros(5, dtype=np.int64),
                         np.array([[True, False, True, False, False]] * 2), ~population,
                         population)  # fmt: skip
    view = TargetView.of(bank, 0)
    for name in ("lm-base-reference", "recall", "dc-pdd"):
        assert np.isfinite(run_attack(name, view).scores).all(), name


def test_calibrated_channels_are_off_unless_asked_for():
    from miaudit.signals.assemble import SignalSpec, query_signals

    lms = _tiny_lms(1, positions=8)
    signals = query_signals(lms, _token_ids(), np.zeros(7), np.arange(3), "tokens",
                            SignalSpec(), progress=False)  # fmt: skip
    for key in ("seq_prefix_token_logprob", "seq_base_token_logprob", "seq_token_ids",
                "seq_vocab_size"):
        assert getattr(signals, key) is None, key


def test_calibrated_arrays_are_validated_and_padding_ids_cleared():
    arrays = sequence_arrays(garbage=False)
    m, n, t = arrays["seq_token_logprob"].shape
    lengths = arrays["seq_lengths"]
    ids = np.random.default_rng(0).integers(0, 5, size=(n, t))
    ids[~valid_positions(lengths, t)] = 99  # padding: anything, cleared to -1
    bank = SignalBank(logits=None, labels=None, seq_token_ids=ids, seq_vocab_size=np.int64(5),
                      seq_base_token_logprob=arrays["seq_token_logprob"][0],
                      seq_prefix_token_logprob=arrays["seq_token_logprob"], **arrays)
    assert (bank.seq_token_ids[~valid_positions(lengths, t)] == -1).all()
    bad = ids.copy()
    bad[0, 0] = 5
    with pytest.raises(BankError, match="outside 0..4"):
        SignalBank(logits=None, labels=None, seq_token_ids=bad, seq_vocab_size=np.int64(5),
                   **arrays)
    with pytest.raises(BankError, match="come together"):
        SignalBank(logits=None, labels=None, seq_token_ids=ids, **arrays)
    with pytest.raises(BankError, match="seq_base_token_logprob must have shape"):
        SignalBank(logits=None, labels=None, seq_base_token_logprob=arrays["seq_token_logprob"],
                   **arrays)
    positive = arrays["seq_token_logprob"].copy()
    positive[0, 0, 0] = 1.0
    with pytest.raises(BankError, match="positive log-probabilities"):
        SignalBank(logits=None, labels=None, seq_prefix_token_logprob=positive, **arrays)
    with pytest.raises(BankError, match="no sequence signals"):
        SignalBank(logits=np.zeros((m, n, 1, 2), np.float32), labels=np.zeros(n, np.int64),
                   membership=arrays["membership"], seq_token_ids=ids,
                   seq_vocab_size=np.int64(5))
