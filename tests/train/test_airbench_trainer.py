"""The airbench94 trainer (Jordan 2024, KellerJordan/cifar10-airbench airbench94.py) on tiny
synthetic CIFAR-shaped data: its recipe, optimizer groups, schedule, alternating flip,
translation, lookahead, whitening-bias freeze, label smoothing, training and caching."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from miaudit.config import load_config
from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.models.airbench import WHITEN_EPS, Airbench94
from miaudit.signals.query import replay_queries, untrained_queries
from miaudit.train import ModelCache, Recipe, key_for
from miaudit.train.airbench import (
    AIRBENCH94_RECIPE,
    AirbenchBatches,
    AirbenchStrategy,
    Lookahead,
    airbench94_recipe,
    airbench_steps,
    param_groups,
)
from miaudit.train.augment import build_augmentation
from miaudit.train.checkpoints import CheckpointSpec
from miaudit.train.common import lr_at, make_optimizer
from miaudit.train.engine import run_epoch
from miaudit.train.loop import PlainStrategy, train_model

SMALL = {"widths": [8, 16, 16]}


def synthetic(n: int = 256, classes: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-shaped pixels in [0, 1]: a fixed template per class plus noise (learnable)."""
    rng = np.random.default_rng(seed)
    templates = rng.random((classes, 3, 32, 32))
    y = rng.integers(0, classes, n)
    x = 0.6 * templates[y] + 0.4 * rng.random((n, 3, 32, 32))
    return x.astype(np.float32), y.astype(np.int64)


def test_the_recipe_is_theirs():
    r = airbench94_recipe()
    assert AIRBENCH94_RECIPE == r.to_dict() and Recipe.from_dict(AIRBENCH94_RECIPE) == r
    # their lr 11.5 and wd 0.0153 per 1024 examples, summed loss -> our mean loss
    kilostep_scale = 1024 * (1 + 1 / (1 - 0.85))
    assert r.lr == pytest.approx(11.5 / kilostep_scale * 1024) == 1.5
    their_wd = (0.0153 * 1024 / kilostep_scale) / (11.5 / kilostep_scale)  # PyTorch's, summed
    assert r.weight_decay == pytest.approx(their_wd / 1024)
    assert (r.optimizer, r.momentum, r.nesterov, r.schedule) == ("sgd", 0.85, True, "triangular")
    assert (r.batch_size, r.epochs, r.epoch_fraction, r.label_smoothing) == (1024, 10, 0.9, 0.2)
    assert [s["name"] for s in r.augment] == ["alternating-flip", "translate"]
    assert r.augment[1]["padding"] == 2
    # CIFAR-10's 50,000 rows: 48 whole batches an epoch, ceil(48 * 9.9) = 476 steps
    assert airbench_steps(r, 50_000) == (48, 476)
    assert r.key() != r.replace(epoch_fraction=1.0).key()
    example = load_config(Path(__file__).parents[2] / "examples" / "cifar10-airbench94.yaml")
    assert Recipe.from_dict(example.recipe) == r  # the shipped example trains their recipe


def test_the_triangular_schedule_is_theirs():
    r = airbench94_recipe()
    total = 476

    def their_get_lr(step: int) -> float:
        warmup_steps = int(total * 0.23)
        if step < warmup_steps:
            frac = step / warmup_steps
            return 0.2 * (1 - frac) + 1.0 * frac
        frac = (step - warmup_steps) / (total - warmup_steps)
        return 1.0 * (1 - frac) + 0.07 * frac

    assert [lr_at(r, s, total) for s in range(total)] == [r.lr * their_get_lr(s)
                                                          for s in range(total)]  # fmt: skip


def test_mean_loss_steps_equal_their_summed_loss_steps():
    """Our groups (BatchNorm shifts at 64x lr, 1/64 wd, set by the engine's lr_scale) on the
    mean loss take their steps on the summed loss exactly (SGD, Nesterov)."""
    batch = 16
    x, y = synthetic(batch)
    xb, yb = torch.from_numpy(x), torch.from_numpy(y)
    torch.manual_seed(0)
    theirs = build_model("airbench94", (3, 32, 32), 4, **SMALL).train()
    ours = build_model("airbench94", (3, 32, 32), 4, **SMALL).train()
    ours.load_state_dict(theirs.state_dict())
    # airbench94.py's main(), at batch_size 16
    kilostep_scale = 1024 * (1 + 1 / (1 - 0.85))
    lr, wd = 11.5 / kilostep_scale, 0.0153 * batch / kilostep_scale
    lr_biases = lr * 64
    named = [(k, p) for k, p in theirs.named_parameters() if p.requires_grad]
    sgd = torch.optim.SGD([
        {"params": [p for k, p in named if "norm" in k], "lr": lr_biases,
         "weight_decay": wd / lr_biases},
        {"params": [p for k, p in named if "norm" not in k], "lr": lr, "weight_decay": wd / lr},
    ], momentum=0.85, nesterov=True)  # fmt: skip
    for _ in range(3):
        loss = F.cross_entropy(theirs(xb), yb, label_smoothing=0.2, reduction="sum")
        sgd.zero_grad(set_to_none=True)
        loss.backward()
        sgd.step()
    recipe = airbench94_recipe(batch_size=batch, schedule="constant")
    optimizer = make_optimizer(recipe, param_groups(ours, recipe))
    run_epoch(PlainStrategy(ours, optimizer, recipe, torch.device("cpu")), [(xb, yb)] * 3,
              recipe, 0, 3)  # fmt: skip
    assert [g["lr"] for g in optimizer.param_groups] == [pytest.approx(1.5 * batch / 1024 * 64),
                                                         pytest.approx(1.5 * batch / 1024)]
    for k, v in theirs.state_dict().items():
        assert torch.allclose(ours.state_dict()[k], v, rtol=1e-4, atol=1e-6), k


