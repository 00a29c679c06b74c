"""Base models by name, folder or GGUF (miaudit.models.pretrained): a tiny random Llama written
as a GGUF by the gguf package's writer stands in for the 93 MB SmolLM2 wheel."""

from __future__ import annotations

import importlib.metadata
import json

import numpy as np
import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.models import pretrained
from miaudit.models.pretrained import (
    base_models_root,
    file_sha256,
    list_base_models,
    load_base_model,
    resolve_base_model,
)

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

VOCAB, HIDDEN, HEADS, KV_HEADS, LAYERS, FFN = 128, 32, 4, 2, 2, 64


def _tiny_llama(tie=False):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=64,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=tie,
        bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms away from 1 so a misplaced one shows in the logits
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def _permute(w, n_head, n_head_kv):
    """llama.cpp's q/k row order (convert_hf_to_gguf.py's ``permute``), which transformers'
    GGUF loader undoes."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))  # fmt: skip


def _tokens():
    """A byte-level BPE vocabulary of VOCAB tokens: specials, printable ASCII, a few merges."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = bytes_to_unicode()
    tokens = ["<unk>", "<s>", "</s>"] + [chars[b] for b in range(32, 127)]
    merges = ["t h", "th e", "Ġ t", "a n", "i n", "e r"]
    tokens += [m.replace(" ", "") for m in merges]
    tokens += [f"<extra_{i}>" for i in range(VOCAB - len(tokens))]
    return tokens, merges


