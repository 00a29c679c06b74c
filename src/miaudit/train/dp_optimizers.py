"""Opacus ``DPOptimizer`` subclasses: the planted DP-SGD bugs and the white-box gradient
canaries, as Opacus's own ``AdaClipDPOptimizer`` extends it (no method rebound on an instance).

Opacus's ``DPOptimizer.pre_step`` runs ``clip_and_accumulate`` (per-sample clipping, summed into
``p.summed_grad``), ``add_noise`` (``p.grad = p.summed_grad + N(0, σ²C²)``), ``scale_grad``
(``p.grad /= B``), then the accountant's step hook, which reads ``noise_multiplier``: the
subclasses override those three steps and never touch ``noise_multiplier``, so the accountant
always sees the claimed σ.

- :class:`PlantedDPOptimizer`: a :class:`~miaudit.train.dp_implementations.DPImplementation`'s
  bugs in the step (no clipping; noise scaled, or only at the last step of each epoch). The
  sampling bug is the loader's and the batch-size one the ``expected_batch_size`` it is given
  (both set in :func:`miaudit.train.dp._make_private`). Under ``correct`` it is Opacus's step.
- :class:`CanaryDPOptimizer`: that, plus the gradient canaries
  (:class:`~miaudit.train.gradient_canaries.CanaryHook`) added to the summed clipped gradients
  after ``clip_and_accumulate`` (so a bug's clipping, or its absence, comes first and the noise
  and normalisation apply to them as to examples) and recorded after ``scale_grad``.

Opacus is imported here at module level: :mod:`miaudit.train.dp` imports this module only when
it makes a model private, as it does Opacus.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opacus.optimizers import DPOptimizer
from opacus.optimizers.optimizer import (
    _check_processed_flag,
    _generate_noise,
    _mark_as_processed,
)
from torch.optim import Optimizer

from miaudit.train.dp_implementations import DPImplementation

if TYPE_CHECKING:
    from miaudit.train.gradient_canaries import CanaryHook, GradientCanaries

__all__ = ["PlantedDPOptimizer", "CanaryDPOptimizer", "optimizer_class", "rebuilt_optimizer"]


class PlantedDPOptimizer(DPOptimizer):
    """Opacus's ``DPOptimizer`` running ``implementation``'s step (module doc);
    ``steps_per_epoch``: the loader's, for noise once per epoch. The other keyword arguments
    are ``DPOptimizer``'s."""

    def __init__(self, optimizer: Optimizer, *, implementation: DPImplementation,
                 steps_per_epoch: int, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(optimizer, **kwargs)
        self.implementation = implementation
        self.steps_per_epoch = max(1, int(steps_per_epoch))
        self.noise_calls = 0  # buggy add_noise calls so far: which step of its epoch

    def clip_and_accumulate(self) -> None:
        if self.implementation.clipping:
            super().clip_and_accumulate()
            return
        # no-clipping: Opacus's sum with a clip factor of 1 for every sample
        for p in self.params:
            _check_processed_flag(p.grad_sample)
            grad = self._get_flat_grad_sample(p).to(p.dtype).sum(dim=0)
            p.summed_grad = grad if p.summed_grad is None else p.summed_grad + grad
            _mark_as_processed(p.grad_sample)

    def add_noise(self) -> None:
        impl = self.implementation
        if impl.noise_scale == 1.0 and impl.noise_every_step:
            super().add_noise()
            return
        self.noise_calls += 1
        noisy = impl.noise_every_step or self.noise_calls % self.steps_per_epoch == 0
        applied = self.noise_multiplier * impl.noise_scale if noisy else 0.0
        # Opacus's add_noise at the applied σ, as AdaClipDPOptimizer's is at its adjusted one
        # (std 0: _generate_noise returns zeros and draws nothing from the RNG)
        for p in self.params:
            _check_processed_flag(p.summed_grad)
            noise = _generate_noise(std=applied * self.max_grad_norm, reference=p.summed_grad,
                                    generator=self.generator, secure_mode=self.secure_mode)
            p.grad = (p.summed_grad + noise).view_as(p)
            _mark_as_processed(p.summed_grad)


class CanaryDPOptimizer(PlantedDPOptimizer):
    """:class:`PlantedDPOptimizer` with white-box gradient canaries in every step: sampled
    canaries join ``p.summed_grad`` after clipping, and each step's privatised gradient is
    recorded after scaling (:class:`~miaudit.train.gradient_canaries.CanaryHook`).
    ``canaries``: prepared on the module (:meth:`GradientCanaries.prepare`); ``sample_rate``:
    the loader's q."""

    def __init__(self, optimizer: Optimizer, *, canaries: GradientCanaries,
                 sample_rate: float, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(optimizer, **kwargs)
        impl = self.implementation
        # the claimed σ (what the accountant's ε assumes), C and B as this optimizer has them
        self.canaries: CanaryHook = canaries.attach(
            sample_rate, self.noise_multiplier, self.max_grad_norm, self.expected_batch_size,
            clipping=impl.clipping,
            shuffled_steps=None if impl.poisson_sampling else self.steps_per_epoch,
        )  # fmt: skip

    def clip_and_accumulate(self) -> None:
        super().clip_and_accumulate()
        self.canaries.after_clipping()

    def scale_grad(self) -> None:
        super().scale_grad()
        self.canaries.after_scaling()


def optimizer_class(implementation: DPImplementation, canaries: bool) -> type[DPOptimizer]:
    """The ``DPOptimizer`` class a run needs: Opacus's own for the correct implementation
    without canaries (its runs stay bit for bit what they were), else a subclass above."""
    if canaries:
        return CanaryDPOptimizer
    return DPOptimizer if implementation.is_correct else PlantedDPOptimizer


def rebuilt_optimizer(made: DPOptimizer, implementation: DPImplementation, steps: int,
                      rows: int, canaries: GradientCanaries | None) -> DPOptimizer:  # fmt: skip
    """The ``DPOptimizer`` of a run of ``implementation`` (with ``canaries``, if given):
    ``made`` (``make_private``'s) when that is the class :func:`optimizer_class` names, else
    that class wrapping the same underlying optimizer, with the same settings, noise generator
    and accountant's step hook. ``steps``: the loader's steps per epoch (q = 1 / steps);
    ``rows``: its dataset's size, for the expected-batch-size bug's normaliser."""
    cls = optimizer_class(implementation, canaries is not None)
    if cls is type(made):
        return made
    expected = made.expected_batch_size
    if canaries is not None and implementation.canaries_in_batch_size:
        # Opacus's int(len(dataset) * q), the included canaries counted as rows of the dataset
        expected = int((rows + int(canaries.included_mask().sum())) * (1.0 / steps))
    extra: dict[str, Any] = {"implementation": implementation, "steps_per_epoch": steps}
    if cls is CanaryDPOptimizer:
        extra.update(canaries=canaries, sample_rate=1.0 / steps)
    optimizer = cls(
        made.original_optimizer, noise_multiplier=made.noise_multiplier,
        max_grad_norm=made.max_grad_norm, expected_batch_size=expected,
        loss_reduction=made.loss_reduction, generator=made.generator,
        secure_mode=made.secure_mode, **extra,
    )  # fmt: skip
    optimizer.attach_step_hook(made.step_hook)  # the accountant's: it sees every step
    return optimizer
