import json

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_digits

from miaudit.errors import ConfigError, DataError
from miaudit.external.audit_config import audit_config
from miaudit.external.data import build_audit_data, read_rows


def _cfg(**sections):
    data = {"model": {"outputs": "unused.npz"}}
    data.update(sections)
    return audit_config(data)


def test_read_rows_formats_and_errors(tmp_path):
    rows = np.array([5, 1, 9])
    (tmp_path / "a.txt").write_text("5\n1\n9\n")
    (tmp_path / "b.csv").write_text("index\n5\n1\n9\n")
    (tmp_path / "c.json").write_text(json.dumps([5, 1, 9]))
    np.save(tmp_path / "d.npy", rows)
    mask = np.zeros(10, bool)
    mask[rows] = True
    np.save(tmp_path / "e.npy", mask)
    for name in ("a.txt", "b.csv", "c.json", "d.npy", "e.npy"):
        assert read_rows(tmp_path / name, 10, "members").tolist() == [1, 5, 9], name
    with pytest.raises(DataError, match=r"lists 1 row outside the data's 8 rows \(0\.\.7\): 9;"):
        read_rows(tmp_path / "a.txt", 8, "members")
    (tmp_path / "dup.txt").write_text("1 1 2")
    with pytest.raises(DataError, match=r"lists 1 row more than once \(first \[1\]\)"):
        read_rows(tmp_path / "dup.txt", 10, "members")
    with pytest.raises(DataError, match="does not exist"):
        read_rows(tmp_path / "none.txt", 10, "members")


def test_rows_out_of_range_are_named_not_spanned(tmp_path):
    """0..99 and 5000 in a 1797-row dataset: the message names 5000, not '0..5000'."""
    (tmp_path / "m.txt").write_text("\n".join(map(str, [*range(100), 5000])))
    with pytest.raises(DataError) as one:
        read_rows(tmp_path / "m.txt", 1797, "data.members")
    message = str(one.value)
    assert "lists 1 row outside the data's 1797 rows (0..1796): 5000;" in message
    assert "0..5000" not in message and "1 rows" not in message
    # many: the first five in file order and how many in all
    (tmp_path / "many.txt").write_text("\n".join(map(str, [-1, 3, *range(2000, 2010)])))
    with pytest.raises(DataError) as many:
        read_rows(tmp_path / "many.txt", 1797, "data.members")
    assert ("lists 11 rows outside the data's 1797 rows (0..1796): -1, 2000, 2001, 2002, "
            "2003, ... (11 rows in all);") in str(many.value)


def test_rows_files_in_the_wrong_numpy_format_say_so(tmp_path):
    (tmp_path / "m.npy").write_text("0\n1\n2\n")  # text named .npy
    with pytest.raises(DataError) as text:
        read_rows(tmp_path / "m.npy", 10, "data.members")
    assert (f"data.members file {tmp_path / 'm.npy'} is a text file (first line '0'), not a "
            "NumPy .npy array: save row indices with np.save(path, rows)") in str(text.value)
    assert "pickled" not in str(text.value)
    np.savez(tmp_path / "m.npz", rows=np.arange(3))  # an archive, whatever its name
    np.savez(tmp_path / "rows.txt.npz", rows=np.arange(3))
    (tmp_path / "rows.txt").write_bytes((tmp_path / "rows.txt.npz").read_bytes())
    for name in ("m.npz", "rows.txt"):
        with pytest.raises(DataError, match=r"is a NumPy \.npz archive; give row indices as a "
                                            r"\.npy array"):
            read_rows(tmp_path / name, 10, "data.members")


def test_bank_layout_with_public_rows_of_the_same_dataset(user, split):
    cfg = _cfg(data={"dataset": "digits", "members": str(user["members"]),
                     "nonmembers": str(user["nonmembers"])},
               public={"rows": str(user["public"]), "population": 0.25})
    data = build_audit_data(cfg)
    digits = load_digits()
    assert data.n_audit == 600 and data.members.sum() == 300
    np.testing.assert_array_equal(data.audit_rows[data.members], split["members"])
    assert data.n_population == round(0.25 * split["public"].size)
    assert data.n_pool + data.n_population == split["public"].size
    assert not np.intersect1d(data.pool_rows, data.population_rows).size
    # bank order: audit rows, then pool, then population, with their own labels and pixels
    order = np.concatenate([data.audit_rows, data.pool_rows, data.population_rows])
    np.testing.assert_array_equal(data.labels, digits.target[order])
    np.testing.assert_allclose(data.features[:, 0], digits.images[order] / 16.0, rtol=1e-6)


