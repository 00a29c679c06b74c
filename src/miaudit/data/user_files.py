"""Bring-your-own data: `.npz` (keys `X`, `y`), `.csv`, `.jsonl` or `.parquet` with a label column.

`load_dataset("file", path=...)` or simply `load_dataset("/path/to/data.npz")`. A table with a
text column loads as a text dataset: `load_dataset("mail.csv", text_column="body")` (or
`kind="text"`, column `text` by default). Texts need no label column (a causal LM's audit reads
none): without one they load unlabelled (:attr:`Dataset.labelled`), and so does a `.txt` file,
one text a line.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from miaudit.data.dataset import Dataset, describe_mapping, encode_labels, unlabelled_note
from miaudit.data.dataset import standardize as standardize_columns
from miaudit.data.registry import register_dataset
from miaudit.errors import DataError
from miaudit.formatting import plural

if TYPE_CHECKING:
    import pandas as pd

_TABLE_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
# a plain text file: one text a line (UTF-8), no columns and no labels
_LINES_SUFFIX = ".txt"
# a column this close to `label` (difflib's ratio, case ignored: `labels` 0.91, `Label` 1,
# `label_id` 0.77, `lbl` 0.75; `level` and `table` 0.6) is most likely the labels under
# another name: a text table with it and no `label` column is refused, naming it
_LABEL_CLOSE = 0.75
# what a label cell reads as missing in a text table (texts themselves are kept verbatim)
_LABEL_NA = ["", "NA", "N/A", "n/a", "NaN", "nan", "null", "NULL", "None", "<NA>"]


# what a NumPy file starts with: a .npz is a zip archive (an empty one: only its end record)
_NUMPY_MAGIC = {"npz": (b"PK\x03\x04", b"PK\x05\x06"), "npy": (b"\x93NUMPY",)}
_NUMPY_WHAT = {"npz": "a NumPy .npz archive", "npy": "a NumPy .npy array"}


def numpy_file_problem(path: str | Path, kind: str) -> str | None:
    """None when `path` starts as a NumPy file of `kind` ("npz" or "npy") does (or cannot be
    read: the loader says so); else what it is instead, as the start of a message: "x.npz is
    a text file (first line 'a,b,label'), not a NumPy .npz archive". NumPy itself reads any
    other file as a pickle and refuses it as "pickled data", which says nothing useful."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return None
    if head.startswith(_NUMPY_MAGIC[kind]):
        return None
    if not head:
        found = "is empty"
    elif any(head.startswith(m) for k, ms in _NUMPY_MAGIC.items() if k != kind for m in ms):
        found = f"is {_NUMPY_WHAT['npy' if kind == 'npz' else 'npz']}"
    elif head.startswith(b"\x80"):
        found = "is a Python pickle"
    else:
        text: str | None
        try:  # a multi-byte character may be cut at the end of the first 4096 bytes
            text = head.decode("utf-8")
        except UnicodeDecodeError as exc:
            text = head[: exc.start].decode("utf-8") if exc.start >= len(head) - 3 else None
        if text is None or "\x00" in text:
            return f"{path} is not {_NUMPY_WHAT[kind]}"  # binary, of some other format
        first = text.strip().splitlines()[0] if text.strip() else ""
        shown = first if len(first) <= 60 else first[:57] + "..."
        found = f"is a text file (first line {shown!r})" if first else "is a text file"
    return f"{path} {found}, not {_NUMPY_WHAT[kind]}"


def read_npz_arrays(path: str | Path, keys: list[str] | None = None,
                    what: str = "data file") -> dict[str, np.ndarray]:
    """The arrays ``keys`` (default: every array) of the .npz at ``path``, never unpickled:
    a DataError naming the file and the array when one holds Python objects (NumPy refuses
    them with allow_pickle=False) or the archive cannot be read. A key not in the file is left
    out (the caller says what it needs)."""
    import zipfile

    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            present = list(npz.files)
            out = {}
            for key in present if keys is None else [k for k in keys if k in present]:
                try:
                    out[key] = npz[key]
                except ValueError as exc:
                    if "allow_pickle" not in str(exc) and "Object arrays" not in str(exc):
                        raise
                    raise DataError(
                        f"{what} {path}: array {key!r} holds Python objects (dtype object): "
                        "object arrays are refused (never unpickled); save it as a numeric "
                        "array, e.g. "
                        f"np.savez(path, {key}=np.asarray(values, dtype=np.float32), ...)"
                    ) from None
    except DataError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"cannot read {what} {path} as .npz ({exc}); save it again with "
                        "np.savez") from exc
    return out


