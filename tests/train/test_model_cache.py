import json
import logging
import stat

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from miaudit import __version__
from miaudit.train import ModelCache, Recipe, key_for, model_cache, trainer

RECIPE = Recipe(architecture="mlp", arch_params={"hidden": 16}, epochs=1, batch_size=64)
IDX = np.arange(0, 200, 2)
FP = "digits-v1"


@pytest.fixture
def calls(monkeypatch):
    """Count calls to the training function the cache uses."""
    counter = {"n": 0}
    real = trainer.train_models  # every cache miss trains through it

    def counting(recipe, features, labels, index_sets, *args, **kwargs):
        counter["n"] += len(index_sets)
        return real(recipe, features, labels, index_sets, *args, **kwargs)

    monkeypatch.setattr(trainer, "train_models", counting)
    return counter


def get(store, digits, **kw):
    x, y = digits
    args = {"features": x, "labels": y, "progress": False}
    return store.get_or_train(FP, kw.pop("indices", IDX), RECIPE, kw.pop("seed", 0), **args, **kw)


def state(model):
    return model.module.state_dict()


def same_weights(a, b):
    return all(torch.equal(v, state(b)[k]) for k, v in state(a).items())


def test_key_for_depends_on_each_input_but_not_index_order():
    base = key_for(FP, IDX, RECIPE, 0)
    assert base == key_for(FP, IDX[::-1], RECIPE, 0)
    assert base != key_for("other", IDX, RECIPE, 0)
    assert base != key_for(FP, IDX[1:], RECIPE, 0)
    assert base != key_for(FP, IDX, RECIPE.replace(lr=0.2), 0)
    assert base != key_for(FP, IDX, RECIPE, 1)
    assert base != key_for(FP, IDX, RECIPE, 0, num_classes=12)


def test_second_call_is_a_hit_without_training(tmp_path, digits, calls):
    store = ModelCache(tmp_path)
    first = get(store, digits)
    key = key_for(FP, IDX, RECIPE, 0)
    assert calls["n"] == 1 and store.contains(key) and not first.from_cache
    second = get(store, digits)
    assert calls["n"] == 1
    assert (store.stats.hits, store.stats.misses) == (1, 1)
    assert second.from_cache and not second.module.training and same_weights(first, second)
    x, _ = digits
    np.testing.assert_array_equal(
        trainer.predict_logits(first.module, x), trainer.predict_logits(second.module, x)
    )
    meta = json.loads((tmp_path / f"{key}.json").read_text())
    assert meta["recipe"] == RECIPE.to_dict() and meta["seed"] == 0 and meta["n_train"] == 100
    assert meta["miaudit_version"] == __version__ and len(meta["weights_sha256"]) == 64
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{key}.json", f"{key}.safetensors"]


def test_other_seed_is_a_miss(tmp_path, digits, calls):
    store = ModelCache(tmp_path)
    get(store, digits, seed=0)
    get(store, digits, seed=1)
    assert calls["n"] == 2 and store.stats.hits == 0


def corrupt_weights(path):
    blob = bytearray(path.read_bytes())
    blob[-5] ^= 0xFF
    path.write_bytes(bytes(blob))


def truncate_json(path):
    path.write_text(path.read_text()[:40])


def delete(path):
    path.unlink()


@pytest.mark.parametrize(
    ("suffix", "damage"),
    [(".safetensors", corrupt_weights), (".json", truncate_json), (".safetensors", delete)],
)
def test_corrupt_entry_is_retrained(tmp_path, digits, calls, caplog, suffix, damage):
    store = ModelCache(tmp_path)
    first = get(store, digits)
    key = key_for(FP, IDX, RECIPE, 0)
    damage(tmp_path / f"{key}{suffix}")
    assert not store.contains(key)
    with caplog.at_level(logging.WARNING, logger="miaudit.train.model_cache"):
        again = get(store, digits)
    assert f"cache entry {key} is corrupt" in caplog.text and "retraining" in caplog.text
    assert calls["n"] == 2 and store.stats.corrupt == 1 and not again.from_cache
    assert same_weights(first, again) and store.contains(key)
    assert get(store, digits).from_cache


