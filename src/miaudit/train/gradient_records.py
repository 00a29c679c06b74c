"""A gradient-canary run's record beside its cached model (docs/algorithms.md §16).

A DP-SGD target trained with gradient canaries (:mod:`miaudit.train.gradient_canaries`) is a
different model from the canary-free one, and its audit needs what the run recorded (each
canary's inclusion and per-step projections): a model without its record is useless to the
white-box auditor. So such a model is cached under its own key (:func:`canary_key`: the
canary-free key and the canaries' settings: those that change training, never the audit's
scoring options such as ``known_data`` or ``noise``) and its :class:`GradientCanaryRecord`
(the rows' part ``data`` included, when the run recorded it) is stored beside it as
``<key>.canaries.npz``, written atomically (a temporary file, then rename) *before* the
entry's json, whose ``gradient_canary_record_sha256`` names it. A record that is
missing, unreadable or does not match that hash raises :class:`~miaudit.errors.CacheError`:
the model cache treats the entry as corrupt and retrains it; a record is never trusted
unverified.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from miaudit.errors import CacheError
from miaudit.io import atomic_path
from miaudit.train.gradient_canaries import GradientCanaries, GradientCanaryRecord

RECORD_SUFFIX = ".canaries.npz"
# the json field holding the record's sha256
RECORD_SHA256 = "gradient_canary_record_sha256"
_ARRAYS = ("included", "projections", "initial", "final", "sampled")
_SCALARS = ("noise_multiplier", "sample_rate", "max_grad_norm", "expected_batch_size")


def canary_settings(canaries: GradientCanaries) -> dict[str, Any]:
    """What makes the canaries (and so the model): their settings, probe rows included."""
    return {**canaries.describe(), "probe_rows": int(canaries.probe_rows)}


def canary_key(model_key: str, canaries: GradientCanaries) -> str:
    """The cache key of the model trained with ``canaries``: the canary-free model's key
    (:func:`~miaudit.train.model_cache.key_for`: data, rows, recipe, seed, training code)
    and the canaries' settings."""
    text = json.dumps(canary_settings(canaries), sort_keys=True, separators=(",", ":"))
    # v2: records hold the other rows' part `data` (known-data scoring); entries of the first
    # layout, which lack it, are never looked up again: they retrain once
    return hashlib.sha256(f"gradient-canaries-v2|{model_key}|{text}".encode()).hexdigest()


def record_path(root: Path, key: str) -> Path:
    return root / f"{key}{RECORD_SUFFIX}"


def save_record(path: Path, record: GradientCanaryRecord) -> str:
    """Write ``record`` to ``path`` atomically; its sha256 (for the entry's json)."""
    arrays: dict[str, Any] = {name: np.asarray(getattr(record, name)) for name in _ARRAYS}
    if record.coordinates is not None:
        arrays["coordinates"] = np.asarray(record.coordinates, dtype=np.int64)
    if record.data is not None:  # the rows' part d, for the known-data auditor
        arrays["data"] = np.asarray(record.data, dtype=np.float64)
    arrays["meta"] = np.array(json.dumps(
        {"kind": record.kind, **{k: float(getattr(record, k)) for k in _SCALARS}}))
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # uncompressed: the hash is of these exact bytes
    blob = buf.getvalue()
    with atomic_path(path) as tmp:
        tmp.write_bytes(blob)
    return hashlib.sha256(blob).hexdigest()


def load_record(path: Path, sha256: str | None) -> GradientCanaryRecord:
    """The record at ``path``, verified against ``sha256`` (the entry's json); CacheError
    when it is missing, altered or unreadable."""
    if not sha256:
        raise CacheError("the entry records no gradient-canary record")
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise CacheError(f"gradient-canary record unreadable: {exc}") from exc
    if hashlib.sha256(blob).hexdigest() != sha256:
        raise CacheError("gradient-canary record's hash does not match its metadata")
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            arrays = {name: np.array(data[name]) for name in _ARRAYS}
            coords = np.array(data["coordinates"]) if "coordinates" in data else None
            # optional: records stored before the cache kept d load without it (scored
            # with known_data they raise in miaudit.privacy.white_box, never score as x)
            rows_part = np.array(data["data"]).astype(np.float64) if "data" in data else None
        record = GradientCanaryRecord(
            included=arrays["included"].astype(bool),
            projections=arrays["projections"].astype(np.float64),
            initial=arrays["initial"].astype(np.float64),
            final=arrays["final"].astype(np.float64),
            sampled=arrays["sampled"].astype(np.int64),
            coordinates=coords, kind=str(meta["kind"]),
            noise_multiplier=float(meta["noise_multiplier"]),
            sample_rate=float(meta["sample_rate"]), max_grad_norm=float(meta["max_grad_norm"]),
            expected_batch_size=float(meta["expected_batch_size"]), data=rows_part)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a hash match makes these rare
        raise CacheError(f"gradient-canary record unreadable: {exc}") from exc
    m = record.included.size
    if record.projections.ndim != 2 or record.projections.shape[1] != m or (
            record.data is not None and record.data.shape != record.projections.shape):
        raise CacheError("gradient-canary record's arrays do not agree on the canaries")
    return record
