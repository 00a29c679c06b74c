"""The audit's data: training rows (members), rows the model did not train on (non-members),
and the attacker's public data, laid out as the rows of one signal bank.

Bank order: the audit rows (members and non-members, in data row order), then the public
reference pool (each reference model trains on a random subset of it), then the population
(public rows no model trains on: RMIA's z samples). Public rows are never evaluated.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from miaudit.config.sections.spec import required
from miaudit.data import Dataset, load_dataset
from miaudit.data.dataset import DataKind
from miaudit.data.user_files import numpy_file_problem, read_npz_arrays
from miaudit.errors import ConfigError, DataError
from miaudit.external.audit_config import AuditConfig
from miaudit.formatting import plural

_MAPPING = re.compile(r"labels mapped to 0\.\.\d+: (\{.*?\})")


@dataclass
class AuditData:
    """Bank-ordered features and labels, with where each row came from."""

    features: np.ndarray  # [N_bank, ...]
    labels: np.ndarray  # int64 [N_bank]
    members: np.ndarray  # bool [n_audit]: the target trained on the row
    audit_rows: np.ndarray  # rows of `data` in the audit block
    pool_rows: np.ndarray  # rows of `public` that reference models train on (subsets of it)
    population_rows: np.ndarray  # rows of `public` no model trains on
    data: Dataset
    public: Dataset | None
    notes: list[str] = field(default_factory=list)
    texts: np.ndarray | None = None  # bank-ordered texts once `features` hold token ids

    @property
    def n_audit(self) -> int:
        return int(self.audit_rows.size)

    @property
    def n_pool(self) -> int:
        return int(self.pool_rows.size)

    @property
    def n_population(self) -> int:
        return int(self.population_rows.size)

    @property
    def kind(self) -> DataKind:
        return self.data.kind

    @property
    def num_classes(self) -> int:
        return self.data.num_classes

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.features.shape[1:])


def read_rows(path: str | Path, n_rows: int, what: str) -> np.ndarray:
    """Sorted row indices from .npy (indices or a bool mask), .json (a list) or text/.csv
    (integers separated by commas or whitespace; a header line is skipped)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what} file {path} does not exist; check the path.")
    # by content where NumPy's own formats are concerned: numpy reads any other file as a
    # pickle and refuses it as "pickled data", which would not say what is wrong
    if numpy_file_problem(path, "npz") is None:
        raise DataError(
            f"{what} file {path} is a NumPy .npz archive; give row indices as a .npy array "
            "(np.save(path, rows)), a .json list or a text file of integers (.txt/.csv)."
        )
    problem = numpy_file_problem(path, "npy") if path.suffix == ".npy" else None
    if problem:
        raise DataError(
            f"{what} file {problem}: save row indices with np.save(path, rows), or name a text "
            "file of integers .txt or .csv."
        )
    try:
        if path.suffix == ".npy":
            values = np.load(path, allow_pickle=False)
        elif path.suffix == ".json":
            values = np.asarray(json.loads(path.read_text(encoding="utf-8")))
        else:
            lines = path.read_text(encoding="utf-8").split("\n")
            tokens = [t for line in lines for t in re.split(r"[,\s]+", line.strip()) if t]
            if tokens and not tokens[0].lstrip("-").isdigit():
                tokens = [t for line in lines[1:] for t in re.split(r"[,\s]+", line.strip()) if t]
            values = np.asarray([int(t) for t in tokens], dtype=np.int64)
    except (ValueError, OSError) as exc:
        raise DataError(
            f"{what} file {path} is not a list of integer row indices: {exc}"
        ) from exc
    values = np.asarray(values)
    if values.dtype == bool:
        if values.shape != (n_rows,):
            raise DataError(f"{what}: a boolean mask needs {n_rows} entries, got {values.shape}.")
        values = np.flatnonzero(values)
    if values.ndim != 1 or (values.size and values.dtype.kind not in "iu"):
        raise DataError(f"{what} file {path} must hold a flat list of integer row indices.")
    values = values.astype(np.int64)
    if values.size == 0:
        raise DataError(f"{what} file {path} lists no rows.")
    outside = values[(values < 0) | (values >= n_rows)]
    if outside.size:
        shown = ", ".join(str(v) for v in outside[:5])
        more = f", ... ({plural(outside.size, 'row')} in all)" if outside.size > 5 else ""
        raise DataError(
            f"{what} file {path} lists {plural(outside.size, 'row')} outside the data's "
            f"{plural(n_rows, 'row')} (0..{n_rows - 1}): {shown}{more}; indices are 0-based row "
            "positions."
        )
    unique, counts = np.unique(values, return_counts=True)
    if unique.size != values.size:
        repeated = unique[counts > 1]
        raise DataError(
            f"{what} file {path} lists {plural(repeated.size, 'row')} more than once (first "
            f"{repeated[:5].tolist()}); list each row once."
        )
    return unique


