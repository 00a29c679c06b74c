import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from miaudit.errors import ConfigError
from miaudit.train import ModelCache, Recipe, train_model
from miaudit.train.forgetting import forget
from miaudit.train.model_cache import forgetting_key, key_for


@pytest.fixture(scope="module")
def digits():
    data = load_digits()
    return (data.data / 16.0).astype(np.float32), data.target.astype(np.int64)


def test_forgetting_warm_starts_from_the_target_and_trains_on_public_rows_only(digits):
    x, y = digits
    recipe = Recipe(architecture="mlp", epochs=3, batch_size=64)
    target = train_model(recipe, x, y, np.arange(300), seed=0, progress=False)
    public = np.arange(1000, 1300)
    tuned = forget(target, recipe.replace(epochs=1, lr=1e-12), x, y, public, seed=1)
    # a vanishing lr (0 is refused: it cannot train): the copy is the target (warm start)
    for a, b in zip(target.module.parameters(), tuned.module.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    moved = forget(target, recipe.replace(epochs=2, lr=0.05), x, y, public, seed=1)
    assert moved.n_train == 300 and len(moved.losses) == 2
    diffs = [float((a - b).detach().abs().max()) for a, b in
             zip(target.module.parameters(), moved.module.parameters(), strict=True)]
    assert max(diffs) > 0
    again = forget(target, recipe.replace(epochs=2, lr=0.05), x, y, public, seed=1)
    for a, b in zip(moved.module.parameters(), again.module.parameters(), strict=True):
        torch.testing.assert_close(a, b)  # seeded
    with pytest.raises(ValueError, match="architecture"):
        forget(target, recipe.replace(architecture="mnist-cnn"), x, y, public, seed=1)
    # public labels the target has no output for: a clear error, not a crash in the loss
    with pytest.raises(ConfigError, match=r"\[0, 10\)"):
        forget(target, recipe, x, np.where(y == 9, 12, y), public, seed=1)
    with pytest.raises(ConfigError, match="indices"):
        forget(target, recipe, x, y, np.array([len(x)]), seed=1)


def test_forgetting_copies_are_cached_under_their_own_key(digits, tmp_path):
    x, y = digits
    recipe = Recipe(architecture="mlp", epochs=2, batch_size=64)
    target = train_model(recipe, x, y, np.arange(200), seed=0, progress=False)
    tkey = key_for("fp", np.arange(200), recipe, 0)
    rows = np.arange(500, 700)
    tune = recipe.replace(epochs=1)
    key = forgetting_key(tkey, "fp", rows, tune, 3)
    assert key != forgetting_key(tkey, "fp", rows, tune, 4)
    cache = ModelCache(tmp_path)
    calls = []

    def make():
        calls.append(1)
        return forget(target, tune, x, y, rows, 3)

    kwargs = dict(recipe=tune, seed=3, input_shape=(64,), num_classes=10, device="cpu",
                  dataset_fingerprint="fp", indices=rows)
    first = cache.get_or_make(key, make, **kwargs)
    second = cache.get_or_make(key, make, **kwargs)
    assert len(calls) == 1 and cache.stats.hits == 1
    for a, b in zip(first.module.parameters(), second.module.parameters(), strict=True):
        torch.testing.assert_close(a, b)
