"""Banks read without copies: arrays of an uncompressed bank.npz mapped from the file.

`numpy.savez` (what `SignalBank.save` writes) stores each array as an uncompressed `.npy`
member of a zip file, so its bytes lie in the file as they would in memory: the logits (the
bulk of a bank: 488 MiB at 100,000 samples x 64 models x 2 queries x 10 classes) are mapped
(copy-on-write) instead of read, and no second copy ever exists. Pages of the mapping are file
cache: they count in the process's RSS once touched, so the passes over every model's logits
(validation, the statistics, the predicted classes) give each model's pages back
(`madvise(MADV_DONTNEED)`) once done with them; a later read maps them again from the page
cache. Compressed members, other dtypes or byte orders, and Fortran order are read as before.
"""

from __future__ import annotations

import mmap
import os
import struct
import zipfile
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from miaudit.signals.statistics import StatisticCache

try:
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # numpy < 2
    from numpy import byte_bounds  # type: ignore[attr-defined,no-redef]

_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature ... file name length, extra length
# Models per statistics pass over mapped logits (each pass gives its pages back after it)
_PASS_BYTES = 64 * 2**20


def read_arrays(path: str | os.PathLike[str], mapped: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """Every array of the .npz at `path`; those named in `mapped` are mapped (copy-on-write)
    from the file where their member is stored uncompressed (else read, as `numpy.load` does)."""
    arrays: dict[str, np.ndarray] = {}
    with np.load(path, allow_pickle=False) as data:
        infos = {info.filename: info for info in data.zip.infolist()}
        for key in data.files:
            info = infos.get(key + ".npy")
            view = _map_member(path, info) if key in mapped and info is not None else None
            arrays[key] = data[key] if view is None else view
    return arrays


def _map_member(path: str | os.PathLike[str], info: zipfile.ZipInfo) -> np.ndarray | None:
    """The .npy member `info` of the zip at `path` as an array on a private mapping of the
    file, or None when it cannot be mapped as it is (compressed, unusual dtype or layout)."""
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:  # 0x1: encrypted
        return None
    with open(path, "rb") as handle:
        handle.seek(info.header_offset)
        signature, name_len, extra_len = _LOCAL_HEADER.unpack(handle.read(_LOCAL_HEADER.size))
        if signature != b"PK\x03\x04":
            return None
        start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
        handle.seek(start)
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
        else:
            return None
        offset = handle.tell()
        count = int(np.prod(shape, dtype=np.int64))
        plain = dtype.kind in "fiub" and dtype.isnative and not dtype.hasobject
        if fortran or not plain or offset % dtype.alignment or count == 0:
            return None
        if offset - start + count * dtype.itemsize != info.file_size:
            return None
        # copy-on-write: writable like a read array (torch reads it without a warning); a
        # write would change this process's pages only, never the file
        buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    return np.frombuffer(buffer, dtype=dtype, count=count, offset=offset).reshape(shape)


def mapping_of(array: np.ndarray) -> mmap.mmap | None:
    """The file mapping `array` views (through its bases), or None for an ordinary array."""
    base: object = array
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):  # numpy.frombuffer keeps a memoryview of the mapping
        base = base.obj
    return base if isinstance(base, mmap.mmap) else None


def release_pages(array: np.ndarray) -> None:
    """Give back the whole pages that the array's bytes span in a file mapping (no-op for an
    ordinary array): the RSS drops, the data stays in the file and is mapped again on access."""
    buffer = mapping_of(array)
    if buffer is None or not hasattr(buffer, "madvise") or array.size == 0:
        return
    origin = np.frombuffer(buffer, dtype=np.uint8, count=1).ctypes.data
    low, high = byte_bounds(array)
    page = mmap.PAGESIZE
    start = -(-(low - origin) // page) * page
    stop = (high - origin) // page * page
    if stop > start:
        buffer.madvise(mmap.MADV_DONTNEED, start, stop - start)


def model_by_model(logits: np.ndarray, fn: Callable[[np.ndarray], Any]) -> np.ndarray:
    """``fn(logits[k])`` for each model k, stacked (read-only), giving each model's mapped
    pages back after it: a pass over every model's logits that never holds more than one."""
    out: np.ndarray | None = None
    for k in range(logits.shape[0]):
        value = np.asarray(fn(logits[k]))
        release_pages(logits[k])
        if out is None:  # filled in place: no list of parts beside the result
            out = np.empty((logits.shape[0], *value.shape), dtype=value.dtype)
        out[k] = value
    assert out is not None  # a bank has at least one model
    out.flags.writeable = False
    return out


class PagedStatistics(StatisticCache):
    """The statistics cache; on mapped logits it computes a group of models at a time and
    gives their pages back after each, so at most ~64 MiB of mapped logits stay resident."""

    def _compute(self, names: tuple[str, ...], rows: np.ndarray) -> None:
        logits = self._logits
        if mapping_of(logits) is None:
            super()._compute(names, rows)
            return
        step = max(1, _PASS_BYTES // max(1, logits[0].nbytes))
        for lo in range(0, rows.size, step):
            chunk = rows[lo : lo + step]
            super()._compute(names, chunk)
            for m in chunk:
                release_pages(logits[int(m)])