def _load_with_column(cfg: AuditConfig) -> tuple[Dataset, np.ndarray]:
    """The data file without its membership column, and that column as a bool mask."""
    path = Path(required(cfg.data.dataset, "data.dataset"))
    column = required(cfg.data.membership_column, "data.membership_column")
    if not path.is_file():
        raise DataError(f"data.membership_column needs a data file; {path} is not one.")
    if path.suffix == ".npz":
        problem = numpy_file_problem(path, "npz")
        if problem:
            raise DataError(f"{problem}: a membership column in a .npz is an array beside X "
                            "and y (np.savez(path, X=..., y=..., member=...)).")
        flags_read = read_npz_arrays(path, [column], "data file")
        if column not in flags_read:
            with np.load(path, allow_pickle=False) as npz:
                held = list(npz.files)
            raise DataError(f"{path} has no array {column!r}; it holds {held}.")
        flags = flags_read[column]
        dataset = load_dataset(str(path), cfg.data_dir, **cfg.data.options)
    elif path.suffix.lower() in (".csv", ".parquet", ".pq"):
        df = _read_table(path, "data file")
        if column not in df.columns:
            raise DataError(f"{path} has no column {column!r}; its columns: {list(df.columns)}.")
        flags = df.pop(column).to_numpy()
        with tempfile.TemporaryDirectory() as tmp:  # the same file minus the column
            copy = Path(tmp) / path.name
            df.to_csv(copy, index=False) if path.suffix == ".csv" else df.to_parquet(copy)
            try:
                dataset = load_dataset(str(copy), cfg.data_dir, **cfg.data.options)
            except DataError as exc:  # named as the user's file, not the copy
                raise DataError(str(exc).replace(str(copy.resolve()), str(path))
                                .replace(str(copy), str(path))) from exc
        dataset = dataclasses.replace(dataset, source=str(path.resolve()))
    else:
        raise DataError(f"{path}: a membership column needs a .npz, .csv or .parquet file.")
    flags = np.asarray(flags)
    nested = flags.dtype == object and any(
        isinstance(v, (list, tuple, dict, set, np.ndarray)) for v in flags.ravel())
    try:
        valid = (not nested and flags.shape == (len(dataset),)
                 and bool(np.isin(flags, (0, 1)).all()))
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise DataError(
            f"{path}: membership column {column!r} must hold one 0/1 (or true/false) value per "
            f"row: 1 = the model trained on the row (found {flags.dtype} values of shape "
            f"{flags.shape} for {len(dataset)} rows)."
        )
    return dataset, flags.astype(bool)


def _read_table(path: Path, what: str) -> Any:
    """A .csv or .parquet file as a DataFrame; a DataError naming the file when it cannot be
    read as one."""
    import pandas as pd

    try:
        return pd.read_csv(path) if path.suffix.lower() == ".csv" else pd.read_parquet(path)
    except pd.errors.EmptyDataError as exc:
        raise DataError(f"{what} {path} is empty; it needs a header and at least one row.") \
            from exc
    except (OSError, ValueError, ImportError, pd.errors.ParserError) as exc:
        kind = "CSV" if path.suffix.lower() == ".csv" else "Parquet"
        raise DataError(f"cannot read {what} {path} as {kind}: {exc}") from exc


def _label_mapping(ds: Dataset) -> str | None:
    match = _MAPPING.search(ds.notes)
    return match.group(1) if match else None


