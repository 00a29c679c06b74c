"""Exposure and greedy extraction (miaudit.privacy.exposure) on a tiny random Llama wrapped as
HFCausalLM, with a byte-level BPE tokenizer trained in the test (its pad id is not 0, so the
feature-space swap is exercised)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from miaudit.privacy.exposure import (
    exposure,
    exposure_from_log_likelihoods,
    feature_codec,
    greedy_extraction,
    greedy_extractions,
    secret_log_likelihoods,
    split_secret_tokens,
)
from miaudit.privacy.secrets import SECRET_FORMATS, SecretFormat, draw_canary_texts

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

SENTENCES = ["my account number is 1234 5678", "the secret words are apple river stone",
             "please send the report to the team before friday", "code 42 and code 17"]
TWO_DIGITS = SecretFormat("two-digits", "test: 2 digits", "code", " {}{}", tuple("0123456789"))


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(SENTENCES * 5, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", 0)])
    return tok, tok.token_to_id("<pad>")


def _model(vocab, pad, seed=0):
    from miaudit.models.hf import HFCausalLM

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation="eager",
    )  # fmt: skip
    return HFCausalLM(transformers.LlamaForCausalLM(config), pad).eval()


@pytest.fixture(scope="module")
def tiny():
    tok, pad = _tokenizer()
    encode, decode = feature_codec(tok, pad)
    return _model(tok.get_vocab_size(), pad), encode, decode


@pytest.fixture(scope="module")
def trained(tiny):
    """A fresh tiny model trained 300 full-batch steps on one canary text alone."""
    _, encode, decode = tiny
    canaries = draw_canary_texts("account-number", 2, seed=5)
    model = _model(300, 1, seed=1).train()
    ids = torch.tensor([encode(canaries[0].text)], dtype=torch.float32)
    target = ids[:, 1:].long()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(300):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(ids)[0, :-1], target[0])
        loss.backward()
        opt.step()
    return model.eval(), canaries


def _naive(module, encode, prefix, secret):
    """log p(secret | prefix) token by token, one unpadded forward per token."""
    context, (cont,) = split_secret_tokens(encode, prefix, [secret])
    total, seen = 0.0, list(context)
    with torch.no_grad():
        for token in cont:
            logits = module(torch.tensor([seen], dtype=torch.float32))[0, -1]
            total += float(torch.log_softmax(logits.double(), -1)[token])
            seen.append(token)
    return total


def test_feature_codec_swaps_the_pad_and_keeps_bos(tiny):
    tok, pad = _tokenizer()
    _, encode, decode = tiny
    ids = encode("code 42")
    assert ids[0] == pad and tok.encode("code 42").ids[0] == 0  # <s> (id 0) is feature `pad`
    assert 0 not in ids and decode(ids) == "code 42"


def test_feature_codec_drops_an_appended_end_of_text(tiny):
    from tokenizers import Tokenizer, processors

    tok, pad = _tokenizer()
    eos = Tokenizer.from_str(tok.to_str())
    eos.add_special_tokens(["</s>"])
    eos.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", eos.token_to_id("</s>"))])
    assert eos.encode("code 42").ids[-1] == eos.token_to_id("</s>")
    assert feature_codec(eos, pad)[0]("code 42") == tiny[1]("code 42")


def test_split_at_the_boundary_and_across_a_merge(tiny):
    _, encode, _ = tiny
    context, conts = split_secret_tokens(encode, "code", [" 42", " 7"])
    assert context == encode("code") and conts[0] == encode("code 42")[len(context):]
    assert len(conts[0]) == 3 and len(conts[1]) == 2  # 'Ġ', '4', '2'

    def merging(text):  # characters, except "s " merged into one token
        out, i = [], 0
        while i < len(text):
            if text[i : i + 2] == "s ":
                out.append(1000)
                i += 2
            else:
                out.append(ord(text[i]))
                i += 1
        return out

    context, conts = split_secret_tokens(merging, "is", [" 12", "x"])
    assert context == [ord("i")]  # the merged "s " is scored with the secret
    assert conts == [[1000, ord("1"), ord("2")], [ord("s"), ord("x")]]
    with pytest.raises(ValueError, match="adds no token"):
        split_secret_tokens(encode, "code", [""])
    with pytest.raises(ValueError, match="pad id 0"):
        split_secret_tokens(lambda t: [0, *map(ord, t)], "code", [" 1"])


def test_log_likelihoods_match_a_naive_loop(tiny):
    module, encode, _ = tiny
    prefix = "the secret words are"
    secrets = [c.secret for c in draw_canary_texts("random-tokens", 5, seed=2)]
    secrets += [" apple", " river stone zebra"]  # other lengths: batches pad unequal rows
    fast = secret_log_likelihoods(module, encode, prefix, secrets, batch_size=3)
    naive = [_naive(module, encode, prefix, s) for s in secrets]
    np.testing.assert_allclose(fast, naive, rtol=1e-5, atol=1e-4)
    assert (fast < 0).all() and not module.training


def test_sampled_exposure_matches_brute_force(tiny, monkeypatch):
    module, encode, _ = tiny
    monkeypatch.setitem(SECRET_FORMATS, TWO_DIGITS.name, TWO_DIGITS)
    every = TWO_DIGITS.all_secrets()
    ll = secret_log_likelihoods(module, encode, TWO_DIGITS.prefix, every)
    rank = np.array([sum(other >= mine for other in ll) for mine in ll])  # 1 = most likely
    exact = np.log2(100) - np.log2(rank)
    full = exposure_from_log_likelihoods(ll, ll, 100)  # R itself as the candidates: exact
    np.testing.assert_allclose([e.exposure for e in full], exact, atol=1e-12)
    canaries = draw_canary_texts("two-digits", 6, seed=0)
    sampled = exposure(module, encode, canaries, "two-digits", n_candidates=4000, seed=1)
    for canary, found in zip(canaries, sampled, strict=True):
        p = rank[every.index(canary.secret)] / 100
        assert abs(2.0 ** -found.exposure - p) <= 5 * math.sqrt(p * (1 - p) / 4000) + 1e-3
        assert found.n_candidates == 4000 and found.space_size == 100
        assert found.max_sampled_exposure == pytest.approx(math.log2(100))
        assert 0 <= found.exposure_extrapolated <= math.log2(100)


def test_seeds_reproduce(tiny):
    module, encode, _ = tiny
    canaries = draw_canary_texts("account-number", 3, seed=0)
    first = exposure(module, encode, canaries, "account-number", n_candidates=64, seed=7)
    assert first == exposure(module, encode, canaries, "account-number", n_candidates=64, seed=7)
    other = exposure(module, encode, canaries, "account-number", n_candidates=64, seed=8)
    assert [e.exposure for e in first] != [e.exposure for e in other]
    assert first[0].to_dict()["n_candidates"] == 64


def test_training_on_a_secret_exposes_and_extracts_it(tiny, trained):
    untrained, encode, decode = tiny
    model, canaries = trained
    secret, other = canaries
    log2_r = math.log2(10**8)
    hit, miss = exposure(model, encode, canaries, "account-number", n_candidates=500, seed=0)
    assert hit.capped and hit.exposure == pytest.approx(math.log2(500))
    assert hit.exposure_extrapolated > 0.8 * log2_r
    assert miss.exposure < hit.exposure and miss.exposure_extrapolated < 0.5 * log2_r
    assert greedy_extraction(model, encode, decode, secret.prefix, secret.secret)
    both = greedy_extractions(model, encode, decode, secret.prefix,
                              [secret.secret, other.secret])
    assert both.tolist() == [True, False]  # one greedy continuation per prefix

    base = exposure(untrained, encode, canaries, "account-number", n_candidates=500, seed=0)
    assert all(e.exposure < 6 and e.exposure_extrapolated < 0.5 * log2_r for e in base)
    assert not greedy_extractions(untrained, encode, decode, secret.prefix,
                                  [secret.secret, other.secret]).any()


def test_greedy_decoding_with_unequal_contexts(trained, tiny):
    _, encode, decode = tiny
    model, (secret, _) = trained
    prefixes = [secret.prefix, "my account number", secret.prefix]
    secrets = [secret.secret, " is" + secret.secret, " 0000 0000"]
    assert greedy_extractions(model, encode, None, prefixes, secrets).tolist() == [
        True, True, False]
