"""Stacked training trains the models the per-model loop trains; grouping; the batched cache."""

import numpy as np
import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.train import ModelCache, Recipe, stacked, train_model, train_models, trainer
from miaudit.train.stacked import can_stack, plan_groups, train_stacked

SGD = Recipe(
    architecture="mlp",
    arch_params={"hidden": 24, "activation": "tanh"},
    momentum=0.9,
    nesterov=True,
    weight_decay=5e-4,
    schedule="cosine",
    lr=0.1,
    epochs=3,
    batch_size=32,  # 100 rows: three full batches and a tail of 4
)
ADAM = Recipe(
    architecture="mlp",
    arch_params={"activation": "relu"},  # default width (2 x 64)
    optimizer="adam",
    lr=1e-2,
    weight_decay=1e-4,
    schedule="constant",
    epochs=3,
    batch_size=32,
)
SETS = [np.arange(0, 100), np.arange(100, 200), np.arange(50, 150)]
SEEDS = [0, 1, 7]


def flat(model):
    return torch.cat([v.flatten() for v in model.module.state_dict().values()])


def assert_same_model(a, b, atol=1e-6):
    """Equal weights up to float summation order (bit-equal on the CPUs we tested)."""
    assert type(a.module) is type(b.module)
    assert a.module.state_dict().keys() == b.module.state_dict().keys()
    torch.testing.assert_close(flat(a), flat(b), rtol=0, atol=atol)
    np.testing.assert_allclose(a.losses, b.losses, rtol=1e-5)
    for name in ("seed", "n_train", "num_classes", "input_shape"):
        assert getattr(a, name) == getattr(b, name)


@pytest.mark.parametrize("recipe", [SGD, ADAM], ids=["sgd-nesterov-wd-cosine", "adam-relu"])
def test_stacked_trains_the_per_model_models(digits, recipe):
    x, y = digits
    models = train_stacked(recipe, x, y, SETS, SEEDS)
    for rows, seed, model in zip(SETS, SEEDS, models, strict=True):
        assert_same_model(model, train_model(recipe, x, y, rows, seed, progress=False))
        assert not model.module.training and model.train_seconds > 0
    assert not torch.equal(flat(models[0]), flat(models[1]))


def test_stacked_models_are_ordinary_and_leave_the_rng_alone(digits):
    x, y = digits
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    (model,) = train_stacked(SGD.replace(epochs=1), torch.from_numpy(x), y, SETS[:1], [3])
    assert torch.equal(torch.rand(2), expected)
    fresh = build_model("mlp", (1, 8, 8), 10, **SGD.arch_params)
    assert type(model.module) is type(fresh)
    fresh.load_state_dict(model.module.state_dict(), strict=True)
    assert model.input_shape == (1, 8, 8) and model.module(torch.from_numpy(x[:2])).shape == (2, 10)


def test_stacked_rejects_what_it_cannot_stack(digits):
    x, y = digits
    cnn = Recipe(architecture="mnist-cnn", epochs=1)
    assert can_stack(SGD) and can_stack(ADAM) and not can_stack(cnn)
    with pytest.raises(ConfigError, match="stacked"):
        train_stacked(cnn, x, y, SETS, SEEDS)
    with pytest.raises(ConfigError, match="equal training-set sizes"):
        train_stacked(SGD, x, y, [np.arange(100), np.arange(50)], [0, 1])
    with pytest.raises(ConfigError, match="pair them"):
        train_stacked(SGD, x, y, SETS, [0])


def test_plan_groups():
    assert plan_groups([5] * 10, True, max_stack=16) == [list(range(10))]
    assert plan_groups([5] * 10, True, max_stack=16, min_groups=2) == [
        [0, 1, 2, 3, 4],
        [5, 6, 7, 8, 9],
    ]
    assert [len(g) for g in plan_groups([5] * 25, True, max_stack=10)] == [9, 8, 8]
    mixed = plan_groups([5, 7, 5, 7, 5], True, max_stack=16)
    assert sorted(map(sorted, mixed)) == [[0, 2, 4], [1, 3]]
    assert plan_groups([5, 5, 5], False, max_stack=16, min_groups=2) == [[0], [1], [2]]
    assert len(plan_groups([5] * 3, True, max_stack=16, min_groups=8)) == 3  # cannot split more
    with pytest.raises(ConfigError):
        plan_groups([5], True, max_stack=0)


