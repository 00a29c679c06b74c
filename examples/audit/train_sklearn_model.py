"""A scikit-learn model trained outside miaudit: a random forest on UCI Adult (income >50K).

Nothing here imports miaudit. The script reads the raw UCI files adult.data and adult.test (as
`miaudit data fetch adult` stores them, or any folder given with --data-dir), one-hot encodes
the categorical columns with pandas, trains a RandomForestClassifier on 5,000 rows, and writes:

    OUT/model.joblib     the fitted estimator
    OUT/audit.parquet    the 5,000 training rows and 5,000 held-out rows, with the label column
                         `income` (1 = >50K) and a `member` column (1 = trained on)
    OUT/public.parquet   20,000 other rows an attacker may hold (same columns, no `member`)

Run:  python examples/audit/train_sklearn_model.py --out runs/audit-example/sklearn
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestClassifier

COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
    "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
    "hours-per-week", "native-country", "income",
]


def load_adult(folder: Path) -> pd.DataFrame:
    """Both UCI files, rows with missing values ('?') dropped, categoricals one-hot."""
    frames = [pd.read_csv(folder / name, header=None, names=COLUMNS, skipinitialspace=True,
                          comment="|") for name in ("adult.data", "adult.test")]
    df = pd.concat(frames, ignore_index=True)
    df = df[~(df == "?").any(axis=1)].reset_index(drop=True)
    income = df.pop("income").str.rstrip(".").eq(">50K").astype(int)
    categorical = [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])]
    features = pd.get_dummies(df, columns=categorical, dtype=np.float32)
    return features.astype(np.float32).assign(income=income)


def main() -> None:
    default_dir = Path(os.environ.get("MIAUDIT_DATA_DIR", Path.home() / ".cache/miaudit/data"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=default_dir / "adult")
    parser.add_argument("--out", type=Path, default=Path("runs/audit-example/sklearn"))
    args = parser.parse_args()
    df = load_adult(args.data_dir)
    order = np.random.default_rng(0).permutation(len(df))
    members, held_out, public = order[:5000], order[5000:10000], order[10000:30000]
    x, y = df.drop(columns="income"), df["income"]
    model = RandomForestClassifier(n_estimators=100, random_state=0, n_jobs=1)
    start = time.perf_counter()
    model.fit(x.iloc[members], y.iloc[members])
    print(f"trained in {time.perf_counter() - start:.1f} s on {len(members)} rows: "
          f"train accuracy {model.score(x.iloc[members], y.iloc[members]):.3f}, "
          f"held-out accuracy {model.score(x.iloc[held_out], y.iloc[held_out]):.3f}")
    args.out.mkdir(parents=True, exist_ok=True)
    joblib.dump(model, args.out / "model.joblib")
    audit = df.iloc[np.sort(np.r_[members, held_out])].copy()
    audit["member"] = audit.index.isin(members).astype(int)
    audit.reset_index(drop=True).to_parquet(args.out / "audit.parquet")
    df.iloc[np.sort(public)].reset_index(drop=True).to_parquet(args.out / "public.parquet")
    print(f"wrote {args.out}/model.joblib, audit.parquet ({len(audit)} rows), public.parquet "
          f"({len(public)} rows); {x.shape[1]} features")


if __name__ == "__main__":
    main()