def _check_compatible(data: Dataset, public: Dataset) -> None:
    """The public data in the audit data's layout and label encoding; texts without labels
    on either side are compared as texts only (a causal LM reads no label; a classifier
    refuses them once its task is known: miaudit.data.dataset.require_labels)."""
    problems = []
    if public.input_shape != data.input_shape or public.kind != data.kind:
        problems.append(f"samples of shape {public.input_shape} ({public.kind}) vs "
                        f"{data.input_shape} ({data.kind})")
    labelled = public.labelled and data.labelled
    if labelled and public.num_classes != data.num_classes:
        problems.append(f"{public.num_classes} classes vs {data.num_classes}")
    elif labelled and _label_mapping(public) != _label_mapping(data):
        problems.append(f"labels mapped {_label_mapping(public)} vs {_label_mapping(data)}")
    if problems:
        raise DataError(
            f"the public data {public.name} does not match the audit data {data.name}: "
            f"{'; '.join(problems)}. Give both in the same layout and label encoding."
        )


def _check_table_columns(a: str, b: str, ignore: str | None) -> None:
    """Two table files must have the same columns in the same order (`ignore`: the audit
    file's membership column)."""
    pa, pb = Path(a), Path(b)
    if not (pa.is_file() and pb.is_file()):
        return
    try:
        if {pa.suffix.lower(), pb.suffix.lower()} <= {".csv"}:
            import pandas as pd

            ca = list(pd.read_csv(pa, nrows=0).columns)
            cb = list(pd.read_csv(pb, nrows=0).columns)
        elif {pa.suffix.lower(), pb.suffix.lower()} <= {".parquet", ".pq"}:
            import pyarrow.parquet as pq

            ca, cb = pq.read_schema(pa).names, pq.read_schema(pb).names
        else:
            return
    except (OSError, ValueError, UnicodeDecodeError, ImportError):
        return  # unreadable: each file's own loader says what is wrong with it, and which
    ca = [c for c in ca if c != ignore]
    if ca != cb:
        only_a, only_b = [c for c in ca if c not in cb], [c for c in cb if c not in ca]
        what = (f"only in {pa.name}: {only_a[:10]}; only in {pb.name}: {only_b[:10]}"
                if only_a or only_b else "the same columns in another order")
        raise DataError(f"{pa} and {pb} must have the same columns in the same order ({what}).")


def _duplicates(a: np.ndarray, b: np.ndarray) -> int:
    """How many rows of `b` equal some row of `a` exactly (texts compared as strings)."""
    if a.dtype == object:
        texts = set(a.tolist())
        return sum(t in texts for t in b.tolist())
    seen = {row.tobytes() for row in np.ascontiguousarray(a).reshape(len(a), -1)}
    return sum(row.tobytes() in seen for row in np.ascontiguousarray(b).reshape(len(b), -1))


def _public_options(cfg: AuditConfig) -> dict[str, Any]:
    """The public data's loader options: its preprocessing is the audit data's unless stated,
    since reference models trained on values scaled otherwise say nothing about the target."""
    options = dict(cfg.public.options)
    if "preprocessing" in cfg.data.options:
        options.setdefault("preprocessing", cfg.data.options["preprocessing"])
    ours = cfg.data.options.get("preprocessing", "standard")
    theirs = options.get("preprocessing", "standard")
    if ours != theirs:
        raise ConfigError(
            f"data.options.preprocessing is {ours!r} but public.options.preprocessing is "
            f"{theirs!r}: reference models must see values scaled like the audit data; give "
            "the same value for both (or leave public.options.preprocessing out)."
        )
    return options


def other_preprocessing(cfg: AuditConfig, data: AuditData) -> tuple[str, Dataset] | None:
    """The audit data loaded with the other `preprocessing` value ("raw" <-> "standard"), to
    test which values the model was trained on; None when there is no other form (a
    membership column's file, a loader without one, or the same values either way)."""
    if cfg.data.membership_column or data.kind in ("text", "tokens"):
        return None  # texts read the same under either value
    mode = cfg.data.options.get("preprocessing", "standard")
    other = "raw" if mode == "standard" else "standard"
    try:
        alt = load_dataset(required(cfg.data.dataset, "data.dataset"), cfg.data_dir,
                           **{**cfg.data.options, "preprocessing": other})
    except DataError:  # e.g. raw refused, or a file whose raw form fails its own checks
        return None
    rows = data.audit_rows[data.members]
    if alt.features.shape != data.data.features.shape or np.array_equal(
            alt.features[rows], data.data.features[rows]):
        return None
    return other, alt