def test_weights_not_fitting_architecture_are_retrained(tmp_path, digits, calls, caplog):
    store = ModelCache(tmp_path)
    get(store, digits)
    key = key_for(FP, IDX, RECIPE, 0)
    weights = tmp_path / f"{key}.safetensors"
    save_file({"hidden.weight": torch.zeros(3, 3)}, str(weights))  # valid file, wrong shapes
    meta_path = tmp_path / f"{key}.json"
    meta = json.loads(meta_path.read_text())
    meta["weights_sha256"] = model_cache.hashlib.sha256(weights.read_bytes()).hexdigest()
    meta_path.write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING):
        get(store, digits)
    assert "do not fit" in caplog.text and calls["n"] == 2


def test_interrupted_weight_write_leaves_no_entry(tmp_path, digits, monkeypatch):
    def exploding_save(tensors, filename):
        with open(filename, "wb") as handle:
            handle.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(model_cache, "save_file", exploding_save)
    store = ModelCache(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        get(store, digits)
    assert list(tmp_path.iterdir()) == []
    assert not store.contains(key_for(FP, IDX, RECIPE, 0))


def test_interrupted_metadata_write_is_not_cached(tmp_path, digits, monkeypatch, calls):
    def exploding_json(path, obj):
        raise KeyboardInterrupt

    monkeypatch.setattr(model_cache, "write_json", exploding_json)
    store = ModelCache(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        get(store, digits)
    key = key_for(FP, IDX, RECIPE, 0)
    assert [p.name for p in tmp_path.iterdir()] == [f"{key}.safetensors"]
    assert not store.contains(key)
    monkeypatch.undo()
    store = ModelCache(tmp_path)
    model = get(store, digits)  # the orphan weights are overwritten, not trusted
    assert not model.from_cache and store.stats.misses == 1 and store.contains(key)


def _fit_sklearn(root, digits):
    from sklearn.linear_model import LogisticRegression

    from miaudit.external.references import SklearnCache

    x, y = digits
    store = SklearnCache(root)
    rows = np.arange(100)
    store.get_or_fit(LogisticRegression(max_iter=20), x[:100].reshape(100, -1), y[:100], FP,
                     rows, 0)
    return store, store.key(_seeded(LogisticRegression(max_iter=20)), FP, rows, 0)


def _seeded(estimator):
    return estimator.set_params(random_state=0)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_every_cache_file_follows_the_umask(tmp_path, digits, umask, mask, mode):
    """A shared MIAUDIT_CACHE_DIR: torch weights (written by safetensors, which makes its file
    0600 itself), their metadata and scikit-learn entries all get 0o666 less the umask."""
    umask(mask)
    get(ModelCache(tmp_path / "torch"), digits)
    _fit_sklearn(tmp_path / "sklearn", digits)
    files = sorted((tmp_path / "torch").iterdir()) + sorted((tmp_path / "sklearn").iterdir())
    assert sorted(p.suffix for p in files) == [".json", ".json", ".safetensors", ".skops"]
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == mode, path.name


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("damage", [corrupt_weights, truncate_json, delete])
def test_a_corrupt_sklearn_entry_is_refit_with_a_warning(tmp_path, digits, caplog, damage):
    store, key = _fit_sklearn(tmp_path, digits)
    assert (store.hits, store.misses) == (0, 1)
    target = tmp_path / f"{key}.json" if damage is truncate_json else tmp_path / f"{key}.skops"
    damage(target)
    with caplog.at_level(logging.WARNING, logger="miaudit.external.references"):
        again, _ = _fit_sklearn(tmp_path, digits)
    assert again.corrupt == 1 and again.misses == 1  # refit, and stored again
    assert (f"scikit-learn cache entry {tmp_path / f'{key}.skops'} is corrupt" in caplog.text
            and "refitting it" in caplog.text)
    third, _ = _fit_sklearn(tmp_path, digits)
    assert (third.hits, third.corrupt) == (1, 0)
