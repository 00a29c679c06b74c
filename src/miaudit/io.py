"""Atomic file writes: a temporary file beside the target, then rename.

A write interrupted at any point leaves either the old file or the new one, never a
half-written file that a rerun would trust. Run directories (staged, committed on success)
are :mod:`miaudit.records.run_dir`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
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
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
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


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` may still run (True when that cannot be told)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's) or unknown: never delete what may be in use
    return True
