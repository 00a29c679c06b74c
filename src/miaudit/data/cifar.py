"""CIFAR-10 / CIFAR-100 from the standard `cifar-*-python.tar.gz` layout.

The batches are Python pickles. They are never given to plain `pickle.load`: a restricted
unpickler resolves only the few globals the format needs (numpy's array reconstruction, ndarray,
dtype and latin-1 `_codecs.encode`), and the result is then checked key by key and type by type.
"""

from __future__ import annotations

import codecs
import io
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from miaudit.data import fetch
from miaudit.data.dataset import Dataset
from miaudit.data.registry import register_dataset
from miaudit.errors import DataError

_RECONSTRUCT_MODULES = ("numpy.core.multiarray", "numpy._core.multiarray")
_IMAGE_BYTES = 3 * 32 * 32


def _reconstruct() -> Any:
    try:
        from numpy._core.multiarray import _reconstruct as fn
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct as fn  # type: ignore[no-redef]
    return fn


def _latin1_encode(text: Any, encoding: str = "utf-8", *args: Any) -> bytes:
    # Python 3 protocol-2 pickles spell bytes as _codecs.encode(str, "latin1")
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1") or args:
        raise pickle.UnpicklingError(f"unexpected _codecs.encode({type(text).__name__}, ...)")
    return codecs.encode(text, "latin1")


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only numpy array reconstruction and latin-1 bytes."""

    def find_class(self, module: str, name: str) -> Any:
        if module in _RECONSTRUCT_MODULES and name == "_reconstruct":
            return _reconstruct()
        if module == "numpy" and name == "ndarray":
            return np.ndarray
        if module == "numpy" and name == "dtype":
            return np.dtype
        if module == "_codecs" and name == "encode":
            return _latin1_encode
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")


def _plain_key(key: Any) -> str:
    if isinstance(key, bytes):
        return key.decode("latin1")
    if isinstance(key, str):
        return key
    raise ValueError(f"key of type {type(key).__name__}")


def unpickle_batch(
    raw: bytes, origin: str, label_keys: dict[str, int]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Safely unpickle one CIFAR batch; return uint8 data [N, 3072] and each label list.

    `label_keys` maps each required label key to its number of classes. Anything else than
    the CIFAR layout raises `DataError` ("refusing to unpickle ...").
    """
    try:
        obj = RestrictedUnpickler(io.BytesIO(raw), encoding="latin1").load()
    except Exception as exc:  # any failure of untrusted input is a refusal, never a crash
        raise DataError(
            f"refusing to unpickle {origin}: {exc}. It is not a CIFAR batch (corrupt, or "
            "crafted to run code); delete it and fetch the official archive again"
        ) from None
    try:
        return _validate(obj, label_keys)
    except ValueError as exc:
        raise DataError(
            f"refusing to unpickle {origin}: {exc}, which the CIFAR layout does not have; "
            "delete it and fetch the official archive again"
        ) from None


