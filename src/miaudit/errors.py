"""Error types. Every error says what is wrong and how to fix it.

The command line exits 2 for a :class:`MiauditError` (bad input: fix it and rerun) unless the
error is a fault of the system the input was fine for (a full disk, an I/O error, a network
that does not answer), which exits 1: the error's ``exit_code``. :func:`describe_os_error`
puts an ``OSError`` (or an error carrying an OS error number, as safetensors' do) into words:
what happened, to which path, and what to do.
"""

from __future__ import annotations

import errno as _errno
import os
import re

# OS errors that are faults of the machine (exit 1), not of the paths or values given (2)
SYSTEM_ERRNOS = frozenset(getattr(_errno, name) for name in (
    "ENOSPC", "EDQUOT", "EIO", "ENOMEM", "EFBIG", "ESTALE", "ETIMEDOUT", "ECONNREFUSED",
    "ECONNRESET", "ECONNABORTED", "EHOSTUNREACH", "ENETUNREACH", "ENETDOWN", "EHOSTDOWN",
    "EPIPE", "EAGAIN", "EMFILE", "ENFILE", "EBUSY",
) if hasattr(_errno, name))


class MiauditError(Exception):
    """Base class for every error miaudit raises on purpose (bad input, bad config, ...)."""

    exit_code = 2  # the command line's exit status: bad input (fix it and rerun)


class ConfigError(MiauditError):
    """A run configuration is invalid (unknown key, wrong type, impossible value)."""


class DataError(MiauditError):
    """A dataset cannot be loaded or is malformed."""


class BankError(MiauditError):
    """A signal bank is malformed (shapes, NaN logits, labels out of range, ...)."""


class AttackError(MiauditError):
    """An attack cannot run on the given bank (missing references, channel, ...)."""


class ParamError(ConfigError, AttackError):
    """An attack parameter is unknown or has an invalid value (a config error, found before
    any work; also an AttackError, as `run_attack` raised for unknown parameters before)."""


class CacheError(MiauditError):
    """A cache entry is corrupt or unreadable."""


class WriteError(MiauditError, OSError):
    """A file could not be written (a full disk, a read-only or forbidden folder): the message
    names the file, the OS error and what to do. ``exit_code`` 1 for a fault of the system
    (:data:`SYSTEM_ERRNOS`: a full disk, an I/O error), 2 for a folder that cannot be written
    (choose another). ``errno``: the OS error number, if known. Also an ``OSError``, as the
    error it restates was: code that caught that still catches this."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno
        self.exit_code = 1 if errno is None or errno in SYSTEM_ERRNOS else 2


class CacheWriteError(CacheError, WriteError):
    """A model could not be stored in the model cache (nothing half-written is kept)."""


class BankWriteError(BankError, WriteError):
    """A signal bank could not be written (nothing half-written is kept)."""


class ClusterConnectionError(ConfigError):
    """The Ray cluster named by ``compute.address`` / ``--ray-address`` did not answer within
    ``compute.connect_timeout_s`` (refused, unreachable, or no Ray there): a fault of the
    network or of the cluster, exit 1."""

    exit_code = 1


_OS_ERROR_NUMBER = re.compile(r"\(os error (\d+)\)|\[Errno (\d+)\]|code: (\d+)")


def os_error_number(exc: BaseException) -> int | None:
    """The OS error number of ``exc``: an OSError's ``errno``, else one written in its message
    (safetensors: "... No space left on device (os error 28)")."""
    number = getattr(exc, "errno", None)
    if isinstance(number, int):
        return number
    match = _OS_ERROR_NUMBER.search(str(exc))
    return int(next(g for g in match.groups() if g)) if match else None


def _errno_name(number: int | None) -> str:
    return _errno.errorcode.get(number, f"errno {number}") if number is not None else "OS error"


def _mount_point(folder: str) -> str:
    """The mount point of the file system holding ``folder`` (or its nearest existing
    ancestor): where ``df`` tells the space left."""
    path = os.path.abspath(folder)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    while not os.path.ismount(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def describe_os_error(exc: BaseException, path: str | os.PathLike[str] | None = None,
                      writing: bool = True) -> tuple[str, str]:
    """``(what happened, what to do)`` for an OSError (or an error naming an OS error
    number, as safetensors' do) met on ``path`` (default: the error's own filename): e.g.
    ``("no space left on the device holding /x/y (ENOSPC)", "free space there (df -h /x)
    ...")``. ``writing``: the path was being written (a read-only folder, a full disk)."""
    number = os_error_number(exc)
    where = path if path is not None else getattr(exc, "filename", None)
    if where is None:
        found = re.search(r'at path "([^"]+)"', str(exc))
        where = found.group(1) if found else None
    name = _errno_name(number)
    shown = f" {os.fspath(where)}" if where is not None else ""
    folder = os.path.dirname(os.path.abspath(os.fspath(where))) if where is not None else None
    if number in (_errno.ENOSPC, getattr(_errno, "EDQUOT", -1), _errno.EFBIG):
        what = f"no space left on the device{(' holding' + shown) if shown else ''} ({name})"
        mount = _mount_point(folder) if folder else None
        todo = (f"free space on {'the disk mounted at ' + mount if mount else 'that disk'} "
                f"(`df -h{' ' + mount if mount else ''}` shows what is left) or write "
                "elsewhere (--out, --cache-dir, $MIAUDIT_CACHE_DIR), then rerun")
    elif number == _errno.EROFS:
        what = f"the file system is read-only: cannot write{shown} ({name})"
        todo = ("choose a writable folder: --out for the run's files, --cache-dir (or "
                "$MIAUDIT_CACHE_DIR) for the model cache")
    elif number in (_errno.EACCES, _errno.EPERM):
        verb = "write" if writing else "read"
        what = f"permission denied: cannot {verb}{shown or ' the file'} ({name})"
        todo = ("choose a folder you may write (--out, --cache-dir) or fix its permissions"
                if writing else "fix the file's permissions or copy it somewhere readable")
    elif number in (_errno.ENOENT, _errno.ENOTDIR):
        what = f"no such file or folder{shown} ({name})"
        todo = "check the path (a folder on the way may be missing or be a file)"
    elif number == _errno.EISDIR:
        what = f"{shown.strip() or 'the path'} is a folder, where a file was expected ({name})"
        todo = "give the path of a file"
    elif number == _errno.EIO:
        what = f"the disk reported an I/O error{(' on' + shown) if shown else ''} ({name})"
        todo = "check the disk (dmesg, its mount) or write elsewhere, then rerun"
    elif number in (_errno.ECONNREFUSED, _errno.ETIMEDOUT, _errno.EHOSTUNREACH,
                    _errno.ENETUNREACH, _errno.ECONNRESET):
        what = f"the network connection failed ({name}: {os.strerror(number)})"
        todo = ("check the address (--ray-address, compute.address) and that the host is up "
                "and reachable from here, then rerun")
    else:
        text = os.strerror(number) if number is not None else str(exc) or type(exc).__name__
        what = f"{text}{(': ' + shown.strip()) if shown else ''} ({name})"
        todo = "fix the cause named above, then rerun"
    return what, todo
