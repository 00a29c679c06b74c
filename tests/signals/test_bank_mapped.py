"""Banks loaded without copies: uncompressed logits mapped from the file (signals/mapped.py)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from miaudit.errors import BankError
from miaudit.signals import SignalBank
from miaudit.signals.mapped import mapping_of, read_arrays, release_pages
from miaudit.signals.statistics import STATISTICS


def _bank(m: int = 4, n: int = 300, q: int = 2, c: int = 5, seed: int = 0) -> SignalBank:
    rng = np.random.default_rng(seed)
    membership = rng.random((m, n)) < 0.5
    population = np.zeros(n, bool)
    population[-30:] = True
    membership[:, population] = False
    return SignalBank(logits=rng.normal(size=(m, n, q, c)).astype(np.float32) * 4,
                      labels=rng.integers(0, c, n), membership=membership,
                      population=population, channels={"grad_norm": rng.random((m, n))})


def test_an_uncompressed_bank_maps_its_logits_and_scores_the_same(tmp_path):
    bank = _bank()
    path = bank.save(tmp_path / "bank.npz")
    mapped = SignalBank.load(path)
    assert mapping_of(mapped.logits) is not None  # mapped, not read
    assert mapping_of(mapped.membership) is None  # only the logits are
    np.testing.assert_array_equal(mapped.logits, bank.logits)
    np.testing.assert_array_equal(mapped.membership, bank.membership)
    np.testing.assert_array_equal(mapped.channels["grad_norm"], bank.channels["grad_norm"])
    for name in STATISTICS:
        np.testing.assert_array_equal(mapped.statistics.get(name), bank.statistics.get(name))
    expected = bank.logits[:, :, 1, :].argmax(axis=-1)
    np.testing.assert_array_equal(mapped.predicted_classes(1), expected)
    np.testing.assert_array_equal(bank.predicted_classes(1), expected)
    np.testing.assert_array_equal(mapped.logits, bank.logits)  # still readable after release


def test_predicted_classes_come_from_the_statistics_pass_or_a_pass_of_their_own():
    bank = _bank()
    expected = bank.logits[:, :, 0, :].argmax(axis=-1)
    alone = _bank()  # no statistics yet: its own pass over the logits
    np.testing.assert_array_equal(alone.predicted_classes(0), expected)
    assert alone.predicted_classes(0).dtype == np.int64
    bank.statistics.get("loss")  # every model: the pass recorded them
    got = bank.predicted_classes(0)
    assert got.dtype == np.uint8 and not got.flags.writeable
    np.testing.assert_array_equal(got, expected)


def test_the_statistics_pass_over_mapped_logits_goes_a_group_of_models_at_a_time(
    tmp_path, monkeypatch
):
    from miaudit.signals import mapped as module

    monkeypatch.setattr(module, "_PASS_BYTES", 1)  # one model per pass
    bank = _bank(m=5)
    loaded = SignalBank.load(bank.save(tmp_path / "bank.npz"))
    np.testing.assert_array_equal(loaded.statistics.get("phi"), bank.statistics.get("phi"))
    np.testing.assert_array_equal(loaded.statistics.get("phi", [3, 1]),
                                  bank.statistics.get("phi", [3, 1]))


def test_compressed_and_old_banks_load_as_before(tmp_path):
    bank = _bank()
    compressed = SignalBank.load(bank.save(tmp_path / "c.npz", compressed=True))
    assert mapping_of(compressed.logits) is None
    np.testing.assert_array_equal(compressed.logits, bank.logits)
    # float64 logits (another writer): read, then converted as before
    np.savez(tmp_path / "f64.npz", logits=bank.logits.astype(np.float64), labels=bank.labels,
             membership=bank.membership)
    wide = SignalBank.load(tmp_path / "f64.npz")
    assert wide.logits.dtype == np.float32 and mapping_of(wide.logits) is None
    np.testing.assert_array_equal(wide.logits, bank.logits)
    # a bank whose logits are not the first member still maps and matches
    np.savez(tmp_path / "late.npz", labels=bank.labels, membership=bank.membership,
             logits=bank.logits)
    late = read_arrays(tmp_path / "late.npz", mapped=("logits",))
    np.testing.assert_array_equal(late["logits"], bank.logits)


def test_a_mapped_bank_with_broken_logits_is_still_rejected(tmp_path):
    bank = _bank()
    logits = bank.logits.copy()
    logits[2, 7, 1, 3] = np.nan
    np.savez(tmp_path / "bad.npz", logits=logits, labels=bank.labels,
             membership=bank.membership)
    with pytest.raises(BankError, match=r"1 logits are NaN or infinite \(models \[2\]\)"):
        SignalBank.load(tmp_path / "bad.npz")


def test_release_pages_is_a_no_op_on_ordinary_arrays():
    values = np.arange(10.0)
    release_pages(values)
    release_pages(values[::2])
    np.testing.assert_array_equal(values, np.arange(10.0))


def _rss_file_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssFile:"):
                return int(line.split()[1])
    raise AssertionError("no RssFile line")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_released_pages_leave_the_resident_set(tmp_path):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 200_000, 1, 10)).astype(np.float32)  # 32 MiB
    np.savez(tmp_path / "big.npz", logits=logits, labels=np.zeros(200_000, np.int64),
             membership=np.zeros((4, 200_000), bool))
    mapped = read_arrays(tmp_path / "big.npz", mapped=("logits",))["logits"]
    before = _rss_file_kib()
    assert float(mapped.sum(dtype=np.float64)) == pytest.approx(logits.sum(dtype=np.float64))
    touched = _rss_file_kib()
    for k in range(4):
        release_pages(mapped[k])
    released = _rss_file_kib()
    assert touched - before > 24 * 1024  # the 32 MiB were mapped in...
    assert touched - released > 24 * 1024  # ...and given back
    np.testing.assert_array_equal(mapped, logits)  # and read again from the file
