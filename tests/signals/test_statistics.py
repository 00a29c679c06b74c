"""Statistics against high-precision references, including confidently classified samples."""

import mpmath
import numpy as np
import pytest

from miaudit.signals.statistics import STATISTICS, StatisticCache, compute_statistics

mpmath.mp.dps = 60


def _reference(z: np.ndarray, y: int) -> dict[str, float]:
    zs = [mpmath.mpf(float(v)) for v in z]
    lse = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in zs))
    log_p = [v - lse for v in zs]
    p = [mpmath.exp(v) for v in log_p]
    others = mpmath.log(mpmath.fsum(mpmath.exp(v) for i, v in enumerate(zs) if i != y))
    mentr = -(1 - p[y]) * log_p[y] - mpmath.fsum(
        p[c] * mpmath.log(1 - p[c]) for c in range(len(zs)) if c != y
    )
    return {
        "loss": float(-log_p[y]),
        "phi": float(zs[y] - others),
        "prob_true": float(p[y]),
        "log_confidence": float(max(log_p)),
        "neg_entropy": float(mpmath.fsum(a * b for a, b in zip(p, log_p, strict=True))),
        "modified_entropy": float(mentr),
    }


CASES = [
    (np.array([0.3, -1.2, 2.0, 0.0]), 2),
    (np.array([0.3, -1.2, 2.0, 0.0]), 1),
    (np.array([40.0, 0.0, -3.0, 1.0]), 0),  # confident and right: loss ~ 1e-17
    (np.array([40.0, 0.0, -3.0, 1.0]), 3),  # confident and wrong
    (np.array([5.0, 5.0, -80.0, 4.0]), 2),  # tied top classes, hopeless true class
    (np.array([1e-3, 0.0, 0.0, 0.0]), 0),
]


@pytest.mark.parametrize("names", [STATISTICS, ("loss", "phi", "log_confidence")])
@pytest.mark.parametrize("z, y", CASES)
def test_every_statistic_is_accurate_to_near_machine_precision(z, y, names):
    logits = z.astype(np.float64).reshape(1, 1, 1, -1)
    got = compute_statistics(logits, np.array([y]), names)
    np.testing.assert_array_equal(logits.ravel(), z)  # not modified
    want = _reference(z, y)
    assert set(got) == set(names)
    for name in names:
        value = float(got[name].item())
        assert value == pytest.approx(want[name], rel=1e-12, abs=1e-300), name


def test_cache_returns_read_only_views_and_subsets():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 30, 2, 5)).astype(np.float32)
    labels = rng.integers(0, 5, 30)
    cache = StatisticCache(logits, labels)
    full = cache.get("loss")
    with pytest.raises(ValueError):
        full[0, 0, 0] = 1.0
    np.testing.assert_array_equal(cache.get("loss", [1, 2]), full[1:3])
    np.testing.assert_array_equal(cache.get("loss", [3, 0]), full[[3, 0]])
    with pytest.raises(KeyError):
        cache.get("nonsense")


def test_extreme_logit_gaps_stay_finite():
    z = np.array([[[[900.0, 0.0, -5.0]]]])
    stats = compute_statistics(z, np.array([0]), STATISTICS)
    for name, value in stats.items():
        assert np.isfinite(value).all(), name
    assert stats["phi"].item() > 700


def test_torch_tensors_are_accepted():
    torch = pytest.importorskip("torch")
    logits, labels = _logits(m=2, n=40)
    want = compute_statistics(logits, labels, STATISTICS)
    got = compute_statistics(torch.from_numpy(logits), torch.from_numpy(labels), STATISTICS)
    for name in STATISTICS:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def _logits(m=5, n=300, q=2, c=6, seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(m, n, q, c)) * rng.choice([1.0, 30.0], size=(m, n, q, 1))
    logits[0, :20] = 3.0  # every class tied
    return logits.astype(np.float32), rng.integers(0, c, n)


@pytest.mark.parametrize("threads", [1, 2])
def test_cache_pass_in_threads_and_blocks_equals_one_direct_call(monkeypatch, threads):
    from miaudit.signals import statistics

    monkeypatch.setattr(statistics, "_BLOCK_BYTES", 1000)  # many blocks of a few samples
    monkeypatch.setattr(statistics, "pass_threads", lambda: threads)
    logits, labels = _logits()
    want = compute_statistics(logits, labels, STATISTICS)
    cache = StatisticCache(logits, labels)
    assert cache.predicted(0) is None  # no pass yet
    got = {name: cache.get(name) for name in STATISTICS}
    want["prob_true"] = np.exp(-got["loss"])  # the cache derives it
    for name in STATISTICS:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    for query in (0, 1):  # recorded by the pass: argmax, the first maximum on ties
        np.testing.assert_array_equal(cache.predicted(query), logits[:, :, query].argmax(-1))


def test_predicted_classes_need_every_model_passed():
    logits, labels = _logits()
    cache = StatisticCache(logits, labels)
    cache.get("loss", [0, 2])
    assert cache.predicted(0) is None
    cache.get("neg_entropy", [1, 3, 4])  # either group records them
    np.testing.assert_array_equal(cache.predicted(1), logits[:, :, 1].argmax(-1))


def test_blocks_of_samples_and_query_means_match_the_whole_arrays(monkeypatch):
    from miaudit.signals import statistics

    monkeypatch.setattr(statistics, "_BLOCK_BYTES", 800)
    logits, labels = _logits(seed=1)
    cache = StatisticCache(logits, labels)
    phi = cache.get("phi")
    np.testing.assert_array_equal(cache.get("phi", [1, 2], slice(10, 50)), phi[1:3, 10:50])
    np.testing.assert_array_equal(cache.get("phi", [4, 0], slice(7, 9)), phi[[4, 0], 7:9])
    loss = cache.get("loss")
    for name, values in (("loss", loss), ("prob_true", np.exp(-loss)), ("phi", phi)):
        want = (values[..., 0] + values[..., 1]) / 2
        np.testing.assert_array_equal(cache.query_mean(name, [3, 1, 2]), want[[3, 1, 2]])
        got = cache.query_mean(name, [0, 1, 2, 3, 4], slice(5, 123))
        np.testing.assert_array_equal(got, want[:, 5:123], err_msg=name)


def test_column_statistics_needs_contiguous_float_columns():
    from miaudit.signals.statistics import column_statistics

    for z in (np.zeros((4, 6))[:, ::2], np.zeros((4, 3), dtype=np.int64)):
        with pytest.raises(ValueError, match="contiguous"):
            column_statistics(z, np.zeros(3, dtype=np.int64), ("loss",))


def test_float32_logits_give_the_float64_statistics_of_their_values():
    logits, labels = _logits(m=2, n=50)  # float32
    got = compute_statistics(logits, labels, STATISTICS)
    want = compute_statistics(logits.astype(np.float64), labels, STATISTICS)
    for name in STATISTICS:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_sample_blocks_cover_every_sample_once():
    from miaudit.signals.statistics import sample_blocks

    blocks = list(sample_blocks(10, 8, budget=24))
    assert blocks == [slice(0, 3), slice(3, 6), slice(6, 9), slice(9, 10)]
    assert list(sample_blocks(5, 10**9)) == [
        slice(0, 1),
        slice(1, 2),
        slice(2, 3),
        slice(3, 4),
        slice(4, 5),
    ]
