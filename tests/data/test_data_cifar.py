"""CIFAR loading from tiny archives in the official layout; hostile pickles are refused."""

from __future__ import annotations

import hashlib
import os
import pickle
import struct

import numpy as np
import pytest

from miaudit.data import cifar, fetch_dataset, load_dataset
from miaudit.data.cifar import unpickle_batch
from miaudit.errors import DataError

TEN = "cifar-10-batches-py"
HUNDRED = "cifar-100-python"


def _batch(n: int, seed: int, keys_as_bytes: bool = True, **labels) -> bytes:
    rng = np.random.default_rng(seed)
    d = {
        "batch_label": "testing batch",
        "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        "filenames": [f"img_{i}.png".encode() for i in range(n)],
        **{k: [int(v) for v in vals] for k, vals in labels.items()},
    }
    if keys_as_bytes:
        d = {k.encode(): v for k, v in d.items()}
    return pickle.dumps(d, protocol=2)


def _cifar10_members(keys_as_bytes: bool = True) -> dict[str, bytes]:
    members = {
        f"{TEN}/data_batch_{i}": _batch(2, i, keys_as_bytes, labels=[i, 9 - i]) for i in range(1, 6)
    }
    members[f"{TEN}/test_batch"] = _batch(3, 0, keys_as_bytes, labels=[0, 1, 2])
    members[f"{TEN}/batches.meta"] = pickle.dumps({b"label_names": [b"airplane"]}, protocol=2)
    return members


@pytest.mark.parametrize("keys_as_bytes", [True, False])
def test_cifar10_from_tarball(tmp_path, build, keys_as_bytes):
    members = _cifar10_members(keys_as_bytes)
    build.make_tar(tmp_path / "cifar10" / "cifar-10-python.tar.gz", members)
    ds = load_dataset("cifar10", data_dir=tmp_path)
    assert ds.features.shape == (13, 3, 32, 32) and ds.features.dtype == np.float32
    assert ds.labels.tolist() == [1, 8, 2, 7, 3, 6, 4, 5, 5, 4, 0, 1, 2]
    first = pickle.loads(members[f"{TEN}/data_batch_1"])[b"data" if keys_as_bytes else "data"]
    np.testing.assert_allclose(ds.features[:2].reshape(2, -1), first / 255.0, rtol=1e-6)
    assert ds.num_classes == 10 and "train (10) then test (3)" in ds.notes


def test_cifar10_raw_keeps_the_pickled_bytes(tmp_path, build):
    members = _cifar10_members()
    build.make_tar(tmp_path / "cifar10" / "cifar-10-python.tar.gz", members)
    raw = load_dataset("cifar10", data_dir=tmp_path, preprocessing="raw")
    first = pickle.loads(members[f"{TEN}/data_batch_1"])[b"data"]
    np.testing.assert_array_equal(raw.features[:2].reshape(2, -1), first.astype(np.float32))
    standard = load_dataset("cifar10", data_dir=tmp_path)
    np.testing.assert_array_equal(standard.features, raw.features / np.float32(255.0))
    assert raw.preprocessing.startswith("raw: ") and "raw pixels 0..255" in raw.notes


def test_cifar10_from_extracted_folder(tmp_path):
    for name, data in _cifar10_members().items():
        path = tmp_path / "cifar10" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert len(load_dataset("cifar10", data_dir=tmp_path)) == 13


def test_cifar100_fine_and_coarse(tmp_path, build):
    members = {
        f"{HUNDRED}/train": _batch(4, 1, fine_labels=[0, 99, 5, 6], coarse_labels=[0, 19, 1, 1]),
        f"{HUNDRED}/test": _batch(2, 2, fine_labels=[7, 8], coarse_labels=[2, 3]),
    }
    build.make_tar(tmp_path / "cifar100" / "cifar-100-python.tar.gz", members)
    fine = load_dataset("cifar100", data_dir=tmp_path)
    coarse = load_dataset("cifar100", data_dir=tmp_path, label="coarse")
    assert fine.num_classes == 100 and fine.labels.tolist() == [0, 99, 5, 6, 7, 8]
    assert coarse.num_classes == 20 and coarse.labels.tolist() == [0, 19, 1, 1, 2, 3]
    assert fine.fingerprint() != coarse.fingerprint()
    with pytest.raises(DataError, match="'fine' or 'coarse'"):
        load_dataset("cifar100", data_dir=tmp_path, label="medium")


# -- Python 2 pickles, as in the official archive, written opcode by opcode ---------------------


def _s(b: bytes) -> bytes:  # SHORT_BINSTRING / BINSTRING: a py2 str
    return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<i", len(b)) + b


def _i(v: int) -> bytes:  # BININT1 / BININT
    return b"K" + bytes([v]) if 0 <= v < 256 else b"J" + struct.pack("<i", v)


