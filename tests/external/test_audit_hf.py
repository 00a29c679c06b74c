"""`miaudit audit --hf-model DIR`: Hugging Face folders trained outside miaudit, audited on text
files end to end (command line and Python API), a classifier and a causal LM.

The user's files: a tiny BERT classifier and a tiny GPT-2 LM, each trained (plain
transformers, full batch) on the same 32 member texts until it overfits them, saved with
save_pretrained beside a byte-level BPE tokenizer; texts.csv (128 docstrings, labelled by
module); members / non-members (32 each) and public rows (64) as row files.
"""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from lm_users import write_split

import miaudit
from miaudit.cli.main import main
from miaudit.errors import ConfigError
from miaudit.models.text import train_bpe

transformers = pytest.importorskip("transformers")
RECIPE = "{optimizer: adam, lr: 0.003, epochs: 2, batch_size: 16, schedule: constant}"
# the calibrated LM attacks that need arrays an audit computes only when it can: a base
# model's log-probs (--base-model), prefix-conditioned log-probs (public texts and room for
# ReCaLL's prefix beside the texts); dc-pdd's token ids are kept whenever it is to run
CALIBRATED = {"lm-base-reference", "ez-mia", "wbc", "recall"}
LM_ATTACKS = {"lm-loss", "zlib", "min-k", "min-k-plus-plus", "blind", "lm-calibrated",
              "lm-lira-offline", "lm-lira-offline-fixed-variance", "lm-rmia", "lm-rapid",
              "dc-pdd", *CALIBRATED}