def test_frozen_parameters_are_in_no_group():
    model = build_model("airbench94", (3, 32, 32), 4, **SMALL)
    grouped = {id(p) for g in param_groups(model, airbench94_recipe()) for p in g["params"]}
    assert id(model.whiten.weight) not in grouped and id(model.whiten.bias) in grouped
    assert id(model.layers[0].norm1.weight) not in grouped
    assert id(model.layers[0].norm1.bias) in grouped


def test_alternating_flip_and_whole_batches():
    """A random half of the rows is mirrored in the first epoch; each later epoch mirrors
    exactly the rows the one before did not; only whole batches, stopping at ``total``."""
    n, batch = 100, 32
    # every image's left half is its row id, the right half -1: a flip is visible
    x = torch.full((n, 1, 2, 2), -1.0)
    x[:, 0, :, 0] = torch.arange(n, dtype=torch.float32)[:, None]
    batches = AirbenchBatches(x, torch.arange(n), batch, total=7, shuffle_seed=1, flip_seed=2)
    flipped = []
    for _ in range(3):
        state, sizes = {}, []
        for xb, yb in batches:
            sizes.append(len(xb))
            left = xb[:, 0, 0, 0]
            for row, value in zip(yb.tolist(), left.tolist(), strict=True):
                state[row] = value == -1.0
        flipped.append(state)
        assert all(s == batch for s in sizes)
    assert [len(s) for s in flipped] == [96, 96, 32]  # 3 + 3 + 1 = 7 steps
    first = flipped[0]
    assert 30 <= sum(first.values()) <= 66
    both = set(first) & set(flipped[1])
    assert both and all(flipped[1][r] != first[r] for r in both)
    assert all(flipped[2][r] == first[r] for r in set(first) & set(flipped[2]))
    plain = AirbenchBatches(x, torch.arange(n), batch, total=3, shuffle_seed=1, flip_seed=None)
    assert all(bool((xb[:, 0, 0, 0] >= 0).all()) for xb, _ in plain)


def test_translate_shifts_by_at_most_its_padding_with_reflection():
    augment = build_augmentation([{"name": "translate", "padding": 2}], (1, 8, 8))
    x = torch.arange(64, dtype=torch.float32).view(1, 1, 8, 8).repeat(200, 1, 1, 1)
    out = augment(x, torch.Generator().manual_seed(0))
    padded = F.pad(x[:1], (2,) * 4, mode="reflect")[0, 0]
    windows = {(dy, dx): padded[dy : dy + 8, dx : dx + 8] for dy in range(5) for dx in range(5)}
    seen = set()
    for image in out[:, 0]:
        match = [s for s, w in windows.items() if torch.equal(w, image)]
        assert len(match) == 1
        seen.add(match[0])
    assert len(seen) == 25  # every shift in [-2, 2]^2 drawn


