"""The `Dataset` container and small array helpers shared by every loader."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from miaudit.errors import DataError

# The kinds of data a Dataset holds. "tokens": a text dataset tokenized for a model (token
# ids as exact float32 [N, L]; see miaudit.models.run_tokenizer.tokenized_dataset)
DataKind = Literal["image", "tabular", "text", "tokens"]
KINDS: tuple[DataKind, ...] = get_args(DataKind)


@dataclass(frozen=True, eq=False)
class Dataset:
    """A whole dataset as arrays: the pool that protocols later split into members and others.

    `features` is float32 (images `[N, C, H, W]` scaled to [0, 1], or as shipped with
    `preprocessing="raw"`; tabular `[N, F]`), `labels` int64 `[N]` in `0..num_classes-1`.
    Arrays of other dtypes are converted on construction. For `kind="text"`, `features` is a
    1-D array of Python `str` (dtype object) `[N]`, never cast to numbers (and made read-only,
    so the memoised fingerprint stays true).
    """

    name: str
    features: np.ndarray
    labels: np.ndarray
    num_classes: int
    kind: DataKind
    source: str = ""
    notes: str = ""
    # how the features were made from the source's values, in words ("standard: pixels / 16
    # -> [0, 1]"); not part of the fingerprint, which hashes the feature bytes themselves
    preprocessing: str = ""
    _fingerprint: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind == "text":
            features = _text_array(self.features, self.name)
        else:
            features = np.ascontiguousarray(self.features, dtype=np.float32)
        labels = np.ascontiguousarray(self.labels)
        if labels.dtype.kind not in "iub":
            raise DataError(
                f"dataset {self.name!r}: labels must be integers, got dtype {labels.dtype}; "
                "map them to 0..K-1 first (the file loader does this for you)"
            )
        labels = labels.astype(np.int64, copy=False)
        object.__setattr__(self, "features", features)
        object.__setattr__(self, "labels", labels)
        if self.kind not in KINDS:
            raise DataError(
                f"dataset {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}"
            )
        min_ndim = 1 if self.kind == "text" else 2
        if labels.ndim != 1 or features.ndim < min_ndim or len(features) != len(labels):
            raise DataError(
                f"dataset {self.name!r}: features {features.shape} and labels {labels.shape} "
                "do not match; need features [N, ...] and labels [N] with the same N"
            )
        if self.kind == "image" and features.ndim != 4:
            raise DataError(
                f"dataset {self.name!r}: image features must be [N, C, H, W], got "
                f"{features.shape}; reshape them or use kind='tabular'"
            )
        if self.kind == "text" and features.ndim != 1:
            raise DataError(
                f"dataset {self.name!r}: text features must be a 1-D array of str [N], got "
                f"{features.shape}"
            )
        if self.kind in ("tabular", "tokens") and features.ndim != 2:
            raise DataError(
                f"dataset {self.name!r}: tabular features must be [N, F], got {features.shape}; "
                "flatten them or use kind='image'"
            )
        if self.num_classes < 1 or (
            len(labels) and (labels.min() < 0 or labels.max() >= self.num_classes)
        ):
            raise DataError(
                f"dataset {self.name!r}: labels must lie in 0..{self.num_classes - 1}; "
                f"found range {labels.min() if len(labels) else '-'}.."
                f"{labels.max() if len(labels) else '-'}; remap the labels or fix num_classes"
            )

    @property
    def labelled(self) -> bool:
        """False for texts loaded without labels (a text file with no label column, or a .txt
        of one text a line): their labels are all 0 (``num_classes`` 1) and their notes begin
        a note with ``unlabelled:`` and why (:func:`unlabelled_note`). Notes travel with every
        copy of the dataset, the tokenized one included, so this does too. Only a causal LM
        is audited on such texts: a classifier refuses them (:func:`require_labels`)."""
        return unlabelled_reason(self.notes) is None

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample (`features.shape[1:]`)."""
        return tuple(self.features.shape[1:])

    def fingerprint(self) -> str:
        """sha256 hex of name, shapes, feature bytes and label bytes (computed once).

        Texts are hashed as their UTF-8 bytes, each preceded by its byte length (8 bytes,
        little-endian), so no two different lists of texts hash alike ("ab", "c" != "a", "bc").
        """
        if self._fingerprint is None:
            digest = hashlib.sha256()
            digest.update(self.name.encode("utf-8") + b"\0")
            if self.kind == "text":
                digest.update(repr(("text", self.features.shape, self.labels.shape)).encode())
                digest.update(b"\0")
                for text in self.features:
                    data = text.encode("utf-8")
                    digest.update(len(data).to_bytes(8, "little"))
                    digest.update(data)
            else:  # bit-identical to the fingerprints before text datasets existed
                digest.update(repr((self.features.shape, self.labels.shape)).encode() + b"\0")
                digest.update(self.features.data.cast("B"))
            digest.update(self.labels.data.cast("B"))
            object.__setattr__(self, "_fingerprint", digest.hexdigest())
        return self._fingerprint  # type: ignore[return-value]

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, kind={self.kind!r}, n={len(self)}, "
            f"input_shape={self.input_shape}, num_classes={self.num_classes})"
        )


