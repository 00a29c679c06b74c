"""An audit's data file with a membership column (data.membership_column), malformed: a
DataError naming the user's file (never the temporary copy the loader reads), the array or
column, and what is expected."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from miaudit.errors import DataError
from miaudit.external.audit_config import audit_config
from miaudit.external.data import build_audit_data


def _cfg(path, column="member"):
    return audit_config({"model": {"outputs": "unused.npz"},
                         "data": {"dataset": str(path), "membership_column": column}})


def test_an_object_membership_array_is_named(tmp_path):
    path = tmp_path / "audit.npz"
    np.savez(path, X=np.ones((4, 2)), y=np.arange(4) % 2,
             member=np.array([1, 0, None, 1], dtype=object))
    with pytest.raises(DataError, match=rf"{path}: array 'member' holds Python objects"):
        build_audit_data(_cfg(path))


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_file_that_is_not_a_table_is_named(tmp_path, suffix):
    path = tmp_path / f"audit{suffix}"
    path.write_bytes(b"\x00\x01garbage\xff" * 10 if suffix == ".parquet" else b"")
    with pytest.raises(DataError, match=rf"(cannot read data file {path} as Parquet|data file "
                                        rf"{path} is empty)"):
        build_audit_data(_cfg(path))


def test_a_nested_column_names_the_users_file_not_the_copy(tmp_path):
    path = tmp_path / "audit.parquet"
    pd.DataFrame({"a": [[1.0, 2.0]] * 6, "label": [0, 1] * 3,
                  "member": [1, 0] * 3}).to_parquet(path)
    with pytest.raises(DataError) as caught:
        build_audit_data(_cfg(path))
    assert str(caught.value).startswith(f"{path}: feature column 'a' holds a ndarray")


def test_a_nested_membership_column_is_refused_in_words(tmp_path):
    path = tmp_path / "audit.parquet"
    pd.DataFrame({"a": [1.0] * 6, "label": [0, 1] * 3,
                  "member": [[1], [0]] * 3}).to_parquet(path)
    with pytest.raises(DataError, match=r"membership column 'member' must hold one 0/1"):
        build_audit_data(_cfg(path))
