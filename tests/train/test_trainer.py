import numpy as np
import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.train import (
    CheckpointSpec,
    Recipe,
    engine,
    lr_at,
    predict_logits,
    train_model,
    train_models,
)
from miaudit.train.forgetting import forget
from miaudit.train.stacked import train_stacked

FAST = Recipe(architecture="mlp", lr=0.1, epochs=8, batch_size=32)
TRAIN = np.arange(200)


def weights(model):
    return torch.cat([p.detach().flatten() for p in model.module.state_dict().values()])


def accuracy(model, x, y):
    return float((predict_logits(model.module, x).argmax(1) == y).mean())


def test_training_lowers_loss_and_learns_digits(digits):
    x, y = digits
    model = train_model(FAST, x, y, TRAIN, seed=0, progress=False)
    assert len(model.losses) == FAST.epochs
    assert model.losses[-1] < 0.5 * model.losses[0]
    assert accuracy(model, x[TRAIN], y[TRAIN]) > 0.9
    assert accuracy(model, x[200:], y[200:]) > 0.7
    assert not model.module.training
    assert model.n_train == 200 and model.num_classes == 10 and model.input_shape == (1, 8, 8)
    assert model.samples_per_second > 0 and model.train_seconds > 0


def test_same_seed_same_weights_different_seed_different(digits):
    x, y = digits
    recipe = Recipe(architecture="mnist-cnn", epochs=1, batch_size=64, lr=0.05)  # has dropout
    a = train_model(recipe, x, y, TRAIN, seed=3, progress=False)
    b = train_model(recipe, x, y, TRAIN[::-1].copy(), seed=3, progress=False)  # order irrelevant
    c = train_model(recipe, x, y, TRAIN, seed=4, progress=False)
    assert torch.equal(weights(a), weights(b))
    assert not torch.equal(weights(a), weights(c))


def test_training_leaves_global_rng_alone(digits):
    x, y = digits
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    train_model(FAST.replace(epochs=1), x, y, TRAIN, seed=0, progress=False)
    assert torch.equal(torch.rand(3), expected)


def test_adam_option_trains(digits):
    x, y = digits
    recipe = FAST.replace(optimizer="adam", lr=1e-2, schedule="constant", epochs=5)
    model = train_model(recipe, x, y, TRAIN, seed=0, progress=False)
    assert model.losses[-1] < 0.5 * model.losses[0]
    assert accuracy(model, x[TRAIN], y[TRAIN]) > 0.85


def test_cosine_lr_reaches_about_zero_and_callback_runs(digits):
    x, y = digits
    seen = []
    recipe = FAST.replace(epochs=3, batch_size=8)  # 75 steps
    train_model(recipe, x, y, TRAIN, seed=0, progress=False, on_epoch_end=seen.append)
    assert [info.epoch for info in seen] == [1, 2, 3]
    assert seen[0].lr < 0.1 and seen[-1].lr < 1e-3 * 0.1
    const = []
    recipe = FAST.replace(epochs=2, schedule="constant")
    train_model(recipe, x, y, TRAIN, seed=0, progress=False, on_epoch_end=const.append)
    assert [info.lr for info in const] == [0.1, 0.1]


def test_plain_sgd_momentum_zero_with_default_nesterov(digits):
    x, y = digits
    recipe = FAST.replace(momentum=0.0, epochs=1)  # nesterov=True is ignored without momentum
    train_model(recipe, x, y, TRAIN, seed=0, progress=False)


def test_accepts_tensors_and_progress_bar(digits):
    x, y = digits
    model = train_model(
        FAST.replace(epochs=1),
        torch.from_numpy(x),
        torch.from_numpy(y),
        torch.arange(50),
        seed=1,
        progress=True,
    )
    assert model.n_train == 50


def test_train_models_pairs_index_sets_with_seeds(digits):
    x, y = digits
    recipe = FAST.replace(epochs=1)
    sets = [np.arange(0, 100), np.arange(100, 200)]
    models = train_models(recipe, x, y, sets, [0, 1], progress=False)
    assert [m.seed for m in models] == [0, 1] and all(m.n_train == 100 for m in models)
    single = train_model(recipe, x, y, sets[1], 1, progress=False)
    assert torch.equal(weights(models[1]), weights(single))
    with pytest.raises(ConfigError, match="seeds"):
        train_models(recipe, x, y, sets, [0], progress=False)


def test_num_classes_inferred_from_all_labels(digits):
    x, y = digits
    zeros_and_ones = np.flatnonzero(y < 2)
    model = train_model(FAST.replace(epochs=1), x, y, zeros_and_ones, 0, progress=False)
    assert model.num_classes == 10


@pytest.mark.parametrize(
    ("indices", "match"),
    [
        (np.array([0, 500]), "lie in"),
        (np.array([], dtype=int), "non-empty"),
        (np.ones(3), "integer"),
    ],
)
def test_bad_indices(digits, indices, match):
    x, y = digits
    with pytest.raises(ConfigError, match=match):
        train_model(FAST, x, y, indices, 0, progress=False)


