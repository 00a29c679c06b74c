"""Dataset registry: names -> (loader, fetcher, presence check, metadata).

Loaders and fetchers receive the dataset's own folder, `data_dir / name`. Registering does no
I/O; files are only touched by `load_dataset` / `fetch_dataset`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miaudit.data.dataset import DataKind, Dataset
from miaudit.errors import DataError
from miaudit.registry import Registry

Loader = Callable[..., Dataset]
Fetcher = Callable[[Path], Path]
PresenceCheck = Callable[[Path], bool]

FILE_SUFFIXES = (".npz", ".csv", ".parquet", ".pq", ".jsonl", ".txt")  # .txt: texts

# The values of every loader's `preprocessing` option. "standard" is what the loader always did
# (the default, so dataset fingerprints and model cache keys stay as they were); "raw" gives
# the values as the source ships them, for models trained on unscaled data.
PREPROCESSING = ("standard", "raw")
_UNDECLARED = "the loader's own (not declared)"

# Text datasets: each text is cut to its first MAX_TEXT_CHARS characters as it loads, before
# tokenization, so one huge text cannot make tokenization hold gigabytes (the tokenizer reads
# the whole text before dataset.max_length cuts its tokens). A million characters is ~250,000
# tokens, far beyond any max_length. The option `max_text_chars` of every dataset sets it
# (null: no cap); the dataset's notes (hence the report) count the texts cut.
MAX_TEXT_CHARS = 1_000_000
TEXT_CAP_OPTION = "max_text_chars"


@dataclass(frozen=True)
class DatasetInfo:
    """What `list_datasets` reports about one registered dataset."""

    name: str
    kind: DataKind
    description: str
    source: str
    license: str
    present: bool
    num_classes: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    # preprocessing value -> what it does, in words; refused values -> why not
    preprocessing: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Entry:
    name: str
    loader: Loader
    fetcher: Fetcher | None
    present: PresenceCheck
    kind: DataKind
    description: str
    source: str
    license: str
    num_classes: int | None
    options: dict[str, Any]
    manual: str
    listed: bool
    locate: Callable[[Path], Path]
    preprocessing: dict[str, str]
    refused: dict[str, str]


_REGISTRY: Registry[_Entry] = Registry(
    "dataset", DataError, cutoff=0.5, listed=lambda entry: entry.listed,
    unknown="unknown dataset {name!r}.{hint} Known datasets: {known}; or pass the path of an "
            f"existing {'/'.join(FILE_SUFFIXES[:3] + FILE_SUFFIXES[4:])} file.",
)


def _always(_folder: Path) -> bool:
    return True


def _same(folder: Path) -> Path:
    return folder


def register_dataset(
    name: str,
    *,
    fetcher: Fetcher | None = None,
    present: PresenceCheck | None = None,
    kind: DataKind,
    description: str,
    source: str = "",
    license: str = "",
    num_classes: int | None = None,
    options: dict[str, Any] | None = None,
    manual: str = "",
    listed: bool = True,
    locate: Callable[[Path], Path] | None = None,
    preprocessing: dict[str, str] | None = None,
    refused: dict[str, str] | None = None,
) -> Callable[[Loader], Loader]:
    """Decorator registering `loader(folder, **options) -> Dataset` under `name`.

    `present(folder)` says whether the files are there (default: always, for embedded data);
    `options` maps each accepted option to its default; `manual` tells a user offline which
    files to place where (`{folder}` stands for the dataset's folder); `locate(folder)` names
    the folder the files are actually read from (default: `folder`), returned by
    `fetch_dataset`.

    `preprocessing` maps each value of the `preprocessing` option the loader supports
    (`"standard"`, `"raw"`) to what it does, in words; the loader then receives
    `preprocessing=` and the option is accepted. `refused` says why a value is not offered.
    A loader declaring none accepts only `preprocessing="standard"` and never receives it.
    """
    described = dict(preprocessing or {})
    unknown = sorted(set(described) - set(PREPROCESSING))
    if unknown or (described and "standard" not in described):
        raise ValueError(f"dataset {name!r}: preprocessing must describe 'standard' and may "
                         f"describe {PREPROCESSING[1:]}; got {sorted(described)}")

    def entry(loader: Loader) -> _Entry:
        return _Entry(
            name=name,
            loader=loader,
            fetcher=fetcher,
            present=present or _always,
            kind=kind,
            description=description,
            source=source,
            license=license,
            num_classes=num_classes,
            options={**(options or {}), "preprocessing": "standard"},
            manual=manual,
            listed=listed,
            locate=locate or _same,
            preprocessing=described,
            refused=dict(refused or {}),
        )

    return _REGISTRY.decorator(name, entry)


def default_data_dir() -> Path:
    """`$MIAUDIT_DATA_DIR` if set, else `~/.cache/miaudit/data`."""
    env = os.environ.get("MIAUDIT_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "miaudit" / "data"


def _root(data_dir: str | os.PathLike[str] | None) -> Path:
    return Path(data_dir).expanduser() if data_dir is not None else default_data_dir()


def _entry(name: str) -> _Entry:
    return _REGISTRY.get(name)


def _looks_like_file(name: str) -> bool:
    if name in _REGISTRY:
        return False
    return Path(name).expanduser().is_file() or Path(name).suffix.lower() in FILE_SUFFIXES


def list_datasets(data_dir: str | os.PathLike[str] | None = None) -> list[DatasetInfo]:
    """Every registered dataset, with whether its files are present in `data_dir`."""
    root = _root(data_dir)
    return [
        DatasetInfo(
            name=e.name,
            kind=e.kind,
            description=e.description,
            source=e.source,
            license=e.license,
            present=bool(e.present(root / e.name)),
            num_classes=e.num_classes,
            options=dict(e.options),
            preprocessing=_offered(e),
            refused={m: _refusal(e, m) for m in PREPROCESSING if m not in _offered(e)},
        )
        for e in sorted(_REGISTRY.values(), key=lambda e: (e.kind, e.name))
        if e.listed
    ]


def _offered(entry: _Entry) -> dict[str, str]:
    return entry.preprocessing or {"standard": _UNDECLARED}


def _refusal(entry: _Entry, mode: str) -> str:
    return entry.refused.get(mode) or "its loader does not declare a raw form"


def _check_preprocessing(entry: _Entry, mode: Any) -> None:
    """A clear DataError for an unknown or refused `preprocessing` value."""
    if mode not in PREPROCESSING:
        raise DataError(
            f"dataset {entry.name!r}: preprocessing must be one of "
            f"{', '.join(repr(m) for m in PREPROCESSING)}, got {mode!r} ('standard': the "
            "library's scaling, 'raw': the values as the source ships them)"
        )
    offered = _offered(entry)
    if mode not in offered:
        listed = "; ".join(f"{m!r}: {d}" for m, d in offered.items())
        raise DataError(
            f"dataset {entry.name!r} cannot offer preprocessing {mode!r}: "
            f"{_refusal(entry, mode)}. It offers {listed} (or give the data as your own "
            ".npz/.csv file, which is fed as given)"
        )


def is_present(name: str, data_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether dataset `name` can be loaded from `data_dir` without fetching."""
    entry = _entry(name)
    return bool(entry.present(_root(data_dir) / name))


def load_dataset(
    name: str | os.PathLike[str], data_dir: str | os.PathLike[str] | None = None, **options: Any
) -> Dataset:
    """Load a registered dataset (or a user file, when `name` is a path) as a `Dataset`.

    Raises `DataError` for an unknown name (with a close match), an unknown option, an
    unknown or refused `preprocessing` value, or a dataset whose files are absent (saying how
    to fetch them). The returned dataset's `preprocessing` says what was done to the values.

    Every text dataset also takes `max_text_chars` (default :data:`MAX_TEXT_CHARS`; None: no
    cap): each longer text is cut to its first that many characters before tokenization, and
    the notes count them (:func:`cap_texts`).
    """
    name = os.fspath(name)
    if _looks_like_file(name):
        if "path" in options:
            raise DataError(f"got both a file name {name!r} and path=...; pass only one")
        options["path"] = name
        name = "file"
    cap_given = TEXT_CAP_OPTION in options
    cap = _check_text_cap(options.pop(TEXT_CAP_OPTION, MAX_TEXT_CHARS))
    entry = _entry(name)
    unknown = sorted(set(options) - set(entry.options))
    if unknown:
        accepted = ", ".join(f"{k}={v!r}" for k, v in entry.options.items()) or "none"
        raise DataError(
            f"dataset {name!r} does not accept option(s) {', '.join(unknown)}; "
            f"accepted options (with defaults): {accepted}"
            + (f"; text datasets also {TEXT_CAP_OPTION}={MAX_TEXT_CHARS}"
               if entry.kind == "text" or entry.name == "file" else "")
        )
    merged = {**entry.options, **options}
    mode = merged.pop("preprocessing")
    _check_preprocessing(entry, mode)  # before any file is read: a typo fails at once
    folder = _root(data_dir) / name
    if not entry.present(folder):
        manual = f" Offline, {entry.manual.format(folder=folder)}." if entry.manual else ""
        raise DataError(
            f"dataset {name!r} is not present in {folder}. Run `miaudit data fetch {name}` "
            f"(or miaudit.data.fetch_dataset({name!r}, data_dir=...)) first.{manual}"
        )
    if entry.preprocessing:  # loaders that declare none never receive the option
        merged["preprocessing"] = mode
    if cap_given and entry.name != "file" and entry.kind != "text":
        _not_text(name, entry.kind)  # before any file is read
    dataset = entry.loader(folder, **merged)
    if not dataset.preprocessing:  # else the loader stated it more precisely itself
        dataset = dataclasses.replace(dataset,
                                      preprocessing=f"{mode}: {_offered(entry)[mode]}")
    if dataset.kind == "text":
        return cap_texts(dataset, cap)
    if cap_given:
        _not_text(name, dataset.kind)
    return dataset


def _not_text(name: str, kind: str) -> None:
    raise DataError(f"dataset {name!r} loads as {kind} data: the option {TEXT_CAP_OPTION} "
                    f"applies to text datasets only; drop it")


def _check_text_cap(value: Any) -> int | None:
    """The option ``max_text_chars``: a whole number >= 1, or None (no cap)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DataError(
            f"option {TEXT_CAP_OPTION} must be a whole number of characters >= 1 (each text "
            f"is cut to that many before tokenization; default {MAX_TEXT_CHARS:,}) or null for "
            f"no cap; got {value!r}"
        )
    return value


def cap_texts(dataset: Dataset, cap: int | None = MAX_TEXT_CHARS) -> Dataset:
    """A text dataset with each text longer than ``cap`` characters cut to its first ``cap``
    (None: as it is), the count in its notes and preprocessing; the dataset itself when no
    text is that long."""
    if cap is None:
        return dataset
    texts = dataset.features
    long = [i for i, text in enumerate(texts) if len(text) > cap]
    if not long:
        return dataset
    longest = max(len(texts[i]) for i in long)
    cut = texts.copy()
    for i in long:
        cut[i] = texts[i][:cap]
    many = len(long) > 1
    note = (f"{len(long)} of {len(texts)} texts {'were' if many else 'was'} longer than "
            f"{cap:,} characters (the longest {longest:,}) and cut to {'their' if many else 'its'} "
            f"first {cap:,} before tokenization (data rows {long[:10]}"
            f"{' ...' if len(long) > 10 else ''}; option {TEXT_CAP_OPTION})")
    notes = f"{dataset.notes}; {note}" if dataset.notes else note
    done = f"texts over {cap:,} characters cut to their first {cap:,}"
    preprocessing = f"{dataset.preprocessing}; {done}" if dataset.preprocessing else done
    return dataclasses.replace(dataset, features=cut, notes=notes, preprocessing=preprocessing)


def fetch_dataset(
    name: str, data_dir: str | os.PathLike[str] | None = None, *, force: bool = False
) -> Path:
    """Obtain the files of dataset `name` into `data_dir/name`; return the folder used.

    Does nothing when the files are already present (unless `force`). Embedded datasets need
    no fetching.
    """
    entry = _entry(name)
    folder = _root(data_dir) / name
    if entry.fetcher is None:
        if name == "file":
            raise DataError("'file' datasets are your own files: there is nothing to fetch")
        return folder
    if not force and entry.present(folder):
        return entry.locate(folder)
    return entry.fetcher(folder)
