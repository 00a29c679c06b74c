"""Staged run directories: a hidden folder beside the run directory, swapped in whole only on
success, under a lock; and what made the run in it (:class:`RunIdentity`).

A failed or killed run leaves the previous run as it was. A run directory holding another run
(another command's, or another config's), or files that are no miaudit run's, is written
into only when the caller says so (``overwrite``), decided under the run directory's lock so
that two runs cannot both pass the check.

The life of a run into ``runs/NAME`` (every hidden entry beside it, in ``runs/``)::

    .NAME.miaudit-lock          taken atomically: {pid, command, host, started}; a second run
                                is refused naming the holder; a dead holder's is taken over
    (recover)                   the leftovers of a killed run are put right (below)
    (check)                     another run, or a folder of no run, refused without overwrite
    .NAME.staging-PID-XXXX/     the run writes here; on success it gets, hard-linked (copied
                                where links fail), the entries of runs/NAME the new run keeps
                                (kept inputs, the user's own files), so it is the whole new
                                folder
    runs/NAME -> .NAME.old-PID  the swap: two renames; then the old folder is deleted
    .NAME.staging-... -> runs/NAME

Recovery (on the next start, under the lock, before the check), of a run killed:
- before the first rename: its staging folder is deleted; runs/NAME is the old run;
- between the renames (runs/NAME missing, .NAME.old-PID present): the old folder is renamed
  back: runs/NAME is the whole old run, the killed run's staging folder is deleted (a run
  that did not finish, and never said it did, leaves the previous one);
- after the second rename (both present): runs/NAME is the whole new run; .NAME.old-PID is
  deleted.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miaudit.errors import ConfigError
from miaudit.io import LockHeld, PidLock, current_umask, pid_alive, write_json

log = logging.getLogger(__name__)


_STAGING = ".staging-"  # marker in staging folder names: `.<run>.staging-<pid>-<random>`
_OLD = ".old-"  # the previous run, set aside during the swap: `.<run>.old-<pid>`
_LOCK = ".miaudit-lock"  # the run directory's lock: `.<run>.miaudit-lock`, beside it
_REPLACED = ".miaudit-replaced-"  # inside a mount point's run directory: its old entries
_LOCK_PATIENCE = 1.0  # seconds a held lock is waited for before refusing

# Test hook: called with the name of each step of entering and committing ("locked",
# "checked", "carrying", "staged", "set-aside", "swapped", "committed"), so that a test can
# kill the process between two of them (os._exit) or hold it there. None in normal use.
step_hook: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if step_hook is not None:
        step_hook(name)


def check_run_name(name: Any, where: str = "name") -> None:
    """A run's name names its folder, runs/<name>: refuse (ConfigError) anything but a plain
    folder name (no separators, no `..`, not empty, not hidden)."""
    why = None
    if not isinstance(name, str) or not name.strip():
        why = "is empty" if isinstance(name, str) or name is None else "is not text"
    elif "/" in name or "\\" in name:
        why = "contains a path separator"
    elif name.startswith("."):
        why = "starts with '.' (`.` and `..` are not folders of runs/; hidden names are " \
              "miaudit's own)"
    elif name != name.strip() or any(ord(c) < 32 for c in name):
        why = "starts or ends with a space, or holds a control character"
    if why is not None:
        raise ConfigError(
            f"{where} {name!r} {why}: a run's name is a plain folder name, its folder "
            "runs/<name>, e.g. `name: digits-mlp`. To write the run somewhere else give "
            "--out FOLDER (output: FOLDER in the config). Nothing was written.")


def _leftovers(out: Path, marker: str) -> list[tuple[Path, int]]:
    """The entries `.<out.name><marker><pid>...` beside `out`, with their pids."""
    pattern = re.compile(rf"^\.{re.escape(out.name)}{re.escape(marker)}(\d+)(?:-[^./\\]*)?$")
    found = []
    with contextlib.suppress(OSError):
        for entry in out.parent.iterdir():
            match = pattern.match(entry.name)
            if match:
                found.append((entry, int(match.group(1))))
    return found


def clean_stale_staging(out: str | os.PathLike[str]) -> list[Path]:
    """Remove staging folders of `out` left by processes that no longer run (killed runs);
    return them. A staging folder is never read back, only deleted."""
    out = Path(out).absolute()
    removed = []
    for entry, pid in _leftovers(out, _STAGING):
        if entry.is_dir() and pid != os.getpid() and not pid_alive(pid):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def recover_run_dir(out: str | os.PathLike[str]) -> list[str]:
    """Put right what a killed run left of `out` (see the module's docstring): the whole old
    run back, or the whole new run kept; staging folders and set-aside folders deleted.
    Only ever called under `out`'s lock (no live run is writing it), so every leftover is a
    dead run's, whatever its pid. Returns what it did, in words (also logged)."""
    out = Path(out).absolute()
    done = []
    asides = sorted(_leftovers(out, _OLD), key=lambda e: e[0].stat().st_mtime, reverse=True)
    asides = [(p, pid) for p, pid in asides if p.is_dir() and not p.is_symlink()]
    if asides and not out.exists() and not out.is_symlink():
        (aside, pid), asides = asides[0], asides[1:]
        os.rename(aside, out)
        done.append(f"restored the previous run in {out}: a run (pid {pid}) was killed while "
                    f"replacing it, after setting it aside as {aside.name}; that run's results "
                    "were discarded")
    for aside, pid in asides:
        shutil.rmtree(aside, ignore_errors=True)
        done.append(f"removed {aside}: a run (pid {pid}) was killed after it had replaced the "
                    f"run in {out}, which is that run's, whole")
    for entry, pid in _leftovers(out, _STAGING):
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
            done.append(f"removed {entry.name}: the unfinished results of a killed run "
                        f"(pid {pid})")
    if out.is_dir():
        for entry in out.iterdir():
            if entry.name.startswith(_REPLACED) and entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
                done.append(f"removed {entry}: left by a run killed while replacing the run "
                            "in its folder (a mount point, replaced file by file)")
    for line in done:
        log.warning("%s", line)
    return done


def _carry(src: Path, dst: Path) -> None:
    """Put `src` (an entry of the old run directory the new run keeps) at `dst` in the staging
    folder, leaving `src` as it is: a hard link (copied where links fail)."""
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(src, dst)


def _link_or_copy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _move(src: Path, dst: Path) -> None:
    """Rename `src` onto `dst`; across filesystems (a run directory that is a mount point)
    fall back to copying, which is not atomic but still only runs after the run succeeded."""
    try:
        os.replace(src, dst)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.move(src, dst)


def _summary(out: Path) -> dict[str, Any] | None:
    """The summary.json of the run in `out`, or None when `out` holds no complete run (no
    summary.json, or one that is not a run's: unreadable, or without its file list)."""
    try:
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or not isinstance(summary.get("files"), list):
        return None
    return summary


def _listed_files(out: Path) -> list[str]:
    """The files of the run in `out`, as its summary.json lists them (plain names only)."""
    summary = _summary(out)
    if summary is None:
        return []
    files = summary["files"]
    # only entries directly in the run directory: a corrupt list must not reach elsewhere
    return [f for f in files if isinstance(f, str) and f and f == Path(f).name
            and f not in (".", "..")]


# --- what made a run ---------------------------------------------------------------------
# summary.json records the command and the config of the run in its folder, so a later run
# can tell a rerun of the same config (replaced silently, as `make demo` twice expects) from
# another run (refused unless the caller passes overwrite=True).

API_TEMP_PREFIX = "miaudit-api-"  # the Python API's folder for arrays given in memory
# where a run reads and writes, not what it measures: a rerun elsewhere is the same run
_LOCATION_KEYS = frozenset({"output", "cache_dir", "data_dir", "device"})
_API_TEMP = re.compile(r"^.*[\\/]" + re.escape(API_TEMP_PREFIX) + r"[^\\/]*(?=[\\/])")


_NO_DEFAULT = object()


def _stable(value: Any, default: Any = _NO_DEFAULT) -> Any:
    """`value` less its location keys and the entries equal to their `default` (so a field a
    later version adds, at its default, leaves the identity of a config as it was), with the
    API's temporary folder (a new one per call) named alike every time."""
    if isinstance(value, Mapping):
        defaults = default if isinstance(default, Mapping) else {}
        out = {}
        for key, item in value.items():
            if key in _LOCATION_KEYS:
                continue
            theirs = defaults.get(key, _NO_DEFAULT)
            if isinstance(item, Mapping) and isinstance(theirs, Mapping):
                item = _stable(item, theirs)
                if item:  # a section left at its defaults says nothing
                    out[str(key)] = item
            elif theirs is _NO_DEFAULT or _stable(item) != _stable(theirs):
                out[str(key)] = _stable(item)
        return out
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    if isinstance(value, str):
        return _API_TEMP.sub("<in memory>", value)
    return value


@dataclass(frozen=True)
class RunIdentity:
    """What made a run: the command (``run``, ``audit``, ``attack``), the run's name and a
    digest of its config (less where it reads and writes: output, cache_dir, data_dir,
    device; and less the values equal to the config's `defaults`, when given)."""

    command: str
    name: str
    config_digest: str

    @classmethod
    def of(
        cls, command: str, name: str, config: Mapping[str, Any],
        defaults: Mapping[str, Any] | None = None,
    ) -> RunIdentity:
        stable = _stable(config, {} if defaults is None else defaults)
        text = json.dumps(stable, sort_keys=True, separators=(",", ":"), default=str)
        return cls(command, str(name), hashlib.sha256(text.encode("utf-8")).hexdigest())

    @classmethod
    def from_summary(
        cls, summary: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
    ) -> RunIdentity | None:
        """The identity a summary.json records; for a run of an earlier version, which did
        not record one, the identity its config and name give (so rerunning the same config
        into its folder keeps working after an upgrade); None when there is none to tell."""
        found = summary.get("run_identity")
        if isinstance(found, Mapping):
            try:
                return cls(str(found["command"]), str(found["name"]),
                           str(found["config_digest"]))
            except KeyError:
                return None
        config, name = summary.get("config"), summary.get("run")
        if "run_identity" in summary or not isinstance(config, Mapping) or not isinstance(
                name, str):
            return None
        # `miaudit audit` records its target's kind, `miaudit run` its design
        return cls.of("audit" if "target_kind" in summary else "run", name, config, defaults)

    def to_dict(self) -> dict[str, str]:
        return {"command": self.command, "name": self.name, "config_digest": self.config_digest}

    def describe(self) -> str:
        return f"'{self.name}', made by `miaudit {self.command}`"


def _describe_previous(summary: Mapping[str, Any], theirs: RunIdentity | None,
                       ours: RunIdentity) -> str:
    """The run a summary.json belongs to (`theirs`, its identity), in words, as it differs
    from `ours`."""
    if theirs is None:
        name = summary.get("run")
        named = f"'{name}', " if isinstance(name, str) and name else ""
        return (f"{named}made by an earlier miaudit version (its summary.json records no "
                "command or config)")
    if theirs.command == ours.command:
        return f"{theirs.describe()} with a different config"
    return theirs.describe()


def _names(names: list[str], most: int = 6) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


class StagedRunDir:
    """A run directory written as a whole: ``with StagedRunDir(out) as stage:`` write into
    ``stage``; on success ``stage`` becomes ``out``, swapped in by renames (see the module's
    docstring), with the entries of the previous ``out`` that the new run keeps; on any
    exception (KeyboardInterrupt included) the staging folder is removed and ``out`` is left
    as it was (not even created for a first run); a kill at any point leaves either, put
    right on the next start (:func:`recover_run_dir`).

    The new folder keeps, of the previous one, every entry it did not write itself except the
    previous run's files (its summary.json ``files``) that it does not write again: the user's
    own files, and `keep`: paths never removed as stale (the inputs of the run, e.g. the bank
    it scores).

    Entering takes the lock ``.<name>.miaudit-lock`` beside ``out`` (not inside: ``out`` may
    not exist yet, and is renamed during the swap), held until the run is committed or
    discarded; a run into the same folder meanwhile is refused (ConfigError naming the
    holder), and the checks below are decided under it.

    `command`, `name`, `config` (and the config's `defaults`): what makes this run
    (:class:`RunIdentity`), recorded in its summary.json. With them, a folder holding another
    run (another command's, another config's, or one of an earlier version whose config does
    not tell), or a non-empty folder holding no miaudit run (the user's own files, other than
    the run's `keep` inputs), is refused on entering, before any work, unless `overwrite`;
    rerunning the same command and config replaces its own run as before. Without them
    nothing is checked.
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        keep: tuple[str | os.PathLike[str], ...] = (),
        *,
        command: str | None = None,
        name: str = "",
        config: Mapping[str, Any] | None = None,
        defaults: Mapping[str, Any] | None = None,
        overwrite: bool = False,
    ) -> None:
        self.out = Path(out).absolute()
        if self.out.is_symlink():  # stage beside the real folder: renames stay on its disk
            self.out = self.out.resolve()
        if not self.out.name or self.out.name in (".", ".."):
            raise ConfigError(f"{out!s} cannot be a run directory: name a folder, e.g. runs/x.")
        if self.out.exists() and not self.out.is_dir():
            raise ConfigError(f"run directory {self.out} is a file; give another output folder.")
        self.keep = {Path(p).resolve() for p in keep}
        self.defaults = defaults
        self.identity = (None if command is None
                         else RunIdentity.of(command, name, config or {}, defaults))
        self.overwrite = overwrite
        self.path: Path | None = None
        self.lock_path = self.out.parent / f".{self.out.name}{_LOCK}"
        self._lock: PidLock | None = None
        self._made: list[Path] = []  # parent folders this run created (removed on failure)
        self._replacing: str | None = None  # the other run being replaced, in words
        self._foreign: list[str] = []  # the entries of a folder of no run written into

    def check(self) -> None:
        """Refuse (ConfigError) to replace another run, or to write into a folder of files of
        no miaudit run, without `overwrite`; called on entering (again under the lock), and
        callable earlier, for a refusal before any work. Called without the lock, it takes
        the lock for a moment (refused while another run holds it) to put right what a killed
        run left (:func:`recover_run_dir`), so that it judges the folder as recovered."""
        self._replacing, self._foreign = None, []
        if self._lock is None and self.out.parent.is_dir():
            self._acquire()
            try:
                recover_run_dir(self.out)
            finally:
                self._release()
        if self.identity is None:
            return
        previous = _summary(self.out)
        if previous is None:
            self._check_foreign()
            return
        theirs = RunIdentity.from_summary(previous, self.defaults)
        if theirs == self.identity:
            return
        what = _describe_previous(previous, theirs, self.identity)
        if not self.overwrite:
            files = _listed_files(self.out)
            raise ConfigError(
                f"{self.out} already holds another run: {what}. This `miaudit "
                f"{self.identity.command}` would replace its files"
                f"{f' ({_names(files)})' if files else ''}. Give --overwrite "
                "(overwrite=True in Python) to replace it, or --out another folder. Nothing "
                "was written."
            )
        self._replacing = what

    def _check_foreign(self) -> None:
        """A non-empty folder of no miaudit run (the user's own files) is written into only
        with `overwrite`; the run's own inputs (`keep`) and miaudit's leftovers do not count."""
        assert self.identity is not None
        if not self.out.is_dir():
            return
        found = sorted(e.name for e in self.out.iterdir()
                       if not e.name.startswith(_REPLACED) and e.resolve() not in self.keep)
        if not found:
            return
        if not self.overwrite:
            raise ConfigError(
                f"{self.out} is not empty and holds no miaudit run: it holds "
                f"{_names(found)}. This `miaudit {self.identity.command}` would write its "
                "files into it, replacing any of the same names. Give --out a new or empty "
                "folder, or --overwrite (overwrite=True in Python) to write into this one (its "
                "other files are kept). Nothing was written."
            )
        self._foreign = found

    def __enter__(self) -> Path:
        self.check()  # before anything is created: a refusal costs nothing
        missing = []
        for parent in [self.out.parent, *self.out.parent.parents]:
            if parent.exists():
                break
            missing.append(parent)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._made = missing  # deepest first
        try:
            self._acquire()
            _step("locked")
            recover_run_dir(self.out)  # a killed run's half-state, before deciding
            self.check()  # decided again under the lock: no run can slip in before the commit
            stage = tempfile.mkdtemp(
                prefix=f".{self.out.name}{_STAGING}{os.getpid()}-", dir=self.out.parent
            )
        except BaseException:
            self.discard()
            raise
        # mkdtemp makes 0700; a run dir is a normal folder
        os.chmod(stage, 0o777 & ~current_umask())
        self.path = Path(stage)
        _step("checked")
        return self.path

    def _acquire(self) -> None:
        """Take the run directory's lock, or refuse (ConfigError naming its holder)."""
        lock = PidLock(self.lock_path)
        # another run's check holds the lock for an instant: wait that long before refusing
        deadline = time.monotonic() + _LOCK_PATIENCE
        while True:
            try:
                stale = lock.acquire()
                break
            except LockHeld as held:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                raise ConfigError(
                    f"{self.out} is being written by another miaudit run: {held.describe()}. "
                    "Wait for it to finish and run again (its run is then another run: "
                    "--overwrite to replace it), or give --out another folder. If no such run "
                    f"is going on, delete the lock file {self.lock_path}. Nothing was written."
                ) from None
        self._lock = lock
        if stale is not None:
            log.warning(
                "took over the lock %s of a miaudit run that no longer runs (pid %s, `%s`, "
                "since %s): it was killed or crashed", self.lock_path, stale.get("pid", "?"),
                stale.get("command", "?"), stale.get("started", "?"))

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: Any) -> None:
        if kind is None:
            try:
                self.commit()
            except BaseException:
                self.discard()  # what is left of the staging folder is of no use
                raise
            self._release()
        else:
            self.discard()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def discard(self) -> None:
        """Remove the staging folder, release the lock (and remove parent folders this run
        created)."""
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None
        self._release()
        for folder in self._made:
            with contextlib.suppress(OSError):  # not empty: something else uses it now
                folder.rmdir()

    def commit(self) -> None:
        """Make the staged run the run directory: the entries of the old one it keeps carried
        into it, then two renames (old aside, new in), then the old one deleted."""
        stage, out = self.path, self.out
        assert stage is not None, "commit() outside the `with` block"
        if self.identity is not None:
            self._record_identity(stage)
        if not out.exists():
            _step("staged")
            os.rename(stage, out)  # first run: one atomic rename
            self.path = None
            _step("swapped")
            return
        new = sorted(p.name for p in stage.iterdir())
        listed = _listed_files(out)
        stale = [f for f in listed if f not in new and (out / f).resolve() not in self.keep]
        carried = sorted(e.name for e in out.iterdir() if e.name not in new
                         and e.name not in stale and not e.name.startswith(_REPLACED))
        self._announce(listed, new, stale)
        if os.path.ismount(out):
            self._commit_in_place(new, stale)
            return
        for name in carried:
            _carry(out / name, stage / name)
            _step("carrying")
        _step("staged")
        aside = out.parent / f".{out.name}{_OLD}{os.getpid()}"
        try:
            os.rename(out, aside)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EBUSY):
                raise
            # a mount point not seen as one (a bind mount of a folder): file by file
            for name in carried:
                _remove(stage / name)
            self._commit_in_place(new, stale)
            return
        _step("set-aside")
        try:
            os.rename(stage, out)
        except BaseException:
            os.rename(aside, out)  # the old run back, whole
            raise
        self.path = None
        _step("swapped")
        shutil.rmtree(aside, ignore_errors=True)
        _step("committed")

    def _commit_in_place(self, new: list[str], stale: list[str]) -> None:
        """Move the staged entries into `out` one by one, for a run directory that is a mount
        point (it cannot be renamed; the staging folder, beside it, is on another filesystem):
        not atomic (a kill midway leaves a mix, without the new summary.json), but still only
        after the run succeeded. The old summary.json goes first, the new one last: a folder
        cut short reads as no complete run."""
        stage, out = self.path, self.out
        assert stage is not None
        trash = out / f"{_REPLACED}{os.getpid()}"
        trash.mkdir()

        def set_aside(name: str) -> None:
            if (out / name).exists() or (out / name).is_symlink():
                os.replace(out / name, trash / name)

        set_aside("summary.json")
        for name in new:
            if name == "summary.json":
                continue
            set_aside(name)
            _move(stage / name, out / name)
        for name in stale:
            set_aside(name)
        if "summary.json" in new:
            _move(stage / "summary.json", out / "summary.json")
        shutil.rmtree(trash, ignore_errors=True)
        shutil.rmtree(stage, ignore_errors=True)
        self.path = None

    def _record_identity(self, stage: Path) -> None:
        """Add the run's identity to the staged summary.json (its file list stays last)."""
        assert self.identity is not None
        path = stage / "summary.json"
        summary = _summary(stage)
        if summary is None:
            return  # no report was written: nothing marks the folder as a run
        files = summary.pop("files")
        write_json(path, {**summary, "run_identity": self.identity.to_dict(), "files": files})

    def _announce(self, listed: list[str], new: list[str], stale: list[str]) -> None:
        """Say which of the previous run's files this commit removes, and, when that run was
        another one, which it replaces; in a folder of no run, which of its files."""
        where = self.out
        if self._replacing is not None:
            replaced = [f for f in listed if f in new and f != "summary.json"]
            parts = [f"removed {_names(stale)}"] if stale else []
            parts += [f"replaced {_names(replaced)}"] if replaced else []
            log.warning("replacing the run in %s (%s; --overwrite)%s", where, self._replacing,
                        f": {'; '.join(parts)}" if parts else "")
        elif self._foreign:
            replaced = [f for f in self._foreign if f in new]
            log.warning("writing into %s, which held no miaudit run (--overwrite)%s", where,
                        f": replaced {_names(replaced)}" if replaced else
                        ": none of its files replaced")
        elif stale:
            log.warning("removed %s from %s: the previous run there wrote %s, this one does "
                        "not", _names(stale), where, "it" if len(stale) == 1 else "them")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