def test_default_nonmembers_are_the_rest_and_overlaps_are_refused(user, split, tmp_path):
    cfg = _cfg(data={"dataset": "digits", "members": str(user["members"])},
               public={"rows": str(user["public"])})
    data = build_audit_data(cfg)
    assert (~data.members).sum() == 1797 - 300 - split["public"].size
    np.savetxt(tmp_path / "clash.txt", split["members"][:5], fmt="%d")
    with pytest.raises(DataError, match="5 public rows are also audit rows"):
        build_audit_data(_cfg(data={"dataset": "digits", "members": str(user["members"])},
                              public={"rows": str(tmp_path / "clash.txt")}))
    with pytest.raises(DataError, match="both members and non-members"):
        build_audit_data(_cfg(data={"dataset": "digits", "members": str(user["members"]),
                                    "nonmembers": str(user["members"])}))
    with pytest.raises(ConfigError, match="give public.rows"):
        build_audit_data(_cfg(data={"dataset": "digits", "members": str(user["members"])},
                              public={"dataset": "digits"}))
    # one row: singular, not "1 public rows are also audit rows"
    np.savetxt(tmp_path / "one.txt", split["members"][:1], fmt="%d")
    with pytest.raises(DataError, match=r"^1 public row is also an audit row \(first \["):
        build_audit_data(_cfg(data={"dataset": "digits", "members": str(user["members"])},
                              public={"rows": str(tmp_path / "one.txt")}))
    with pytest.raises(DataError, match=r"^1 row is both a member and a non-member \(first"):
        build_audit_data(_cfg(data={"dataset": "digits", "members": str(user["members"]),
                                    "nonmembers": str(tmp_path / "one.txt")}))


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npz"])
def test_membership_column_of_a_data_file(tmp_path, suffix):
    digits = load_digits()
    x, y = digits.data[:200], digits.target[:200]
    member = (np.arange(200) % 3 == 0).astype(int)
    path = tmp_path / f"audit{suffix}"
    if suffix == ".npz":
        np.savez(path, X=x, y=y, member=member)
    else:
        df = pd.DataFrame(x, columns=[f"f{i}" for i in range(64)]).assign(label=y, member=member)
        df.to_csv(path, index=False) if suffix == ".csv" else df.to_parquet(path)
    data = build_audit_data(_cfg(data={"dataset": str(path), "membership_column": "member"}))
    assert data.input_shape == (64,)  # the column is not a feature
    np.testing.assert_array_equal(data.members, member.astype(bool))
    np.testing.assert_allclose(data.features, x.astype(np.float32))
    with pytest.raises(DataError, match="no (column|array) 'inside'"):
        build_audit_data(_cfg(data={"dataset": str(path), "membership_column": "inside"}))


def test_a_text_file_named_npz_is_not_read_as_pickled_data(tmp_path):
    path = tmp_path / "audit.npz"
    path.write_text("f0,f1,label,member\n0.5,0.1,1,0\n")
    with pytest.raises(DataError) as refused:
        build_audit_data(_cfg(data={"dataset": str(path), "membership_column": "member"}))
    message = str(refused.value)
    assert message.startswith(f"{path} is a text file (first line 'f0,f1,label,member'), not a "
                              "NumPy .npz archive:")
    assert "pickled" not in message


def test_public_file_must_match_the_audit_data(tmp_path):
    digits = load_digits()
    np.savez(tmp_path / "audit.npz", X=digits.data[:100], y=digits.target[:100],
             member=np.arange(100) % 2)
    np.savez(tmp_path / "public.npz", X=digits.data[100:300, :32], y=digits.target[100:300])
    cfg = _cfg(data={"dataset": str(tmp_path / "audit.npz"), "membership_column": "member"},
               public={"dataset": str(tmp_path / "public.npz")})
    with pytest.raises(DataError, match=r"does not match the audit data.*\(32,\)"):
        build_audit_data(cfg)
    np.savez(tmp_path / "public.npz", X=digits.data[100:300], y=digits.target[100:300] % 4)
    with pytest.raises(DataError, match="4 classes vs 10"):
        build_audit_data(cfg)
    np.savez(tmp_path / "public.npz", X=digits.data[:300], y=digits.target[:300])
    data = build_audit_data(cfg)  # rows 0..99 are copies of audit rows: noted, not refused
    assert any("50 public rows are exact copies of training rows" in n for n in data.notes)