def _check_finite(x: np.ndarray, path: Path) -> None:
    bad = ~np.isfinite(x.reshape(len(x), -1)).all(axis=1)
    if bad.any():
        rows = np.nonzero(bad)[0]
        many = len(rows) > 1
        raise DataError(
            f"{path}: {plural(len(rows), 'row')} {'have' if many else 'has'} NaN or inf "
            f"features (first rows {rows[:5].tolist()}); drop or impute "
            f"{'them' if many else 'it'} before auditing"
        )


def _load_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    problem = numpy_file_problem(path, "npz")
    if problem:
        raise DataError(
            f"{problem}: a .npz data file holds arrays X (features) and y (labels), saved with "
            "np.savez(path, X=features, y=labels); a table needs its own suffix (.csv, .jsonl "
            "or .parquet)"
        )
    arrays = read_npz_arrays(path, ["X", "y"])
    if "X" not in arrays or "y" not in arrays:
        keys = _npz_keys(path)
        raise DataError(
            f"{path} holds keys {keys}; it needs 'X' (features) and 'y' (labels): "
            "save it with np.savez(path, X=features, y=labels)"
        )
    x, y = arrays["X"], arrays["y"]
    if x.dtype.kind not in "biuf":
        raise DataError(f"{path}: X has dtype {x.dtype}; features must be numeric")
    if y.ndim != 1:
        raise DataError(f"{path}: y has shape {y.shape}; labels must be one value per row [N]")
    return x, y


def _npz_keys(path: Path) -> list[str]:
    with np.load(path, allow_pickle=False) as npz:
        return list(npz.files)


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


