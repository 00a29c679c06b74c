"""Texts without labels (issue #35, goal 2): a causal LM's audit reads no label, so its texts
may come as a .jsonl / .csv / .parquet with a text column and no label column, or as a .txt of
one text a line. They load unlabelled (labels all 0, noted "unlabelled"), the split check reads
the texts alone, and a classifier refuses them with the loader's message for a missing label
column.

The user's files: a tiny GPT-2 LM fitted (plain transformers, full batch) on 32 member texts
from the checkpoint ``lm-pretrained`` (its base model), a tiny untrained BERT classifier, and
a LoRA adapter trained with peft over the session's tiny random Llama (``base_folder``), all
made outside miaudit; the docstring texts in every format, without labels; row files.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest
import torch
from lm_users import lora_model, write_split

import miaudit
from miaudit.cli.main import main
from miaudit.errors import DataError
from miaudit.models.text import train_bpe
from miaudit.report.split import split_line

transformers = pytest.importorskip("transformers")
MAX_LENGTH = 24
ATTACKS = "lm-loss,lm-base-reference,blind"


def _gpt(seed: int = 0):
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=300, n_embd=32, n_layer=2, n_head=2, n_positions=32, bos_token_id=1,
        eos_token_id=2, pad_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def _bert(seed: int = 0):
    torch.manual_seed(seed)
    return transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32, num_labels=4, pad_token_id=0))


def _fit(model, batch, steps: int = 60, lr: float = 3e-3):
    """Full-batch Adam on the next-token loss until the LM overfits its members."""
    targets = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        model(**batch, labels=targets).loss.backward()
        optimizer.step()
    return model.eval()


def _write_texts(root, texts, stem: str = "texts") -> dict[str, object]:
    """The texts, no label column, as .jsonl, .csv, .parquet (with an id column) and .txt."""
    table = pd.DataFrame({"id": range(len(texts)), "text": texts})
    paths = {suffix: root / f"{stem}.{suffix}" for suffix in ("jsonl", "csv", "parquet", "txt")}
    table.to_json(paths["jsonl"], orient="records", lines=True)
    table.to_csv(paths["csv"], index=False)
    table.to_parquet(paths["parquet"])
    paths["txt"].write_text("".join(f"{t}\n" for t in texts), encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def user(tmp_path_factory, docstring_texts):
    root = tmp_path_factory.mktemp("unlabelled-user")
    texts, modules = docstring_texts
    assert not any("\n" in t for t in texts)  # one text a line in the .txt
    files = _write_texts(root, texts)
    rows = write_split(root, len(texts))
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=train_bpe(texts, vocab_size=300), pad_token="<pad>", bos_token="<s>",
        eos_token="</s>")
    batch = dict(tokenizer([texts[i] for i in rows["members"]], truncation=True,
                           max_length=MAX_LENGTH, padding="max_length", return_tensors="pt"))
    with torch.random.fork_rng():
        _gpt(seed=0).save_pretrained(root / "lm-pretrained")  # the base it is fine-tuned from
        _fit(_gpt(seed=0), batch).save_pretrained(root / "lm")
        _bert().save_pretrained(root / "clf")
    for name in ("lm-pretrained", "lm", "clf"):
        tokenizer.save_pretrained(root / name)
    return {"root": root, "files": files, "texts": texts, "modules": modules, "rows": rows,
            **{name: root / name for name in ("lm", "lm-pretrained", "clf")},
            **{name: root / f"{name}.txt" for name in rows}}


def _cli(user, data, out, *extra, model="lm", attacks=ATTACKS):
    return ["audit", "--hf-model", str(user[model]), "--data", str(data),
            "--members", str(user["members"]), "--nonmembers", str(user["nonmembers"]),
            "--public-rows", str(user["public"]), "--references", "0",
            "--max-length", str(MAX_LENGTH), "--attacks", attacks, "--out", str(out),
            "--cache-dir", str(out.parent / "cache"), "--quiet", "--exposed", "5", *extra]


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet", "txt"])
def test_an_lm_is_audited_on_texts_without_labels(user, tmp_path, capsys, suffix):
    """`miaudit audit --hf-model LM --base-model BASE --data texts.X --text-column text`, no
    label column anywhere (a .txt names no column: one text a line)."""
    out = tmp_path / "run"
    column = [] if suffix == "txt" else ["--text-column", "text"]
    flags = _cli(user, user["files"][suffix], out, "--base-model", str(user["lm-pretrained"]),
                 *column)
    assert main(flags) == 0
    printed = capsys.readouterr().out
    assert "lm-base-reference" in printed and "Most exposed training samples" in printed
    assert " label " not in printed.split("Most exposed training samples")[1]  # none to show
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dataset_labels"] == "unlabelled" and summary["hf_task"] == "causal-lm"
    assert summary["audit_samples"] == 64 and not summary["skipped"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == set(ATTACKS.split(","))
    assert metrics["lm-loss"]["auc"] > 0.8  # an overfit LM leaks its members
    assert metrics["lm-base-reference"]["auc"] > 0.8
    # the split check ran on the texts alone: no label feature, and nothing found (members
    # were drawn at random)
    split = summary["checks"]["split"]
    assert split["rows"] == 64 and split["classifier"] == "logistic regression"
    assert split["features"] == "hashed TF-IDF words and word pairs, 9 text statistics"
    assert not split["shifted"] and split["p_value"] > 0.001
    with open(out / "exposed.csv") as handle:
        ranked = list(csv.DictReader(handle))
    assert {r["label"] for r in ranked} == {""} and {r["predicted"] for r in ranked} == {""}
    assert {int(r["row"]) for r in ranked} <= set(user["rows"]["members"].tolist())
    with np.load(out / "bank.npz") as bank:
        assert bank["seq_token_logprob"].shape == (1, 128, MAX_LENGTH - 1)
        assert bank["seq_base_token_logprob"].shape == (128, MAX_LENGTH - 1)
    assert "unlabelled" in (out / "report.html").read_text()


def test_every_format_gives_the_same_texts_and_scores(user, tmp_path):
    results = {}
    for suffix in ("jsonl", "txt"):
        results[suffix] = miaudit.audit(
            str(user["lm"]), str(user["files"][suffix]), members=user["members"],
            nonmembers=user["nonmembers"], public_rows=user["public"], references=0,
            max_length=MAX_LENGTH, attacks=["lm-loss"], out=tmp_path / suffix,
            text_column="text" if suffix != "txt" else None, progress=False,
            cache_dir=str(tmp_path / "cache"))
    scores = [r.outcome("lm-loss").scores for r in results.values()]
    np.testing.assert_array_equal(*scores)


def test_the_split_check_finds_a_shifted_split_of_unlabelled_texts(user, tmp_path):
    """Members from one module's docstrings (math), non-members from the others': told apart
    from the texts alone (no label is read: the file has none), and the verdict says so."""
    modules = user["modules"]
    members, nonmembers = np.flatnonzero(modules == 0), np.flatnonzero(modules != 0)
    result = miaudit.audit(
        str(user["lm"]), str(user["files"]["jsonl"]), members=members, nonmembers=nonmembers,
        references=0, max_length=MAX_LENGTH, attacks=["lm-loss"], out=tmp_path / "run",
        text_column="text", progress=False, cache_dir=str(tmp_path / "cache"))
    split = result.meta["checks"]["split"]
    assert "label" not in split.features and split.rows == 128
    assert split.auc > 0.8 and split.shifted
    line = split_line(result)
    assert "can be told apart without the model" in line
    assert "on hashed TF-IDF words and word pairs, 9 text statistics, cross-fitted" in line


def test_a_classifier_is_refused_on_texts_without_labels(user, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_cli(user, user["files"]["jsonl"], out, "--text-column", "text", model="clf",
                     attacks="loss")) == 2
    err = capsys.readouterr().err
    assert (f"{user['files']['jsonl']} has no label column 'label'; its columns are ['id', "
            "'text']: pass label_column=NAME; the Hugging Face classifier in") in err
    assert "needs a label column (only a causal LM is audited on texts without one)" in err
    assert not out.exists()
    assert main(_cli(user, user["files"]["txt"], out, model="clf", attacks="loss")) == 2
    err = capsys.readouterr().err
    assert "is a .txt file (one text a line), which holds no labels: give the texts with " \
           "their labels as a .csv, .jsonl or .parquet file" in err
    # labelled audit texts, but public texts without labels: refused as well
    labelled = tmp_path / "labelled.csv"
    pd.DataFrame({"text": user["texts"], "label": user["modules"]}).to_csv(labelled,
                                                                          index=False)
    with pytest.raises(DataError, match="has no label column 'label'.*the Hugging Face "
                                        "classifier"):
        miaudit.audit(str(user["clf"]), str(labelled), members=user["rows"]["members"],
                      public=str(user["files"]["csv"]), references=0, attacks=["loss"],
                      out=tmp_path / "api", text_column="text", progress=False,
                      cache_dir=str(tmp_path / "cache"))


def test_a_label_column_named_and_absent_is_still_refused(user, tmp_path, capsys):
    """--label-column NAME says the file has one: refused as before when it has not; a
    .txt holds none to name."""
    out = tmp_path / "run"
    assert main(_cli(user, user["files"]["csv"], out, "--text-column", "text",
                     "--label-column", "topic", attacks="lm-loss")) == 2
    assert "has no label column 'topic'; its columns are ['id', 'text']" in (
        capsys.readouterr().err)
    assert main(_cli(user, user["files"]["txt"], out, "--label-column", "topic",
                     attacks="lm-loss")) == 2
    assert "is a .txt file, one text a line, which holds no labels: drop " \
           "label_column='topic'" in capsys.readouterr().err


def test_an_lm_audit_of_labelled_texts_is_unchanged(user, tmp_path):
    """A label column, where there is one, is read as before (and the split check uses
    it); public texts without labels beside labelled audit texts are fine for an LM."""
    labelled = tmp_path / "labelled.csv"
    pd.DataFrame({"text": user["texts"], "label": user["modules"]}).to_csv(labelled,
                                                                          index=False)
    result = miaudit.audit(
        str(user["lm"]), str(labelled), members=user["rows"]["members"],
        nonmembers=user["rows"]["nonmembers"], public=str(user["files"]["txt"]),
        references=0, max_length=MAX_LENGTH, attacks=["lm-loss"], out=tmp_path / "run",
        text_column="text", progress=False, cache_dir=str(tmp_path / "cache"))
    assert result.meta["dataset_labels"] == "labelled"
    assert result.meta["checks"]["split"].features.endswith("and the label")


@pytest.fixture(scope="module")
def adapter(user, tmp_path_factory, base_folder):
    """A LoRA adapter (r 4 on q_proj/v_proj) trained with peft on the 32 member texts over
    the session's tiny random Llama, as a user makes one outside miaudit; saved without a
    tokenizer (its base's is used)."""
    pytest.importorskip("peft")
    model, tokenizer = lora_model(base_folder)
    batch = dict(tokenizer([user["texts"][i] for i in user["rows"]["members"]],
                           truncation=True, max_length=32, padding="max_length",
                           return_tensors="pt"))
    with torch.random.fork_rng():
        _fit(model, batch, steps=40, lr=1e-2)
    folder = tmp_path_factory.mktemp("peft-unlabelled") / "adapter"
    model.save_pretrained(folder)
    return folder


def test_a_lora_adapter_is_audited_on_unlabelled_jsonl(user, adapter, base_folder, tmp_path,
                                                       capsys):
    """The issue's example: a user's LoRA adapter on a jsonl of texts with no label."""
    out = tmp_path / "run"
    assert main(["audit", "--hf-model", str(adapter), "--base-model", str(base_folder),
                 "--data", str(user["files"]["jsonl"]), "--text-column", "text",
                 "--members", str(user["members"]), "--nonmembers", str(user["nonmembers"]),
                 "--public-rows", str(user["public"]), "--max-length", "32",
                 "--references", "0", "--attacks", "lm-loss,lm-base-reference,zlib,blind",
                 "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "lm-base-reference" in printed and "Split check" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dataset_labels"] == "unlabelled"
    assert summary["hf_adapter"]["r"] == 4 and summary["base_model"] == str(base_folder)
    assert "label" not in summary["checks"]["split"]["features"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"lm-loss", "lm-base-reference", "zlib", "blind"}
    assert metrics["lm-base-reference"]["auc"] > 0.7  # the adapter learnt its members


@pytest.mark.parametrize("model", ["lm", "adapter"])
def test_members_never_seen_report_no_leak(user, adapter, base_folder, tmp_path, model):
    """The null on unlabelled texts: the models above trained on the 32 member rows, but the
    audit claims 32 other rows (never seen) as members against the 32 non-members; every
    attack is at chance and the verdict reports no leak."""
    from miaudit.verdict.strength import assess

    unseen, public = user["rows"]["public"][:32], user["rows"]["public"][32:]
    folder, base = ((adapter, base_folder) if model == "adapter"
                    else (user["lm"], user["lm-pretrained"]))
    result = miaudit.audit(
        str(folder), str(user["files"]["jsonl"]), members=unseen,
        nonmembers=user["rows"]["nonmembers"], public_rows=public, references=0,
        base_model=str(base), max_length=32 if model == "adapter" else MAX_LENGTH,
        attacks=["lm-loss", "zlib", "min-k", "lm-base-reference", "blind"],
        out=tmp_path / "run", text_column="text", progress=False,
        cache_dir=str(tmp_path / "cache"))
    assert result.meta["dataset_labels"] == "unlabelled"
    assert assess(result).measured not in ("exposed", "average-case")
    assert result.meta["verdict"].level not in ("exposed", "average-case")
    assert not result.meta["checks"]["split"].shifted
    for outcome in result.outcomes:  # 32 members and 32 non-members: |z| < 4.9
        assert abs(outcome.metrics.auc - 0.5) < 4.9 * np.sqrt(65 / (12 * 32 * 32)), outcome.name


def test_a_bf16_audit_is_refused_without_native_bf16_before_the_data_loads(user, tmp_path,
                                                                          capsys, monkeypatch):
    from miaudit.runtime import devices

    monkeypatch.setattr(devices, "native_bf16", devices.is_cuda)  # a CPU without bf16 units

    def no_data(*args, **kwargs):
        raise AssertionError("the data were loaded")

    monkeypatch.setattr("miaudit.external.run.build_audit_data", no_data)
    out = tmp_path / "run"
    assert main(_cli(user, user["files"]["jsonl"], out, "--text-column", "text",
                     "--base-model", str(user["lm-pretrained"]), "--device", "cpu",
                     "--precision", "bf16")) == 2
    assert "needs a CUDA device or a CPU with native bfloat16" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(_cli(user, user["files"]["jsonl"], out, "--precision", "fp16"))


@pytest.mark.skipif(not __import__("miaudit.runtime.devices").runtime.devices.native_bf16("cpu"),
                    reason="this CPU has no native bfloat16")
def test_a_bf16_audit_queries_in_bf16_and_finds_what_fp32_finds(user, tmp_path):
    """`--precision bf16` on a CPU with bf16 units: the target and the base read under
    autocast (the bank differs from fp32's), recorded in audit.yaml, the same leak found."""
    banks, metrics = {}, {}
    for precision in ("fp32", "bf16"):
        out = tmp_path / precision
        assert main(_cli(user, user["files"]["jsonl"], out, "--text-column", "text",
                         "--base-model", str(user["lm-pretrained"]), "--device", "cpu",
                         "--precision", precision)) == 0
        assert f"precision: {precision}" in (out / "audit.yaml").read_text()
        with np.load(out / "bank.npz") as bank:
            banks[precision] = {k: bank[k] for k in ("seq_token_logprob",
                                                     "seq_base_token_logprob")}
        metrics[precision] = json.loads((out / "metrics.json").read_text())
    for key, fp32 in banks["fp32"].items():
        bf16 = banks["bf16"][key]
        assert not np.array_equal(bf16, fp32), key
        assert np.abs(bf16 - fp32).mean() < 0.05, key
    for attack in ("lm-loss", "lm-base-reference"):
        assert metrics["bf16"][attack]["auc"] == pytest.approx(metrics["fp32"][attack]["auc"],
                                                               abs=0.03)