def test_lookahead_averages_and_resets_the_weights():
    model = build_model("airbench94", (3, 32, 32), 4, **SMALL)
    state = Lookahead(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
        model.layers[0].norm1.running_mean.add_(2.0)
        model.layers[0].norm1.num_batches_tracked.add_(5)
    moved = {k: v.clone() for k, v in model.state_dict().items()}
    state.update(model, decay=0.75)
    for k, v in model.state_dict().items():
        if v.dtype == torch.float32:  # average 1/4 of the way to the weights, weights reset
            assert torch.allclose(v, before[k] + 0.25 * (moved[k] - before[k])), k
            assert torch.equal(state.average[k], v)
    assert int(model.layers[0].norm1.num_batches_tracked) == 5  # integers are left alone
    with torch.no_grad():
        model.head.weight.add_(3.0)
    state.update(model, decay=1.0)  # the end of training: the weights become the average
    assert torch.equal(model.head.weight, state.average["head.weight"])


def test_lookahead_every_five_steps_and_at_the_end(monkeypatch):
    calls = []
    monkeypatch.setattr(Lookahead, "update", lambda self, module, decay: calls.append(decay))
    x, y = synthetic(96)
    recipe = airbench94_recipe(batch_size=16, epochs=3, epoch_fraction=0.5, arch_params=SMALL)
    assert airbench_steps(recipe, 96) == (6, 15)
    train_model(recipe, x, y, np.arange(96), 0, progress=False)
    t = [5, 10, 15]
    assert calls[:-1] == pytest.approx([0.95**5 * (s / 15) ** 3 for s in t]) and calls[-1] == 1.0


def test_label_smoothing_is_point_two_in_the_loss():
    x, y = synthetic(32)
    xb, yb = torch.from_numpy(x), torch.from_numpy(y)
    model = build_model("airbench94", (3, 32, 32), 4, **SMALL).train()
    recipe = airbench94_recipe(batch_size=32)
    expected = F.cross_entropy(model(xb), yb, label_smoothing=0.2).item()
    assert expected != pytest.approx(F.cross_entropy(model(xb), yb).item(), abs=1e-4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    strategy = AirbenchStrategy(model, optimizer, recipe, torch.device("cpu"), 1000,
                                Lookahead(model))  # fmt: skip
    strategy.step(xb, yb)
    assert strategy.epoch_losses()[0] == pytest.approx(expected, rel=1e-5)


def test_it_trains_and_the_whitening_bias_only_for_three_epochs():
    x, y = synthetic(256)
    recipe = airbench94_recipe(batch_size=32, epochs=6, epoch_fraction=1.0, arch_params=SMALL)
    biases = []

    def record(info):
        biases.append(info.module.whiten.bias.detach().clone())

    model = train_model(recipe, x, y, np.arange(256), 0, progress=False, on_epoch_end=record)
    assert len(model.losses) == 6 and model.losses[-1] < 0.9 * model.losses[0]
    logits = model.module(torch.from_numpy(x)).argmax(1).numpy()
    assert (logits == y).mean() > 0.5  # 4 classes: chance is 1/4
    assert not torch.equal(biases[0], biases[2])
    # frozen from epoch 4; the first lookahead update in it (step 25) still moves it
    assert torch.equal(biases[3], biases[4]) and torch.equal(biases[4], biases[5])
    assert model.module.whiten.bias.requires_grad  # as built, like a model from the cache


def test_samples_per_second_counts_the_samples_seen():
    """Whole batches over epochs - 1 + epoch_fraction epochs, not n_train x epochs."""
    x, y = synthetic(100)
    recipe = airbench94_recipe(batch_size=32, epochs=2, epoch_fraction=0.5, arch_params=SMALL)
    model = train_model(recipe, x, y, np.arange(100), 0, progress=False)
    per_epoch, total = airbench_steps(recipe, 100)
    assert (per_epoch, total) == (3, 5)  # 100 // 32; ceil(3 x 1.5)
    assert model.samples_per_second * model.train_seconds == pytest.approx(total * 32)


def test_cache_key_and_reload(tmp_path):
    x, y = synthetic(128)
    recipe = airbench94_recipe(batch_size=32, epochs=2, epoch_fraction=0.5, arch_params=SMALL)
    store = ModelCache(tmp_path)
    idx = np.arange(0, 128)
    first = store.get_or_train("synthetic", idx, recipe, 3, features=x, labels=y,
                               progress=False)  # fmt: skip
    second = store.get_or_train("synthetic", idx, recipe, 3, features=x, labels=y,
                                progress=False)  # fmt: skip
    assert not first.from_cache and second.from_cache
    assert store.contains(key_for("synthetic", idx, recipe, 3))
    with torch.no_grad():
        xb = torch.from_numpy(x[:8])
        assert torch.equal(first.module(xb), second.module(xb))
    again = train_model(recipe, x, y, idx, 3, progress=False)  # same seed, same weights
    assert all(torch.equal(v, first.module.state_dict()[k])
               for k, v in again.module.state_dict().items())  # fmt: skip


def test_refusals():
    x, y = synthetic(64)
    recipe = airbench94_recipe(batch_size=16, arch_params=SMALL)
    with pytest.raises(ConfigError, match="checkpoints"):
        train_model(recipe, x, y, np.arange(64), 0, progress=False,
                    checkpoints=CheckpointSpec(epochs=(1,)))  # fmt: skip
    with pytest.raises(ConfigError, match="DP-SGD"):
        train_model(recipe.replace(augment=[], dp={"epsilon": 8.0}), x, y, np.arange(64), 0,
                    progress=False)  # fmt: skip
    with pytest.raises(ConfigError, match="whole batches"):
        train_model(recipe, x, y, np.arange(8), 0, progress=False)
    cnn = Recipe(architecture="cifar-cnn", augment=["alternating-flip"], epochs=1, batch_size=16)
    with pytest.raises(ConfigError, match="alternating-flip"):
        train_model(cnn, x, y, np.arange(64), 0, progress=False)
    with pytest.raises(ConfigError, match="epoch_fraction"):
        Recipe(architecture="cifar-cnn", epoch_fraction=0.5)
    with pytest.raises(ConfigError, match="epoch_fraction"):
        airbench94_recipe(epoch_fraction=0.0)


def test_queries_that_replay_its_augmentation():
    augment = list(AIRBENCH94_RECIPE["augment"])
    assert replay_queries(augment, 2) == ["plain", "mirror"]  # LiRA's pair replays it
    views = ["mirror", "translate-dr", "mirror-translate-ul", "translate3-ul"]
    assert untrained_queries(views, augment) == ["translate3-ul"]
    assert untrained_queries(views, ["mirror"]) == views[1:]


def test_a_run_takes_their_training_loops_steps(monkeypatch):
    """Their main() transcribed (summed loss, their groups, LambdaLR triangle, lookahead state
    from the weights before whitening, whitening bias frozen after 3 epochs, the final
    average) on the batches our run drew: the same weights at the end."""
    seen, weights = [], {}
    step = AirbenchStrategy.step
    monkeypatch.setattr(AirbenchStrategy, "step", lambda self, xb, yb: (
        seen.append((xb.clone(), yb.clone())), step(self, xb, yb)))
    whiten = Airbench94.init_whitening

    def capture(self, images, eps=WHITEN_EPS):
        weights["before"] = {k: v.clone() for k, v in self.state_dict().items()}
        whiten(self, images, eps)
        weights["whiten"] = self.whiten.weight.detach().clone()

    monkeypatch.setattr(Airbench94, "init_whitening", capture)
    x, y = synthetic(96)
    recipe = airbench94_recipe(batch_size=16, epochs=5, epoch_fraction=0.5, arch_params=SMALL)
    ours = train_model(recipe, x, y, np.arange(96), 0, progress=False).module

    net = build_model("airbench94", (3, 32, 32), 4, **SMALL).train()
    net.load_state_dict(weights["before"])
    batch_size, epochs, momentum = 16, 4.5, 0.85
    kilostep_scale = 1024 * (1 + 1 / (1 - momentum))
    lr, wd = 11.5 / kilostep_scale, 0.0153 * batch_size / kilostep_scale
    lr_biases = lr * 64
    total_train_steps = math.ceil(96 // batch_size * epochs)
    norm_biases = [p for k, p in net.named_parameters() if "norm" in k and p.requires_grad]
    other_params = [p for k, p in net.named_parameters() if "norm" not in k and p.requires_grad]
    optimizer = torch.optim.SGD([
        {"params": norm_biases, "lr": lr_biases, "weight_decay": wd / lr_biases},
        {"params": other_params, "lr": lr, "weight_decay": wd / lr}],
        momentum=momentum, nesterov=True)  # fmt: skip

    def get_lr(step: int) -> float:
        warmup_steps = int(total_train_steps * 0.23)
        if step < warmup_steps:
            frac = step / warmup_steps
            return 0.2 * (1 - frac) + 1.0 * frac
        frac = (step - warmup_steps) / (total_train_steps - warmup_steps)
        return 1.0 * (1 - frac) + 0.07 * frac

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, get_lr)
    alpha_schedule = 0.95**5 * (torch.arange(total_train_steps + 1) / total_train_steps) ** 3
    lookahead = Lookahead(net)  # their LookaheadState, tested above
    with torch.no_grad():
        net.whiten.weight.copy_(weights["whiten"])
    current_steps, batches = 0, iter(seen)
    for epoch in range(math.ceil(epochs)):
        net.whiten.bias.requires_grad = epoch < 3
        for _ in range(96 // batch_size):
            inputs, labels = next(batches)
            loss = F.cross_entropy(net(inputs), labels, label_smoothing=0.2, reduction="sum")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            current_steps += 1
            if current_steps % 5 == 0:
                lookahead.update(net, decay=alpha_schedule[current_steps].item())
            if current_steps >= total_train_steps:
                lookahead.update(net, decay=1.0)
                break
    assert current_steps == len(seen) == 27
    for k, v in net.state_dict().items():
        assert torch.allclose(ours.state_dict()[k], v, rtol=1e-3, atol=1e-5), k
    moved = (net.head.weight - weights["before"]["head.weight"]).abs().max()
    assert moved > 100 * (net.head.weight - ours.head.weight).abs().max()
