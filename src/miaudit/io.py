"""Atomic file writes (a temporary file beside the target, then rename) and staged run
directories (a hidden folder beside the run directory, committed only on success).

A run interrupted at any point leaves either the old file or the new one, never a
half-written file that a rerun would trust; a failed run leaves the previous run as it was.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from miaudit.errors import ConfigError


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; rename it onto `path` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """Open a temporary file for writing; it replaces `path` only if the block succeeds."""
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as handle:
        yield handle


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


# --- staged run directories --------------------------------------------------------------
# A run writes everything into a hidden staging folder beside its run directory and commits
# it only on success, so a failing or interrupted run never replaces (or mixes with) the
# files of the previous good run, and a failing first run leaves no folder at all.

_STAGING = ".staging-"  # marker in staging folder names: `.<run>.staging-<pid>-<random>`
_REPLACED = ".miaudit-replaced"  # inside the staging folder: old entries, deleted with it


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's) or unknown: never delete what may be in use
    return True


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
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
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


def _listed_files(out: Path) -> list[str]:
    """The files of the run in `out`, as its summary.json lists them (plain names only)."""
    try:
        files = json.loads((out / "summary.json").read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if not isinstance(files, list):
        return []
    # only entries directly in the run directory: a corrupt list must not reach elsewhere
    return [f for f in files if isinstance(f, str) and f and f == Path(f).name
            and f not in (".", "..")]


class StagedRunDir:
    """A run directory written as a whole: ``with StagedRunDir(out) as stage:`` write into
    ``stage``; on success the staged entries replace the same-named ones in ``out``, and the
    previous run's files (its summary.json ``files``) that the new run did not write are
    removed; on any exception (KeyboardInterrupt included) the staging folder is removed and
    ``out`` is left as it was (not even created for a first run).

    `keep`: paths never removed as stale (the inputs of the run, e.g. the bank it scores).
    """

    def __init__(self, out: str | os.PathLike, keep: tuple[str | os.PathLike, ...] = ()) -> None:
        self.out = Path(out).absolute()
        if self.out.is_symlink():  # stage beside the real folder: renames stay on its disk
            self.out = self.out.resolve()
        if not self.out.name or self.out.name in (".", ".."):
            raise ConfigError(f"{out!s} cannot be a run directory: name a folder, e.g. runs/x.")
        if self.out.exists() and not self.out.is_dir():
            raise ConfigError(f"run directory {self.out} is a file; give another output folder.")
        self.keep = {Path(p).resolve() for p in keep}
        self.path: Path | None = None
        self._made: list[Path] = []  # parent folders this run created (removed on failure)

    def __enter__(self) -> Path:
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
        os.chmod(stage, 0o777 & ~_umask())  # mkdtemp makes 0700; a run dir is a normal folder
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
        if not out.exists():
            os.rename(stage, out)  # first run: one atomic rename
            self.path = None
            return
        new = sorted(p.name for p in stage.iterdir())
        stale = [f for f in _listed_files(out)
                 if f not in new and (out / f).resolve() not in self.keep]
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
