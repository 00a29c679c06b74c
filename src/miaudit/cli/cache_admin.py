"""What a model cache folder holds, and removing what this code can no longer use
(``miaudit cache info | prune``).

Every cache key covers the code that made the model (:func:`miaudit.train.model_cache.cache_version`
for torch models: the file layout, the training code's digest and miaudit's version;
:meth:`miaudit.external.references.SklearnCache.version` for scikit-learn references, plus
scikit-learn's version), and every entry's json records those values. So an entry is
**reachable** when its json records this code's values (some key of this code is its key), and
**stale** otherwise: a key of this code never equals its key, so nothing will read it again.
Entries written before the values were recorded are stale.

The folder: ``<key>.safetensors`` + ``<key>.json`` (torch models, :mod:`miaudit.train.model_cache`;
a DP-SGD model trained with gradient canaries also has ``<key>.canaries.npz``, its record),
``sklearn/<key>.skops`` + ``<key>.json`` (scikit-learn references, :mod:`skops.io` files; the
``sklearn/<key>.joblib`` pickles of format 1 are listed as stale entries and pruned, never
loaded: no key of this code reaches them), temporary files of writes
in progress or killed (``.<key>.<ext>.<pid>-<random>.tmp``, :func:`miaudit.io.atomic_path`), and
``pretrained/`` (extracted pretrained weights, :mod:`miaudit.models.text`), which is not an entry
and is left alone, as is any other file.

Pruning is safe beside processes using the cache: it removes only complete stale entries (the
json first, so a reader sees a miss, never half an entry), corrupt entries and orphans older
than :data:`GRACE_SECONDS`, and temporary files whose writer no longer runs (the pid in the
name) and which are older than that too. Nothing the current code can reach is removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miaudit.formatting import plural
from miaudit.io import TEMP_FILE, pid_alive

# Files younger than this are never removed (a write may be under way): a write takes seconds.
GRACE_SECONDS = 300.0
SKLEARN_FOLDER = "sklearn"
_KEY = re.compile(r"^[0-9a-f]{64}$")

REACHABLE, STALE, CORRUPT = "reachable", "stale", "corrupt"


@dataclass(frozen=True)
class Store:
    """One kind of entry in a cache folder and the version fields this code writes."""

    kind: str  # "torch" or "sklearn"
    folder: Path
    suffix: str  # the weights file's
    current: dict[str, Any]  # the version fields of this code (in the key and the json)
    digest_field: str  # the field holding the code digest
    # weights files of earlier formats, which this code never reads: their entries are stale
    legacy: tuple[str, ...] = ()


@dataclass
class Entry:
    """A ``<key>.json`` and its weights file."""

    kind: str
    key: str
    paths: list[Path]  # the json first, then the weights file when there is one
    size: int
    mtime: float  # of the newest file
    status: str  # REACHABLE, STALE or CORRUPT
    recorded: dict[str, Any] = field(default_factory=dict)  # version fields (None: absent)
    reason: str = ""  # why stale or corrupt


@dataclass
class Loose:
    """A file that belongs to no entry: a temporary file or weights without their json."""

    kind: str  # "temp" or "weights"
    path: Path
    size: int
    removable: bool
    note: str


@dataclass
class Inventory:
    """A cache folder's entries, loose files, and what is not the cache's."""

    root: Path
    exists: bool
    verified: bool  # weights hashed against their json
    stores: list[Store] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    loose: list[Loose] = field(default_factory=list)
    other: list[tuple[Path, int]] = field(default_factory=list)  # not managed: left alone

    def with_status(self, status: str) -> list[Entry]:
        return [e for e in self.entries if e.status == status]

    def removable(self, now: float | None = None) -> tuple[list[Entry], list[Loose]]:
        """What ``prune`` removes: every stale entry, corrupt entries older than the grace
        period, and the removable loose files."""
        now = time.time() if now is None else now
        entries = [e for e in self.entries if e.status == STALE
                   or (e.status == CORRUPT and now - e.mtime >= GRACE_SECONDS)]
        return entries, [f for f in self.loose if f.removable]


def current_stores(root: Path) -> list[Store]:
    """The entry kinds of a cache folder ``root``, with this code's version fields."""
    from miaudit.train.model_cache import cache_version

    stores = [Store("torch", root, ".safetensors", cache_version(), "trainer_digest")]
    folder = root / SKLEARN_FOLDER
    if folder.is_dir():
        suffix = ".skops"
        try:
            from miaudit.external.references import SKLEARN_SUFFIX, SklearnCache

            current, suffix = SklearnCache.version(), SKLEARN_SUFFIX
        except ImportError:  # no scikit-learn here: no key of this code reaches its entries
            current = {"format": None, "fit_digest": None, "sklearn_version": None}
        # format 1's joblib pickles: listed and pruned, never loaded
        stores.append(Store("sklearn", folder, suffix, current, "fit_digest",
                            legacy=(".joblib",)))
    return stores


