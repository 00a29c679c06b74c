"""A causal-LM run end to end through the ordinary pipeline: texts -> MiniLM
WordPiece ids -> gpt-small target and references trained on the next-token loss -> the one
assembly's sequence bank -> the LM attacks and the model-free blind baseline."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from miaudit.config import config_from_dict
from miaudit.data import load_dataset
from miaudit.errors import ConfigError
from miaudit.models.text import tokenize
from miaudit.pipeline import run
from miaudit.protocol import make_split
from miaudit.signals import SignalBank

MAX_LENGTH = 24


def test_a_causal_lm_run_builds_a_sequence_bank(tmp_path, docstring_texts):
    table = pd.DataFrame({"text": docstring_texts[0], "label": 0})  # one class: unused by an LM
    path = tmp_path / "texts.csv"
    table.to_csv(path, index=False)
    n = len(table)
    attacks = ["lm-loss", "zlib", "min-k", "min-k-plus-plus", "lm-calibrated",
               "lm-lira-offline", "lm-rmia", "blind"]  # fmt: skip
    cfg = config_from_dict({
        "name": "lm", "seed": 0, "output": str(tmp_path / "run"),
        "dataset": {"name": str(path), "options": {"text_column": "text",
                                                   "label_column": "label"},
                    "max_length": MAX_LENGTH},
        "split": {"audit": n * 2 // 5, "public": n * 2 // 5, "population": n // 10},
        "models": 3,
        "recipe": {"architecture": "gpt-small",
                   "arch_params": {"n_layer": 1, "n_embd": 32, "n_head": 2},
                   "optimizer": "adam", "lr": 0.01, "epochs": 8, "batch_size": 16},
        "attacks": attacks,
        "metrics": {"bootstrap": 20},
    })
    result, out = run(cfg, progress=False, echo=False)
    assert {o.name for o in result.outcomes} == set(attacks)
    for outcome in result.outcomes:
        assert 0.0 <= outcome.metrics.auc <= 1.0

    bank = SignalBank.load(out / "bank.npz")
    assert bank.has_sequences and bank.has_text and bank.logits_derived
    m, rows = bank.membership.shape
    assert m == 3
    for key in ("seq_token_logprob", "seq_mean_logprob", "seq_std_logprob"):
        assert getattr(bank, key).shape == (3, rows, MAX_LENGTH - 1)
    # padding never leaks: each sample scores its tokens - 1 positions, and only those
    texts = load_dataset(cfg.dataset.name, cfg.data_dir, **cfg.dataset.options).features
    split = make_split(len(texts), cfg.split.audit, cfg.split.public, cfg.split.population,
                       cfg.seed)  # build_bank's split: the bank rows
    tokens = tokenize(texts[split.rows], MAX_LENGTH)
    np.testing.assert_array_equal(bank.text_chars, [len(t) for t in texts[split.rows]])
    assert tokens.n_truncated > 0  # some texts were cut: their length is max_length - 1
    np.testing.assert_array_equal(bank.seq_lengths, tokens.lengths - 1)
    pad = np.arange(MAX_LENGTH - 1)[None, :] >= bank.seq_lengths[:, None]
    assert (bank.seq_token_logprob[:, pad] == 0).all()
    assert (bank.seq_token_logprob[:, ~pad] < 0).all()

    # the target fit its training texts: lower loss on members than on non-members
    target = result.meta["models"][0]
    assert "train_acc" not in target
    assert target["train_loss"] < target["test_loss"]
    assert np.isclose(target["train_ppl"], np.exp(target["train_loss"]))
    loss = -bank.sequence_loglik[0]
    members = bank.membership[0]
    assert loss[members].mean() < loss[~members].mean()



def test_the_assembly_queries_causal_lms_into_sequence_arrays():
    from miaudit.models.text import gpt_small, token_log_probs
    from miaudit.signals.assemble import SignalSpec, assemble_bank, query_signals, require_channels

    torch.manual_seed(0)
    lms = [gpt_small((8,), 1, n_layer=1, n_embd=16, n_head=2, vocab_size=30) for _ in range(2)]
    ids = np.zeros((6, 8), dtype=np.float32)
    for i, length in enumerate([2, 3, 8, 5, 8, 4]):
        ids[i, :length] = 1 + (np.arange(length) * (i + 2)) % 29
    rows = np.array([5, 0, 2, 3])
    spec = SignalSpec(batch_size=3)
    signals = query_signals(lms, ids, np.zeros(6, dtype=np.int64), rows, "tokens", spec,
                            progress=False)  # fmt: skip
    assert signals.logits is None and signals.seq_token_logprob.shape == (2, 4, 7)
    np.testing.assert_array_equal(signals.seq_lengths, [3, 1, 7, 4])
    for m, lm in enumerate(lms):
        expected = token_log_probs(lm, ids[rows])
        np.testing.assert_allclose(signals.seq_token_logprob[m], np.nan_to_num(expected, nan=0.0),
                                   rtol=1e-5, atol=1e-6)  # fmt: skip
    assert "grad_norm" in signals.missing and "causal LM" in signals.missing["grad_norm"]
    one = signals.take([1])
    assert one.seq_std_logprob.shape == (1, 4, 7)
    np.testing.assert_array_equal(one.seq_mean_logprob[0], signals.seq_mean_logprob[1])
    membership = np.array([[True, False, True, False], [False, True, False, True]])
    bank = assemble_bank(signals, np.array([3, 1, 2, 0]), membership, np.ones(4, bool),
                         np.zeros(4, bool))  # fmt: skip
    assert bank.has_sequences and bank.logits_derived and (bank.labels == 0).all()
    with pytest.raises(ConfigError, match="grad_norm"):
        require_channels(signals, SignalSpec(grad_norm=True))
    with pytest.raises(ConfigError, match="plain"):
        query_signals(lms, ids, np.zeros(6), rows, "tokens", SignalSpec(queries=("mirror",)))


def test_a_causal_lm_recipe_needs_texts_and_lm_references():
    from miaudit.config.recipes import resolve_recipes
    from miaudit.pipeline.querying import check_lm_recipes

    def check(data, kind):
        cfg = config_from_dict(data)
        check_lm_recipes(cfg, resolve_recipes(cfg), kind)

    lm = {"name": "x", "dataset": {"name": "digits"}, "recipe": {"architecture": "gpt-small"}}
    with pytest.raises(ConfigError, match="trains on texts"):
        check(lm, "tabular")
    mixed = {**lm, "reference_recipe": {"architecture": "text-cnn"}}
    with pytest.raises(ConfigError, match="both be causal LMs"):
        check(mixed, "text")
    check(lm, "text")


def test_a_bpe_tokenizer_is_trained_on_the_public_pool_only(tmp_path, docstring_texts,
                                                             monkeypatch):
    from miaudit.models import run_tokenizer as T

    table = pd.DataFrame({"text": docstring_texts[0], "label": 0})
    path = tmp_path / "texts.csv"
    table.to_csv(path, index=False)
    n = len(table)
    seen: list[list[str]] = []
    real_train_bpe = T.train_bpe

    def recording_train_bpe(texts, vocab_size=4096, min_frequency=2):
        seen.append(list(texts))
        return real_train_bpe(texts, vocab_size, min_frequency)

    monkeypatch.setattr(T, "train_bpe", recording_train_bpe)
    cfg = config_from_dict({
        "name": "bpe", "seed": 0, "output": str(tmp_path / "run"),
        "dataset": {"name": str(path), "options": {"text_column": "text", "label_column": "label"},
                    "max_length": MAX_LENGTH, "tokenizer": "bpe", "bpe_vocab_size": 400},
        "split": {"audit": n * 2 // 5, "public": n * 2 // 5, "population": n // 10},
        "models": 2,
        "recipe": {"architecture": "gpt-small",
                   "arch_params": {"n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 400},
                   "optimizer": "adam", "lr": 0.01, "epochs": 2, "batch_size": 16},
        "attacks": ["lm-loss", "blind"],
        "metrics": {"bootstrap": 0},
    })
    result, out = run(cfg, progress=False, echo=False)
    texts = load_dataset(cfg.dataset.name, cfg.data_dir, **cfg.dataset.options).features
    split = make_split(len(texts), cfg.split.audit, cfg.split.public, cfg.split.population,
                       cfg.seed)
    assert seen == [list(texts[split.public])]  # never an audit or population text
    assert "byte-level BPE" in result.meta["dataset_preprocessing"]
    bank = SignalBank.load(out / "bank.npz")
    assert bank.seq_token_logprob.shape[:2] == (2, len(split.rows))
    # the same texts give the same tokenizer: a rerun reuses both cached models
    again, _ = run(cfg, progress=False, echo=False)
    assert again.meta["models_trained"] == 0


def test_the_tokenizer_and_its_vocabulary_are_checked():
    base = {"name": "x", "dataset": {"name": "digits"}}
    with pytest.raises(ConfigError, match="auto, wordpiece, bpe, base"):
        config_from_dict({**base, "dataset": {"name": "digits", "tokenizer": "sentencepiece"}})
    with pytest.raises(ConfigError, match="bpe_vocab_size"):
        config_from_dict({**base, "dataset": {"name": "digits", "bpe_vocab_size": 10}})