def _text_array(values: Any, name: str) -> np.ndarray:
    """A read-only 1-D object array of `str`; anything else is a clear DataError."""
    if isinstance(values, str):
        raise DataError(f"dataset {name!r}: text features must be a sequence of str, got one str")
    arr = np.asarray(values, dtype=object)
    if arr.ndim != 1:
        raise DataError(
            f"dataset {name!r}: text features must be a 1-D array of str [N], got shape "
            f"{arr.shape}"
        )
    bad = [i for i, v in enumerate(arr) if not isinstance(v, str)]
    if bad:
        raise DataError(
            f"dataset {name!r}: text features must all be str; rows {bad[:5]} hold "
            f"{type(arr[bad[0]]).__name__}; convert them (or drop those rows) first"
        )
    for i, v in enumerate(arr):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise DataError(
                f"dataset {name!r}: text row {i} is not valid Unicode ({exc.reason} at "
                f"character {exc.start}); decode the source bytes properly first"
            ) from None
    out = np.empty(len(arr), dtype=object)
    out[:] = [str(v) for v in arr]  # plain str, not subclasses (numpy.str_ hashes the same)
    out.flags.writeable = False
    return out


UNLABELLED = "unlabelled"
_UNLABELLED_TAIL = " (every label is set to 0 and never read: a causal LM needs none)"
_UNLABELLED_NOTE = re.compile(rf"(?:^|; ){UNLABELLED}: (.*?){re.escape(_UNLABELLED_TAIL)}")


def unlabelled_note(why: str) -> str:
    """The note that marks a dataset as having no labels (:attr:`Dataset.labelled`): ``why``
    says what is missing, as a classifier's refusal will repeat it ("data.csv has no label
    column 'label'; its columns are ['text']")."""
    return f"{UNLABELLED}: {why}{_UNLABELLED_TAIL}"


def unlabelled_reason(notes: str) -> str | None:
    """Why a dataset with these ``notes`` has no labels (:func:`unlabelled_note`'s ``why``);
    None when it has them."""
    found = _UNLABELLED_NOTE.search(notes)
    return found.group(1) if found else None


def require_labels(dataset: Dataset, who: str) -> None:
    """A DataError when ``dataset`` has no labels (:attr:`Dataset.labelled`) and ``who`` (a
    classifier: "the Hugging Face classifier in my-bert/", "recipe.architecture 'text-cnn'")
    needs them: the loader's own message for a missing label column, and who needs it."""
    why = unlabelled_reason(dataset.notes)
    if why is None:
        return
    txt = dataset.source.lower().endswith(".txt")
    fix = ("give the texts with their labels as a .csv, .jsonl or .parquet file (text_column, "
           "label_column)" if txt else "pass label_column=NAME")
    raise DataError(f"{why}: {fix}; {who} needs a label column (only a causal LM is audited "
                    "on texts without one)")


def encode_labels(values: Sequence[Any] | np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """Map arbitrary label values to 0..K-1 (sorted order); return codes and the class list."""
    arr = np.asarray(values)
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise DataError("labels contain NaN or inf; drop or fix those rows")
    if arr.dtype == object:
        if any(v is None or (isinstance(v, float) and v != v) for v in arr):
            raise DataError("labels contain missing values; drop or fix those rows")
        arr = arr.astype(str)
    classes, codes = np.unique(arr, return_inverse=True)
    return codes.astype(np.int64).reshape(-1), [_plain(c) for c in classes]


def describe_mapping(classes: Sequence[Any], limit: int = 20) -> str:
    """Human-readable 'value->code' list for notes (truncated past `limit` classes)."""
    pairs = [f"{c!r}->{i}" for i, c in enumerate(classes[:limit])]
    more = f", ... ({len(classes) - limit} more)" if len(classes) > limit else ""
    return "{" + ", ".join(pairs) + more + "}"


def standardize(x: np.ndarray) -> np.ndarray:
    """Z-score each column (population std; constant columns are only centred)."""
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    std[std == 0] = 1.0
    result: np.ndarray = (x - mean) / std
    return result


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value