def _bert(vocab: int = 300, seed: int = 0):
    torch.manual_seed(seed)
    return transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32, num_labels=4, pad_token_id=0,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def _gpt(seed: int = 0):
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=300, n_embd=32, n_layer=2, n_head=2, n_positions=32, bos_token_id=1,
        eos_token_id=2, pad_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def _fit(model, batch, targets, steps: int = 60):
    """Full-batch Adam until the model overfits its members (what the audit measures)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        model(**batch, labels=targets).loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def hf_user(tmp_path_factory, docstring_texts):
    root = tmp_path_factory.mktemp("hf-user")
    texts, labels = docstring_texts
    pd.DataFrame({"text": texts, "label": labels}).to_csv(root / "texts.csv", index=False)
    rows = write_split(root, len(texts))
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=train_bpe(texts, vocab_size=300), pad_token="<pad>", bos_token="<s>",
        eos_token="</s>")
    batch = dict(tokenizer([texts[i] for i in rows["members"]], truncation=True, max_length=32,
                           padding="max_length", return_tensors="pt"))
    folders = {}
    for name, model, targets, steps in (
        ("clf", _bert(), torch.from_numpy(labels[rows["members"]]), 150),
        ("lm", _gpt(), batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100), 60),
    ):
        with torch.random.fork_rng():
            _fit(model, batch, targets, steps).save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        folders[name] = root / name
    _gpt(seed=1).save_pretrained(root / "lm-base")  # a "pretrained" checkpoint, untrained here
    # the checkpoint `lm` was fine-tuned from (the same seed), with its tokenizer: a base model
    _gpt(seed=0).save_pretrained(root / "lm-pretrained")
    tokenizer.save_pretrained(root / "lm-pretrained")
    folders["lm_pretrained"] = root / "lm-pretrained"
    return {"root": root, "csv": root / "texts.csv", **folders, "lm_base": root / "lm-base",
            "tokenizer": tokenizer, "labels": labels, "texts": texts,
            **{name: root / f"{name}.txt" for name in rows}, "rows": rows}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("hf-cache")


def _flags(user, model, out, cache, *extra):
    return ["audit", "--hf-model", str(user[model]), "--data", str(user["csv"]),
            "--text-column", "text", "--label-column", "label", "--members", str(user["members"]),
            "--nonmembers", str(user["nonmembers"]), "--public-rows", str(user["public"]),
            "--out", str(out), "--cache-dir", str(cache), "--quiet", "--exposed", "5", *extra]


def test_cli_audits_a_classifier_folder(hf_user, cache, tmp_path, capsys):
    out = tmp_path / "clf"
    assert main(_flags(hf_user, "clf", out, cache, "--references", "2", "--recipe", RECIPE)) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["target_kind"] == "hf" and summary["hf_task"] == "sequence-classification"
    assert summary["max_length"] == 32  # the model's 32 positions
    assert summary["texts_truncated"] > 0 and "were longer than max_length 32" in printed
    # the classifier bank of a torch module: logits [M, N, Q, C], gradient norms, text sizes
    with np.load(out / "bank.npz") as bank:
        assert bank["logits"].shape == (3, 128, 1, 4)
        assert bank["channel_grad_norm"].shape == (3, 128)
        assert bank["text_zlib_bytes"].shape == (128,) and "seq_token_logprob" not in bank
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"loss", "gradient-norm", "calibrated-loss", "lira-offline", "rmia", "rapid",
            "blind"} <= set(metrics)
    assert not any(name.startswith("lm-") for name in {*metrics, *summary["skipped"]})
    assert summary["target_member_accuracy"] > 0.9  # it overfits its 32 members
    assert summary["models"][0]["train_acc"] > summary["models"][0]["test_acc"]
    assert max(m["auc"] for m in metrics.values()) > 0.6
    recipe = summary["reference_recipe"]
    assert recipe["architecture"] == "hf" and recipe["arch_params"]["init"] == "scratch"
    assert summary["references_trained"] == 2 and summary["reference_train_rows"] == 32
    verdict = json.loads((out / "verdict.json").read_text())
    assert any("trained from scratch" in c for c in verdict["caveats"])
    with open(out / "exposed.csv") as handle:
        ranked = list(csv.DictReader(handle))
    assert {int(r["row"]) for r in ranked} == set(hf_user["rows"]["members"])
    assert all(int(r["label"]) == hf_user["labels"][int(r["row"])] for r in ranked)
    # rerun from the saved config (paths absolute): the references come from the cache
    assert main(["audit", "--config", str(out / "audit.yaml"), "--out", str(tmp_path / "again"),
                 "--quiet", "--attacks", "loss,calibrated-loss"]) == 0
    again = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert again["references_trained"] == 0 and again["references_from_cache"] == 2


def test_api_audits_a_classifier_with_text_queries(hf_user, cache, tmp_path):
    result = miaudit.audit(
        str(hf_user["clf"]), str(hf_user["csv"]), members=hf_user["rows"]["members"],
        nonmembers=hf_user["nonmembers"], public_rows=hf_user["public"], references=2,
        recipe={"optimizer": "adam", "lr": 0.003, "epochs": 2, "batch_size": 16,
                "schedule": "constant"},
        attacks=["loss", "rapid"], out=tmp_path / "run", text_column="text",
        label_column="label", cache_dir=str(cache), progress=False,
        signals={"queries": ["plain", "token-dropout-1", "adjacent-swap-1"],
                 "grad_norm": False},
    )
    assert {o.name for o in result.outcomes} == {"loss", "rapid"}
    assert result.meta["queries_per_sample"] == 3
    with np.load(result.out / "bank.npz") as bank:
        logits = bank["logits"]
    assert logits.shape == (3, 128, 3, 4)
    assert not np.allclose(logits[:, :, 0], logits[:, :, 1])  # the queries perturb the texts
    assert result.meta["references_from_cache"] == 2  # the recipe of the command-line audit


def test_api_audits_a_causal_lm_without_references(hf_user, tmp_path):
    result = miaudit.audit(
        str(hf_user["lm"]), str(hf_user["csv"]), members=hf_user["members"],
        nonmembers=hf_user["nonmembers"], public_rows=hf_user["public"], references=0,
        out=tmp_path / "lm", text_column="text", label_column="label", progress=False,
        cache_dir=str(tmp_path / "cache"),
    )
    ran = {o.name for o in result.outcomes}
    assert ran == {"lm-loss", "zlib", "min-k", "min-k-plus-plus", "blind", "dc-pdd"}
    assert set(result.meta["skipped"]) == LM_ATTACKS - ran
    assert all("needs reference models: references.models is 0" in why
               for name, why in result.meta["skipped"].items() if name not in CALIBRATED)
    assert "queried no base model" in result.meta["skipped"]["lm-base-reference"]
    assert "prefix (ReCaLL)" in result.meta["skipped"]["recall"]
    # its 32 tokens per text take all 32 positions: no room for ReCaLL's prefix
    assert "leaving none for the prefix" in result.meta["skipped"]["recall"]
    assert "base_model" not in result.meta
    assert result.outcome("lm-loss").metrics.auc > 0.8  # an overfit LM leaks its members
    with np.load(result.out / "bank.npz") as bank:
        assert bank["seq_token_logprob"].shape == (1, 128, 31)  # max_length - 1 positions
        assert bank["seq_lengths"].min() >= 1 and "logits" not in bank  # derived from them
    meta = result.meta
    assert meta["hf_task"] == "causal-lm" and meta["references"] == 0
    assert meta["target_member_loss"] < meta["target_nonmember_loss"]
    assert meta["target_member_perplexity"] == pytest.approx(np.exp(meta["target_member_loss"]),
                                                             rel=1e-3)
    assert "target_member_accuracy" not in meta and "train_acc" not in meta["models"][0]
    assert meta["models"][0]["train_loss"] < meta["models"][0]["test_loss"]
    verdict = meta["verdict"]
    assert "token probabilities" in " ".join(verdict.paragraphs)  # what an attacker sees
    assert any("No reference models" in c for c in verdict.caveats)
    with open(result.out / "exposed.csv") as handle:
        assert {r["predicted"] for r in csv.DictReader(handle)} == {""}  # no class to predict


def test_cli_audits_a_causal_lm_with_references_from_a_base(hf_user, tmp_path, capsys):
    out = tmp_path / "lm"
    flags = _flags(hf_user, "lm", out, tmp_path / "cache", "--references", "2", "--recipe",
                   RECIPE, "--reference-base", str(hf_user["lm_base"]), "--max-length", "24")
    assert main(flags) == 0
    summary = json.loads((out / "summary.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) | set(summary["skipped"]) == LM_ATTACKS
    assert {"lm-calibrated", "lm-lira-offline", "lm-rmia", "lm-rapid"} <= set(metrics)
    assert summary["max_length"] == 24 and summary["references_trained"] == 2
    params = summary["reference_recipe"]["arch_params"]
    assert params["init"] == "pretrained" and params["folder"] == str(hf_user["lm_base"])
    assert summary["reference_train_loss"] > 0
    with np.load(out / "bank.npz") as bank:
        assert bank["seq_token_logprob"].shape == (3, 128, 23)
    verdict = json.loads((out / "verdict.json").read_text())
    assert any("fine-tuned from" in c and "references.base" in c for c in verdict["caveats"])
    assert metrics["lm-loss"]["auc"] > 0.8


@pytest.fixture
def broken(hf_user, tmp_path):
    """Copies of the classifier folder, each broken in one way."""
    no_tok = shutil.copytree(hf_user["clf"], tmp_path / "no-tokenizer")
    (no_tok / "tokenizer.json").unlink()
    small = tmp_path / "small-vocab"
    _bert(vocab=200).save_pretrained(small)
    hf_user["tokenizer"].save_pretrained(small)
    pairs = pd.DataFrame({"text": hf_user["texts"], "label": hf_user["labels"] % 2})
    pairs.to_csv(tmp_path / "pairs.csv", index=False)
    return {"no_tokenizer": no_tok, "small_vocab": small, "pairs": tmp_path / "pairs.csv"}


@pytest.mark.parametrize("case, match", [
    ("no_tokenizer", "no tokenizer.json: .*tokenizer.save_pretrained"),
    ("small_vocab", "tokenizer does not match the model: tokenizer.json has 300 tokens but the "
                    "model's embedding table only 200"),
    ("pairs", "the model has 4 output labels .* but the audit data has 2 classes"),
    ("no_config", "has no config.json"),
    ("digits", "audited on texts, but the audit data digits is image data"),
])
def test_broken_inputs_name_the_fix(hf_user, broken, tmp_path, case, match):
    model, data = str(hf_user["clf"]), str(hf_user["csv"])
    if case in ("no_tokenizer", "small_vocab"):
        model = str(broken[case])
    elif case == "pairs":
        data = str(broken["pairs"])
    elif case == "no_config":
        model = str(tmp_path)
    elif case == "digits":
        data = "digits"
    with pytest.raises(ConfigError, match=match):
        miaudit.audit(model, data, members=hf_user["members"], nonmembers=hf_user["nonmembers"],
                      references=0, out=tmp_path / "run", text_column="text",
                      label_column="label", progress=False)


def test_command_line_refusals(hf_user, tmp_path, capsys):
    base = ["--data", str(hf_user["csv"]), "--text-column", "text", "--members",
            str(hf_user["members"]), "--out", str(tmp_path / "run"), "--quiet"]
    assert main(["audit", "--hf-model", str(hf_user["csv"]), *base]) == 2
    assert "is not a folder: give the folder written by model.save_pretrained" in (
        capsys.readouterr().err)
    assert main(["audit", "--hf-model", str(hf_user["clf"]), "--estimator", "m.joblib",
                 *base]) == 2
    assert "name the model exactly once" in capsys.readouterr().err
    assert main(["audit", "--estimator", "m.joblib", "--max-length", "16", *base]) == 2
    assert "model.max_length applies to a Hugging Face model folder" in capsys.readouterr().err
    # texts with a PyTorch module: only a model folder reads texts
    nets = tmp_path / "nets.py"
    nets.write_text("from torch import nn\nclass Net(nn.Linear):\n"
                    "    def __init__(self):\n        super().__init__(4, 4)\n")
    torch.save(torch.nn.Linear(4, 4).state_dict(), tmp_path / "w.pt")
    assert main(["audit", "--model", f"{nets}:Net", "--weights", str(tmp_path / "w.pt"),
                 *base]) == 2
    assert "are texts: audit a Hugging Face model folder" in capsys.readouterr().err


def test_api_audits_a_causal_lm_against_its_base_model(hf_user, tmp_path):
    """--base-model: lm-base-reference's reference is the pretrained base (no reference model
    trained); ReCaLL's prefix is drawn from the public texts (max_length 24 leaves 8 of the
    model's 32 positions for it)."""
    result = miaudit.audit(
        str(hf_user["lm"]), str(hf_user["csv"]), members=hf_user["members"],
        nonmembers=hf_user["nonmembers"], public_rows=hf_user["public"], references=0,
        base_model=hf_user["lm_pretrained"], max_length=24, out=tmp_path / "lm",
        text_column="text", label_column="label", progress=False,
        cache_dir=str(tmp_path / "cache"), attacks=["lm-loss", "lm-base-reference", "recall"],
    )
    assert {o.name for o in result.outcomes} == {"lm-loss", "lm-base-reference", "recall"}
    assert not result.meta["skipped"]
    for name in ("lm-base-reference", "recall"):
        assert np.isfinite(result.outcome(name).scores).all(), name
        assert len(result.outcome(name).scores) == 64
    assert result.outcome("lm-base-reference").metrics.auc > 0.8  # members gained the most
    assert result.meta["base_model"] == str(hf_user["lm_pretrained"])
    assert result.meta["references_trained"] == 0
    with np.load(result.out / "bank.npz") as bank:
        assert bank["seq_base_token_logprob"].shape == (128, 23)
        assert bank["seq_prefix_token_logprob"].shape == (1, 128, 23)
    summary = json.loads((result.out / "summary.json").read_text())
    assert summary["base_model"] == str(hf_user["lm_pretrained"])
    # the verdict says what the reference was: the base, queried, nothing trained
    caveats = " ".join(result.meta["verdict"].caveats)
    assert "No reference model was trained" in caveats
    assert f"base model {hf_user['lm_pretrained']} is lm-base-reference's reference" in caveats


