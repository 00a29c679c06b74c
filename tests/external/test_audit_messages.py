"""Messages about the user's outputs files: what is wrong, in grammatical English."""

import numpy as np
import pytest

from miaudit.errors import DataError
from miaudit.external.audit_bank import _rows_from
from miaudit.external.sources import load_outputs, to_logits


def test_a_text_file_named_npz_is_not_called_pickled_data(tmp_path):
    path = tmp_path / "outputs.npz"
    path.write_text("p0,p1\n0.5,0.5\n")
    with pytest.raises(DataError) as refused:
        load_outputs(path, 2, "auto", 1e-3)
    message = str(refused.value)
    assert message.startswith(f"{path} is a text file (first line 'p0,p1'), not a NumPy .npz "
                              "archive: an outputs .npz holds 'logits' or 'probabilities'")
    assert "pickled" not in message and "(.csv or .parquet)" in message


def test_counts_of_one_row_read_in_the_singular():
    probabilities = np.full((4, 2), 0.5)
    probabilities[2] = [0.5, 0.6]
    with pytest.raises(DataError, match=r"1 of 4 rows does not \(row 2 sums to 1\.1\)"):
        to_logits(probabilities, 2, "probabilities", 1e-3, "p.npz")
    with pytest.raises(DataError, match=r"like probabilities but 1 row does not sum to 1 \("):
        to_logits(probabilities, 2, "auto", 1e-3, "p.npz")
    probabilities[2] = [np.nan, 0.5]
    with pytest.raises(DataError, match=r"p\.npz: 1 row holds NaN or inf \(first \[2\]\)"):
        to_logits(probabilities, 2, "auto", 1e-3, "p.npz")
    with pytest.raises(DataError, match="the public outputs have 1 row but the public data has "
                                        "5; "):
        _rows_from((None, np.zeros((1, 2))), np.arange(1), 5, "public")
