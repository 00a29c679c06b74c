"""Bring-your-own .npz / .csv / .parquet files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from miaudit.data import load_dataset
from miaudit.errors import DataError


def test_npz_tabular_by_path(tmp_path):
    path = tmp_path / "mine.npz"
    x = np.random.default_rng(0).normal(size=(6, 3))
    np.savez(path, X=x, y=np.array([2, 0, 1, 2, 0, 1]))
    ds = load_dataset(str(path))
    assert ds.kind == "tabular" and ds.features.shape == (6, 3) and ds.num_classes == 3
    np.testing.assert_allclose(ds.features, x.astype(np.float32))
    assert ds.labels.tolist() == [2, 0, 1, 2, 0, 1] and ds.name == "file:mine.npz"
    assert ds.source == str(path.resolve())
    same = load_dataset("file", path=path)
    assert same.fingerprint() == ds.fingerprint()


def test_npz_images_uint8_and_channels_last(tmp_path):
    rng = np.random.default_rng(1)
    gray = rng.integers(0, 256, (4, 10, 10), dtype=np.uint8)
    np.savez(tmp_path / "gray.npz", X=gray, y=np.array(["a", "b", "a", "c"]))
    ds = load_dataset(str(tmp_path / "gray.npz"))
    assert ds.kind == "image" and ds.features.shape == (4, 1, 10, 10)
    np.testing.assert_allclose(ds.features[:, 0], gray / 255.0, rtol=1e-6)
    assert ds.labels.tolist() == [0, 1, 0, 2] and "'a'->0" in ds.notes
    rgb = rng.random((3, 8, 8, 3)).astype(np.float32)
    np.savez(tmp_path / "rgb.npz", X=rgb, y=np.array([0, 1, 0]))
    ds = load_dataset(str(tmp_path / "rgb.npz"))
    assert ds.features.shape == (3, 3, 8, 8) and "channels-last" in ds.notes
    flat = load_dataset(str(tmp_path / "rgb.npz"), kind="tabular")
    assert flat.features.shape == (3, 192)


def test_raw_files_are_fed_as_given(tmp_path):
    gray = np.random.default_rng(2).integers(0, 256, (4, 6, 6), dtype=np.uint8)
    np.savez(tmp_path / "gray.npz", X=gray, y=np.array([0, 1, 0, 1]))
    raw = load_dataset(str(tmp_path / "gray.npz"), preprocessing="raw")
    np.testing.assert_array_equal(raw.features[:, 0], gray.astype(np.float32))  # no / 255
    assert raw.preprocessing == "raw: as given"
    standard = load_dataset(str(tmp_path / "gray.npz"))
    assert standard.preprocessing == "standard: as given (integer pixels divided by 255)"
    wide = np.random.default_rng(3).normal(size=(4, 3, 5, 5)) * 50  # floats outside [0, 1]
    np.savez(tmp_path / "wide.npz", X=wide, y=np.array([0, 1, 0, 1]))
    with pytest.raises(DataError, match="preprocessing='raw'"):
        load_dataset(str(tmp_path / "wide.npz"), kind="image")
    as_given = load_dataset(str(tmp_path / "wide.npz"), kind="image", preprocessing="raw")
    np.testing.assert_array_equal(as_given.features, wide.astype(np.float32))
    table = pd.DataFrame({"a": [1.5, 20.0, 3.0, 4.0], "label": [0, 1, 0, 1]})
    table.to_csv(tmp_path / "t.csv", index=False)
    plain = load_dataset(str(tmp_path / "t.csv"))
    same = load_dataset(str(tmp_path / "t.csv"), preprocessing="raw")
    assert plain.fingerprint() == same.fingerprint() and plain.preprocessing == (
        "standard: as given")
    with pytest.raises(DataError, match="cannot be combined with standardize"):
        load_dataset(str(tmp_path / "t.csv"), preprocessing="raw", standardize=True)


def test_npz_errors(tmp_path):
    np.savez(tmp_path / "keys.npz", features=np.zeros((2, 2)), y=np.zeros(2))
    with pytest.raises(DataError, match=r"keys \['features', 'y'\].*'X'"):
        load_dataset(str(tmp_path / "keys.npz"))
    np.savez(tmp_path / "len.npz", X=np.zeros((3, 2)), y=np.zeros(2, int))
    with pytest.raises(DataError, match="X has 3 rows but y has 2"):
        load_dataset(str(tmp_path / "len.npz"))
    x = np.zeros((3, 2))
    x[1, 0] = np.nan
    np.savez(tmp_path / "nan.npz", X=x, y=np.zeros(3, int))
    with pytest.raises(DataError, match=r"1 row has NaN or inf.*\[1\]\); drop or impute it "):
        load_dataset(str(tmp_path / "nan.npz"))
    np.savez(tmp_path / "obj.npz", X=np.array([[1, "a"]], dtype=object), y=np.zeros(1, int))
    with pytest.raises(DataError, match="object arrays are refused"):
        load_dataset(str(tmp_path / "obj.npz"))
    np.savez(tmp_path / "empty.npz", X=np.zeros((0, 2)), y=np.zeros(0, int))
    with pytest.raises(DataError, match="no samples"):
        load_dataset(str(tmp_path / "empty.npz"))
    np.savez(tmp_path / "range.npz", X=np.full((2, 4, 4), 3.0), y=np.zeros(2, int))
    with pytest.raises(DataError, match=r"lie in \[0, 1\]"):
        load_dataset(str(tmp_path / "range.npz"))


@pytest.mark.parametrize("content, found", [
    (b"x0,x1,label\n0.5,0.2,1\n", "is a text file (first line 'x0,x1,label')"),
    (b"", "is empty"),
    (b"\x80\x04K\x01.", "is a Python pickle"),
    (b"\x00\x01\x02binary\xff\xfe", "is not a NumPy .npz archive"),
])
def test_a_file_that_is_no_npz_archive_says_what_it_is(tmp_path, content, found):
    """NumPy reads any non-zip file as a pickle ("pickled (object) data"): say instead that
    the file is not a NumPy .npz archive, what it is, and what a data .npz holds."""
    path = tmp_path / "rows.npz"
    path.write_bytes(content)
    with pytest.raises(DataError) as refused:
        load_dataset(str(path))
    message = str(refused.value)
    assert message.startswith(f"{path} {found}")
    assert "not a NumPy .npz archive" in message and "pickled" not in message
    assert "np.savez(path, X=features, y=labels)" in message and ".csv" in message
    np.save(tmp_path / "array.npy", np.zeros(3))  # a .npy renamed .npz
    (tmp_path / "array.npy").rename(path)
    with pytest.raises(DataError, match=r"is a NumPy \.npy array, not a NumPy \.npz archive"):
        load_dataset(str(path))


def test_counts_of_one_read_in_the_singular(tmp_path):
    path = tmp_path / "mail.csv"
    path.write_text("text,label\nhello,0\n ,1\nhello,1\nbye,0\n")
    with pytest.raises(DataError) as refused:
        load_dataset(str(path), text_column="text")
    assert ": 1 row has an empty or whitespace-only text in column 'text': data row 1 " in str(
        refused.value)
    assert "remove it, or pass drop_empty: true to drop it" in str(refused.value)
    ds = load_dataset(str(path), text_column="text", drop_empty=True)
    assert "dropped 1 row with an empty or whitespace-only text" in ds.notes
    assert "the rows after it moved up" in ds.notes
    assert "1 text repeats an earlier row exactly" in ds.notes


def test_csv_with_categoricals_and_string_labels(tmp_path):
    path = tmp_path / "people.csv"
    path.write_text(
        "age,city,smoker,outcome\n30,Paris,yes,sick\n41,Rome,no,well\n25,Paris,no,well\n"
    )
    ds = load_dataset(str(path), label_column="outcome")
    assert ds.kind == "tabular" and ds.features.shape == (3, 5)  # age + 2 cities + 2 smoker
    assert ds.labels.tolist() == [0, 1, 1] and "'sick'->0, 'well'->1" in ds.notes
    assert "one-hot" in ds.notes
    np.testing.assert_allclose(ds.features[:, 0], [30, 41, 25])
    scaled = load_dataset(str(path), label_column="outcome", standardize=True)
    np.testing.assert_allclose(scaled.features.mean(axis=0), 0, atol=1e-6)


def test_csv_errors(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(DataError, match=r"no label column 'label'.*\['a', 'b'\]"):
        load_dataset(str(path))
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataError, match="is empty"):
        load_dataset(str(tmp_path / "empty.csv"))
    (tmp_path / "gap.csv").write_text("a,label\n1,0\n,1\n")
    with pytest.raises(DataError, match=r"\['a'\] have missing values"):
        load_dataset(str(tmp_path / "gap.csv"))
    (tmp_path / "inf.csv").write_text("a,label\n1,0\ninf,1\n")
    with pytest.raises(DataError, match="NaN or inf"):
        load_dataset(str(tmp_path / "inf.csv"))
    (tmp_path / "nolab.csv").write_text("a,label\n1,0\n2,\n")
    with pytest.raises(DataError, match="labels contain NaN"):
        load_dataset(str(tmp_path / "nolab.csv"))
    (tmp_path / "x.tsv").write_text("hi")  # (a .txt loads as texts, one a line)
    with pytest.raises(DataError, match="unsupported file type"):
        load_dataset("file", path=tmp_path / "x.tsv")
    with pytest.raises(DataError, match="no such file"):
        load_dataset(str(tmp_path / "missing.csv"))
    with pytest.raises(DataError, match="needs path"):
        load_dataset("file")


def test_parquet(tmp_path):
    df = pd.DataFrame({"f1": [0.5, 1.5, 2.5], "flag": [True, False, True], "y": [7, 9, 7]})
    df.to_parquet(tmp_path / "d.parquet")
    ds = load_dataset(str(tmp_path / "d.parquet"), label_column="y")
    assert ds.features.shape == (3, 2) and ds.labels.tolist() == [0, 1, 0] and ds.num_classes == 2
    assert "7->0, 9->1" in ds.notes