def test_a_base_model_with_another_vocabulary_is_refused(hf_user, tmp_path):
    other = tmp_path / "other-base"
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=200, n_embd=16, n_layer=1, n_head=2, n_positions=32, bos_token_id=1,
        eos_token_id=2, pad_token_id=0)).save_pretrained(other)
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=train_bpe(hf_user["texts"], vocab_size=200), pad_token="<pad>",
        bos_token="<s>", eos_token="</s>").save_pretrained(other)
    with pytest.raises(ConfigError, match=r"does not match the fine-tuned model: its tokenizer "
                                          r"has \d+ tokens \(output layer 200\), the "
                                          r"fine-tuned model's 300"):
        miaudit.audit(str(hf_user["lm"]), str(hf_user["csv"]), members=hf_user["members"],
                      nonmembers=hf_user["nonmembers"], public_rows=hf_user["public"],
                      references=0, base_model=other, out=tmp_path / "run",
                      text_column="text", label_column="label", progress=False,
                      cache_dir=str(tmp_path / "cache"), attacks=["lm-base-reference"])


def test_a_base_model_needs_a_causal_lm(hf_user, tmp_path, capsys):
    flags = _flags(hf_user, "clf", tmp_path / "run", tmp_path / "cache", "--base-model",
                   str(hf_user["lm_pretrained"]), "--references", "0")
    assert main(flags) == 2
    assert "model.base_model (--base-model) is the pretrained model a causal LM" in (
        capsys.readouterr().err)
    assert main(["audit", "--estimator", "m.joblib", "--data", str(hf_user["csv"]),
                 "--members", str(hf_user["members"]), "--base-model", "smollm2-135m",
                 "--out", str(tmp_path / "run"), "--quiet"]) == 2
    assert "model.base_model (the pretrained model a causal LM was fine-tuned from) needs " \
           "model.hf_model" in capsys.readouterr().err


