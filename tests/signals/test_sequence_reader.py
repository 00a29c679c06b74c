"""lm_signals read through hidden states and the output head (chunks of positions, ReCaLL's
prefix cached once) gives what the full logits of one forward per text give."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

import miaudit.signals.sequence_reader as sequence_reader
from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.models.hf import encode_texts
from miaudit.models.hf_lm import base_tokenizer
from miaudit.models.lm_parts import lm_parts, parts_agree
from miaudit.runtime import devices
from miaudit.signals.assemble import SignalSpec, lm_signals

MAX_LENGTH = 20


def _features(docstring_texts, base_folder, count=30):
    tok, pad = base_tokenizer(str(base_folder))
    tokens, _ = encode_texts(docstring_texts[0][:count], tok, MAX_LENGTH, pad)
    return tokens.features()


def _perturbed(module, seed=0):
    """Every trainable weight (a LoRA adapter's B starts at 0) moved off its start."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return module.eval()


def _modules(base_folder):
    torch.manual_seed(0)
    lora = _perturbed(build_model("hf-causal-lm", (MAX_LENGTH,), 1,
                                  base_model=str(base_folder)))
    full = _perturbed(build_model("hf-causal-lm", (MAX_LENGTH,), 1,
                                  base_model=str(base_folder), lora=False), seed=1)
    return lora, full


def _read(monkeypatch, whole, models, features, **kwargs):
    if whole:  # no model taken apart: full logits, the prefix concatenated to each text
        monkeypatch.setattr(sequence_reader, "lm_parts", lambda module: None)
    else:
        monkeypatch.setattr(sequence_reader, "lm_parts", lm_parts)
    return lm_signals(models, features, np.arange(len(features)), SignalSpec(batch_size=7),
                      progress=False, **kwargs)


def test_hidden_route_and_cached_prefix_match_full_logits(monkeypatch, docstring_texts,
                                                          base_folder):
    features = _features(docstring_texts, base_folder)
    lora, full = _modules(base_folder)
    for module in (lora, full):
        parts = lm_parts(module)
        assert parts is not None
        assert parts_agree(module, parts, torch.as_tensor(features[:2, :8]))
    base = build_model("hf-causal-lm", (MAX_LENGTH,), 1, base_model=str(base_folder)).eval()
    prefix = features[-1][features[-1] != 0][:6].astype(np.int64)
    kwargs = dict(base=base, prefix_ids=prefix)
    expected = _read(monkeypatch, True, [lora, full], features[:25], **kwargs)
    found = _read(monkeypatch, False, [lora, full], features[:25], **kwargs)
    for key in ("seq_token_logprob", "seq_mean_logprob", "seq_std_logprob",
                "seq_prefix_token_logprob", "seq_base_token_logprob"):
        np.testing.assert_allclose(getattr(found, key), getattr(expected, key), atol=2e-5,
                                   err_msg=key)
    top1 = found.seq_top1_correct
    assert top1.dtype == bool and top1.shape == found.seq_token_logprob.shape
    np.testing.assert_array_equal(top1, expected.seq_top1_correct)
    assert top1.any() and not top1.all()
    # conditioning on the prefix changes the log-probs: the prefix was used
    assert np.abs(found.seq_prefix_token_logprob - found.seq_token_logprob).max() > 1e-3
    # padding is never scored: no top-1 hit there
    valid = np.arange(MAX_LENGTH - 1)[None, :] < found.seq_lengths[:, None]
    assert not top1[:, ~valid].any()


def test_top1_counts_argmax_hits(monkeypatch, docstring_texts, base_folder):
    """seq_top1_correct is whether the argmax of the full logits is the next token."""
    features = _features(docstring_texts, base_folder, count=12)
    lora, _ = _modules(base_folder)
    found = _read(monkeypatch, False, [lora], features)
    with torch.no_grad():
        logits = lora(torch.as_tensor(features))  # feature space, padded
    ids = torch.as_tensor(features).long()
    hits = (logits[:, :-1].argmax(-1) == ids[:, 1:]).numpy()
    for i, n in enumerate(found.seq_lengths):
        np.testing.assert_array_equal(found.seq_top1_correct[0, i, :n], hits[i, :n])


def test_gpt_small_is_read_through_its_parts(monkeypatch):
    torch.manual_seed(0)
    module = build_model("gpt-small", (12,), 1, n_layer=1, n_embd=16, n_head=2,
                         vocab_size=50, pad_id=0).eval()
    assert lm_parts(module) is not None
    rng = np.random.default_rng(0)
    features = rng.integers(1, 50, size=(9, 12)).astype(np.float32)
    features[3, 7:] = 0  # right padding
    whole = _read(monkeypatch, True, [module], features)
    parts = _read(monkeypatch, False, [module], features)
    np.testing.assert_allclose(parts.seq_token_logprob, whole.seq_token_logprob, atol=2e-5)
    np.testing.assert_array_equal(parts.seq_top1_correct, whole.seq_top1_correct)


def test_a_module_that_cannot_be_taken_apart_is_read_whole():
    class Scaled(torch.nn.Module):
        """A causal LM whose logits are its head's, doubled: not a plain linear head."""

        causal_lm, pad_id, vocab_size = True, 0, 50

        def __init__(self):
            super().__init__()
            self.inner = build_model("gpt-small", (12,), 1, n_layer=1, n_embd=16, n_head=2,
                                     vocab_size=50, pad_id=0)

        def forward(self, x):
            return 2 * self.inner(x)

    torch.manual_seed(0)
    module = Scaled().eval()
    assert lm_parts(module) is None
    features = np.random.default_rng(1).integers(1, 50, size=(5, 12)).astype(np.float32)
    signals = lm_signals([module], features, np.arange(5), SignalSpec(), progress=False)
    with torch.no_grad():
        logp = torch.log_softmax(module(torch.as_tensor(features))[:, :-1], -1)
    naive = logp.gather(2, torch.as_tensor(features).long()[:, 1:, None])[..., 0].numpy()
    np.testing.assert_allclose(signals.seq_token_logprob[0], naive, atol=1e-5)
    assert signals.seq_top1_correct is not None


@pytest.mark.parametrize("tolerance", [1e-3])
def test_parts_agree_catches_a_scaled_head(docstring_texts, base_folder, tolerance):
    lora, _ = _modules(base_folder)
    parts = lm_parts(lora)
    features = torch.as_tensor(_features(docstring_texts, base_folder, count=2)[:, :8])
    assert parts_agree(lora, parts, features, tolerance)
    original = parts.head
    parts.head = lambda hidden: 2 * original(hidden)
    assert not parts_agree(lora, parts, features, tolerance)


def _gpt_small(seed=0):
    torch.manual_seed(seed)
    return build_model("gpt-small", (12,), 1, n_layer=1, n_embd=16, n_head=2, vocab_size=50,
                       pad_id=0).eval()


def test_each_model_and_the_base_read_in_their_precision(monkeypatch):
    """precision per model; the base at the target's (the first model's); ReCaLL's prefix too."""
    entered = []

    def recording(device, precision):
        entered.append(precision)
        return contextlib.nullcontext()

    monkeypatch.setattr(sequence_reader, "autocast", recording)
    features = np.random.default_rng(2).integers(1, 50, size=(6, 10)).astype(np.float32)
    models, base = [_gpt_small(0), _gpt_small(1)], _gpt_small(2)
    lm_signals(models, features, np.arange(6), SignalSpec(batch_size=6), progress=False,
               base=base, prefix_ids=np.array([3, 4]), precision=["fp32", "bf16"])  # fmt: skip
    # one batch each: the target (signals, prefixed), the reference, then the base
    assert entered == ["fp32", "fp32", "bf16", "bf16", "fp32"]
    with pytest.raises(ConfigError, match="got 1 precisions for 2 models"):
        lm_signals(models, features, np.arange(6), SignalSpec(), progress=False,
                   precision=["fp32"])  # fmt: skip


def test_bf16_lm_queries_are_refused_without_native_bf16(monkeypatch):
    monkeypatch.setattr(devices, "native_bf16", devices.is_cuda)
    features = np.random.default_rng(2).integers(1, 50, size=(4, 12)).astype(np.float32)
    with pytest.raises(ConfigError, match="native bfloat16"):
        lm_signals([_gpt_small()], features, np.arange(4), SignalSpec(), progress=False,
                   precision="bf16")  # fmt: skip


@pytest.mark.skipif(not devices.native_bf16("cpu"), reason="this CPU has no native bfloat16")
def test_a_bf16_lm_query_runs_in_bf16_and_stays_close(monkeypatch, docstring_texts,
                                                      base_folder):  # fmt: skip
    """On a CPU with bf16 units, for real: the hidden-state route under autocast, its
    statistics float32, within bf16's rounding of the float32 query (not equal: it ran)."""
    features = _features(docstring_texts, base_folder, count=12)
    lora, _ = _modules(base_folder)
    want = _read(monkeypatch, False, [lora], features)
    got = _read(monkeypatch, False, [lora], features, precision="bf16")
    valid = np.arange(MAX_LENGTH - 1)[None, :] < got.seq_lengths[:, None]
    for key in ("seq_token_logprob", "seq_mean_logprob", "seq_std_logprob"):
        found, expected = getattr(got, key)[0][valid], getattr(want, key)[0][valid]
        assert found.dtype == np.float32 and not np.array_equal(found, expected), key
        assert np.abs(found - expected).mean() < 0.1, key
    assert (got.seq_top1_correct == want.seq_top1_correct).mean() > 0.95
