"""A run config whose text dataset has no label column (issue #35, goal 2): a causal LM
(gpt-small, hf-causal-lm) trains and is audited on the texts alone, the split check reads
the texts only; a classifier recipe (text-cnn) is refused before any model trains, with the
loader's message for the missing label column."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from miaudit.config import config_from_dict
from miaudit.errors import DataError
from miaudit.pipeline import run

MAX_LENGTH = 16


def _config(tmp_path, path, n, recipe, attacks, **dataset_options):
    return config_from_dict({
        "name": "unlabelled", "seed": 0, "output": str(tmp_path / "run"),
        "cache_dir": str(tmp_path / "cache"),
        "dataset": {"name": str(path), "options": dataset_options, "max_length": MAX_LENGTH},
        "split": {"audit": n // 2, "public": n // 4, "population": n // 8},
        "models": 2, "recipe": recipe, "attacks": attacks, "metrics": {"bootstrap": 10},
    })  # fmt: skip


def _jsonl(tmp_path, texts):
    path = tmp_path / "texts.jsonl"
    pd.DataFrame({"text": texts}).to_json(path, orient="records", lines=True)
    return path


def test_a_gpt_small_run_on_texts_without_labels(tmp_path, docstring_texts):
    texts = docstring_texts[0]
    cfg = _config(tmp_path, _jsonl(tmp_path, texts), len(texts),
                  {"architecture": "gpt-small",
                   "arch_params": {"n_layer": 1, "n_embd": 16, "n_head": 2},
                   "optimizer": "adam", "lr": 0.01, "epochs": 2, "batch_size": 32},
                  ["lm-loss", "lm-calibrated", "blind"], text_column="text")
    result, out = run(cfg, progress=False, echo=False)
    assert {o.name for o in result.outcomes} == {"lm-loss", "lm-calibrated", "blind"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dataset_labels"] == "unlabelled"
    assert summary["dataset_notes"].startswith(f"unlabelled: {cfg.dataset.name} has no label "
                                               "column 'label'; its columns are ['text']")
    split = summary["checks"]["split"]
    assert split["features"] == "hashed TF-IDF words and word pairs, 9 text statistics"
    assert split["rows"] == len(texts) // 2
    assert not split["shifted"]  # miaudit drew the membership at random


def test_an_hf_causal_lm_run_on_a_txt_file(tmp_path, docstring_texts, base_folder):
    pytest.importorskip("peft")
    texts = docstring_texts[0][:96]
    path = tmp_path / "texts.txt"
    path.write_text("".join(f"{t}\n" for t in texts), encoding="utf-8")
    cfg = _config(tmp_path, path, len(texts),
                  {"architecture": "hf-causal-lm",
                   "arch_params": {"base_model": str(base_folder), "lora": True},
                   "optimizer": "adam", "lr": 0.01, "epochs": 1, "batch_size": 16},
                  ["lm-loss", "lm-base-reference"])
    result, _ = run(cfg, progress=False, echo=False)
    assert {o.name for o in result.outcomes} == {"lm-loss", "lm-base-reference"}
    assert result.meta["dataset_labels"] == "unlabelled"
    assert "is a .txt file (one text a line)" in result.meta["dataset_notes"]
    assert "label" not in result.meta["checks"]["split"].features


@pytest.mark.parametrize("suffix", ["jsonl", "txt"])
def test_a_classifier_run_is_refused_on_texts_without_labels(tmp_path, docstring_texts,
                                                              suffix):
    texts = docstring_texts[0][:64]
    if suffix == "txt":
        path = tmp_path / "texts.txt"
        path.write_text("".join(f"{t}\n" for t in texts), encoding="utf-8")
        options, match = {}, r"is a .txt file \(one text a line\), which holds no labels"
    else:
        path, options = _jsonl(tmp_path, texts), {"text_column": "text"}
        match = r"has no label column 'label'; its columns are \['text'\]: pass label_column=NAME"
    cfg = _config(tmp_path, path, len(texts),
                  {"architecture": "text-cnn", "optimizer": "adam", "lr": 0.01, "epochs": 1,
                   "batch_size": 16}, ["loss"], **options)
    with pytest.raises(DataError, match=match + r".*recipe.architecture 'text-cnn' \(a "
                                              r"classifier\) needs a label column"):
        run(cfg, progress=False, echo=False)
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()