def _check_utf8(path: Path) -> None:
    """A .csv / .jsonl must be UTF-8: name the first bad line, and how to re-encode."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DataError(
            f"{path}: line {line} holds bytes that are not UTF-8 ({data[exc.start:exc.end]!r} "
            f"at byte {exc.start}); re-encode the file as UTF-8, e.g. `iconv -f latin1 -t "
            f"utf-8 {path.name} > fixed{path.suffix}` (or open it in pandas with its encoding "
            "and save it again)"
        ) from None


def _read_jsonl(path: Path) -> pd.DataFrame:
    import pandas as pd

    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise DataError(f"{path}: line {number} is not valid JSON ({exc})") from None
            if not isinstance(row, dict):
                raise DataError(
                    f"{path}: line {number} is a JSON {type(row).__name__}; each line must be "
                    'one object, e.g. {"text": "...", "label": 0}'
                )
            rows.append(row)
    if not rows:
        raise DataError(f"{path} is empty; it needs one JSON object per line")
    return pd.DataFrame(rows)


def _read_lines(path: Path) -> tuple[list[str], list[str]]:
    """The texts of a .txt file, one a line, as given: split at line feeds only (a carriage
    return before one ends the line with it; other separators such as U+2028 stay inside the
    text), a UTF-8 byte order mark dropped. Blank lines at the end of the file are no texts
    (dropped, noted); the caller refuses (or drops) blank lines among the texts."""
    _check_utf8(path)
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            content = handle.read()
    except OSError as exc:
        raise DataError(f"cannot read {path} as text: {exc}") from exc
    content = content.removeprefix("\ufeff")
    lines = [line.removesuffix("\r") for line in content.split("\n")]
    if lines and lines[-1] == "":  # the newline ending the last line starts no text
        lines.pop()
    notes = []
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    if end < len(lines):
        notes.append(f"{plural(len(lines) - end, 'blank line')} at the end of the file "
                     "ignored (no text)")
    if end == 0:
        raise DataError(f"{path} holds no text; a .txt data file holds one text a line")
    return lines[:end], notes


def _read_table(
    path: Path, fmt: str, text_column: str | None = None, label_column: str | None = "label"
) -> pd.DataFrame:
    import pandas as pd

    if fmt in ("csv", "jsonl"):
        _check_utf8(path)
    try:
        if fmt == "jsonl":
            return _read_jsonl(path)
        if fmt == "parquet":
            return pd.read_parquet(path)
        if text_column is None:
            return pd.read_csv(path)
        # texts verbatim (no number parsing, 'NA' stays 'NA', '' stays ''); labels as usual
        return pd.read_csv(
            path, dtype={text_column: str}, keep_default_na=False,
            na_values={label_column: _LABEL_NA} if label_column is not None else None,
        )
    except pd.errors.EmptyDataError as exc:
        raise DataError(f"{path} is empty; it needs a header and at least one row") from exc
    except (OSError, ValueError, ImportError, pd.errors.ParserError) as exc:
        raise DataError(f"cannot read {path} as {fmt}: {exc}") from exc


def _check_cells(df: pd.DataFrame, path: Path, role: str = "feature") -> None:
    """Each cell of a table one value: a DataError naming the file, the column and the first
    row whose cell holds a list, array, mapping or set (a nested .parquet / .jsonl column),
    which no column of numbers or categories can hold."""
    nested = (list, tuple, dict, set, np.ndarray)
    for column in df.columns:
        if df[column].dtype != object:
            continue
        for row, value in enumerate(df[column].tolist()):
            if isinstance(value, nested):
                shown = repr(value if not isinstance(value, np.ndarray) else value.tolist())
                shown = shown if len(shown) <= 40 else shown[:37] + "..."
                fix = ("give one label per row (a number or a name)" if role == "label" else
                       "spread its elements over columns of their own, one value each, or drop "
                       "the column")
                raise DataError(
                    f"{path}: {role} column {str(column)!r} holds a {type(value).__name__} in "
                    f"data row {row} (counted from 0; {shown}), where a {role} cell must be one "
                    f"value (a number or a category); {fix}"
                )


def _table_features(df: pd.DataFrame, path: Path, notes: list[str]) -> tuple[np.ndarray, list[str]]:
    import pandas as pd

    _check_cells(df, path)
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
    description="your own .npz (X, y) / .csv / .jsonl / .parquet file, or a .txt of texts "
    "(one a line): load_dataset(PATH)",
    options={"path": None, "label_column": "label", "kind": None, "standardize": False,
             "text_column": None, "drop_empty": False},
    listed=False,
    preprocessing={
        "standard": "as given, except: non-numeric table columns one-hot encoded, integer "
        "image pixels 0..255 divided by 255, table columns z-scored with standardize: true",
        "raw": "as given, as float32 (non-numeric table columns still one-hot encoded; image "
        "pixels never rescaled)",
    },
)  # text files (text_column / kind='text'): the texts as given, under either value
def load_file(
    folder: Path,
    path: str | Path | None = None,
    label_column: str | None = "label",
    kind: Literal["image", "tabular", "text"] | None = None,
    standardize: bool = False,
    preprocessing: str = "standard",
    text_column: str | None = None,
    drop_empty: bool = False,
) -> Dataset:
    """Load a user file; labels of any type are mapped to 0..K-1 (sorted) and recorded.

    `preprocessing="raw"` feeds the file's numbers as they are (no /255 of integer pixels,
    no range check); it cannot be combined with `standardize`. With `text_column` (or
    `kind="text"`, column `text` by default) a .csv / .jsonl / .parquet loads as a text
    dataset: that column's strings as given, other columns but the label ignored; empty or
    whitespace-only texts are refused unless `drop_empty` (which drops those rows, so later
    rows move up: say so in your member list).

    Texts need no labels (a causal LM's audit reads none): a text table without the label
    column `label` (the default; unless a column of a close name is there, such as `labels`,
    which is refused as today, naming it), or with `label_column=None`, loads *unlabelled*:
    every label 0, one class, and a note saying why (:attr:`Dataset.labelled`); a classifier
    refuses such data (:func:`~miaudit.data.dataset.require_labels`). A label column named
    otherwise must be there. A `.txt` file loads as unlabelled texts, one a line (its
    `text_column` implied); blank lines at its end are ignored, blank lines among its texts
    refused, or dropped with `drop_empty`.
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
    if kind not in (None, "image", "tabular", "text"):
        raise DataError(f"kind must be 'image', 'tabular', 'text' or None (infer), got {kind!r}")
    suffix = path.suffix.lower()
    if kind == "text" or text_column is not None or suffix == _LINES_SUFFIX:
        if kind not in (None, "text"):
            made = (f"text_column={text_column!r}" if text_column is not None
                    else f"a {_LINES_SUFFIX} file (one text a line)")
            raise DataError(f"{path}: {made} makes a text dataset; drop kind={kind!r}")
        if standardize:
            raise DataError("standardize: true applies to numeric columns, not to texts; drop it")
        return _load_text_file(path, suffix, text_column or "text", label_column, drop_empty,
                               preprocessing)
    if drop_empty:
        raise DataError("drop_empty applies to text files only (with text_column=...); drop it")
    if label_column is None:
        raise DataError(f"{path}: label_column null (no labels) applies to texts only "
                        "(text_column=...); numbers and images need a label column")
    notes: list[str] = []
    if suffix == ".npz":
        x, y_raw = _load_npz(path)
    elif suffix in _TABLE_SUFFIXES:
        df = _read_table(path, _TABLE_SUFFIXES[suffix])
        _need_column(df, label_column, "label", path)
        _check_cells(df[[label_column]], path, "label")
        y_raw = df[label_column].to_numpy()
        x, _ = _table_features(df.drop(columns=[label_column]), path, notes)
        if kind == "image":
            raise DataError(f"{path}: tables load as tabular data; save images as .npz instead")
    else:
        raise DataError(
            f"{path}: unsupported file type {suffix!r}; use .npz, .csv, .jsonl or .parquet "
            "(or .txt for texts, one a line)"
        )
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


def _need_column(df: pd.DataFrame, column: str, role: str, path: Path, extra: str = "") -> None:
    """A DataError listing the columns present and the closest one, if `column` is absent
    (`extra`: more ways out, after "pass {role}_column=NAME")."""
    if column in df.columns:
        return
    present = [str(c) for c in df.columns]
    close = difflib.get_close_matches(str(column), present, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise DataError(
        f"{path} has no {role} column {column!r}; its columns are {present}{hint}: "
        f"pass {role}_column=NAME{extra}"
    )


def _load_text_file(
    path: Path, suffix: str, text_column: str, label_column: str | None, drop_empty: bool,
    preprocessing: str,
) -> Dataset:
    """A .csv / .jsonl / .parquet with a text column (and a label column, unless the texts
    have none), or a .txt of one text a line -> a text Dataset."""
    import pandas as pd

    notes: list[str] = []
    unlabelled: str | None  # why the texts load unlabelled (None: they have labels)
    if suffix == _LINES_SUFFIX:
        if label_column not in (None, "label"):
            raise DataError(
                f"{path} is a .txt file, one text a line, which holds no labels: drop "
                f"label_column={label_column!r}, or give the texts with their labels as a "
                ".csv, .jsonl or .parquet file"
            )
        values, notes = _read_lines(path)
        y_raw, unlabelled = None, f"{path} is a .txt file (one text a line), which holds no labels"
        rows_are, what = "lines", "line"
        described = "texts of its lines"
    elif suffix in _TABLE_SUFFIXES:
        df = _read_table(path, _TABLE_SUFFIXES[suffix], text_column, label_column)
        _need_column(df, text_column, "text", path)
        if text_column == label_column:
            raise DataError(f"{path}: text_column and label_column are both {text_column!r}")
        label_column, unlabelled = _text_labels(df, text_column, label_column, path)
        if len(df) == 0:
            raise DataError(f"{path} holds no rows; nothing to audit")
        values = df[text_column].tolist()
        if label_column is not None:
            _check_cells(df[[label_column]], path, "label")
        y_raw = None if label_column is None else df[label_column].to_numpy()
        rows_are, what = "data rows", "data row"
        described = f"texts of column {text_column!r}"
    else:
        raise DataError(
            f"{path}: texts load from .csv, .jsonl or .parquet files (or .txt, one text a "
            f"line), not {suffix!r}; save a table with a text column (and a label column for a "
            "classifier)"
        )
    missing = [i for i, v in enumerate(values) if v is None or v is pd.NA
               or (isinstance(v, float) and v != v)]
    gaps = set(missing)
    not_text = [i for i, v in enumerate(values) if i not in gaps and not isinstance(v, str)]
    if not_text:
        raise DataError(
            f"{path}: text column {text_column!r} holds non-text values in data rows "
            f"{not_text[:10]} (counted from 0; e.g. {values[not_text[0]]!r}); store them as "
            "strings (quote them in JSON)"
        )
    empty = sorted(set(missing) | {i for i, v in enumerate(values)
                                   if isinstance(v, str) and not v.strip()})
    keep = np.ones(len(values), dtype=bool)
    if empty and not drop_empty:
        shown = _row_list(empty, suffix)
        many = len(empty) > 1
        where = (f"in column {text_column!r}: data {'rows' if many else 'row'} {shown} "
                 "(counted from 0, header excluded)" if suffix != _LINES_SUFFIX else
                 f"on {'lines' if many else 'line'} {shown} (counted from 1; the data row is "
                 "the line number - 1)")
        raise DataError(
            f"{path}: {plural(len(empty), 'row')} {'have' if many else 'has'} an empty or "
            f"whitespace-only text {where}; fill or "
            f"remove {'them' if many else 'it'}, or pass drop_empty: true to drop "
            f"{'them' if many else 'it'} (later rows then move up)"
        )
    if empty:
        keep[empty] = False
        numbers = [i + 1 for i in empty] if suffix == _LINES_SUFFIX else empty
        notes.append(
            f"dropped {plural(len(empty), 'row')} with an empty or whitespace-only text "
            f"({rows_are if len(empty) > 1 else what} {numbers[:20]}"
            f"{' ...' if len(empty) > 20 else ''}); the rows after "
            f"{'them' if len(empty) > 1 else 'it'} moved up"
        )
    if not keep.any():
        raise DataError(f"{path}: every text is empty; nothing to audit")
    texts = [v for v, k in zip(values, keep, strict=True) if k]
    if y_raw is None:
        labels, classes = np.zeros(len(texts), dtype=np.int64), [None]
        notes.insert(0, unlabelled_note(unlabelled or f"{path} has no labels"))
    else:
        labels, classes = _encode(y_raw[keep], path)
        notes.append(f"labels mapped to 0..{len(classes) - 1}: {describe_mapping(classes)}")
    repeated = len(texts) - len(set(texts))
    if repeated:
        notes.append(
            f"{plural(repeated, 'text')} {'repeat' if repeated > 1 else 'repeats'} an earlier "
            "row exactly (kept: a member and a non-member with the same text cannot be told "
            "apart)"
        )
    return Dataset(
        name=f"file:{path.name}",
        features=np.array(texts, dtype=object),
        labels=labels,
        num_classes=len(classes),
        kind="text",
        source=str(path.resolve()),
        notes="; ".join(notes),
        preprocessing=f"{preprocessing}: as given ({described})",
    )


def _row_list(rows: list[int], suffix: str) -> str:
    """The first 20 of ``rows`` (0-based), as line numbers (from 1) for a .txt file."""
    numbers = [i + 1 for i in rows] if suffix == _LINES_SUFFIX else rows
    return ", ".join(str(i) for i in numbers[:20]) + (" ..." if len(numbers) > 20 else "")


def _text_labels(df: pd.DataFrame, text_column: str, label_column: str | None, path: Path
                 ) -> tuple[str | None, str | None]:  # fmt: skip
    """The label column of a text table, or None and why the texts load unlabelled: with
    ``label_column`` None, or the default ``label`` absent and no column of a close name
    (``labels``, ``Label``, ``label_id``, ``lbl``: a DataError naming it, as for any label
    column named and absent, since that is most likely the label column under another name).
    Other columns of a corpus (``level``, ``table``, ``channel``) are no labels: ignored."""
    if label_column is None:
        ignored = " (its column 'label' ignored)" if "label" in df.columns else ""
        return None, f"{path}: label_column is null (no labels){ignored}"
    if label_column in df.columns or label_column != "label":
        _need_column(df, label_column, "label", path)
        return label_column, None
    others = [str(c) for c in df.columns if c != text_column]
    if any(difflib.SequenceMatcher(None, label_column, c.lower()).ratio() >= _LABEL_CLOSE
           for c in others):
        _need_column(df, label_column, "label", path,  # refused, naming the close column
                     ", or label_column: null if the texts have no labels (a causal LM's "
                     "audit needs none)")
    present = [str(c) for c in df.columns]
    return None, f"{path} has no label column {label_column!r}; its columns are {present}"