def _write_gguf(model, path):
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(64)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(VOCAB)
    tokens, merges = _tokens()
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_types([3, 3, 3] + [1] * (VOCAB - 3))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    state = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    if not model.config.tie_word_embeddings:  # a GGUF without output.weight ties them
        writer.add_tensor("output.weight", state["lm_head.weight"])
    names = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for i in range(LAYERS):
        for hf_name, gguf_name in names.items():
            w = state[f"model.layers.{i}.{hf_name}.weight"]
            if gguf_name == "attn_q":
                w = _permute(w, HEADS, HEADS)
            elif gguf_name == "attn_k":
                w = _permute(w, HEADS, KV_HEADS)
            writer.add_tensor(f"blk.{i}.{gguf_name}.weight", np.ascontiguousarray(w))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model = _tiny_llama()
    path = _write_gguf(model, tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    return model, path


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits


IDS = [1, 5, 9, 40, 77, 100, 3]


def test_gguf_converted_once_then_read_from_the_cache(tiny, tmp_path, monkeypatch):
    model, path = tiny
    cache = tmp_path / "cache"
    loaded, tokenizer = load_base_model(str(path), cache_dir=cache)
    folder = base_models_root(cache) / file_sha256(path)
    assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()
    assert (folder / "tokenizer.json").is_file() and (folder / "CONVERTED.json").is_file()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no temporary left
    torch.testing.assert_close(_logits(loaded, IDS), _logits(model, IDS), rtol=1e-5, atol=1e-5)
    assert tokenizer.convert_ids_to_tokens(5) == _tokens()[0][5]

    def refuse(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(pretrained, "_convert_gguf", refuse)
    again, tokenizer2 = load_base_model(str(path), cache_dir=cache)
    torch.testing.assert_close(_logits(again, IDS), _logits(model, IDS), rtol=1e-5, atol=1e-5)
    assert tokenizer2("the tea")["input_ids"] == tokenizer("the tea")["input_ids"]


def test_tied_embeddings_are_stored_once(tmp_path):
    from safetensors import safe_open

    model = _tiny_llama(tie=True)
    path = _write_gguf(model, tmp_path / "tied.gguf")
    loaded, _ = load_base_model(path, cache_dir=tmp_path / "cache")
    assert loaded.config.tie_word_embeddings
    torch.testing.assert_close(_logits(loaded, IDS), _logits(model, IDS), rtol=1e-5, atol=1e-5)
    folder = base_models_root(tmp_path / "cache") / file_sha256(path)
    with safe_open(folder / "model.safetensors", "pt") as handle:
        assert "lm_head.weight" not in set(handle.keys())
    loaded, _ = load_base_model(path, cache_dir=tmp_path / "cache")  # from the cache
    torch.testing.assert_close(_logits(loaded, IDS), _logits(model, IDS), rtol=1e-5, atol=1e-5)


def test_damaged_cache_folder_is_converted_again(tiny, tmp_path):
    model, path = tiny
    cache = tmp_path / "cache"
    load_base_model(path, cache_dir=cache)
    folder = base_models_root(cache) / file_sha256(path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated: the sizes disagree
    loaded, _ = load_base_model(path, cache_dir=cache)
    torch.testing.assert_close(_logits(loaded, IDS), _logits(model, IDS), rtol=1e-5, atol=1e-5)
    (folder / "CONVERTED.json").unlink()  # an interrupted conversion: no marker
    load_base_model(path, cache_dir=cache)
    assert json.loads((folder / "CONVERTED.json").read_text())["sha256"] == file_sha256(path)
    size = weights.stat().st_size
    weights.write_bytes(b"\0" * size)  # same size, unreadable: transformers fails, converted again
    loaded, _ = load_base_model(path, cache_dir=cache)
    torch.testing.assert_close(_logits(loaded, IDS), _logits(model, IDS), rtol=1e-5, atol=1e-5)


def test_a_conversion_by_other_package_versions_is_made_again(tiny, tmp_path, monkeypatch):
    _, path = tiny
    cache = tmp_path / "cache"
    load_base_model(path, cache_dir=cache)
    marker = base_models_root(cache) / file_sha256(path) / "CONVERTED.json"
    record = json.loads(marker.read_text())
    record["versions"]["transformers"] = "0.0.1"  # converted by another transformers
    marker.write_text(json.dumps(record))
    load_base_model(path, cache_dir=cache)
    assert json.loads(marker.read_text())["versions"]["transformers"] != "0.0.1"


def test_gguf_without_the_gguf_package(tiny, tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_gguf(name, *args, **kwargs):
        if name == "gguf":
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_gguf)
    with pytest.raises(ConfigError, match=r"the gguf package.*pip install 'miaudit\[llm\]'"):
        load_base_model(tiny[1], cache_dir=tmp_path)


def test_local_folder(tiny, tmp_path):
    model, _ = tiny
    model.save_pretrained(tmp_path / "hf")
    spec = resolve_base_model(tmp_path / "hf")
    assert spec.kind == "folder"
    with pytest.raises(ConfigError, match="tokenizer|cannot load"):
        load_base_model(spec)  # no tokenizer saved


def test_named_model_without_its_package(monkeypatch):
    assert "smollm2-135m" in list_base_models()

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(ConfigError, match=r"pip install 'miaudit\[llm\]'"):
        resolve_base_model("smollm2-135m")


def test_named_model_whose_file_is_missing(monkeypatch, tmp_path):
    class Dist:
        version = "0.1.2"

        def locate_file(self, name):
            return tmp_path / name

    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Dist())
    with pytest.raises(ConfigError, match=r"has no SmolLM2-135M-Instruct.Q4_1.gguf.*reinstall"):
        resolve_base_model("smollm2-135m")


def test_unreadable_gguf(tmp_path):
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ConfigError, match="cannot read the GGUF file"):
        load_base_model(path, cache_dir=tmp_path / "cache")
    assert not any((tmp_path / "cache" / "base-models").glob("*"))  # nothing half-written


def test_bad_names_and_paths(tmp_path):
    with pytest.raises(ConfigError, match="smollm2-135m"):
        resolve_base_model("smollm2-136m")
    with pytest.raises(ConfigError, match="no such GGUF"):
        resolve_base_model(tmp_path / "absent.gguf")
    with pytest.raises(ConfigError, match="without config.json"):
        resolve_base_model(tmp_path)
