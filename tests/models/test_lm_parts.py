"""The training loss from hidden states and head, a chunk of positions at a time, is the
next-token loss of the full logits: its value and every gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import miaudit.models.lm_parts as lm_parts_module
from miaudit.models import build_model
from miaudit.models.hf import encode_texts
from miaudit.models.hf_lm import base_tokenizer
from miaudit.models.lm_parts import chunked_next_token_loss, training_parts
from miaudit.models.text import lm_outputs, next_token_loss, trim_padding
from miaudit.runtime.devices import native_bf16

MAX_LENGTH = 20


def _features(docstring_texts, base_folder, count=12):
    tok, pad = base_tokenizer(str(base_folder))
    tokens, _ = encode_texts(docstring_texts[0][:count], tok, MAX_LENGTH, pad)
    return torch.as_tensor(tokens.features())


def _grads(module):
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


def _compare(module, x, monkeypatch, chunk):
    monkeypatch.setattr(lm_parts_module, "LOSS_CHUNK_FLOATS", chunk)
    x = trim_padding(x, module.pad_id)
    module.zero_grad()
    logits, ids, pad = lm_outputs(module, x)
    expected = next_token_loss(logits, ids, pad)
    expected.backward()
    want = _grads(module)
    module.zero_grad()
    parts = training_parts(module)
    assert parts is not None
    found = chunked_next_token_loss(parts, x)
    found.backward()
    got = _grads(module)
    assert float(found.detach()) == pytest.approx(float(expected.detach()), abs=1e-5)
    assert want.keys() == got.keys() and want
    for name in want:
        np.testing.assert_allclose(got[name].numpy(), want[name].numpy(), atol=2e-6,
                                   rtol=1e-4, err_msg=name)


@pytest.mark.parametrize("lora", [True, False])
def test_hf_loss_and_gradients_match_the_full_logits(monkeypatch, docstring_texts, base_folder,
                                                     lora):
    torch.manual_seed(0)
    module = build_model("hf-causal-lm", (MAX_LENGTH,), 1, base_model=str(base_folder),
                         lora=lora)
    with torch.no_grad():  # LoRA's B starts at 0: move it, so its gradients flow both ways
        for p in module.parameters():
            if p.requires_grad and not p.any():
                p.add_(0.05)
    x = _features(docstring_texts, base_folder)
    for chunk in (5 * 300, 2**22):  # chunks of 5 positions (vocabulary 300), and one chunk
        _compare(module, x, monkeypatch, chunk)
    if not lora:  # the tied head and embedding: one gradient, both routes' parts summed
        assert any("embed" in name for name in _grads(module))


def test_gpt_small_loss_matches(monkeypatch):
    torch.manual_seed(0)
    module = build_model("gpt-small", (12,), 1, n_layer=1, n_embd=16, n_head=2, vocab_size=50,
                         pad_id=0)
    x = torch.randint(1, 50, (6, 12)).float()
    x[2, 5:] = 0
    _compare(module, x, monkeypatch, 3 * 50)


def test_no_target_gives_nan_as_cross_entropy(docstring_texts, base_folder):
    module = build_model("hf-causal-lm", (MAX_LENGTH,), 1, base_model=str(base_folder))
    x = _features(docstring_texts, base_folder, count=2)[:, :1]  # one token: nothing to predict
    assert torch.isnan(chunked_next_token_loss(training_parts(module), x))


def test_a_head_with_a_bias_uses_the_logits():
    torch.manual_seed(0)
    module = build_model("gpt-small", (12,), 1, n_layer=1, n_embd=16, n_head=2, vocab_size=50,
                         pad_id=0)
    module.lm.lm_head.bias = torch.nn.Parameter(torch.zeros(50))
    assert training_parts(module) is None


def test_training_runs_the_same_either_way(monkeypatch, docstring_texts, base_folder):
    """train_model through the chunked loss ends where the full logits' loss ends."""
    from miaudit.train import Recipe, train_model

    x = _features(docstring_texts, base_folder, count=24).numpy()
    y = np.zeros(len(x), dtype=np.int64)
    recipe = Recipe(architecture="hf-causal-lm",
                    arch_params={"base_model": str(base_folder), "lora": {"r": 2}},
                    optimizer="adam", lr=1e-2, epochs=2, batch_size=8, schedule="constant")
    states = []
    for route in (training_parts, lambda module: None):
        monkeypatch.setattr(lm_parts_module, "training_parts", route)
        trained = train_model(recipe, x, y, np.arange(len(x)), seed=0, progress=False)
        states.append({k: v.clone() for k, v in trained.module.state_dict().items()})
    assert states[0].keys() == states[1].keys()
    for key in states[0]:
        np.testing.assert_allclose(states[0][key].numpy(), states[1][key].numpy(), atol=1e-4,
                                   err_msg=key)
    assert any(float(v.abs().max()) > 1e-3 for k, v in states[0].items() if "lora_B" in k)


@pytest.mark.skipif(not native_bf16("cpu"), reason="this CPU has no native bfloat16")
@pytest.mark.parametrize("lora", [True, False])
def test_under_bf16_autocast_the_chunked_loss_matches_the_logits_loss(docstring_texts,
                                                                      base_folder, lora):
    """bf16 training takes the chunked route too (found under autocast, checked in float32),
    and its loss and gradients are the logits' route's under the same autocast, to bf16's
    rounding."""
    torch.manual_seed(0)
    module = build_model("hf-causal-lm", (MAX_LENGTH,), 1, base_model=str(base_folder),
                         lora=lora)
    with torch.no_grad():
        for p in module.parameters():
            if p.requires_grad and not p.any():
                p.add_(0.05)
    x = trim_padding(_features(docstring_texts, base_folder), module.pad_id)
    results = []
    for chunked in (False, True):
        module.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if chunked:
                parts = training_parts(module)
                assert parts is not None  # the float32 check passed under autocast
                loss = chunked_next_token_loss(parts, x)
            else:
                loss = next_token_loss(*lm_outputs(module, x))
        assert loss.dtype == torch.float32
        loss.backward()
        results.append((float(loss.detach()), _grads(module)))
    (want_loss, want), (got_loss, got) = results
    assert got_loss == pytest.approx(want_loss, abs=0.02)
    assert want.keys() == got.keys() and want
    for name in want:
        scale = float(want[name].abs().max())
        assert float((got[name] - want[name]).abs().max()) <= 0.05 * scale + 1e-6, name
