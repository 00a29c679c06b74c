"""The DPOptimizer subclasses (miaudit.train.dp_optimizers) are Opacus's plain DPOptimizer plus
the documented modification and nothing else: on a tiny model, each subclass's steps equal,
bit for bit, a reference run of Opacus's DPOptimizer with that modification applied by hand
between its own clip / noise / scale steps; the accountant's hook always reads the claimed σ;
and a run builds its subclass without rebinding any method on an instance."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from torch import nn
from torch.nn import functional as F

from miaudit.train import Recipe, dp
from miaudit.train.dp_implementations import get_implementation, implementation_names
from miaudit.train.dp_optimizers import CanaryDPOptimizer, PlantedDPOptimizer
from miaudit.train.gradient_canaries import GradientCanaries

SIGMA, C, B, ROWS = 0.8, 0.05, 8.0, 8  # a small C: most rows are clipped
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def batches():
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(ROWS, 5, generator=gen), torch.randint(3, (ROWS,), generator=gen))
            for _ in range(6)]  # fmt: skip


def _module() -> nn.Module:
    torch.manual_seed(1)
    return nn.Linear(5, 3)


def _optimizer(module: nn.Module, cls: type = DPOptimizer, **kwargs) -> DPOptimizer:
    kwargs = {"noise_multiplier": SIGMA, "max_grad_norm": C, "expected_batch_size": B,
              **kwargs}  # fmt: skip
    return cls(torch.optim.SGD(module.parameters(), lr=0.5), **kwargs)


def _backward(wrapped: GradSampleModule, opt: DPOptimizer, xb, yb, seed: int) -> None:
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(wrapped(xb), yb, reduction="sum").backward()
    torch.manual_seed(seed)  # the noise: the same draws for both optimizers


def _run(opt_of, batches, reference=None):
    """Weights after one step per batch: ``opt.step()``, or ``reference(opt, i)`` for the
    hand-made step (Opacus's own pieces with the modification between them)."""
    module = _module()
    wrapped = GradSampleModule(module)
    opt = opt_of(module)
    claimed = []
    opt.attach_step_hook(lambda o: claimed.append(o.noise_multiplier))  # as the accountant's
    for i, (xb, yb) in enumerate(batches):
        _backward(wrapped, opt, xb, yb, seed=100 + i)
        if reference is None:
            opt.step()
        else:
            reference(opt, i)
            opt.step_hook(opt)
            opt.original_optimizer.step()
    return [p.detach().clone() for p in module.parameters()], claimed, opt


def _equal(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _planted(name: str, steps: int = 3):
    return lambda m: _optimizer(m, PlantedDPOptimizer, implementation=get_implementation(name),
                                steps_per_epoch=steps)  # fmt: skip


def _pieces(noise_multiplier=None, clip=None, after_clip=None):
    """Opacus's pre_step by hand: clip, (the modification), noise at the given σ, scale."""

    def step(opt: DPOptimizer, i: int) -> None:
        opt.clip_and_accumulate()
        if clip is not None:
            clip(opt)
        if after_clip is not None:
            after_clip(opt, i)
        claimed = opt.noise_multiplier
        opt.noise_multiplier = claimed if noise_multiplier is None else noise_multiplier(i)
        opt.add_noise()
        opt.noise_multiplier = claimed
        opt.scale_grad()

    return step


def test_correct_is_opacus_step(batches):
    ours, claimed, _ = _run(_planted("correct"), batches)
    plain, _, _ = _run(_optimizer, batches)
    assert _equal(ours, plain) and claimed == [SIGMA] * len(batches)


@pytest.mark.parametrize("name,scale", [("noise-x0.5", 0.5), ("noise-x0.25", 0.25)])
def test_scaled_noise_is_opacus_at_the_scaled_sigma(batches, name, scale):
    ours, claimed, opt = _run(_planted(name), batches)
    reference, _, _ = _run(_optimizer, batches, _pieces(lambda i: SIGMA * scale))
    assert _equal(ours, reference)
    assert claimed == [SIGMA] * len(batches) and opt.noise_multiplier == SIGMA
    assert not _equal(ours, _run(_optimizer, batches)[0])  # the bug does change the run


def test_noise_once_per_epoch_is_opacus_unnoised_but_at_each_epochs_last_step(batches):
    ours, claimed, _ = _run(_planted("noise-once-per-epoch", steps=3), batches)
    last = lambda i: SIGMA if i % 3 == 2 else 0.0  # noqa: E731 (steps 2 and 5 of 0-5)
    reference, _, _ = _run(_optimizer, batches, _pieces(last))
    assert _equal(ours, reference) and claimed == [SIGMA] * len(batches)


def test_no_clipping_is_opacus_with_the_raw_per_sample_sum(batches):
    def raw(opt: DPOptimizer) -> None:  # the documented modification: a clip factor of 1
        for p in opt.params:
            p.summed_grad = p.grad_sample.to(p.dtype).sum(dim=0)

    ours, claimed, _ = _run(_planted("no-clipping"), batches)
    reference, _, _ = _run(_optimizer, batches, _pieces(clip=raw))
    assert _equal(ours, reference) and claimed == [SIGMA] * len(batches)
    assert not _equal(ours, _run(_optimizer, batches)[0])


@pytest.mark.parametrize("name", ["correct", "no-clipping", "noise-x0.5"])
def test_canaries_are_opacus_with_C_added_on_their_coordinates(batches, name):
    # q = 1: every included canary joins every step, so the reference knows which joined
    count, norm = 6, 3.0
    canaries = GradientCanaries(count, seed=2, coordinates="random", norm=norm)
    impl = get_implementation(name)

    def ours_of(module: nn.Module) -> DPOptimizer:
        xb, yb = batches[0]
        canaries.prepare(module, xb, yb, C)
        return _optimizer(module, CanaryDPOptimizer, canaries=canaries, sample_rate=1.0,
                          implementation=impl, steps_per_epoch=3)  # fmt: skip

    ours, claimed, opt = _run(ours_of, batches)
    record = canaries.finish()
    included = np.flatnonzero(record.included)
    coords = torch.as_tensor(record.coordinates[included])
    weight = C * (min(norm, 1.0) if impl.clipping else norm)  # clipped to C unless the bug
    rows = []

    def plant(opt: DPOptimizer, i: int) -> None:
        flat = torch.zeros(sum(p.numel() for p in opt.params))
        flat.index_add_(0, coords, torch.full((len(coords),), weight))
        for p, piece in zip(opt.params, flat.split([p.numel() for p in opt.params]),
                            strict=True):  # fmt: skip
            p.summed_grad.add_(piece.view_as(p.summed_grad))

    def record_x(opt: DPOptimizer, i: int) -> None:
        flat = torch.cat([p.grad.reshape(-1) for p in opt.params])
        rows.append((flat[torch.as_tensor(record.coordinates)] * (B / C)).double().numpy())

    pieces = _pieces(lambda i: SIGMA * impl.noise_scale,
                     clip=None if impl.clipping else _raw_sum, after_clip=plant)

    def reference_step(opt: DPOptimizer, i: int) -> None:
        pieces(opt, i)
        record_x(opt, i)

    reference, _, _ = _run(_optimizer, batches, reference_step)
    assert len(included) > 0 and (record.sampled[included] == len(batches)).all()
    assert _equal(ours, reference) and claimed == [SIGMA] * len(batches)
    assert np.array_equal(record.projections, np.stack(rows))
    assert (record.noise_multiplier, record.max_grad_norm, record.expected_batch_size) == (
        SIGMA, C, B)


def _raw_sum(opt: DPOptimizer) -> None:
    for p in opt.params:
        p.summed_grad = p.grad_sample.to(p.dtype).sum(dim=0)


def test_a_run_builds_its_subclass_with_make_privates_settings():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.as_tensor((d.data[:128] / 16.0).astype(np.float32))
    y = torch.as_tensor(d.target[:128])
    recipe = Recipe(epochs=1, batch_size=32, arch_params={"hidden": 8},
                    dp={"epsilon": 4.0, "delta": 1e-5, "accountant": "rdp"})
    expected = {"correct": DPOptimizer}
    for name in implementation_names():
        for canaries in (None, GradientCanaries(20, seed=1)):
            torch.manual_seed(0)
            private = dp._make_private(recipe, x, y, 10, 0, canaries, get_implementation(name))
            opt = private.strategy.optimizer
            want = (CanaryDPOptimizer if canaries else expected.get(name, PlantedDPOptimizer))
            assert type(opt) is want, (name, canaries)
            # the steps are the class's: nothing rebound on the instance
            assert not {"clip_and_accumulate", "add_noise", "scale_grad"} & set(vars(opt))
            assert opt.noise_multiplier == private.search.sigma
            assert opt.step_hook is not None  # the accountant's, carried over
            assert list(opt.params) == list(private.strategy.module.parameters())
            # Opacus's int(|D|·q), q = 1/4; the included canaries counted as rows by the bug
            extra = (int(canaries.included_mask().sum())
                     if canaries is not None and name == "expected-batch-size" else 0)
            assert opt.expected_batch_size == int((128 + extra) * (1 / 4))