def _size(path: Path) -> int:
    if path.is_dir() and not path.is_symlink():
        return sum(_size(p) for p in path.iterdir())
    try:
        return path.lstat().st_size
    except FileNotFoundError:
        return 0


# Files stored beside a torch entry's weights, part of the entry (removed with it): a
# gradient-canary run's record (miaudit.train.gradient_records; its json holds its hash)
COMPANIONS = (".canaries.npz",)


def _entry(store: Store, key: str, verify: bool) -> Entry | None:
    meta_path, weights = store.folder / f"{key}.json", store.folder / f"{key}{store.suffix}"
    companions = [store.folder / f"{key}{c}" for c in COMPANIONS] if store.kind == "torch" else []
    legacy = [store.folder / f"{key}{s}" for s in store.legacy]
    paths, size, mtime = [], 0, 0.0
    for path in (meta_path, weights, *companions, *legacy):
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        paths.append(path)
        size += st.st_size
        mtime = max(mtime, st.st_mtime)
    if meta_path not in paths:
        return None  # removed since the folder was listed
    entry = Entry(store.kind, key, paths, size, mtime, CORRUPT)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        entry.reason = f"metadata unreadable ({type(exc).__name__})"
        return entry
    old = [p for p in legacy if p in paths]
    if old and weights not in paths:  # an entry of an earlier format: never read, so stale
        entry.status = STALE
        entry.recorded = ({name: meta.get(name) for name in store.current}
                          if isinstance(meta, dict) else {})
        entry.reason = (f"{old[0].suffix} pickle of an earlier format, never loaded (entries are "
                        f"{store.suffix} files now)")
        return entry
    if not isinstance(meta, dict) or "weights_sha256" not in meta:
        entry.reason = "metadata lacks weights_sha256"
        return entry
    if weights not in paths:
        entry.reason = "weights file missing"
        return entry
    if verify:
        digest = hashlib.sha256()
        try:
            with open(weights, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        except OSError as exc:
            entry.reason = f"weights unreadable ({exc.strerror or exc})"
            return entry
        if digest.hexdigest() != meta["weights_sha256"]:
            entry.reason = "weights file hash does not match its metadata"
            return entry
    entry.recorded = {name: meta.get(name) for name in store.current}
    differs = [name for name, value in store.current.items() if entry.recorded[name] != value]
    if not differs:
        entry.status = REACHABLE
    else:
        entry.status = STALE
        entry.reason = ("written before code versions were recorded"
                        if entry.recorded[store.digest_field] is None
                        else "other " + ", ".join(differs))
    return entry


def _loose_temp(path: Path, pid: str | None, now: float) -> Loose | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    age = now - st.st_mtime
    if pid is not None and (int(pid) == os.getpid() or pid_alive(int(pid))):
        return Loose("temp", path, st.st_size, False, f"its writer (pid {pid}) still runs")
    if age < GRACE_SECONDS:
        return Loose("temp", path, st.st_size, False,
                     f"younger than {GRACE_SECONDS / 60:g} min: a write may be under way")
    return Loose("temp", path, st.st_size, True, "left by a killed write")


def _scan_store(store: Store, inventory: Inventory, verify: bool, now: float) -> None:
    try:
        names = sorted(os.listdir(store.folder))
    except FileNotFoundError:
        return
    keys = {n[: -len(".json")] for n in names if n.endswith(".json")}
    for name in names:
        path = store.folder / name
        if store.kind == "torch" and name == SKLEARN_FOLDER and path.is_dir():
            continue  # a store of its own
        stem, dot, ext = name.partition(".")
        temp = TEMP_FILE.match(name)
        if temp is not None:
            key, _, ext = temp["name"].partition(".")
            if _KEY.match(key) and ext in ("json", store.suffix[1:], *(s[1:] for s in store.legacy),
                                           *(c[1:] for c in COMPANIONS)):
                found = _loose_temp(path, temp["pid"], now)
                if found is not None:
                    inventory.loose.append(found)
                continue
        elif _KEY.match(stem) and path.is_file() and not path.is_symlink():
            if dot + ext == ".json":
                entry = _entry(store, stem, verify)
                if entry is not None:
                    inventory.entries.append(entry)
                continue
            companion = store.kind == "torch" and dot + ext in COMPANIONS
            if dot + ext == store.suffix or companion or dot + ext in store.legacy:
                if stem not in keys:  # weights (or a record) whose json was never written
                    try:
                        st = path.stat()
                    except FileNotFoundError:
                        continue
                    old = now - st.st_mtime >= GRACE_SECONDS
                    inventory.loose.append(Loose(
                        "weights", path, st.st_size, old,
                        "weights without metadata (a write killed before its json)" if old
                        else f"younger than {GRACE_SECONDS / 60:g} min: its json may follow"))
                continue
        inventory.other.append((path, _size(path)))


def scan(root: str | os.PathLike[str], verify: bool = False, now: float | None = None) -> Inventory:
    """The inventory of the cache folder ``root`` (``verify``: hash every weights file)."""
    root = Path(root)
    inventory = Inventory(root, root.is_dir(), verify)
    if not inventory.exists:
        return inventory
    now = time.time() if now is None else now
    inventory.stores = current_stores(root)
    for store in inventory.stores:
        _scan_store(store, inventory, verify, now)
    return inventory


@dataclass
class Removed:
    """What :func:`prune` removed (or would remove, dry run)."""

    entries: list[Entry] = field(default_factory=list)
    loose: list[Loose] = field(default_factory=list)
    freed: int = 0  # bytes
    failed: list[str] = field(default_factory=list)  # files that could not be removed, and why

    def __iter__(self) -> Iterator[Entry | Loose]:
        yield from self.entries
        yield from self.loose


def _unlink(path: Path, removed: Removed) -> int:
    try:
        size = path.stat().st_size
        path.unlink()
    except FileNotFoundError:  # another process removed it first
        return 0
    except OSError as exc:  # e.g. another user's file in a shared cache
        removed.failed.append(f"{path}: {exc.strerror or exc}")
        return 0
    return size


def prune(inventory: Inventory, dry_run: bool = False, now: float | None = None) -> Removed:
    """Remove the stale entries, old corrupt entries and removable loose files of
    ``inventory`` (see :meth:`Inventory.removable`); an entry's json goes first, so no reader
    ever finds a json without its weights. ``dry_run``: remove nothing, say what would go."""
    entries, loose = inventory.removable(now)
    removed = Removed(entries, loose)
    if dry_run:
        removed.freed = sum(e.size for e in entries) + sum(f.size for f in loose)
        return removed
    for entry in entries:
        assert entry.status != REACHABLE
        for path in entry.paths:  # the json first
            removed.freed += _unlink(path, removed)
    for item in loose:
        removed.freed += _unlink(item.path, removed)
    return removed


# --- text -------------------------------------------------------------------------------------


def human_size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError  # unreachable


def _version_text(store: Store) -> str:
    values = store.current
    digest = values.get(store.digest_field)
    parts = [f"{'trainer' if store.kind == 'torch' else 'fit'} {str(digest)[:12]}",
             f"miaudit {values.get('miaudit_version')}", f"format {values.get('format')}"]
    if "sklearn_version" in values:
        parts.append(f"scikit-learn {values['sklearn_version']}")
    return f"{store.kind}: " + ", ".join(parts)


def describe(inventory: Inventory) -> list[str]:
    """``miaudit cache info``'s lines."""
    if not inventory.exists:
        return [f"no model cache at {inventory.root}"]
    entries = inventory.entries
    reachable, stale = inventory.with_status(REACHABLE), inventory.with_status(STALE)
    corrupt = inventory.with_status(CORRUPT)
    orphans = [f for f in inventory.loose if f.removable]
    busy = [f for f in inventory.loose if not f.removable]
    size = sum(e.size for e in entries)
    lines = [
        f"model cache {inventory.root}",
        f"  {plural(len(entries), 'entry', 'entries')}, {human_size(size)}: "
        f"{len(reachable)} reachable by this code ({human_size(sum(e.size for e in reachable))}),"
        f" {len(stale)} stale ({human_size(sum(e.size for e in stale))}), "
        f"{len(corrupt)} corrupt",
        f"  orphan files: {len(orphans)} ({human_size(sum(f.size for f in orphans))})"
        + (f"; files that may be in use (kept): {len(busy)}" if busy else ""),
        "  this code: " + "; ".join(_version_text(s) for s in inventory.stores),
    ]
    groups: dict[tuple[Any, ...], list[Entry]] = {}
    fields = {s.kind: s for s in inventory.stores}
    for entry in reachable + stale:
        store = fields[entry.kind]
        rec = entry.recorded
        groups.setdefault((entry.kind, rec.get(store.digest_field), rec.get("miaudit_version"),
                           rec.get("format"), rec.get("sklearn_version"), entry.status,
                           entry.reason), []).append(entry)
    if groups:
        lines += ["", f"  {'kind':8s} {'code digest':13s} {'miaudit':8s} {'format':7s} "
                      f"{'entries':>7s} {'size':>9s}  status"]
        order = sorted(groups, key=lambda g: (g[0] != "torch", g[5] != REACHABLE,
                                              -len(groups[g])))
        for kind, digest, version, fmt, sk, status, reason in order:
            members = groups[(kind, digest, version, fmt, sk, status, reason)]
            shown = "(none)" if digest is None else str(digest)[:12]
            note = "reachable" if status == REACHABLE else f"stale: {reason}"
            if sk is not None:
                note += f" (scikit-learn {sk})"
            lines.append(f"  {kind:8s} {shown:13s} {str(version):8s} {str(fmt):6s} "
                         f"{len(members):7d} {human_size(sum(e.size for e in members)):>9s}  "
                         f"{note}")
    details = [f"  corrupt {e.kind} entry {e.key[:12]}: {e.reason}" for e in corrupt]
    details += [f"  {f.path.name}: {f.note}" for f in inventory.loose]
    details += [f"  not managed by prune: {p.name}{'/' if p.is_dir() else ''} "
                f"({human_size(n)})" for p, n in inventory.other]
    if details:
        lines += ["", *details]
    to_go, loose = inventory.removable()
    if to_go or loose:
        freed = sum(e.size for e in to_go) + sum(f.size for f in loose)
        lines += ["", f"`miaudit cache prune` would remove "
                      f"{plural(len(to_go), 'entry', 'entries')} and "
                      f"{plural(len(loose), 'orphan file')}, freeing {human_size(freed)}"]
    return lines


def _removed_line(item: Entry | Loose) -> str:
    if isinstance(item, Entry):
        return (f"  {item.status} {item.kind} entry {item.key} "
                f"({human_size(item.size)}): {item.reason}")
    return f"  {item.path.name} ({human_size(item.size)}): {item.note}"


def describe_prune(inventory: Inventory, removed: Removed, dry_run: bool) -> list[str]:
    """``miaudit cache prune``'s lines."""
    if not inventory.exists:
        return [f"no model cache at {inventory.root}: nothing to prune"]
    verb = "would remove" if dry_run else "removed"
    lines = [f"{verb}: {_removed_line(item).strip()}" for item in removed]
    kept = inventory.with_status(REACHABLE)
    lines.append(
        f"{'dry run: ' if dry_run else ''}{verb} "
        f"{plural(len(removed.entries), 'entry', 'entries')} and "
        f"{plural(len(removed.loose), 'orphan file')} from {inventory.root}, "
        f"{'freeing' if dry_run else 'freed'} {human_size(removed.freed)}; kept "
        f"{plural(len(kept), 'reachable entry', 'reachable entries')} "
        f"({human_size(sum(e.size for e in kept))})")
    lines += [f"could not remove {failure}" for failure in removed.failed]
    skipped = [f for f in inventory.loose if not f.removable]
    skipped_corrupt = [e for e in inventory.with_status(CORRUPT) if e not in removed.entries]
    for f in skipped:
        lines.append(f"kept {f.path.name}: {f.note}")
    for e in skipped_corrupt:
        lines.append(f"kept corrupt entry {e.key[:12]} for now: younger than "
                     f"{GRACE_SECONDS / 60:g} min")
    return lines