def test_bad_seed_and_labels(digits):
    x, y = digits
    with pytest.raises(ConfigError, match="seed"):
        train_model(FAST, x, y, TRAIN, -1, progress=False)
    with pytest.raises(ConfigError, match="num_classes"):
        train_model(FAST, x, y, TRAIN, 0, num_classes=5, progress=False)


def test_predict_logits_batched_eval_mode(digits):
    x, _ = digits
    torch.manual_seed(0)
    from miaudit.models import build_model

    module = build_model("mnist-cnn", (1, 8, 8), 10)  # dropout: eval mode must be deterministic
    module.train()
    a = predict_logits(module, x, batch_size=7)
    b = predict_logits(module, torch.from_numpy(x), batch_size=1024)
    assert a.shape == (300, 10) and a.dtype == np.float32
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert module.training  # mode restored
    assert predict_logits(module, x[:0]).shape == (0, 10)


@pytest.mark.parametrize(
    ("arch", "params", "shape"),
    [
        ("cifar-cnn", {}, (3, 32, 32)),
        ("resnet18", {"width": 8}, (3, 32, 32)),
        ("mnist-cnn", {}, (1, 28, 28)),
    ],
)
def test_every_architecture_trains_a_step(arch, params, shape):
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(24, *shape, generator=gen)
    y = torch.arange(24) % 3
    recipe = Recipe(architecture=arch, arch_params=params, epochs=1, batch_size=8, lr=0.01)
    model = train_model(recipe, x, y, np.arange(24), seed=0, progress=False)
    assert np.isfinite(model.losses).all()
    assert predict_logits(model.module, x).shape == (24, 3)


def test_num_threads_is_scoped_to_the_call(digits):
    x, y = digits
    torch.set_num_threads(2)  # the autouse fixture restores the original afterwards
    seen = []
    train_model(
        FAST.replace(epochs=1),
        x,
        y,
        np.arange(50),
        0,
        progress=False,
        num_threads=1,
        on_epoch_end=lambda info: seen.append(torch.get_num_threads()),
    )
    assert seen == [1] and torch.get_num_threads() == 2


class RecordingStrategy:
    """Two fake models: each step records its learning rate and rows, and adds 1 to a weight."""

    module = None
    models = 2

    def __init__(self):
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.optimizer = torch.optim.SGD([self.weight], lr=1.0)
        self.lrs, self.batches = [], []

    def step(self, xb, yb):
        self.lrs.append(self.optimizer.param_groups[0]["lr"])
        self.batches.append(yb.view(2, -1).clone())  # model 0's rows, then model 1's
        with torch.no_grad():
            self.weight += 1

    def epoch_losses(self):
        return [float(len(self.batches)), 0.0]

    def snapshots(self):
        return [{"w": self.weight.detach().clone()}, {"w": -self.weight.detach().clone()}]

    def resume(self):
        pass


def test_the_loop_owns_batches_schedule_and_snapshots():
    recipe = Recipe(lr=0.1, epochs=3, batch_size=4)  # 5 rows a model: 2 steps an epoch
    x, y = torch.arange(10.0)[:, None], torch.arange(10)
    members = torch.arange(10).view(2, 5)
    strategy = RecordingStrategy()
    batches = engine.ShuffledBatches(x, y, [0, 1], recipe.batch_size, members)
    result = engine.train_loop(strategy, batches, recipe, 5, torch.device("cpu"),
                               checkpoints=CheckpointSpec(epochs=[1], steps=[5]))
    assert result.steps == 6 and strategy.lrs == [lr_at(recipe, s, 6) for s in range(6)]
    assert result.losses == [[2.0, 4.0, 6.0], [0.0, 0.0, 0.0]]
    assert sorted(result.snapshots[0]) == [2, 5]
    assert float(result.snapshots[0][5]["w"]) == 5 and float(result.snapshots[1][2]["w"]) == -2
    for epoch in range(3):  # each epoch: every model's own rows once, freshly shuffled
        rows = torch.cat(strategy.batches[2 * epoch : 2 * epoch + 2], dim=1)
        assert rows[0].sort().values.tolist() == [0, 1, 2, 3, 4]
        assert rows[1].sort().values.tolist() == [5, 6, 7, 8, 9]
    assert strategy.batches[0][0].tolist() != strategy.batches[2][0].tolist()
    with pytest.raises(ConfigError, match="callbacks"):
        engine.train_loop(strategy, batches, recipe, 5, torch.device("cpu"),
                          on_epoch_end=lambda info: None)


def test_every_trainer_steps_through_the_one_loop(digits, monkeypatch):
    x, y = digits
    seen = []
    real = engine.run_epoch

    def spy(strategy, *args, **kwargs):
        seen.append(type(strategy).__name__)
        return real(strategy, *args, **kwargs)

    monkeypatch.setattr(engine, "run_epoch", spy)
    recipe = FAST.replace(epochs=1)
    target = train_model(recipe, x, y, TRAIN, seed=0, progress=False)
    train_stacked(recipe, x, y, [TRAIN, TRAIN + 50], [0, 1])
    forget(target, recipe, x, y, np.arange(200, 300), seed=1)
    assert seen == ["PlainStrategy", "StackedStrategy", "PlainStrategy"]
