import numpy as np
import pytest
from scipy.special import log_softmax, logsumexp

from miaudit.errors import BankError
from miaudit.signals import SignalBank


def _arrays(m=3, n=20, q=2, c=4, seed=0):
    rng = np.random.default_rng(seed)
    return dict(
        logits=rng.normal(size=(m, n, q, c)).astype(np.float32),
        labels=rng.integers(0, c, n),
        membership=rng.random((m, n)) < 0.5,
    )


def test_save_load_round_trip_with_channels(tmp_path):
    arrays = _arrays()
    population = np.zeros(20, bool)
    population[-3:] = True
    arrays["membership"][:, population] = False
    bank = SignalBank(**arrays, population=population, channels={"grad_norm": np.ones((3, 20))})
    path = bank.save(tmp_path / "bank.npz")
    again = SignalBank.load(path)
    np.testing.assert_array_equal(again.logits, bank.logits)
    np.testing.assert_array_equal(again.audit, ~population)
    assert set(again.channels) == {"grad_norm"}
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind


def test_statistics_match_direct_formulas():
    arrays = _arrays()
    bank = SignalBank(**arrays)
    z = arrays["logits"].astype(np.float64)  # [M, N, Q, C]
    y = arrays["labels"]
    m, n, q, _ = z.shape
    loss = np.empty((m, n, q))
    phi = np.empty((m, n, q))
    for a in range(m):
        for i in range(n):
            for k in range(q):
                loss[a, i, k] = -log_softmax(z[a, i, k])[y[i]]
                phi[a, i, k] = z[a, i, k, y[i]] - logsumexp(np.delete(z[a, i, k], y[i]))
    np.testing.assert_allclose(bank.statistics.get("loss"), loss, rtol=1e-12)
    np.testing.assert_allclose(bank.statistics.get("phi"), phi, rtol=1e-10)
    # a subset of models agrees with the full computation
    np.testing.assert_allclose(bank.statistics.get("prob_true", [2]), np.exp(-loss[[2]]),
                               rtol=1e-12)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda a: a.update(logits=a["logits"][:, :, 0]), "shape"),
        (lambda a: a.update(labels=a["labels"][:-1]), "labels must have shape"),
        (lambda a: a.update(membership=a["membership"][:, :-1]), "membership must have shape"),
        (lambda a: a["labels"].__setitem__(0, 7), "outside 0..3"),
        (lambda a: a["logits"].__setitem__((1, 0, 0, 0), np.nan), "NaN"),
        (lambda a: a["logits"].__setitem__((1, 0, 0, 0), np.inf), "infinite"),
    ],
)
def test_bad_banks_are_rejected_with_a_clear_message(change, message):
    arrays = _arrays()
    change(arrays)
    with pytest.raises(BankError, match=message):
        SignalBank(**arrays)


def test_population_members_and_overlaps_are_rejected():
    arrays = _arrays()
    population = np.zeros(20, bool)
    population[0] = True
    arrays["membership"][0, 0] = True
    with pytest.raises(BankError, match="population samples are members"):
        SignalBank(**arrays, population=population)
    arrays["membership"][0, 0] = False
    with pytest.raises(BankError, match="both population and audit"):
        SignalBank(**arrays, population=population, audit=np.ones(20, bool))


def test_the_canary_mask_travels_and_is_its_own_rows(tmp_path):
    arrays = _arrays()
    canary = np.zeros(20, bool)
    canary[-5:] = True
    bank = SignalBank(**arrays, canary=canary)  # audit defaults to the non-canary rows
    np.testing.assert_array_equal(bank.audit, ~canary)
    again = SignalBank.load(bank.save(tmp_path / "bank.npz"))
    np.testing.assert_array_equal(again.canary, canary)
    np.testing.assert_array_equal(again.audit, ~canary)
    plain = SignalBank.load(SignalBank(**_arrays()).save(tmp_path / "plain.npz"))
    assert plain.canary is None  # a bank without canaries saves no mask
    with np.load(tmp_path / "plain.npz") as data:
        assert "canary" not in data.files
    with pytest.raises(BankError, match="both canary and audit"):
        SignalBank(**arrays, canary=canary, audit=np.ones(20, bool))
    with pytest.raises(BankError, match="canary must be a boolean mask of shape"):
        SignalBank(**arrays, canary=canary[:5])


def test_corrupt_or_incomplete_files(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(BankError, match="cannot be read"):
        SignalBank.load(bad)
    partial = tmp_path / "partial.npz"
    np.savez(partial, logits=np.zeros((1, 2, 1, 2), np.float32))
    with pytest.raises(BankError, match="lacks required arrays"):
        SignalBank.load(partial)
    with pytest.raises(BankError, match="does not exist"):
        SignalBank.load(tmp_path / "none.npz")


def test_replace_validates_and_keeps_the_rest():
    bank = SignalBank(**_arrays())
    flipped = bank.replace(membership=~bank.membership)
    np.testing.assert_array_equal(flipped.membership, ~bank.membership)
    assert flipped.logits is bank.logits
    with pytest.raises(BankError, match="membership must have shape"):
        bank.replace(membership=bank.membership[:, :-1])
