"""Atomic file writes: a temporary file beside the target, then rename; and lock files.

A write interrupted at any point leaves either the old file or the new one, never a
half-written file that a rerun would trust. Run directories (staged, committed on success)
are :mod:`miaudit.records.run_dir`; :class:`PidLock` is the lock they are written under.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any


def current_umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


# The temporary files of atomic_path: `.<name>.<pid>-<random>.tmp` (before the pid was in the
# name: `.<name>.<random>.tmp`, then `pid` does not match).
TEMP_FILE = re.compile(r"^\.(?P<name>.+?)\.(?:(?P<pid>\d+)-)?[^.]+\.tmp$")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; rename it onto `path` on success.

    The temporary file is ``.<name>.<pid>-<random>.tmp`` (:data:`TEMP_FILE`): the writer's
    process id tells a cleaner (``miaudit cache prune``) whether its writer still runs.
    The file gets the permissions of a newly created file (0o666 less the umask), whoever
    wrote it: the block may replace the temporary file with one of its own mode."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp",
                               dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # set after the block: mkstemp makes 0600, and writers such as safetensors' save_file
        # create the file anew (0600 too), which would hide shared cache entries from others
        os.chmod(tmp_path, 0o666 & ~current_umask())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary file for writing; it replaces `path` only if the block succeeds."""
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as handle:
        yield handle


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


# --- staged run directories --------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` may still run (True when that cannot be told)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's) or unknown: never delete what may be in use
    return True


def _linux_start_time(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), on Linux; None elsewhere."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(line for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        ticks = int(stat.rpartition(")")[2].split()[19])  # field 22: starttime
        return int(boot.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


# --- lock files --------------------------------------------------------------------------
# A lock file is created atomically (O_CREAT | O_EXCL: of two processes exactly one creates
# it) and holds its holder's pid, command line, host and start time, so a refusal can say
# who holds it and a lock left by a killed process (its pid dead, on this host) can be told
# apart and taken over.

_HELD: set[str] = set()  # the lock files this process holds
_UNREADABLE_GRACE = 10.0  # seconds: a lock file still empty after this was left by a kill


class LockHeld(Exception):
    """The lock file `path` is held by a live process (`holder`: its record; None when it
    cannot be read)."""

    def __init__(self, path: Path, holder: dict[str, Any] | None) -> None:
        super().__init__(str(path))
        self.path, self.holder = path, holder

    def describe(self) -> str:
        """The holder in words: pid, command, host and since when."""
        h = self.holder
        if not h:
            return (f"a process that has not recorded itself in {self.path} (it may be writing "
                    "it just now)")
        return (f"pid {h.get('pid')} (`{h.get('command', '?')}`) on {h.get('host', '?')}, "
                f"since {h.get('started', '?')}")


def command_line() -> str:
    """This process's command line as a user would type it (``miaudit run x.yaml``)."""
    argv = list(sys.argv) or ["python"]
    argv[0] = Path(argv[0]).name or argv[0]
    text = shlex.join(argv)
    return text if len(text) <= 300 else text[:297] + "..."


@contextlib.contextmanager
def _folder_guard(folder: Path) -> Iterator[None]:
    """Mutual exclusion, between processes, for the few steps of taking over a stale lock in
    `folder` (an advisory flock on the folder, released by the kernel even on kill -9).
    Where flock is unavailable (Windows, some network filesystems) it guards nothing: a stale
    lock's removal then only re-checks, just before, that it is still the same file."""
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the flock


class PidLock:
    """A lock file holding ``{pid, command, host, started}`` as JSON.

    :meth:`acquire` creates it atomically or raises :class:`LockHeld` naming the live holder;
    a lock whose holder is dead (a pid that no longer runs on this host, or runs a process
    started after the lock was taken: a reused pid) is taken over, and its record returned
    so the caller can say so. :meth:`release` removes it (only while it is still ours)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.record = {"pid": os.getpid(), "command": command_line(),
                       "host": socket.gethostname(),
                       "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       "started_at": time.time()}
        self._bytes = (json.dumps(self.record) + "\n").encode("utf-8")
        self.held = False

    def _read(self) -> tuple[bytes, os.stat_result] | None:
        """The lock file's bytes and stat; None when it is gone."""
        try:
            with open(self.path, "rb") as handle:
                return handle.read(), os.fstat(handle.fileno())
        except FileNotFoundError:
            return None

    def _stale(self, holder: dict[str, Any] | None, info: os.stat_result) -> bool:
        """Whether the lock's holder is gone (never True for a live or unknown holder)."""
        if holder is None:  # never written: its creator died between creating and writing
            return time.time() - info.st_mtime > _UNREADABLE_GRACE
        pid = holder.get("pid")
        if not isinstance(pid, int) or holder.get("host") != socket.gethostname():
            return False  # another host's process: this one cannot tell whether it runs
        if pid == os.getpid():  # this very process: held unless it is not ours (a reused pid)
            return str(self.path) not in _HELD
        if not pid_alive(pid):
            return True
        started, since = _linux_start_time(pid), holder.get("started_at")
        # a process started after the lock was taken is not its holder: the pid was reused
        return started is not None and isinstance(since, (int, float)) and started > since + 2

    def acquire(self) -> dict[str, Any] | None:
        """Take the lock; return the record of a stale lock taken over (None when there was
        none). Raises :class:`LockHeld` when a live process holds it."""
        taken_over = None
        for _ in range(20):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                found = self._settled()
                if found is None:
                    continue  # released meanwhile: try again
                data, info, holder = found
                if not self._stale(holder, info):
                    raise LockHeld(self.path, holder) from None
                if self._remove_if_same(data, info):
                    taken_over = holder or {}
                continue
            try:
                os.write(fd, self._bytes)
            finally:
                os.close(fd)
            self.held = True
            _HELD.add(str(self.path))
            return taken_over
        found = self._settled()
        raise LockHeld(self.path, None if found is None else found[2])

    def _settled(self) -> tuple[bytes, os.stat_result, dict[str, Any] | None] | None:
        """The lock file as its holder wrote it: a lock just created is empty for an instant,
        so an empty or partial one is read again for up to a second."""
        for _ in range(20):
            read = self._read()
            if read is None:
                return None
            data, info = read
            try:
                holder = json.loads(data.decode("utf-8"))
                if isinstance(holder, dict):
                    return data, info, holder
            except (UnicodeDecodeError, ValueError):
                pass
            time.sleep(0.05)
        return data, info, None

    def _remove_if_same(self, data: bytes, info: os.stat_result) -> bool:
        """Remove the stale lock file read as (`data`, `info`), unless another process took
        it over first (then it is another file, or holds other bytes)."""
        with _folder_guard(self.path.parent):
            read = self._read()
            if read is None:
                return False
            now_data, now = read
            if (now_data, now.st_ino, now.st_mtime_ns) != (data, info.st_ino, info.st_mtime_ns):
                return False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            return True

    def release(self) -> None:
        """Remove the lock file, if this process still holds it."""
        if not self.held:
            return
        self.held = False
        _HELD.discard(str(self.path))
        read = self._read()
        if read is not None and read[0] == self._bytes:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
