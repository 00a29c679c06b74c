"""The `hf` architecture: Hugging Face save_pretrained folders read locally, wrapped for
miaudit's feature ids (pad 0), rebuilt from their weights or their config, cached by content."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.models.hf import (
    CAUSAL_LM,
    CLASSIFIER,
    HFCausalLM,
    HFClassifier,
    folder_digest,
    inspect_folder,
    load_folder_model,
    swap_pad,
)
from miaudit.models.text import token_log_probs
from miaudit.signals.query import per_sample_grad_norms

transformers = pytest.importorskip("transformers")
VOCAB = 300  # a byte-level BPE has at least 256 + 3 tokens


def _tokenizer(texts, specials):
    """A byte-level BPE whose special tokens come in the order given (ids 0, 1, 2)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=list(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    ids = {t: tok.token_to_id(t) for t in specials}
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", ids["<s>"]), ("</s>", ids["</s>"])])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>",
                                                bos_token="<s>", eos_token="</s>")


def _save(model, tokenizer, folder):
    model.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def texts(docstring_texts):
    return docstring_texts[0][:40]


@pytest.fixture(scope="module")
def folders(tmp_path_factory, texts):
    """A tiny BERT classifier and GPT-2 LM whose tokenizer pads with id 1 (as RoBERTa's)."""
    root = tmp_path_factory.mktemp("hf")
    tok = _tokenizer(texts, ["<s>", "<pad>", "</s>"])
    assert tok.pad_token_id == 1
    torch.manual_seed(0)
    bert = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=24, num_labels=3, pad_token_id=1))
    gpt = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=16, n_layer=1, n_head=2, n_positions=24, bos_token_id=0,
        eos_token_id=2, pad_token_id=1))
    return {"clf": _save(bert, tok, root / "clf"), "lm": _save(gpt, tok, root / "lm"),
            "root": root, "tokenizer": tok}


def _ids(tokenizer, texts, length=16):
    enc = tokenizer(list(texts), truncation=True, max_length=length, padding="max_length",
                    return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]


def test_swap_pad_is_its_own_inverse():
    ids = np.array([[5, 0, 7, 3, 3], [3, 0, 1, 2, 9]])
    swapped = swap_pad(ids, 3)
    assert swapped.tolist() == [[5, 3, 7, 0, 0], [0, 3, 1, 2, 9]]
    assert np.array_equal(swap_pad(swapped, 3), ids)
    assert torch.equal(swap_pad(torch.from_numpy(ids), 0), torch.from_numpy(ids))


def test_classifier_wrapper_matches_transformers_with_another_pad(folders, texts):
    folder = inspect_folder(folders["clf"])
    assert (folder.task, folder.num_labels, folder.max_positions) == (CLASSIFIER, 3, 24)
    module = load_folder_model(folder, token_pad=1)
    assert isinstance(module, HFClassifier) and module.additive_mask  # an encoder
    ids, mask = _ids(folders["tokenizer"], texts[:6])
    direct = module.model(input_ids=ids, attention_mask=mask).logits
    with torch.no_grad():
        ours = module(swap_pad(ids, 1).float())  # features: pad 0, float ids
    assert ours.shape == (6, 3) and torch.allclose(ours, direct, atol=1e-5)
    # per-sample gradient norms (torch.func) trace through it: the white-box channel
    features = swap_pad(ids, 1).float().numpy()
    norms = per_sample_grad_norms(module, features, np.zeros(6, dtype=np.int64), np.arange(6))
    assert norms.shape == (6,) and np.isfinite(norms).all() and (norms > 0).all()


def test_causal_lm_wrapper_scores_feature_ids(folders, texts):
    module = load_folder_model(inspect_folder(folders["lm"]), token_pad=1)
    assert isinstance(module, HFCausalLM) and module.causal_lm and module.pad_id == 0
    ids, mask = _ids(folders["tokenizer"], texts[:5])
    with torch.no_grad():
        logits = module.model(input_ids=ids, attention_mask=mask).logits
    logp = torch.log_softmax(logits[:, :-1], -1).gather(2, ids[:, 1:, None])[..., 0]
    lengths = mask.sum(1)
    expected = torch.where(torch.arange(1, 16)[None] < lengths[:, None], logp, torch.nan)
    ours = token_log_probs(module, swap_pad(ids, 1).float(), lengths)
    np.testing.assert_allclose(ours, expected.numpy(), atol=1e-5)
    assert module.vocab_size == VOCAB


