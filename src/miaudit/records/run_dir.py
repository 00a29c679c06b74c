"""Staged run directories: a hidden folder beside the run directory, committed only on
success, and what made the run in it (:class:`RunIdentity`).

A failed run leaves the previous run as it was. A run directory holding another run (another
command's, or another config's) is replaced only when the caller says so (``overwrite``).
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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miaudit.errors import ConfigError
from miaudit.io import current_umask, pid_alive, write_json

log = logging.getLogger(__name__)


# A run writes everything into a hidden staging folder beside its run directory and commits
# it only on success, so a failing or interrupted run never replaces (or mixes with) the
# files of the previous good run, and a failing first run leaves no folder at all.

_STAGING = ".staging-"  # marker in staging folder names: `.<run>.staging-<pid>-<random>`
_REPLACED = ".miaudit-replaced"  # inside the staging folder: old entries, deleted with it


def clean_stale_staging(out: str | os.PathLike) -> list[Path]:
    """Remove staging folders of `out` left by processes that no longer run (killed runs);
    return them. A staging folder is never read back, only deleted."""
    out = Path(out).absolute()
    removed = []
    if not out.parent.is_dir():
        return removed
    prefix = f".{out.name}{_STAGING}"
    for entry in out.parent.iterdir():
        if not entry.name.startswith(prefix) or not entry.is_dir():
            continue
        pid = entry.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


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
    ``stage``; on success the staged entries replace the same-named ones in ``out``, and the
    previous run's files (its summary.json ``files``) that the new run did not write are
    removed; on any exception (KeyboardInterrupt included) the staging folder is removed and
    ``out`` is left as it was (not even created for a first run).

    `keep`: paths never removed as stale (the inputs of the run, e.g. the bank it scores).

    `command`, `name`, `config` (and the config's `defaults`): what makes this run
    (:class:`RunIdentity`), recorded in its summary.json. With them, a folder holding another
    run (another command's, another config's, or one of an earlier version whose config does
    not tell) is refused on entering, before any work, unless `overwrite`; rerunning the same
    command and config replaces its own files as before.
    Without them nothing is checked. A folder without a run's summary.json (a first run, the
    user's own files) holds no run.
    """

    def __init__(
        self,
        out: str | os.PathLike,
        keep: tuple[str | os.PathLike, ...] = (),
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
        self._made: list[Path] = []  # parent folders this run created (removed on failure)
        self._replacing: str | None = None  # the other run being replaced, in words

    def check(self) -> None:
        """Refuse (ConfigError) to replace another run without `overwrite`; called on
        entering, and callable earlier."""
        self._replacing = None
        if self.identity is None:
            return
        previous = _summary(self.out)
        if previous is None:
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
                "(overwrite=True in Python) to replace it, or --out another folder."
            )
        self._replacing = what

    def __enter__(self) -> Path:
        self.check()  # before anything is created: a refusal costs nothing
        missing = []
        for parent in [self.out.parent, *self.out.parent.parents]:
            if parent.exists():
                break
            missing.append(parent)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._made = missing  # deepest first
        clean_stale_staging(self.out)
        stage = tempfile.mkdtemp(
            prefix=f".{self.out.name}{_STAGING}{os.getpid()}-", dir=self.out.parent
        )
        # mkdtemp makes 0700; a run dir is a normal folder
        os.chmod(stage, 0o777 & ~current_umask())
        self.path = Path(stage)
        return self.path

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: Any) -> None:
        if kind is None:
            try:
                self.commit()
            except BaseException:
                self.discard()  # what is left of the staging folder is of no use
                raise
        else:
            self.discard()

    def discard(self) -> None:
        """Remove the staging folder (and parent folders this run created)."""
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None
        for folder in self._made:
            with contextlib.suppress(OSError):  # not empty: something else uses it now
                folder.rmdir()

    def commit(self) -> None:
        """Move the staged run into the run directory (summary.json last: its presence marks
        a complete run)."""
        stage, out = self.path, self.out
        assert stage is not None, "commit() outside the `with` block"
        if self.identity is not None:
            self._record_identity(stage)
        if not out.exists():
            os.rename(stage, out)  # first run: one atomic rename
            self.path = None
            return
        new = sorted(p.name for p in stage.iterdir())
        listed = _listed_files(out)
        stale = [f for f in listed if f not in new and (out / f).resolve() not in self.keep]
        self._announce(listed, new, stale)
        trash = stage / _REPLACED
        trash.mkdir()

        def set_aside(name: str) -> None:
            if (out / name).exists() or (out / name).is_symlink():
                _move(out / name, trash / name)

        # the old summary.json goes first: a commit cut short leaves no summary, so the
        # folder reads as incomplete rather than as the old run
        set_aside("summary.json")
        for name in new:
            if name == "summary.json":
                continue
            if (stage / name).is_dir() or (out / name).is_dir():
                set_aside(name)  # a folder cannot be renamed onto a non-empty one
            _move(stage / name, out / name)
        for name in stale:
            set_aside(name)
        if "summary.json" in new:
            _move(stage / "summary.json", out / "summary.json")
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
        another one, which it replaces."""
        where = self.out
        if self._replacing is not None:
            replaced = [f for f in listed if f in new and f != "summary.json"]
            parts = [f"removed {_names(stale)}"] if stale else []
            parts += [f"replaced {_names(replaced)}"] if replaced else []
            log.warning("replacing the run in %s (%s; --overwrite)%s", where, self._replacing,
                        f": {'; '.join(parts)}" if parts else "")
        elif stale:
            log.warning("removed %s from %s: the previous run there wrote %s, this one does "
                        "not", _names(stale), where, "it" if len(stale) == 1 else "them")
