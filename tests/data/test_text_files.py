"""Texts without labels (issue #35, goal 2): a text table with no label column and a .txt of
one text a line load as unlabelled text datasets (labels all 0, one class, a note saying why);
a label column named and absent, or one of a close name, is refused as before; a classifier
refuses unlabelled data with the loader's message (require_labels)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from miaudit.config.plan import dataset_kind
from miaudit.data import Dataset, load_dataset
from miaudit.data.dataset import require_labels, unlabelled_note, unlabelled_reason
from miaudit.errors import DataError

TEXTS = ["Hello there.", "NA", "12345", "  spaced  ", "ünïcode ✓"]


def _write(df: pd.DataFrame, path) -> None:
    if path.suffix == ".csv":
        df.to_csv(path, index=False)
    elif path.suffix == ".jsonl":
        df.to_json(path, orient="records", lines=True, force_ascii=False)
    else:
        df.to_parquet(path)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_text_table_without_labels_loads_unlabelled(tmp_path, suffix):
    path = tmp_path / f"texts{suffix}"
    _write(pd.DataFrame({"id": range(5), "body": TEXTS}), path)
    ds = load_dataset(str(path), text_column="body")
    assert ds.kind == "text" and ds.features.tolist() == TEXTS  # verbatim, 'NA' included
    assert not ds.labelled and ds.labels.tolist() == [0] * 5 and ds.num_classes == 1
    assert ds.notes.startswith(f"unlabelled: {path} has no label column 'label'; its columns "
                               "are ['id', 'body'] (every label is set to 0")
    assert "labels mapped" not in ds.notes
    assert unlabelled_reason(ds.notes) == (f"{path} has no label column 'label'; its columns "
                                           "are ['id', 'body']")
    # the same texts as a .txt read the same
    txt = tmp_path / "texts.txt"
    txt.write_text("".join(f"{t}\n" for t in TEXTS), encoding="utf-8")
    assert load_dataset(str(txt)).features.tolist() == TEXTS


def test_a_label_column_where_there_is_one_is_read_as_before(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame({"text": ["a", "b", "c"], "label": ["x", "y", "x"]}).to_csv(path, index=False)
    ds = load_dataset(str(path), text_column="text")
    assert ds.labelled and ds.labels.tolist() == [0, 1, 0] and ds.num_classes == 2
    # label_column null: no labels read, even where the column is
    bare = load_dataset(str(path), text_column="text", label_column=None)
    assert not bare.labelled and bare.num_classes == 1
    assert "label_column is null (no labels) (its column 'label' ignored)" in bare.notes
    assert bare.fingerprint() != ds.fingerprint()  # other labels


def test_a_missing_label_column_is_refused_when_named_or_close(tmp_path):
    path = tmp_path / "m.jsonl"
    pd.DataFrame({"text": ["a", "b"], "labels": [0, 1]}).to_json(path, orient="records",
                                                                 lines=True)
    # a column of a close name: most likely the labels, under another name
    with pytest.raises(DataError, match=r"no label column 'label'; its columns are \['text', "
                                        r"'labels'\] \(did you mean 'labels'\?\): pass "
                                        r"label_column=NAME, or label_column: null if the texts "
                                        r"have no labels"):
        load_dataset(str(path), text_column="text")
    assert load_dataset(str(path), text_column="text", label_column="labels").labelled
    assert not load_dataset(str(path), text_column="text", label_column=None).labelled
    # a label column named: it must be there
    with pytest.raises(DataError, match="no label column 'topic'.*pass label_column=NAME"):
        load_dataset(str(path), text_column="text", label_column="topic")
    # numbers need labels whatever
    table = tmp_path / "n.csv"
    pd.DataFrame({"a": [1.0, 2.0]}).to_csv(table, index=False)
    with pytest.raises(DataError, match=r"no label column 'label'.*\['a'\]"):
        load_dataset(str(table))
    with pytest.raises(DataError, match="label_column null .* applies to texts only"):
        load_dataset(str(table), label_column=None)


@pytest.mark.parametrize("column", ["Label", "LABELS", "label_id", "lbl"])
def test_a_column_named_like_the_labels_is_refused(tmp_path, column):
    path = tmp_path / "m.jsonl"
    pd.DataFrame({"text": ["a", "b"], column: [0, 1]}).to_json(path, orient="records",
                                                               lines=True)
    with pytest.raises(DataError, match=r"no label column 'label'; its columns are \['text', "
                                        rf"'{column}'\].*label_column: null if the texts"):
        load_dataset(str(path), text_column="text")


def test_a_corpus_s_other_columns_are_no_labels(tmp_path):
    """Metadata beside the texts of an LM corpus, some of names not far from `label`
    (`level`, `table`, `channel`: difflib ratio 0.5 to 0.6), load unlabelled, ignored."""
    path = tmp_path / "corpus.jsonl"
    pd.DataFrame({"text": ["a b", "c d"], "level": [1, 2], "table": ["x", "y"],
                  "channel": ["web", "mail"], "source": ["s", "t"]}).to_json(
        path, orient="records", lines=True)
    ds = load_dataset(str(path), text_column="text")
    assert not ds.labelled and ds.features.tolist() == ["a b", "c d"]
    assert "its columns are ['text', 'level', 'table', 'channel', 'source']" in ds.notes


def test_a_txt_file_is_one_text_a_line(tmp_path):
    path = tmp_path / "lines.txt"
    # a byte order mark, CRLF line ends, a U+2028 inside a text, blank lines at the end
    path.write_bytes("\ufefffirst text\r\nsecond\u2028still second\n  third  \n\n \n".encode())
    ds = load_dataset(str(path))
    assert ds.features.tolist() == ["first text", "second\u2028still second", "  third  "]
    assert ds.kind == "text" and not ds.labelled and ds.name == "file:lines.txt"
    assert ds.preprocessing == "standard: as given (texts of its lines)"
    assert "2 blank lines at the end of the file ignored (no text)" in ds.notes
    assert "is a .txt file (one text a line), which holds no labels" in ds.notes
    # the text column is implied: naming one changes nothing
    assert load_dataset(str(path), text_column="text").features.tolist() == ds.features.tolist()
    assert dataset_kind(str(path)) == "text"  # what a run config plans with


def test_blank_lines_among_the_texts_are_refused_or_dropped(tmp_path):
    path = tmp_path / "gaps.txt"
    path.write_text("one\n\ntwo\n   \nthree\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"2 rows have an empty or whitespace-only text on lines "
                                        r"2, 4 \(counted from 1; the data row is the line "
                                        r"number - 1\).*drop_empty: true"):
        load_dataset(str(path))
    ds = load_dataset(str(path), drop_empty=True)
    assert ds.features.tolist() == ["one", "two", "three"]
    assert "dropped 2 rows with an empty or whitespace-only text (lines [2, 4])" in ds.notes


@pytest.mark.parametrize(("content", "options", "match"), [
    (b"", {}, "holds no text"),
    (b"\n \n", {}, "holds no text"),
    (b"caf\xe9\n", {}, r"line 1 holds bytes that are not UTF-8"),
    (b"a\n", {"label_column": "topic"}, r"a .txt file, one text a line, which holds no labels: "
                                         r"drop label_column='topic'"),
    (b"a\n", {"kind": "tabular"}, r"a .txt file \(one text a line\) makes a text dataset; "
                                  r"drop kind='tabular'"),
])
def test_a_bad_txt_file_says_what_is_wrong(tmp_path, content, options, match):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=match):
        load_dataset(str(path), **options)


def test_a_missing_txt_file_is_named(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_dataset(str(tmp_path / "absent.txt"))


def test_a_classifier_refuses_unlabelled_texts_with_the_loaders_message(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame({"text": ["a", "b"]}).to_csv(path, index=False)
    ds = load_dataset(str(path), text_column="text")
    with pytest.raises(DataError, match=r"t.csv has no label column 'label'; its columns are "
                                        r"\['text'\]: pass label_column=NAME; recipe.architecture "
                                        r"'text-cnn' needs a label column \(only a causal LM"):
        require_labels(ds, "recipe.architecture 'text-cnn'")
    txt = tmp_path / "t.txt"
    txt.write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"holds no labels: give the texts with their labels as "
                                        r"a .csv, .jsonl or .parquet file"):
        require_labels(load_dataset(str(txt)), "a classifier")
    require_labels(dataclasses.replace(ds, notes=""), "a classifier")  # no mark: labelled


def test_unlabelled_survives_copies_and_tokenization(tmp_path):
    """The mark is a note, and notes travel: dataclasses.replace, the tokenized copy a run
    trains on, a text cap."""
    from miaudit.models.run_tokenizer import tokenized_dataset

    path = tmp_path / "t.txt"
    path.write_text("a short text\nanother text here\n" + "x" * 50 + "\n", encoding="utf-8")
    ds = load_dataset(str(path), max_text_chars=20)
    assert not ds.labelled and "cut to its first 20" in ds.notes
    tokens, _ = tokenized_dataset(ds, 8)
    assert tokens.kind == "tokens" and not tokens.labelled
    assert not dataclasses.replace(ds, name="other").labelled
    made = Dataset("mine", np.array(["a", "b"], dtype=object), np.zeros(2, dtype=np.int64), 1,
                   "text", notes=unlabelled_note("my texts have no labels"))
    assert not made.labelled and unlabelled_reason(made.notes) == "my texts have no labels"
    assert Dataset("mine", np.array(["a"], dtype=object), np.zeros(1, dtype=np.int64), 1,
                   "text").labelled