def test_build_from_weights_or_config_and_cache_round_trip(folders, texts):
    digest = folder_digest(folders["lm"])
    params = {"folder": str(folders["lm"]), "folder_sha256": digest, "task": CAUSAL_LM,
              "pad_id": 1}
    built = build_model("hf", (16,), 2, **params)
    x = swap_pad(_ids(folders["tokenizer"], texts[:3])[0], 1).float()
    reference = load_folder_model(inspect_folder(folders["lm"]), 1)
    with torch.no_grad():
        assert torch.allclose(built(x), reference(x), atol=1e-6)  # the folder's weights
    # the tied LM head saves (safetensors refuses shared memory) and loads back
    state = load_safetensors(save_safetensors(
        {k: v.contiguous() for k, v in built.state_dict().items()}))
    torch.manual_seed(3)
    scratch = build_model("hf", (16,), 2, folder=str(folders["lm"]), init="scratch",
                          task=CAUSAL_LM, pad_id=1,
                          folder_sha256=folder_digest(folders["lm"], weights=False))
    with torch.no_grad():
        assert not torch.allclose(scratch(x), built(x), atol=1e-3)  # random weights
        scratch.load_state_dict(state, strict=True)
        assert torch.allclose(scratch(x), built(x), atol=1e-6)
    fresh = []
    for _ in range(2):  # the same seed, the same initialisation (the trainer seeds it)
        torch.manual_seed(3)
        fresh.append(build_model("hf", (16,), 2, folder=str(folders["lm"]), init="scratch",
                                 task=CAUSAL_LM, pad_id=1))
    with torch.no_grad():
        assert torch.equal(fresh[0](x), fresh[1](x))
    # a classifier head of another width over a base checkpoint (the reference case)
    head = build_model("hf", (16,), 5, folder=str(folders["clf"]), task=CLASSIFIER, pad_id=1)
    assert head(x).shape == (3, 5)


def test_changed_folder_and_too_many_positions_are_refused(folders, tmp_path):
    copy = shutil.copytree(folders["clf"], tmp_path / "copy")
    digest = folder_digest(copy)
    config = json.loads((copy / "config.json").read_text())
    config["hidden_dropout_prob"] = 0.2
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="changed since this recipe was made"):
        build_model("hf", (16,), 3, folder=str(copy), folder_sha256=digest, pad_id=1)
    with pytest.raises(ConfigError, match="at most 24 tokens"):
        build_model("hf", (32,), 3, folder=str(copy), pad_id=1)


def test_folder_errors_name_the_fix(folders, tmp_path):
    with pytest.raises(ConfigError, match="is not a folder"):
        inspect_folder(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="no config.json"):
        inspect_folder(tmp_path)
    no_tok = shutil.copytree(folders["clf"], tmp_path / "no-tok")
    (no_tok / "tokenizer.json").unlink()
    with pytest.raises(ConfigError, match="no tokenizer.json.*tokenizer.save_pretrained"):
        inspect_folder(no_tok)
    assert inspect_folder(no_tok, tokenizer=False).tokenizer is None
    no_weights = shutil.copytree(folders["clf"], tmp_path / "no-weights")
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(ConfigError, match="has no weights"):
        inspect_folder(no_weights)
    encoder = _save(transformers.BertModel(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32)), None, tmp_path / "encoder")
    with pytest.raises(ConfigError, match="holds a BertModel.*ForSequenceClassification"):
        inspect_folder(encoder, tokenizer=False)
    # ... but it is a valid base for a classifier fine-tuned from it
    assert inspect_folder(encoder, tokenizer=False, task=CLASSIFIER).architecture == "BertModel"
    custom = shutil.copytree(folders["clf"], tmp_path / "custom")
    config = json.loads((custom / "config.json").read_text())
    (custom / "config.json").write_text(json.dumps({**config, "auto_map": {"x": "y.Z"}}))
    with pytest.raises(ConfigError, match="never runs code"):
        inspect_folder(custom)
    with pytest.raises(ConfigError, match="arch_params.folder"):
        build_model("hf", (16,), 3)
