"""Registry behaviour, the Dataset container, and the embedded digits dataset."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from miaudit.data import (
    Dataset,
    default_data_dir,
    fetch_dataset,
    is_present,
    list_datasets,
    load_dataset,
)
from miaudit.data.dataset import encode_labels
from miaudit.errors import DataError, MiauditError

EXPECTED = {
    "digits", "mnist", "fashion-mnist", "cifar10", "cifar100", "adult", "german-credit",
    "texas-health", "purchase-celeba", "spam-assassin",
}  # fmt: skip


def test_list_datasets_names_and_presence(tmp_path):
    infos = {i.name: i for i in list_datasets(tmp_path)}
    assert set(infos) == EXPECTED
    assert infos["digits"].present and not infos["mnist"].present
    assert infos["mnist"].kind == "image" and infos["adult"].kind == "tabular"
    assert all(i.description and i.license and i.source for i in infos.values())
    assert infos["cifar100"].options == {"label": "fine", "preprocessing": "standard"}


def test_digits_loads_as_scaled_images():
    ds = load_dataset("digits")
    assert ds.features.shape == (1797, 1, 8, 8) and ds.features.dtype == np.float32
    assert ds.labels.dtype == np.int64 and ds.num_classes == 10 and len(ds) == 1797
    assert ds.features.min() == 0.0 and ds.features.max() == 1.0
    assert ds.input_shape == (1, 8, 8) and ds.kind == "image"
    assert sorted(np.unique(ds.labels)) == list(range(10))


def test_unknown_name_suggests_close_match():
    with pytest.raises(DataError) as err:
        load_dataset("mnsit")
    msg = str(err.value)
    assert "Did you mean 'mnist'" in msg and "fashion-mnist" in msg and "digits" in msg
    assert isinstance(err.value, MiauditError)


def test_absent_dataset_says_how_to_fetch(tmp_path):
    with pytest.raises(DataError, match="miaudit data fetch mnist"):
        load_dataset("mnist", data_dir=tmp_path)
    assert not is_present("adult", tmp_path)
    with pytest.raises(DataError, match=r"miaudit data fetch adult.*adult\.data"):
        load_dataset("adult", data_dir=tmp_path)


def test_unknown_option_lists_accepted_ones(tmp_path):
    with pytest.raises(DataError, match=r"label='fine'"):
        load_dataset("cifar100", data_dir=tmp_path, colour=True)


def test_default_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("MIAUDIT_DATA_DIR", str(tmp_path / "here"))
    assert default_data_dir() == tmp_path / "here"
    monkeypatch.delenv("MIAUDIT_DATA_DIR")
    assert default_data_dir() == Path.home() / ".cache" / "miaudit" / "data"


def test_fetch_embedded_and_file_datasets(tmp_path):
    assert fetch_dataset("digits", tmp_path) == tmp_path / "digits"
    with pytest.raises(DataError, match="nothing to fetch"):
        fetch_dataset("file", tmp_path)


def test_fingerprint_stable_and_sensitive():
    a, b = load_dataset("digits"), load_dataset("digits")
    assert a.fingerprint() == b.fingerprint() and len(a.fingerprint()) == 64
    assert a._fingerprint is not None  # memoised
    labels = a.labels.copy()
    labels[0] = (labels[0] + 1) % 10
    changed = Dataset("digits", a.features, labels, 10, "image")
    renamed = Dataset("digits2", a.features, a.labels, 10, "image")
    assert len({a.fingerprint(), changed.fingerprint(), renamed.fingerprint()}) == 3


def test_dataset_validates_and_converts():
    ds = Dataset("t", np.zeros((3, 2), np.float64), np.array([0, 1, 1], np.int32), 2, "tabular")
    assert ds.features.dtype == np.float32 and ds.labels.dtype == np.int64
    with pytest.raises(DataError, match="labels must lie in 0..1"):
        Dataset("t", np.zeros((3, 2)), np.array([0, 1, 2]), 2, "tabular")
    with pytest.raises(DataError, match="do not match"):
        Dataset("t", np.zeros((3, 2)), np.array([0, 1]), 2, "tabular")
    with pytest.raises(DataError, match=r"\[N, C, H, W\]"):
        Dataset("t", np.zeros((3, 2)), np.array([0, 1, 1]), 2, "image")
    with pytest.raises(DataError, match="kind must be"):
        Dataset("t", np.zeros((3, 2)), np.array([0, 1, 1]), 2, "audio")
    with pytest.raises(DataError, match=r"text features must be a 1-D array of str \[N\]"):
        Dataset("t", np.zeros((3, 2)), np.array([0, 1, 1]), 2, "text")
    with pytest.raises(DataError, match="integers"):
        Dataset("t", np.zeros((3, 2)), np.array([0.0, 1.0, 1.0]), 2, "tabular")


def test_encode_labels_any_type():
    codes, classes = encode_labels(np.array(["cat", "dog", "cat", "ant"], dtype=object))
    assert codes.tolist() == [1, 2, 1, 0] and classes == ["ant", "cat", "dog"]
    codes, classes = encode_labels(np.array([10, 30, 10]))
    assert codes.tolist() == [0, 1, 0] and classes == [10, 30]
    with pytest.raises(DataError, match="NaN"):
        encode_labels(np.array([1.0, np.nan]))


def test_import_reads_nothing_and_stays_light():
    code = (
        "import sys, builtins; opened = []\n"
        "orig = builtins.open\n"
        "builtins.open = lambda *a, **k: (opened.append(a[0]), orig(*a, **k))[1]\n"
        "import miaudit.data\n"
        "heavy = [m for m in ('pandas', 'sklearn', 'torch') if m in sys.modules]\n"
        "print(opened, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] []"