def test_train_models_groups_by_size_and_keeps_job_order(digits, monkeypatch):
    x, y = digits
    sizes = []
    real = stacked.train_stacked

    def spy(recipe, features, labels, index_sets, seeds, *args, **kwargs):
        sizes.append(len(seeds))
        return real(recipe, features, labels, index_sets, seeds, *args, **kwargs)

    monkeypatch.setattr(stacked, "train_stacked", spy)
    sets = [SETS[0], np.arange(200, 250), SETS[1], SETS[2], np.arange(250, 300)]
    seeds = [4, 3, 2, 1, 0]
    models = train_models(SGD, x, y, sets, seeds, progress=False, workers=1)
    assert sorted(sizes) == [2, 3]
    assert [m.seed for m in models] == seeds
    assert [m.n_train for m in models] == [100, 50, 100, 100, 50]
    for rows, seed, model in zip(sets, seeds, models, strict=True):
        assert_same_model(model, train_model(SGD, x, y, rows, seed, progress=False))


def test_unstackable_recipes_fall_back_to_the_loop(digits, monkeypatch):
    x, y = digits

    def refuse(*args, **kwargs):
        raise AssertionError("a CNN must not be stacked")

    monkeypatch.setattr(stacked, "train_stacked", refuse)
    cnn = Recipe(architecture="mnist-cnn", epochs=1, batch_size=64, lr=0.05)  # has dropout
    models = train_models(cnn, x, y, SETS[:2], SEEDS[:2], progress=False, workers=1)
    for rows, seed, model in zip(SETS, SEEDS, models, strict=False):
        assert torch.equal(flat(model), flat(train_model(cnn, x, y, rows, seed, progress=False)))


def test_worker_processes_train_the_same_models(digits):
    x, y = digits
    recipe = SGD.replace(epochs=1)
    in_process = train_models(recipe, x, y, SETS, SEEDS, progress=False, workers=1)
    fanned = train_models(recipe, x, y, SETS, SEEDS, progress=False, workers=2)
    for a, b in zip(in_process, fanned, strict=True):
        assert torch.equal(flat(a), flat(b)) and a.seed == b.seed
        assert not b.module.training


@pytest.fixture
def trained_jobs(monkeypatch):
    """Record the seeds of every model the cache has train_models train."""
    seen: list[list[int]] = []
    real = trainer.train_models

    def counting(recipe, features, labels, index_sets, seeds, *args, **kwargs):
        seen.append(list(seeds))
        return real(recipe, features, labels, index_sets, seeds, *args, **kwargs)

    monkeypatch.setattr(trainer, "train_models", counting)
    return seen


def test_get_or_train_many_trains_each_miss_once(tmp_path, digits, trained_jobs):
    x, y = digits
    store = ModelCache(tmp_path)
    kw = {"features": x, "labels": y, "progress": False, "workers": 1}
    recipe = SGD.replace(epochs=1)
    jobs = [(SETS[0], 0), (SETS[1], 1), (SETS[0][::-1].copy(), 0)]  # the third = the first
    first = store.get_or_train_many("fp", jobs, recipe, **kw)
    assert trained_jobs == [[0, 1]] and store.stats.misses == 2 and store.stats.hits == 0
    assert first[0] is first[2] and not first[0].from_cache

    again = store.get_or_train_many("fp", jobs[:2] + [(SETS[2], 2)], recipe, **kw)
    assert trained_jobs == [[0, 1], [2]]  # only the new job trained
    assert store.stats.hits == 2 and store.stats.misses == 3
    assert again[0].from_cache and again[1].from_cache and not again[2].from_cache
    for a, b in zip(first[:2], again[:2], strict=True):
        assert torch.equal(flat(a), flat(b))

    # get_or_train finds what get_or_train_many stored, and the weights are the plain path's
    single = store.get_or_train("fp", SETS[2], recipe, 2, features=x, labels=y, progress=False)
    assert single.from_cache and torch.equal(flat(single), flat(again[2]))
    assert_same_model(again[2], train_model(recipe, x, y, SETS[2], 2, progress=False))
    assert trained_jobs == [[0, 1], [2]]