def bank_features(
    data: Dataset, public: Dataset | None, audit_rows: np.ndarray, pool_rows: np.ndarray,
    population_rows: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels in bank order: audit rows of `data`, then the pool and the
    population rows of `public`."""
    parts, labels = [data.features[audit_rows]], [data.labels[audit_rows]]
    if public is not None:
        parts += [public.features[pool_rows], public.features[population_rows]]
        labels += [public.labels[pool_rows], public.labels[population_rows]]
    return np.concatenate(parts), np.concatenate(labels)


def build_audit_data(cfg: AuditConfig) -> AuditData:
    """Load the audit data and the public data and lay them out as bank rows."""
    notes: list[str] = []
    if cfg.data.membership_column:
        data, flags = _load_with_column(cfg)
        members = np.flatnonzero(flags)
        if members.size == 0:
            raise DataError(f"membership column {cfg.data.membership_column!r} has no 1s.")
    else:
        data = load_dataset(required(cfg.data.dataset, "data.dataset"), cfg.data_dir,
                            **cfg.data.options)
        members = read_rows(required(cfg.data.members, "data.members"), len(data),
                            "data.members")
    public_options = _public_options(cfg)
    same = cfg.public.dataset in (None, cfg.data.dataset) and not (
        cfg.public.options and public_options != cfg.data.options)
    public: Dataset | None = None
    public_rows = np.zeros(0, dtype=np.int64)
    if same and cfg.public.rows:
        public = data
        public_rows = read_rows(cfg.public.rows, len(data), "public.rows")
    elif not same:
        if data.kind != "text":  # a text table's other columns are not read: only its texts
            _check_table_columns(required(cfg.data.dataset, "data.dataset"),
                                 required(cfg.public.dataset, "public.dataset"),
                                 cfg.data.membership_column)
        public = load_dataset(required(cfg.public.dataset, "public.dataset"), cfg.data_dir,
                              **public_options)
        _check_compatible(data, public)
        public_rows = (read_rows(cfg.public.rows, len(public), "public.rows") if cfg.public.rows
                       else np.arange(len(public)))
    elif cfg.public.dataset is not None:
        raise ConfigError("the public data is the audit data: give public.rows (a file of its "
                          "row indices that the attacker holds, disjoint from the audit rows).")
    else:
        notes.append("no public data given: reference-model attacks cannot run")
    if cfg.data.nonmembers:
        nonmembers = read_rows(cfg.data.nonmembers, len(data), "data.nonmembers")
    else:  # every row that is neither a member nor public
        taken = np.zeros(len(data), dtype=bool)
        taken[members] = True
        if public is data:
            taken[public_rows] = True
        nonmembers = np.flatnonzero(~taken)
    overlap = np.intersect1d(members, nonmembers)
    if overlap.size:
        both = ("is both a member and a non-member" if overlap.size == 1
                else "are both members and non-members")
        raise DataError(f"{plural(overlap.size, 'row')} {both} (first {overlap[:5].tolist()}); "
                        "each row is one or the other.")
    if nonmembers.size == 0:
        raise DataError("no non-member rows: give data.nonmembers (rows the model did not "
                        "train on); an audit compares members with non-members.")
    if public is data:
        clash = np.intersect1d(public_rows, np.union1d(members, nonmembers))
        if clash.size:
            also = "is also an audit row" if clash.size == 1 else "are also audit rows"
            raise DataError(f"{plural(clash.size, 'public row')} {also} (first "
                            f"{clash[:5].tolist()}); public data must be disjoint from them.")
    elif public is not None:
        dupes = _duplicates(data.features[members], public.features[public_rows])
        if dupes:
            copies = ("is an exact copy of a training row" if dupes == 1
                      else "are exact copies of training rows")
            notes.append(f"{plural(dupes, 'public row')} {copies}: reference models trained "
                         "on them see members, which weakens reference attacks")
    audit_rows = np.union1d(members, nonmembers)
    rng = np.random.default_rng([cfg.seed, 3])
    shuffled = rng.permutation(public_rows)
    n_pop = int(round(cfg.public.population * shuffled.size))
    population_rows, pool_rows = np.sort(shuffled[:n_pop]), np.sort(shuffled[n_pop:])
    features, labels = bank_features(data, public, audit_rows, pool_rows, population_rows)
    if cfg.references.models and public is not None and pool_rows.size < 2:
        raise ConfigError("the public data needs at least 2 rows outside the population for "
                          "reference models; give more public rows or lower public.population.")
    return AuditData(
        features=features, labels=labels,
        members=np.isin(audit_rows, members), audit_rows=audit_rows, pool_rows=pool_rows,
        population_rows=population_rows, data=data, public=public, notes=notes,
    )
