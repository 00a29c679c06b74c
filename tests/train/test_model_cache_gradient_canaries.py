"""A DP-SGD model trained with white-box gradient canaries in the model cache
(ModelCache.get_or_train_with_canaries, miaudit.train.gradient_records): its own key (the
canary-free key and the canaries' settings), its record stored beside it and verified on every
load, a cached rerun giving back the same record and bounds, a corrupt or missing record
retrained, never trusted."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
import torch

from miaudit.privacy.gradient_canary_scores import gradient_canary_audit
from miaudit.train import ModelCache, Recipe, key_for
from miaudit.train.gradient_canaries import GradientCanaries
from miaudit.train.gradient_records import RECORD_SUFFIX, canary_key

N = 256
RECIPE = Recipe(epochs=2, batch_size=64, lr=0.1, arch_params={"hidden": 32},
                dp={"epsilon": 4.0, "accountant": "rdp"})
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def data():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data[:N] / 16.0).astype(np.float32), d.target[:N].astype(np.int64)


def _get(cache, data, count=100, seed=3):
    x, y = data
    canaries = GradientCanaries(count, seed=seed)
    model, record = cache.get_or_train_with_canaries(
        "digits-fp", np.arange(N), RECIPE, 7, canaries, features=x, labels=y,
        num_classes=10, progress=False)
    return model, record, canaries


def _same(a, b):
    for name in ("included", "projections", "initial", "final", "sampled", "coordinates",
                 "data"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert (a.kind, a.noise_multiplier, a.sample_rate) == (b.kind, b.noise_multiplier,
                                                          b.sample_rate)


def test_own_key_record_beside_and_a_cached_rerun_gives_the_same_bounds(tmp_path, data):
    cache = ModelCache(tmp_path)
    model, record, canaries = _get(cache, data)
    plain_key = key_for("digits-fp", np.arange(N), RECIPE, 7, 10)
    key = canary_key(plain_key, canaries)
    assert model.cache_key == key != plain_key
    assert not cache.contains(plain_key)  # the canary-free model is another entry
    assert (tmp_path / f"{key}{RECORD_SUFFIX}").is_file()
    assert model.privacy["gradient_canaries"]["count"] == 100
    # other canary settings: another model, another key
    assert canary_key(plain_key, GradientCanaries(100, seed=4)) != key
    assert canary_key(plain_key, GradientCanaries(100, seed=3, kind="random")) != key

    again = ModelCache(tmp_path)
    loaded, loaded_record, fresh = _get(again, data)
    assert (again.stats.hits, again.stats.misses) == (1, 0) and loaded.from_cache
    assert fresh.record is loaded_record
    assert loaded_record.data is not None  # the rows' part d comes back too
    _same(record, loaded_record)
    for k, v in model.module.state_dict().items():
        assert torch.equal(v.cpu(), loaded.module.state_dict()[k].cpu())
    assert gradient_canary_audit(record) == gradient_canary_audit(loaded_record)
    known = {"noise": "per-step", "known_data": True}
    assert (gradient_canary_audit(record, **known)
            == gradient_canary_audit(loaded_record, **known))


def test_a_record_stored_without_the_rows_part_loads_and_is_never_scored_as_if_it_had_it(
        tmp_path, data):
    """An entry cached before the record kept d (its npz has no ``data``) still loads, for
    the auditor who does not need d; asked for known_data it is a ConfigError that says
    what to do, never the x score under a known-data report."""
    from miaudit.config import CanariesConfig
    from miaudit.errors import ConfigError
    from miaudit.privacy.audit_record import PrivacySettings
    from miaudit.privacy.white_box import gradient_canaries_csv, white_box_audit
    from miaudit.train.gradient_records import load_record, save_record

    _, record, _ = _get(ModelCache(tmp_path), data)
    path = tmp_path / "old.canaries.npz"
    old = load_record(path, save_record(path, dataclasses.replace(record, data=None)))
    assert old.data is None
    _same(dataclasses.replace(record, data=None), old)
    settings = PrivacySettings(claimed=None, alpha=0.05, delta=1e-5, delta_source="dp",
                               split_seed=0)
    section = CanariesConfig(kind="gradient", count=100)  # known_data: true by default
    for use in (lambda: white_box_audit(old, section, settings),
                lambda: gradient_canaries_csv(old, section)):
        with pytest.raises(ConfigError, match=r"known_data: true needs .*known_data: false"):
            use()
    as_before = section.replace(known_data=False)
    assert (white_box_audit(old, as_before, settings)
            == white_box_audit(record, as_before, settings))


@pytest.mark.parametrize("damage", ["garbage", "missing", "swapped"])
def test_a_corrupt_or_missing_record_is_retrained_never_trusted(tmp_path, data, damage,
                                                                caplog):
    cache = ModelCache(tmp_path)
    _, record, canaries = _get(cache, data)
    key = canary_key(key_for("digits-fp", np.arange(N), RECIPE, 7, 10), canaries)
    path = tmp_path / f"{key}{RECORD_SUFFIX}"
    if damage == "garbage":
        path.write_bytes(b"not a record")
    elif damage == "missing":
        path.unlink()
    else:  # a well-formed record of other canaries: its hash does not match the entry's
        _, other, _ = _get(ModelCache(tmp_path / "other"), data, count=100, seed=9)
        from miaudit.train.gradient_records import save_record

        save_record(path, other)
    again = ModelCache(tmp_path)
    with caplog.at_level(logging.WARNING):
        _, retrained, _ = _get(again, data)
    assert (again.stats.corrupt, again.stats.misses, again.stats.hits) == (1, 1, 0)
    assert "gradient-canary record" in caplog.text and "retraining" in caplog.text
    _same(record, retrained)  # the same seeds train the same run again
    assert ModelCache(tmp_path).contains(key) and path.is_file()


def test_the_record_belongs_to_its_entry_in_the_cache_inventory(tmp_path, data):
    from miaudit.cli.cache_admin import REACHABLE, scan

    _, _, canaries = _get(ModelCache(tmp_path), data)
    key = canary_key(key_for("digits-fp", np.arange(N), RECIPE, 7, 10), canaries)
    inventory = scan(tmp_path, verify=True)
    (entry,) = inventory.entries
    assert entry.key == key and entry.status == REACHABLE
    assert tmp_path / f"{key}{RECORD_SUFFIX}" in entry.paths  # pruned with its entry
    assert not inventory.other and not inventory.loose
