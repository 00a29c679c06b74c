"""Planted DP-SGD bugs (miaudit.train.dp_implementations): each does what its name says to
Opacus's step, leaves the accountant's claim unchanged and is recorded; the correct
implementation changes nothing; an unknown name lists the known ones."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from miaudit.errors import ConfigError
from miaudit.privacy.gradient_canary_scores import estimated_noise
from miaudit.train import Recipe, dp
from miaudit.train.dp_implementations import get_implementation, implementation_names
from miaudit.train.gradient_canaries import GradientCanaries

N = 256
RECIPE = Recipe(epochs=3, batch_size=64, lr=0.1, arch_params={"hidden": 32},
                dp={"epsilon": 4.0, "delta": 1e-5, "accountant": "rdp"})
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def data():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data[:N] / 16.0).astype(np.float32), d.target[:N].astype(np.int64)


def _private(data, name, recipe=RECIPE, canaries=None):
    x, y = data
    torch.manual_seed(0)
    return dp._make_private(recipe, torch.as_tensor(x), torch.as_tensor(y), 10, 0, canaries,
                            get_implementation(name))  # fmt: skip


def _train(data, name="correct", seed=1, canaries=None, recipe=RECIPE):
    x, y = data
    return dp.train_model_dp(recipe, x, y, np.arange(N), seed=seed, progress=False,
                             gradient_canaries=canaries, implementation=name)  # fmt: skip


def test_registry_and_unknown_names():
    assert implementation_names() == ["correct", "noise-x0.5", "noise-x0.25", "no-clipping",
                                      "shuffled-batches", "noise-once-per-epoch",
                                      "expected-batch-size"]
    with pytest.raises(ConfigError, match="noise-x0.5") as err:
        get_implementation("noise-x0.3")
    assert "correct" in str(err.value) and "expected-batch-size" in str(err.value)
    with pytest.raises(ConfigError, match="Known"):
        get_implementation(3)


def test_correct_is_unchanged(data):
    private = _private(data, "correct")
    # nothing wrapped on the optimizer instance: Opacus's own methods run
    assert not {"add_noise", "clip_and_accumulate", "scale_grad"} & set(vars(private.strategy
                                                                             .optimizer))
    plain, named = _train(data), _train(data, "correct")
    a, b = plain.module.state_dict(), named.module.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert plain.privacy == named.privacy and "implementation" not in plain.privacy


def _noise_std(optimizer, calls=1):
    """The std of what add_noise adds to zero summed gradients, per call."""
    out = []
    for _ in range(calls):
        for p in optimizer.params:
            p.summed_grad = torch.zeros_like(p)
        optimizer.add_noise()
        out.append(float(torch.cat([p.grad.reshape(-1) for p in optimizer.params]).std()))
    return out


@pytest.mark.parametrize("name,scale", [("noise-x0.5", 0.5), ("noise-x0.25", 0.25)])
def test_scaled_noise(data, name, scale):
    private = _private(data, name)
    opt = private.strategy.optimizer
    sigma = private.search.sigma
    (std,) = _noise_std(opt)
    assert std == pytest.approx(scale * sigma * opt.max_grad_norm, rel=0.05)
    assert opt.noise_multiplier == sigma  # what the accountant's hook reads afterwards


def test_noise_once_per_epoch(data):
    private = _private(data, "noise-once-per-epoch")
    opt, steps = private.strategy.optimizer, len(private.loader)
    assert steps == 4  # 256 rows, batches of 64
    stds = _noise_std(opt, 2 * steps)
    noisy = [i for i, s in enumerate(stds) if s > 0]
    assert noisy == [steps - 1, 2 * steps - 1]  # the last step of each epoch, no other
    assert stds[steps - 1] == pytest.approx(private.search.sigma * opt.max_grad_norm, rel=0.05)


def test_no_clipping_sums_raw_per_sample_gradients(data):
    recipe = dataclasses.replace(RECIPE, dp={**RECIPE.dp, "max_grad_norm": 0.01})
    x, y = (torch.as_tensor(a[:16]) for a in data)
    summed = {}
    for name in ("correct", "no-clipping"):
        private = _private(data, name, recipe)
        opt = private.strategy.optimizer
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(private.strategy.dp_module(x), y, reduction="sum").backward()
        raw = [p.grad_sample.sum(0).clone() for p in opt.params]
        opt.clip_and_accumulate()
        summed[name] = [p.summed_grad for p in opt.params]
        if name == "no-clipping":
            assert all(torch.allclose(s, r, atol=1e-6) for s, r in zip(summed[name], raw,
                                                                        strict=True))
    norm = lambda gs: float(torch.cat([g.reshape(-1) for g in gs]).norm())  # noqa: E731
    assert norm(summed["correct"]) <= 16 * 0.01 + 1e-5 < norm(summed["no-clipping"])


def test_shuffled_batches_and_their_canaries(data):
    private = _private(data, "shuffled-batches")
    batches = [len(yb) for _, yb in private.loader]
    assert batches == [64] * 4  # fixed size, every row once an epoch (no Poisson sampling)
    canaries = GradientCanaries(200, seed=2)
    model = _train(data, "shuffled-batches", canaries=canaries)
    r = canaries.record
    # an included canary joins exactly one step of each of the 3 epochs, as a shuffled row
    assert (r.sampled[r.included] == 3).all() and (r.sampled[~r.included] == 0).all()
    correct = _train(data)
    assert model.privacy["epsilon_spent"] == correct.privacy["epsilon_spent"]  # same claim
    assert model.privacy["sample_rate"] == correct.privacy["sample_rate"]
    assert model.privacy["implementation"]["poisson_sampling"] is False


def test_expected_batch_size_counts_the_included_canaries(data):
    canaries = GradientCanaries(300, seed=4)
    k = int(canaries.included_mask().sum())
    for name, rows in (("correct", N), ("expected-batch-size", N + k)):
        private = _private(data, name, canaries=GradientCanaries(300, seed=4))
        assert private.strategy.optimizer.expected_batch_size == int(rows * (1 / 4))
    # without canaries nothing counts beyond the rows: Opacus's int(len(dataset) * q), as ever
    assert _private(data, "expected-batch-size").strategy.optimizer.expected_batch_size == 64


@pytest.mark.parametrize("name", implementation_names()[1:])
def test_every_bug_keeps_the_claim_and_is_recorded(data, name):
    correct = _train(data, seed=5)
    bugged = _train(data, name, seed=5)
    same = ("epsilon_spent", "target_epsilon", "noise_multiplier", "sample_rate", "steps")
    assert {k: bugged.privacy[k] for k in same} == {k: correct.privacy[k] for k in same}
    assert bugged.privacy["implementation"]["name"] == name


def test_the_audit_sees_the_halved_noise(data):
    ratio = {}
    for name in ("correct", "noise-x0.5"):
        canaries = GradientCanaries(500, seed=6)
        _train(data, name, canaries=canaries)
        r = canaries.record
        ratio[name] = estimated_noise(r, known_data=True) / r.noise_multiplier
    # σ̂ from the run alone (x − d: noise, plus 1 where a canary joined, which lifts the
    # robust spread a little): about the claimed σ, and about half of it under the bug
    assert 0.95 < ratio["correct"] < 1.15 and 0.45 < ratio["noise-x0.5"] < 0.62
