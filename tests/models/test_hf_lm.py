"""hf-causal-lm: a pretrained causal LM fine-tuned through the ordinary trainer (LoRA or in
full), its adapter alone cached, its base model queried for lm-base-reference and its
tokenizer used for the texts. A tiny random Llama and a BPE tokenizer trained here stand in
for SmolLM2 (no download)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors import safe_open

from miaudit.config import config_from_dict
from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.models.hf import HFCausalLM, encode_texts
from miaudit.models.hf_lm import base_model_identity, base_tokenizer
from miaudit.pipeline import run
from miaudit.pipeline.canaries import exposure_line
from miaudit.signals import SignalBank
from miaudit.signals.assemble import SignalSpec, lm_signals
from miaudit.train import Recipe

transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

MAX_LENGTH = 24


def _csv(tmp_path, texts):
    path = tmp_path / "texts.csv"
    pd.DataFrame({"text": texts, "label": 0}).to_csv(path, index=False)
    return path


def _config(tmp_path, path, n, base, lora=True, attacks=None, **extra):
    return config_from_dict({
        "name": "ft", "seed": 0, "output": str(tmp_path / "run"),
        "cache_dir": str(tmp_path / "cache"),
        "dataset": {"name": str(path), "options": {"text_column": "text",
                                                   "label_column": "label"},
                    "max_length": MAX_LENGTH},
        "split": {"audit": n // 2, "public": n // 4, "population": n // 8},
        "models": 1,
        "recipe": {"architecture": "hf-causal-lm",
                   "arch_params": {"base_model": str(base), "lora": lora},
                   "optimizer": "adam", "lr": 0.01, "epochs": 2, "batch_size": 16},
        "attacks": attacks or ["lm-loss", "lm-base-reference", "recall", "dc-pdd", "blind"],
        "metrics": {"bootstrap": 10},
        **extra,
    })  # fmt: skip


def test_a_lora_fine_tuning_run_caches_the_adapter_only(tmp_path, docstring_texts,
                                                        base_folder):
    texts = docstring_texts[0][:120]
    cfg = _config(tmp_path, _csv(tmp_path, texts), len(texts), base_folder)
    result, out = run(cfg, progress=False, echo=False)
    assert {o.name for o in result.outcomes} == set(cfg.attacks)
    assert "own tokenizer" in result.meta["dataset_preprocessing"]
    files = list((tmp_path / "cache").glob("*.safetensors"))
    assert len(files) == 1
    with safe_open(str(files[0]), "pt") as handle:
        keys = list(handle.keys())
    assert keys and all("lora_" in k for k in keys)  # never the base's weights
    bank = SignalBank.load(out / "bank.npz")
    assert bank.seq_base_token_logprob is not None and bank.seq_prefix_token_logprob is not None

    # the base channel is the base model's own log-probabilities of each text's tokens
    tok, pad = base_tokenizer(str(base_folder))
    base = transformers.AutoModelForCausalLM.from_pretrained(base_folder).eval()
    first = bank.seq_lengths[0] + 1
    # the bank's first text, tokenized here and scored with a plain forward
    loaded = pd.read_csv(_csv(tmp_path, texts))["text"].tolist()
    from miaudit.protocol import make_split

    split = make_split(len(loaded), cfg.split.audit, cfg.split.public, cfg.split.population,
                       cfg.seed)
    row_text = loaded[split.rows[0]]
    ids = tok.encode(row_text).ids[:MAX_LENGTH]
    assert len(ids) == first
    with torch.no_grad():
        logp = torch.log_softmax(base(input_ids=torch.tensor([ids])).logits[0, :-1], -1)
    naive = logp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0].numpy()
    np.testing.assert_allclose(bank.seq_base_token_logprob[0, : first - 1], naive, atol=1e-4)
    assert pad == 0

    again, _ = run(cfg, progress=False, echo=False)  # the adapter loads onto a fresh base
    assert again.meta["models_trained"] == 0
    for a, b in zip(result.outcomes, again.outcomes, strict=True):
        assert a.metrics.auc == pytest.approx(b.metrics.auc, abs=1e-9)


def test_full_fine_tuning_keeps_every_weight(docstring_texts, base_folder):
    full = build_model("hf-causal-lm", (MAX_LENGTH,), 1, base_model=str(base_folder),
                       lora=False)
    lora = build_model("hf-causal-lm", (MAX_LENGTH,), 1, base_model=str(base_folder),
                       lora={"r": 2, "targets": ["q_proj"]})
    assert len(full.state_dict()) > 10 and all(p.requires_grad for p in full.parameters())
    state = lora.state_dict()
    assert len(state) == 2 * 2  # lora_A and lora_B of q_proj, in 2 layers
    with pytest.raises(RuntimeError, match="adapter"):
        lora.load_state_dict({k: v for k, v in list(state.items())[:1]})
    lora.load_state_dict({k: torch.ones_like(v) for k, v in state.items()})
    assert all(bool((v == 1).all()) for v in lora.state_dict().values())


def test_bucketed_querying_matches_a_padded_forward(docstring_texts, base_folder):
    """lm_signals sorts texts by length and cuts each batch's padding: the log-probabilities
    are those of one padded forward per text."""
    tok, pad = base_tokenizer(str(base_folder))
    texts = docstring_texts[0][:40]
    tokens, _ = encode_texts(texts, tok, MAX_LENGTH, pad)
    features = tokens.features()
    module = build_model("hf-causal-lm", (MAX_LENGTH,), 1, base_model=str(base_folder))
    signals = lm_signals([module], features, np.arange(len(texts)),
                         SignalSpec(batch_size=7), progress=False)
    assert isinstance(module, HFCausalLM)
    with torch.no_grad():
        logits = module(torch.as_tensor(features))  # feature space, full width, padded
    logp = torch.log_softmax(logits[:, :-1], -1)
    ids = torch.as_tensor(features).long()
    naive = logp.gather(2, ids[:, 1:, None])[..., 0].numpy()
    lengths = (ids != 0).sum(1).numpy()
    for i, n in enumerate(lengths):
        np.testing.assert_allclose(signals.seq_token_logprob[0, i, : n - 1], naive[i, : n - 1],
                                   atol=1e-4)
        assert not signals.seq_token_logprob[0, i, n - 1 :].any()


def test_bad_settings_are_named(tmp_path, docstring_texts, base_folder):
    with pytest.raises(ConfigError, match="no key"):
        build_model("hf-causal-lm", (8,), 1, base_model=str(base_folder), lora={"rank": 4})
    with pytest.raises(ConfigError, match="needs arch_params.base_model"):
        build_model("hf-causal-lm", (8,), 1)
    with pytest.raises(ConfigError, match="positions"):
        build_model("hf-causal-lm", (65,), 1, base_model=str(base_folder))
    texts = docstring_texts[0][:40]
    cfg = _config(tmp_path, _csv(tmp_path, texts), len(texts), base_folder)
    cfg.dataset.tokenizer = "bpe"  # ids the base model was never trained on
    with pytest.raises(ConfigError, match="own tokenizer"):
        run(cfg, progress=False, echo=False)


def test_the_base_identity_is_in_the_recipe_key(tmp_path, base_folder):
    recipe = Recipe(architecture="hf-causal-lm", arch_params={"base_model": str(base_folder)})
    before = recipe.key()
    assert base_model_identity(str(base_folder)).startswith("folder:")
    weights = base_folder / "model.safetensors"
    data = weights.read_bytes()
    try:
        weights.write_bytes(data[:-4] + bytes(4))  # other weights under the same name
        assert recipe.key() != before
    finally:
        weights.write_bytes(data)
    os.utime(weights, ns=(1, 1))  # a touch alone is the same content: the same key
    assert recipe.key() == before


def test_secret_canaries_are_inserted_and_their_exposure_reported(tmp_path, docstring_texts,
                                                                  base_folder):
    texts = docstring_texts[0][:100]
    cfg = _config(tmp_path, _csv(tmp_path, texts), len(texts), base_folder,
                  attacks=["lm-loss", "lm-base-reference"],
                  canaries={"count": 12, "kind": "secret", "exposure_candidates": 50,
                            "guesses": {"k_plus": 3, "k_minus": 3}})
    result, out = run(cfg, progress=False, echo=False)
    table = pd.read_csv(out / "canaries.csv")
    assert len(table) == 12
    assert table["text"].str.startswith("my account number is ").all()
    assert table["text"].nunique() == 12
    assert {"exposure", "exposure_extrapolated", "extracted"} <= set(table.columns)
    assert (table["exposure"] <= table["max_sampled_exposure"] + 1e-9).all()
    summary = result.meta["canary_exposure"]
    assert summary["included"]["canaries"] + summary["excluded"]["canaries"] == 12
    assert "in training: median" in exposure_line(summary)  # the run's terminal line
    assert summary["included"]["canaries"] == int(table["included"].sum())
    # one-run bounds read the attacks' scores on the canaries
    assert result.meta["privacy_audit"].settings.canaries.kind == "secret"
    with pytest.raises(ConfigError, match="secret canaries are texts a causal LM"):
        bad = _config(tmp_path, _csv(tmp_path, texts), len(texts), base_folder,
                      canaries={"count": 12, "kind": "secret",
                                "guesses": {"k_plus": 3, "k_minus": 3}})
        bad.recipe = dict(bad.recipe, architecture="text-cnn", arch_params={})
        bad.attacks = ["loss"]  # a classifier's attack: the canaries are what is wrong here
        run(bad, progress=False, echo=False)
