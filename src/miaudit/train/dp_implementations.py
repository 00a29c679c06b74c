"""DP-SGD implementations, correct and with planted bugs, for auditing studies (issue #27).

``train_model_dp(..., implementation=NAME)`` trains with the named implementation of DP-SGD.
Every planted bug keeps the accountant's claim unchanged: the noise search, the sample rate
and the accountant's history (Opacus's step hook reads the *claimed* noise multiplier) are
the correct run's, so ``privacy["epsilon_spent"]`` is the same number; what the run really
does differs. The name and the bug's settings are recorded in ``privacy["implementation"]``
(absent for ``"correct"``, whose runs are bit for bit what they were before this module).

Which implementations (:data:`IMPLEMENTATIONS`, in registration order):

- ``correct``: Opacus's DP-SGD as :mod:`miaudit.train.dp` runs it.
- ``noise-x0.5``, ``noise-x0.25``: the Gaussian noise added is 0.5 (0.25) × σ·C while the
  accountant is told σ (a mis-scaled noise multiplier).
- ``no-clipping``: per-sample gradients are summed unclipped (``max_grad_norm`` is still
  what the noise is scaled to, and what the accountant assumes bounds each example).
- ``shuffled-batches``: fixed-size batches from a shuffle each epoch (Opacus's
  ``poisson_sampling=False``) while the accountant assumes Poisson sampling at the same rate
  (Opacus #80, PR #128; Chua et al., "How Private are DP-SGD Implementations?", ICML 2024).
  Gradient canaries follow the same sampling: each included one joins one uniformly random
  step of every epoch.
- ``noise-once-per-epoch``: noise σ·C is added at the last step of each epoch only; the
  other steps release the clipped sum unnoised.
- ``expected-batch-size``: the normaliser B = int(|D|·q) is computed from the dataset the run
  actually trains on, neighbours included: Opacus's own ``privacy_engine.py``
  (``expected_batch_size = int(len(data_loader.dataset) * sample_rate)``, v1.0–v1.6), which
  leaks |D| (Opacus #571: ε ≈ 2.5 measured against an accounted 1.2 on 2–3 rows; #819: the
  floor-based normalisation, analysed with f-DP, whose leak grows with the output dimension).
  For input-space rows Opacus, and so ``correct``, already does this; here the white-box
  gradient canaries, which ``correct`` keeps out of |D|, count as rows too: B = int((n + k)·q)
  with k the canaries included. Only the *number* of included canaries moves B, which is why a
  one-run audit (whose guesses are per canary) is not expected to see this one.

The bugs are plain data (:class:`DPImplementation`): the loader's sampling and the batch-size
normaliser are chosen where the optimizer is made (:func:`miaudit.train.dp._make_private`), the
step's bugs run in an Opacus ``DPOptimizer`` subclass
(:class:`miaudit.train.dp_optimizers.PlantedDPOptimizer`). This module imports neither torch
nor Opacus, so that a study can name and list the implementations cheaply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from miaudit.errors import ConfigError
from miaudit.registry import Registry

__all__ = ["DPImplementation", "IMPLEMENTATIONS", "CORRECT", "get_implementation",
           "implementation_names"]

CORRECT = "correct"


@dataclass(frozen=True)
class DPImplementation:
    """One DP-SGD implementation: what it does differently from the correct one."""

    name: str
    description: str
    noise_scale: float = 1.0  # the noise applied / the noise the accountant is told
    clipping: bool = True  # per-sample clipping to max_grad_norm
    poisson_sampling: bool = True  # False: fixed-size batches of a shuffle per epoch
    noise_every_step: bool = True  # False: noise at the last step of each epoch only
    canaries_in_batch_size: bool = False  # B counts the included gradient canaries as rows
    source: str = ""  # where the bug is documented

    @property
    def is_correct(self) -> bool:
        return self == IMPLEMENTATIONS[CORRECT]

    def to_record(self) -> dict[str, Any]:
        """What the privacy record keeps of it (plain values)."""
        return asdict(self)


IMPLEMENTATIONS: Registry[DPImplementation] = Registry(
    "DP-SGD implementation", ConfigError, ordered=False,
    unknown="unknown {kind} {name!r}.{hint} Known: {known}.",
)


def _register(impl: DPImplementation) -> None:
    IMPLEMENTATIONS.register(impl.name, impl)


_register(DPImplementation(CORRECT, "Opacus's DP-SGD: Poisson sampling, per-sample clipping, "
                                    "noise σ·C every step"))
_register(DPImplementation("noise-x0.5", "noise 0.5 × σ·C; the accountant is told σ",
                           noise_scale=0.5))
_register(DPImplementation("noise-x0.25", "noise 0.25 × σ·C; the accountant is told σ",
                           noise_scale=0.25))
_register(DPImplementation("no-clipping", "per-sample gradients summed unclipped",
                           clipping=False))
_register(DPImplementation(
    "shuffled-batches", "fixed-size shuffled batches; the accountant assumes Poisson sampling",
    poisson_sampling=False, source="Opacus #80, PR #128; Chua et al. ICML 2024"))
_register(DPImplementation(
    "noise-once-per-epoch", "noise σ·C at the last step of each epoch only",
    noise_every_step=False))
_register(DPImplementation(
    "expected-batch-size", "normaliser int(|D|·q) of the dataset actually trained on, the "
                           "gradient canaries counted as rows (Opacus's own rule)",
    canaries_in_batch_size=True, source="Opacus #571, #819; privacy_engine.py (v1.0-v1.6)"))


def get_implementation(name: str | DPImplementation) -> DPImplementation:
    """The registered implementation ``name`` (a clear error listing the known ones)."""
    if isinstance(name, DPImplementation):
        return name
    if not isinstance(name, str):
        raise ConfigError(f"a DP-SGD implementation is named by a string; got {name!r}. "
                          f"Known: {', '.join(IMPLEMENTATIONS.names())}.")
    return IMPLEMENTATIONS.get(name)


def implementation_names() -> list[str]:
    return IMPLEMENTATIONS.names()