def _py2_batch(data: np.ndarray, labels: list[int]) -> bytes:
    array = (
        b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n"
        + (_i(0) + b"\x85" + _s(b"b") + b"\x87R")
        + (b"(" + _i(1) + _i(len(data)) + _i(3072) + b"\x86")
        + (b"cnumpy\ndtype\n" + _s(b"u1") + _i(0) + _i(1) + b"\x87R")
        + (b"(" + _i(3) + _s(b"|") + b"NNN" + _i(-1) + _i(-1) + _i(0) + b"tb")
        + (b"\x89" + _s(data.tobytes()) + b"tb")
    )
    label_list = b"](" + b"".join(_i(v) for v in labels) + b"e"
    return (
        b"\x80\x02}("
        + (_s(b"batch_label") + _s(b"training batch 1 of 5"))
        + (_s(b"labels") + label_list)
        + (_s(b"data") + array)
        + b"u."
    )


def test_python2_pickle_like_the_official_files():
    data = np.random.default_rng(0).integers(0, 256, (3, 3072), dtype=np.uint8)
    arr, labels = unpickle_batch(_py2_batch(data, [4, 0, 9]), "py2", {"labels": 10})
    np.testing.assert_array_equal(arr, data)
    assert labels["labels"].tolist() == [4, 0, 9]


# -- hostile or malformed pickles ---------------------------------------------------------------


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_running_code_is_refused(tmp_path, build):
    marker = tmp_path / "pwned"
    evil = pickle.dumps({b"data": _Evil(marker), b"labels": [0]}, protocol=2)
    members = _cifar10_members()
    members[f"{TEN}/data_batch_3"] = evil
    build.make_tar(tmp_path / "cifar10" / "cifar-10-python.tar.gz", members)
    with pytest.raises(DataError, match=r"refusing to unpickle .*data_batch_3.*system"):
        load_dataset("cifar10", data_dir=tmp_path)
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload, reason",
    [
        ({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0], b"extra": 1}, "unexpected"),
        ({b"data": np.zeros((1, 3072), np.float64), b"labels": [0]}, "dtype float64"),
        ({b"data": np.zeros((1, 100), np.uint8), b"labels": [0]}, r"shape \(1, 100\)"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, "length 1"),
        ({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}, r"outside 0..9"),
        ({b"data": np.zeros((1, 3072), np.uint8), b"labels": ["0"]}, "list of ints"),
        ({b"data": np.zeros((1, 3072), np.uint8)}, "missing"),
        ([1, 2, 3], "list instead of a dict"),
        ({b"data": {1: 2}, b"labels": [0]}, "dict"),
    ],
)
def test_unexpected_content_is_refused(payload, reason):
    with pytest.raises(DataError, match=rf"refusing to unpickle .*{reason}"):
        unpickle_batch(pickle.dumps(payload, protocol=2), "batch", {"labels": 10})


def test_other_globals_and_garbage_are_refused():
    refs = pickle.dumps({b"data": np.float64(1.0)}, protocol=2)  # numpy scalar: not in the format
    with pytest.raises(DataError, match="refusing to unpickle batch: global"):
        unpickle_batch(refs, "batch", {"labels": 10})
    with pytest.raises(DataError, match="refusing to unpickle"):
        unpickle_batch(b"\x80\x02garbage", "batch", {"labels": 10})
    builtin = b"\x80\x02cbuiltins\neval\nU\x041+1\x85R."
    with pytest.raises(DataError, match="builtins.eval is not allowed"):
        unpickle_batch(builtin, "batch", {"labels": 10})


def test_fetch_cifar10_downloads_checks_and_loads(tmp_path, build, web, monkeypatch):
    archive = build.make_tar(tmp_path / "src" / "c.tar.gz", _cifar10_members()).read_bytes()
    spec = {**cifar._SPECS["cifar10"], "md5": hashlib.md5(archive).hexdigest()}
    monkeypatch.setitem(cifar._SPECS, "cifar10", spec)
    web.pages[spec["url"]] = archive
    folder = fetch_dataset("cifar10", tmp_path / "data")
    assert (folder / "cifar-10-python.tar.gz").read_bytes() == archive
    assert len(load_dataset("cifar10", tmp_path / "data")) == 13


def test_fetch_cifar_offline(tmp_path):
    with pytest.raises(DataError) as err:
        fetch_dataset("cifar100", tmp_path)
    msg = str(err.value)
    assert "offline" in msg and "cifar-100-python.tar.gz" in msg and "www.cs.toronto.edu" in msg
    assert list((tmp_path / "cifar100").iterdir()) == []


def test_truncated_archive(tmp_path, build):
    path = build.make_tar(tmp_path / "cifar10" / "cifar-10-python.tar.gz", _cifar10_members())
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(DataError, match="corrupt or truncated|lacks"):
        load_dataset("cifar10", data_dir=tmp_path)