def _validate(obj: Any, label_keys: dict[str, int]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    if not isinstance(obj, dict):
        raise ValueError(f"a top-level {type(obj).__name__} instead of a dict")
    batch = {_plain_key(k): v for k, v in obj.items()}
    allowed = {"data", "batch_label", "filenames", *label_keys}
    extra = sorted(set(batch) - allowed)
    missing = sorted({"data", *label_keys} - set(batch))
    if extra or missing:
        raise ValueError(f"keys {sorted(batch)} (unexpected {extra}, missing {missing})")
    data = batch["data"]
    if not (isinstance(data, np.ndarray) and type(data) is np.ndarray):
        raise ValueError(f"'data' of type {type(data).__name__}")
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != _IMAGE_BYTES:
        raise ValueError(f"'data' of dtype {data.dtype} and shape {data.shape}")
    labels = {}
    for key, classes in label_keys.items():
        values = batch[key]
        if not isinstance(values, list) or not all(type(v) is int for v in values):
            raise ValueError(f"{key!r} that is not a list of ints")
        arr = np.asarray(values, dtype=np.int64)
        if len(arr) != len(data) or (len(arr) and (arr.min() < 0 or arr.max() >= classes)):
            raise ValueError(f"{key!r} of length {len(arr)} or outside 0..{classes - 1}")
        labels[key] = arr
    if "batch_label" in batch and not isinstance(batch["batch_label"], (str, bytes)):
        raise ValueError("a 'batch_label' that is not a string")
    names = batch.get("filenames", [])
    if not isinstance(names, list) or not all(isinstance(n, (str, bytes)) for n in names):
        raise ValueError("'filenames' that are not a list of strings")
    return data, labels


class _Spec(TypedDict):
    archive: str  # the python-pickles archive
    folder: str  # the folder it extracts to
    members: list[str]  # the pickled batches
    labels: dict[str, int]  # label key -> classes
    url: str
    md5: str


_SPECS: dict[str, _Spec] = {
    "cifar10": {
        "archive": "cifar-10-python.tar.gz",
        "folder": "cifar-10-batches-py",
        "members": [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"],
        "labels": {"labels": 10},
        "url": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "md5": "c58f30108f718f92721af3b95e74349a",
    },
    "cifar100": {
        "archive": "cifar-100-python.tar.gz",
        "folder": "cifar-100-python",
        "members": ["train", "test"],
        "labels": {"fine_labels": 100, "coarse_labels": 20},
        "url": "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        "md5": "eb9058c3a382ffc7106e4002c42a8d85",
    },
}


def _present(name: str) -> Callable[[Path], bool]:
    spec = _SPECS[name]

    def check(folder: Path) -> bool:
        if (folder / spec["archive"]).is_file():
            return True
        return all((folder / spec["folder"] / m).is_file() for m in spec["members"])

    return check


def _read_raw(folder: Path, name: str) -> tuple[dict[str, bytes], Path]:
    spec = _SPECS[name]
    extracted = folder / spec["folder"]
    if all((extracted / m).is_file() for m in spec["members"]):
        return {m: (extracted / m).read_bytes() for m in spec["members"]}, extracted
    archive = folder / spec["archive"]
    members = fetch.read_members(archive, [f"{spec['folder']}/{m}" for m in spec["members"]])
    return {k.rsplit("/", 1)[1]: v for k, v in members.items()}, archive


PREPROCESSING = {
    "standard": "pixels / 255 -> [0, 1], [N, 3, 32, 32]",
    "raw": "integer pixels 0..255 as float32, the pickled bytes as they are, [N, 3, 32, 32]",
}


def load_cifar(
    folder: Path, name: str, label_key: str, preprocessing: str = "standard"
) -> Dataset:
    """Train batches then test batch(es) -> [N, 3, 32, 32] in [0, 1] (raw: 0..255)."""
    spec = _SPECS[name]
    raw, origin = _read_raw(folder, name)
    data, labels = [], []
    for member in spec["members"]:
        arr, labs = unpickle_batch(raw.pop(member), f"{origin}:{member}", spec["labels"])
        data.append(arr)
        labels.append(labs[label_key])
    x = np.concatenate(data).reshape(-1, 3, 32, 32).astype(np.float32)
    if preprocessing == "standard":
        x /= 255.0  # in place: CIFAR is 0.7 GB as float32
    y = np.concatenate(labels)
    n_test = len(labels[-1])
    return Dataset(
        name=name if label_key != "coarse_labels" else f"{name}-coarse",
        features=x,
        labels=y,
        num_classes=spec["labels"][label_key],
        kind="image",
        source=f"CIFAR python pickles (restricted unpickler): {origin}",
        notes=f"train ({len(y) - n_test}) then test ({n_test}); "
        f"{'pixels / 255' if preprocessing == 'standard' else 'raw pixels 0..255'}; "
        f"labels {label_key!r}",
    )


def _fetcher(name: str) -> Callable[[Path], Path]:
    def fetch_cifar(folder: Path) -> Path:
        spec = _SPECS[name]
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fetch.download([spec["url"]], folder / spec["archive"], md5=spec["md5"], timeout=120)
        except fetch.ToolFailed as exc:
            manual = f"download {spec['url']} elsewhere and copy it into {folder}"
            raise fetch.offline_error(name, [str(exc)], manual) from None
        return folder

    return fetch_cifar


@register_dataset(
    "cifar10",
    fetcher=_fetcher("cifar10"),
    present=_present("cifar10"),
    kind="image",
    description="CIFAR-10 natural images, 60,000 x 3x32x32, 10 classes (train+test)",
    source="https://www.cs.toronto.edu/~kriz/cifar.html (needs internet)",
    license="no explicit license; cite Krizhevsky 2009",
    num_classes=10,
    manual="copy cifar-10-python.tar.gz (or its extracted cifar-10-batches-py/) into {folder}",
    preprocessing=PREPROCESSING,
)
def load_cifar10(folder: Path, preprocessing: str = "standard") -> Dataset:
    """CIFAR-10, the 5 training batches then the test batch."""
    return load_cifar(folder, "cifar10", "labels", preprocessing)


@register_dataset(
    "cifar100",
    fetcher=_fetcher("cifar100"),
    present=_present("cifar100"),
    kind="image",
    description="CIFAR-100 natural images, 60,000 x 3x32x32, 100 fine (or 20 coarse) classes",
    source="https://www.cs.toronto.edu/~kriz/cifar.html (needs internet)",
    license="no explicit license; cite Krizhevsky 2009",
    num_classes=100,
    options={"label": "fine"},
    manual="copy cifar-100-python.tar.gz (or its extracted cifar-100-python/) into {folder}",
    preprocessing=PREPROCESSING,
)
def load_cifar100(folder: Path, label: str = "fine", preprocessing: str = "standard") -> Dataset:
    """CIFAR-100 train then test; `label="fine"` (100 classes) or `"coarse"` (20)."""
    if label not in ("fine", "coarse"):
        raise DataError(f"cifar100 option label must be 'fine' or 'coarse', got {label!r}")
    return load_cifar(folder, "cifar100", f"{label}_labels", preprocessing)