def test_a_base_model_audited_as_its_own_fine_tune_finds_nothing(hf_user, tmp_path):
    """The language-model entry point under the null (tests/null): the "fine-tuned" target is
    the pretrained base itself, so nothing it outputs is about its "members"; every attack is
    at chance, the verdict says no leak, no ε is certified, and the base-reference scores
    (the target against itself) are zero."""
    result = miaudit.audit(
        str(hf_user["lm_pretrained"]), str(hf_user["csv"]), members=hf_user["members"],
        nonmembers=hf_user["nonmembers"], public_rows=hf_user["public"], references=0,
        base_model=hf_user["lm_pretrained"], max_length=24, out=tmp_path / "lm",
        text_column="text", label_column="label", progress=False,
        cache_dir=str(tmp_path / "cache"),
        attacks=["lm-loss", "zlib", "min-k", "min-k-plus-plus", "lm-base-reference", "recall"],
    )
    from miaudit.verdict.strength import assess

    assert assess(result).measured not in ("exposed", "average-case")
    assert result.meta["verdict"].level not in ("exposed", "average-case")
    best = result.meta["privacy_audit"].best
    assert best is None or best.bound.epsilon == 0
    # the target against itself: zero, but for float32 rounding between two batchings
    assert np.abs(result.outcome("lm-base-reference").scores).max() < 1e-5
    for outcome in result.outcomes:  # 32 members and 32 non-members: |z| < 4.9
        assert abs(outcome.metrics.auc - 0.5) < 4.9 * np.sqrt(65 / (12 * 32 * 32)), outcome.name
