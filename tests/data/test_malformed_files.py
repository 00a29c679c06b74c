"""Malformed user files are a DataError saying which file, which array or column (and row),
and what is expected: never a raw ValueError / TypeError from NumPy or pandas."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from miaudit.data import load_dataset
from miaudit.data.user_files import read_npz_arrays
from miaudit.errors import DataError


def test_an_object_array_in_an_npz_is_named(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, X=np.ones((4, 2)), y=np.array([None, 1, 0, 1], dtype=object))
    with pytest.raises(DataError, match=rf"data file {path}: array 'y' holds Python objects "
                                        r"\(dtype object\): object arrays are refused"):
        load_dataset(str(path))
    assert list(read_npz_arrays(path, ["X"])) == ["X"]  # the numeric one reads
    with pytest.raises(DataError, match=r"outputs file .*: array 'y'"):
        read_npz_arrays(path, what="outputs file")


@pytest.mark.parametrize("cell, kind", [([1, 2], "ndarray"), ({"x": 1}, "dict")])
def test_a_nested_parquet_column_is_named(tmp_path, cell, kind):
    path = tmp_path / "nested.parquet"
    pd.DataFrame({"a": [1.0] * 4, "b": [cell] * 4, "label": [0, 1] * 2}).to_parquet(path)
    with pytest.raises(DataError, match=rf"{path}: feature column 'b' holds a {kind} in data "
                                        r"row 0 .* must be one value"):
        load_dataset(str(path))


def test_a_jsonl_with_lists_in_a_feature_or_the_label_is_named(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"a": i, "b": [i, i], "label": i % 2}) + "\n"
                            for i in range(4)))
    with pytest.raises(DataError, match=r"feature column 'b' holds a list in data row 0 "
                                        r"\(counted from 0; \[0, 0\]\)"):
        load_dataset(str(path))
    path.write_text("".join(json.dumps({"a": i, "label": [i % 2]}) + "\n" for i in range(4)))
    with pytest.raises(DataError, match=r"label column 'label' holds a list .* give one label "
                                        r"per row"):
        load_dataset(str(path))
    text = tmp_path / "texts.jsonl"
    text.write_text("".join(json.dumps({"text": f"t{i}", "label": {"k": i}}) + "\n"
                            for i in range(4)))
    with pytest.raises(DataError, match=r"label column 'label' holds a dict"):
        load_dataset(str(text), text_column="text")
