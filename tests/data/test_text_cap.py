"""Texts longer than a cap (default 1,000,000 characters, the option ``max_text_chars`` of
every text dataset; null: none) are cut as they load, before tokenization, with the count in
the dataset's notes (hence the report): one huge text no longer makes tokenization hold
gigabytes (the issue's .jsonl holding one 50 MB text, max_length 32: 6.6 GB and 96 s before)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from miaudit.data import load_dataset
from miaudit.data.registry import MAX_TEXT_CHARS
from miaudit.errors import DataError


def _jsonl(path, texts, labels=None):
    labels = labels if labels is not None else [i % 2 for i in range(len(texts))]
    with open(path, "w", encoding="utf-8") as handle:
        for text, label in zip(texts, labels, strict=True):
            handle.write(json.dumps({"text": text, "label": label}) + "\n")
    return path


def test_a_text_over_the_default_cap_is_cut_and_counted(tmp_path):
    huge = "ab" * (MAX_TEXT_CHARS // 2) + "tail"  # 1,000,004 characters
    path = _jsonl(tmp_path / "t.jsonl", ["short one", huge, "another"])
    ds = load_dataset(str(path), text_column="text")
    assert [len(t) for t in ds.features] == [9, MAX_TEXT_CHARS, 7]
    assert ds.features[1] == huge[:MAX_TEXT_CHARS]
    assert ("1 of 3 texts was longer than 1,000,000 characters (the longest 1,000,004) and cut "
            "to its first 1,000,000 before tokenization (data rows [1]; option "
            "max_text_chars)") in ds.notes
    assert ds.preprocessing.endswith("texts over 1,000,000 characters cut to their first "
                                     "1,000,000")
    assert not ds.features.flags.writeable  # still a read-only text array


def test_the_cap_is_settable_and_null_removes_it(tmp_path):
    texts = ["x" * 50, "y" * 10, "z" * 80]
    path = _jsonl(tmp_path / "t.jsonl", texts)
    ds = load_dataset(str(path), text_column="text", max_text_chars=20)
    assert [len(t) for t in ds.features] == [20, 10, 20]
    assert "2 of 3 texts were longer than 20 characters (the longest 80)" in ds.notes
    assert "data rows [0, 2]" in ds.notes
    whole = load_dataset(str(path), text_column="text", max_text_chars=None)
    assert list(whole.features) == texts and "characters" not in whole.notes


def test_texts_under_the_cap_load_as_before(tmp_path, docstring_texts):
    """Nothing cut, nothing changed: the same fingerprint (hence cache keys) as uncapped."""
    texts, labels = docstring_texts
    path = _jsonl(tmp_path / "d.jsonl", texts, labels.tolist())
    capped = load_dataset(str(path), text_column="text")
    uncapped = load_dataset(str(path), text_column="text", max_text_chars=None)
    assert capped.fingerprint() == uncapped.fingerprint() and capped.notes == uncapped.notes
    assert capped.preprocessing == uncapped.preprocessing


@pytest.mark.parametrize("value", [0, -5, 2.5, "1000", True])
def test_a_bad_cap_is_refused_before_the_file_is_read(tmp_path, value):
    with pytest.raises(DataError, match=r"option max_text_chars must be a whole number of "
                                        r"characters >= 1 .* or null for no cap"):
        load_dataset(str(tmp_path / "never-read.jsonl"), text_column="text",
                     max_text_chars=value)


def test_the_cap_applies_to_text_datasets_only(tmp_path):
    with pytest.raises(DataError, match=r"'digits' loads as image data: the option "
                                        r"max_text_chars applies to text datasets only"):
        load_dataset("digits", max_text_chars=100)
    path = tmp_path / "table.csv"
    path.write_text("a,label\n1,0\n2,1\n")
    with pytest.raises(DataError, match="loads as tabular data"):
        load_dataset(str(path), max_text_chars=100)
    with pytest.raises(DataError, match=r"text datasets also max_text_chars=1000000"):
        load_dataset(str(path), max_text_chars_typo=100)


def test_tokenization_sees_the_cut_text_only(tmp_path):
    """What bounded the memory: the tokenizer reads the cut text (its ids are the first
    max_length of the capped text's), never the file's whole text."""
    from miaudit.models.run_tokenizer import tokenized_dataset

    words = " ".join(f"word{i}" for i in range(200_000))  # ~1.3 million characters
    path = _jsonl(tmp_path / "t.jsonl", ["a short text", words])
    ds = load_dataset(str(path), text_column="text", max_text_chars=1000)
    tokens, cut = tokenized_dataset(ds, 32)
    assert tokens.features.shape == (2, 32) and cut is not None
    assert "1 of 2 texts was longer than 1,000 characters" in tokens.notes
    assert "1 of 2 texts were longer than 32 tokens" in tokens.notes


def test_a_run_reports_the_texts_cut(tmp_path, docstring_texts):
    """The count reaches the run's report (summary.json's dataset notes, report.html)."""
    from miaudit.config import config_from_dict
    from miaudit.pipeline import run

    texts, labels = docstring_texts
    texts = list(texts)
    texts[3] = texts[3] + " filler" * 400  # longer than the cap of 2,000 characters
    path = _jsonl(tmp_path / "d.jsonl", texts, labels.tolist())
    n = len(texts)
    cfg = config_from_dict({
        "name": "capped", "seed": 0, "output": str(tmp_path / "run"),
        "cache_dir": str(tmp_path / "cache"),
        "dataset": {"name": str(path), "options": {"text_column": "text",
                                                   "max_text_chars": 2000},
                    "max_length": 16},
        "split": {"audit": n * 2 // 5, "public": n * 2 // 5, "population": n // 10},
        "models": 2,
        "recipe": {"architecture": "text-cnn", "arch_params": {"embed_dim": 8, "channels": 8},
                   "optimizer": "adam", "lr": 0.01, "epochs": 1, "batch_size": 32},
        "attacks": ["loss"], "metrics": {"bootstrap": 10},
    })
    result, out = run(cfg, progress=False, echo=False)
    note = f"1 of {n} texts was longer than 2,000 characters"
    assert note in result.meta["dataset_notes"]
    assert note in (out / "report.html").read_text(encoding="utf-8")
    assert np.isfinite(result.outcome("loss").metrics.auc)
