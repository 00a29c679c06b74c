"""Bring-your-own data: `.npz` (keys `X`, `y`), `.csv` or `.parquet` with a label column.

`load_dataset("file", path=...)` or simply `load_dataset("/path/to/data.npz")`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from miaudit.data.base import Dataset, describe_mapping, encode_labels
from miaudit.data.base import standardize as standardize_columns
from miaudit.data.registry import register_dataset
from miaudit.errors import DataError

if TYPE_CHECKING:
    import pandas as pd

_TABLE_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


def _check_finite(x: np.ndarray, path: Path) -> None:
    bad = ~np.isfinite(x.reshape(len(x), -1)).all(axis=1)
    if bad.any():
        rows = np.nonzero(bad)[0]
        raise DataError(
            f"{path}: {len(rows)} rows have NaN or inf features (first rows {rows[:5].tolist()});"
            " drop or impute them before auditing"
        )


def _load_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            keys = list(npz.keys())
            if "X" not in keys or "y" not in keys:
                raise DataError(
                    f"{path} holds keys {keys}; it needs 'X' (features) and 'y' (labels): "
                    "save it with np.savez(path, X=features, y=labels)"
                )
            x, y = npz["X"], npz["y"]
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(
            f"cannot read {path} as .npz ({exc}); object arrays are refused: save numeric arrays"
        ) from exc
    if x.dtype.kind not in "biuf":
        raise DataError(f"{path}: X has dtype {x.dtype}; features must be numeric")
    if y.ndim != 1:
        raise DataError(f"{path}: y has shape {y.shape}; labels must be one value per row [N]")
    return x, y


def _image_layout(x: np.ndarray, path: Path, notes: list[str], raw: bool = False) -> np.ndarray:
    if x.ndim == 3:
        notes.append("added a channel axis [N, H, W] -> [N, 1, H, W]")
        x = x[:, None]
    if x.ndim != 4:
        raise DataError(
            f"{path}: image features must be [N, C, H, W] or [N, H, W], got {x.shape}; "
            "reshape them or pass kind='tabular'"
        )
    if x.shape[-1] in (1, 3, 4) and x.shape[1] not in (1, 3, 4):
        notes.append("channels-last input transposed to [N, C, H, W]")
        x = x.transpose(0, 3, 1, 2)
    if raw:  # the file's values, whatever their range: the model was trained on them
        return x.astype(np.float32)
    if x.dtype.kind in "biu" and x.size and x.min() >= 0 and x.max() <= 255:
        notes.append("integer pixels divided by 255")
        return x.astype(np.float32) / 255.0
    if x.size and (x.min() < 0 or x.max() > 1):
        raise DataError(
            f"{path}: image features must lie in [0, 1] (or be 0..255 integers), found "
            f"{x.min():.3g}..{x.max():.3g}; rescale them, pass kind='tabular', or load them "
            "as given with preprocessing='raw'"
        )
    return x.astype(np.float32)


def _read_table(path: Path, fmt: str) -> pd.DataFrame:
    import pandas as pd

    try:
        return pd.read_csv(path) if fmt == "csv" else pd.read_parquet(path)
    except pd.errors.EmptyDataError as exc:
        raise DataError(f"{path} is empty; it needs a header and at least one row") from exc
    except (OSError, ValueError, ImportError, pd.errors.ParserError) as exc:
        raise DataError(f"cannot read {path} as {fmt}: {exc}") from exc


def _table_features(df: pd.DataFrame, path: Path, notes: list[str]) -> tuple[np.ndarray, list[str]]:
    import pandas as pd

    missing = [str(c) for c in df.columns if df[c].isna().any()]
    if missing:
        raise DataError(
            f"{path}: feature columns {missing[:10]} have missing values; drop or impute them"
        )
    numeric = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])]  # bool -> 0/1
    categorical = [c for c in df.columns if c not in numeric]
    if categorical:
        notes.append(f"one-hot encoded non-numeric columns {[str(c) for c in categorical]}")
    encoded = pd.get_dummies(df, columns=categorical, dtype=np.float32) if categorical else df
    return encoded.to_numpy(np.float64), [str(c) for c in encoded.columns]


@register_dataset(
    "file",
    kind="tabular",
    description="your own .npz (X, y) / .csv / .parquet file: load_dataset(PATH)",
    options={"path": None, "label_column": "label", "kind": None, "standardize": False},
    listed=False,
    preprocessing={
        "standard": "as given, except: non-numeric table columns one-hot encoded, integer "
        "image pixels 0..255 divided by 255, table columns z-scored with standardize: true",
        "raw": "as given, as float32 (non-numeric table columns still one-hot encoded; image "
        "pixels never rescaled)",
    },
)
def load_file(
    folder: Path,
    path: str | Path | None = None,
    label_column: str = "label",
    kind: str | None = None,
    standardize: bool = False,
    preprocessing: str = "standard",
) -> Dataset:
    """Load a user file; labels of any type are mapped to 0..K-1 (sorted) and recorded.

    `preprocessing="raw"` feeds the file's numbers as they are (no /255 of integer pixels,
    no range check); it cannot be combined with `standardize`.
    """
    raw = preprocessing == "raw"
    if raw and standardize:
        raise DataError(
            "preprocessing 'raw' feeds the file's values as they are, so it cannot be combined "
            "with standardize: true; choose one"
        )
    if path is None:
        raise DataError("dataset 'file' needs path=...: load_dataset('file', path='data.csv')")
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(f"no such file: {path}; check the path")
    if kind not in (None, "image", "tabular"):
        raise DataError(f"kind must be 'image', 'tabular' or None (infer), got {kind!r}")
    suffix = path.suffix.lower()
    notes: list[str] = []
    if suffix == ".npz":
        x, y_raw = _load_npz(path)
    elif suffix in _TABLE_SUFFIXES:
        df = _read_table(path, _TABLE_SUFFIXES[suffix])
        if label_column not in df.columns:
            raise DataError(
                f"{path} has no label column {label_column!r}; its columns are "
                f"{[str(c) for c in df.columns]}: pass label_column=NAME"
            )
        y_raw = df[label_column].to_numpy()
        x, _ = _table_features(df.drop(columns=[label_column]), path, notes)
        if kind == "image":
            raise DataError(f"{path}: tables load as tabular data; save images as .npz instead")
    else:
        raise DataError(f"{path}: unsupported file type {suffix!r}; use .npz, .csv or .parquet")
    if len(x) == 0 or x.ndim < 2 or x[0].size == 0:
        raise DataError(f"{path} holds no samples or no feature columns; nothing to audit")
    if len(x) != len(y_raw):
        raise DataError(f"{path}: X has {len(x)} rows but y has {len(y_raw)}; they must match")
    _check_finite(x, path)
    labels, classes = _encode(y_raw, path)
    notes.append(f"labels mapped to 0..{len(classes) - 1}: {describe_mapping(classes)}")
    if kind is None:
        kind = "image" if x.ndim >= 3 else "tabular"
    if kind == "image":
        x = _image_layout(x, path, notes, raw)
    else:
        if x.ndim > 2:
            notes.append(f"features {x.shape[1:]} flattened to {int(np.prod(x.shape[1:]))}")
            x = x.reshape(len(x), -1)
        if standardize:
            x = standardize_columns(x)
            notes.append("features standardised (z-score per column)")
    # what was done to the values, for the report: "as given" unless a step changed them
    changes = [n for n in notes if n.startswith(("one-hot", "integer pixels", "features stand"))]
    return Dataset(
        name=f"file:{path.name}",
        features=x.astype(np.float32),
        labels=labels,
        num_classes=len(classes),
        kind=kind,
        source=str(path.resolve()),
        notes="; ".join(notes),
        preprocessing=f"{preprocessing}: as given" + (f" ({'; '.join(changes)})"
                                                      if changes else ""),
    )


def _encode(y: np.ndarray, path: Path) -> tuple[np.ndarray, list[Any]]:
    try:
        return encode_labels(y)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None
