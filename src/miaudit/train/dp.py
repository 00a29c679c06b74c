"""DP-SGD training with Opacus: the path :func:`miaudit.train.loop.train_model` takes for a
recipe with ``dp`` set.

``recipe.dp`` (validated by :func:`miaudit.train.recipe.check_dp`) names a target ``epsilon``,
``delta`` (default 1e-5), the per-sample clipping norm ``max_grad_norm`` and Opacus's
``accountant`` (``"prv"`` or ``"rdp"``; the default ``"auto"`` is PRV up to epsilon 100 and RDP
above, resolved in the recipe). The noise multiplier is the smallest one the accountant finds
that reaches the target over ``recipe.epochs`` epochs; the epsilon actually spent, read back
from the same accountant after training, is recorded in :attr:`TrainedModel.privacy` (and
stored with the model by the cache), with the accountant's name.

PRV at large epsilon: Opacus's PRV accountant discretises the privacy loss on a grid whose size
grows with epsilon (its noise search at epsilon 1,000 outgrew 11 GiB). The PRV search here is
Opacus's, step for step, except that it never evaluates a noise whose grid exceeds
``PRV_MAX_GRID_POINTS`` (it counts as too little noise): the answer is then larger noise than
needed, flagged ``search_bounded`` in the privacy record and in a warning, never less privacy.
Checkpoints (``checkpoints``) carry the epsilon spent up to their step (:func:`privacy_at`).

Training runs the one loop (:func:`miaudit.train.engine.train_loop`: learning rate per step,
checkpoints, callbacks, progress) with :class:`DPStrategy` for the step and Opacus's loader for
the batches, the one training path that uses a ``DataLoader`` instead of the engine's
resident-tensor batching: the privacy guarantee rests on Poisson sampling of the batches
(each row joins each step's batch independently with rate ``1 / steps_per_epoch``, so the
expected batch size is about ``recipe.batch_size``), which Opacus's ``DPDataLoader`` provides.
The loader is a ``TensorDataset`` over the resident tensors with a seeded generator, and
Opacus's noise is drawn from torch's global RNG inside :func:`common.isolated_rng`, so the same
seed gives the same weights (``secure_mode`` is off: this is for auditing, not deployment).

Models with BatchNorm (``resnet18``) are rejected: per-sample gradients are undefined for it,
and swapping it for GroupNorm would change the architecture the model cache rebuilds. DP-SGD
runs in fp32 only: a recipe with ``dp`` and ``precision: bf16`` is refused by the recipe (Opacus's
per-sample gradients under autocast are not verified here). On CUDA the loader indexes the
resident tensors row by row (``TensorDataset``), and the epoch's loss adds up on the device.

Planted bugs (auditing studies, ``miaudit study dp-bugs``): ``train_model_dp(...,
implementation=NAME)`` runs one of :mod:`miaudit.train.dp_implementations`' named
implementations (``"correct"``, the default, or one with a bug that leaves the accountant's
claim unchanged), recorded in ``privacy["implementation"]``. It is deliberately *not* a key
of the recipe's ``dp`` section: a recipe (and so the model cache, whose key is the recipe's)
only ever trains the correct implementation, and a study that plants a bug trains its models
itself, uncached. A bug's step, and white-box gradient canaries, run in a ``DPOptimizer``
subclass (:mod:`miaudit.train.dp_optimizers`) built in place of ``make_private``'s, on the same
settings and accountant; the correct implementation without canaries keeps Opacus's own.
"""

from __future__ import annotations

import functools
import logging
import math
import warnings
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.train import common
from miaudit.train.checkpoints import CheckpointSpec, steps_per_epoch
from miaudit.train.common import EpochCallback, TrainedModel
from miaudit.train.dp_implementations import DPImplementation, get_implementation
from miaudit.train.engine import train_loop
from miaudit.train.recipe import PRV_MAX_AUTO_EPSILON, Recipe
from miaudit.train.rows import ArrayLike, training_rows

if TYPE_CHECKING:
    from miaudit.train.gradient_canaries import GradientCanaries

log = logging.getLogger(__name__)


# PRV accounting discretises the privacy loss on ~2 L / mesh points and needs ~200 bytes a point
# (measured: 1.05e7 points, 2.0 GiB peak, 15 s); this bound keeps one evaluation under ~1 GiB.
PRV_MAX_GRID_POINTS = 5_000_000
EPSILON_TOLERANCE = 0.01  # Opacus's get_noise_multiplier default
MAX_SIGMA = 1e6  # Opacus's: "The privacy budget is too low" beyond it


class NoiseSearch(NamedTuple):
    """The noise multiplier found for a target, and whether the PRV grid bound cut the search
    short (then the noise is larger than needed and the spent epsilon below the target)."""

    sigma: float
    bounded: bool = False


class PRVGridTooLarge(Exception):
    """The PRV accountant's grid would exceed ``PRV_MAX_GRID_POINTS``."""


def bounded_prv_accountant(max_points: float) -> Any:
    """An Opacus ``PRVAccountant`` that raises :class:`PRVGridTooLarge` instead of building a
    grid of more than ``max_points`` points (the check runs after its domain is computed, before
    anything large is allocated; below the bound it is Opacus's accountant unchanged)."""
    from opacus.accountants import PRVAccountant

    class BoundedPRVAccountant(PRVAccountant):
        def _get_domain(self, *args: Any, **kwargs: Any) -> Any:
            domain = super()._get_domain(*args, **kwargs)
            if domain.size > max_points:
                raise PRVGridTooLarge(f"{domain.size} grid points > {max_points}")
            return domain

    return BoundedPRVAccountant()


def epsilon_spent(accountant: str, sigma: float, sample_rate: float, steps: int, delta: float
                  ) -> float:  # fmt: skip
    """Epsilon of ``steps`` DP-SGD steps at noise ``sigma`` by a fresh Opacus accountant."""
    from opacus.accountants import create_accountant

    acc = create_accountant(mechanism=accountant)
    acc.history = [(sigma, sample_rate, steps)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # RDP: "optimal order is the largest"
        return float(acc.get_epsilon(delta=delta))


def _prv_search(epsilon: float, delta: float, sample_rate: float, epochs: int) -> NoiseSearch:
    """Opacus's ``get_noise_multiplier`` for the PRV accountant, step for step (same sigmas,
    same answer), except that a sigma whose PRV grid exceeds ``PRV_MAX_GRID_POINTS`` is never
    evaluated: it is treated as too little noise, which can only make the answer larger (more
    private than the target, never less)."""
    steps = int(epochs / sample_rate)
    bounded = False

    accountant = bounded_prv_accountant(PRV_MAX_GRID_POINTS)

    def eps_at(sigma: float) -> float:
        nonlocal bounded
        accountant.history = [(sigma, sample_rate, steps)]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return float(accountant.get_epsilon(delta=delta))
        except PRVGridTooLarge:
            bounded = True
            return math.inf

    eps_high, sigma_low, sigma_high = math.inf, 0.0, 10.0
    while eps_high > epsilon:
        sigma_high = 2 * sigma_high
        eps_high = eps_at(sigma_high)
        if sigma_high > MAX_SIGMA:
            too_big = " (the PRV grid is too large: use the rdp accountant)" if bounded else ""
            raise ValueError(f"The privacy budget is too low{too_big}.")
    while epsilon - eps_high > EPSILON_TOLERANCE:
        if bounded and sigma_high - sigma_low < 1e-3 * sigma_high:
            break  # the grid bound lies in between: no closer sigma can be evaluated
        sigma = (sigma_low + sigma_high) / 2
        eps = eps_at(sigma)
        if eps < epsilon:
            sigma_high, eps_high = sigma, eps
        else:
            sigma_low = sigma
    return NoiseSearch(float(sigma_high), bounded)


@functools.lru_cache(maxsize=256)
def find_noise(
    epsilon: float, delta: float, sample_rate: float, epochs: int, accountant: str
) -> NoiseSearch:
    """Opacus's noise multiplier for the target, as ``make_private_with_epsilon`` finds it
    (``get_noise_multiplier``, default tolerance; for PRV the same search with the grid bound
    of :func:`_prv_search`); memoised, since the search takes seconds and every reference model
    of an audit asks the same question."""
    from opacus.accountants.utils import get_noise_multiplier

    try:
        if accountant == "prv":
            found = _prv_search(epsilon, delta, sample_rate, epochs)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # RDP: "optimal order is ..."
                found = NoiseSearch(float(get_noise_multiplier(
                    target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate,
                    epochs=epochs, accountant=accountant,
                )))  # fmt: skip
    except ValueError as exc:  # "The privacy budget is too low."
        raise ConfigError(
            f"no noise multiplier reaches epsilon={epsilon}, delta={delta} over {epochs} "
            f"epochs at sample rate {sample_rate}: {exc}"
        ) from exc
    if found.bounded:
        log.warning(
            "PRV accounting near the target epsilon=%g needs more than %d grid points (about "
            "%.0f GiB); the noise search stopped at sigma=%.4g, which spends less than the "
            "target (the model's privacy record holds the epsilon spent). Use dp.accountant: "
            "rdp (the default above epsilon %g) to reach large targets.",
            epsilon, PRV_MAX_GRID_POINTS, PRV_MAX_GRID_POINTS * 200 / 2**30, found.sigma,
            PRV_MAX_AUTO_EPSILON,
        )  # fmt: skip
    return found


def noise_multiplier(
    epsilon: float, delta: float, sample_rate: float, epochs: int, accountant: str
) -> float:
    """The noise multiplier :func:`find_noise` finds."""
    return find_noise(epsilon, delta, sample_rate, epochs, accountant).sigma


class DPStrategy:
    """One module trained by DP-SGD: Opacus's per-sample gradients (``dp_module``), clipping and
    noise (``optimizer``), on Poisson-sampled batches of any size, even empty."""

    models = 1

    def __init__(self, module: nn.Module, dp_module: nn.Module, optimizer: torch.optim.Optimizer,
                 recipe: Recipe, device: torch.device | None = None) -> None:  # fmt: skip
        self.module, self.dp_module, self.optimizer = module, dp_module, optimizer
        self.smoothing = recipe.label_smoothing
        # The epoch's summed loss on the device, in float64: the same sums as adding each
        # step's float(loss_sum) on the host, without a host-device sync per step.
        self.total = torch.zeros((), dtype=torch.float64, device=device)
        self.count = 0

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> None:
        # sum / max(len, 1): the mean, but 0 (not nan) on an empty Poisson batch.
        loss_sum = F.cross_entropy(self.dp_module(xb), yb, reduction="sum",
                                   label_smoothing=self.smoothing)  # fmt: skip
        loss = loss_sum / max(len(yb), 1)
        self.optimizer.zero_grad(set_to_none=True)
        with warnings.catch_warnings():  # "Full backward hook is firing ..."
            warnings.simplefilter("ignore", UserWarning)
            loss.backward()
        self.optimizer.step()  # clips per sample, adds noise from torch's global RNG
        self.total.add_(loss_sum.detach().double())
        self.count += len(yb)

    def epoch_losses(self) -> list[float]:
        loss = float(self.total) / max(self.count, 1)  # float(): the one sync per epoch
        self.total.zero_()
        self.count = 0
        return [loss]

    def snapshots(self) -> list[dict[str, torch.Tensor]]:
        return [common.snapshot(self.module)]  # the plain module's keys, no Opacus wrapper

    def resume(self) -> None:
        self.dp_module.train()


class _Private(NamedTuple):
    """A model made private by Opacus: what training and the privacy record need."""

    strategy: DPStrategy
    loader: Any  # Opacus's DPDataLoader: Poisson-sampled batches
    engine: Any  # the PrivacyEngine, whose accountant saw every step
    search: NoiseSearch
    implementation: DPImplementation


def _make_private(
    recipe: Recipe, x: torch.Tensor, y: torch.Tensor, n_classes: int, shuffle_seed: int,
    canaries: GradientCanaries | None = None, impl: DPImplementation | None = None,
) -> _Private:
    """Build the model (under the caller's seeded RNG), check Opacus can train it, find the
    noise for the target and wrap model, optimizer and a seeded loader with ``make_private``.
    ``canaries``: chosen on the freshly built model, then put into the DP optimizer's step
    (they use their own generators, so the global RNG stream is the same with or without them).
    ``impl``: the implementation (its sampling is the loader's here, its step the optimizer's,
    :func:`~miaudit.train.dp_optimizers.rebuilt_optimizer`); None is the correct one."""
    impl = impl or get_implementation("correct")
    from opacus import PrivacyEngine
    from opacus.validators import ModuleValidator

    from miaudit.train.dp_optimizers import rebuilt_optimizer

    dp = dict(recipe.dp or {})
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=recipe.batch_size,
        shuffle=not impl.poisson_sampling,  # the shuffle bug's batches; Poisson: Opacus's own
        generator=torch.Generator(device="cpu").manual_seed(shuffle_seed),
    )
    input_shape = tuple(int(d) for d in x.shape[1:])
    module = build_model(recipe.architecture, input_shape, n_classes, **recipe.arch_params)
    errors = ModuleValidator.validate(module, strict=False)
    if errors:
        raise ConfigError(
            f"architecture {recipe.architecture!r} cannot be trained with DP-SGD: "
            f"{'; '.join(str(e) for e in errors)}. Use one without BatchNorm "
            "(mlp, mnist-cnn, cifar-cnn)."
        )
    module.to(x.device).train()
    if canaries is not None:
        canaries.prepare(module, x, y, dp["max_grad_norm"])
    optimizer = common.make_optimizer(recipe, list(module.parameters()))
    search = find_noise(
        dp["epsilon"], dp["delta"], 1.0 / len(loader), recipe.epochs, dp["accountant"]
    )
    # make_private with the memoised sigma: what make_private_with_epsilon does.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Secure RNG turned off", ...
        engine = PrivacyEngine(accountant=dp["accountant"], secure_mode=False)
        dp_module, dp_optimizer, dp_loader = engine.make_private(
            module=module,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=search.sigma,
            max_grad_norm=dp["max_grad_norm"],
            poisson_sampling=impl.poisson_sampling,
        )
    # a bug's step, or canaries: a DPOptimizer subclass in place of make_private's
    dp_optimizer = rebuilt_optimizer(dp_optimizer, impl, len(loader), len(loader.dataset),
                                     canaries)  # fmt: skip
    return _Private(DPStrategy(module, dp_module, dp_optimizer, recipe, x.device), dp_loader,
                    engine, search, impl)  # fmt: skip


def _privacy_record(recipe: Recipe, private: _Private, steps: int, sample_rate: float
                    ) -> dict[str, Any]:  # fmt: skip
    """What the run spent (by its own accountant) and how: :attr:`TrainedModel.privacy`."""
    dp = dict(recipe.dp or {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        spent = float(private.engine.get_epsilon(dp["delta"]))
    return {
        "epsilon_spent": spent,
        "target_epsilon": dp["epsilon"],
        "delta": dp["delta"],
        "noise_multiplier": float(private.strategy.optimizer.noise_multiplier),
        "max_grad_norm": dp["max_grad_norm"],
        "accountant": dp["accountant"],
        "sample_rate": sample_rate,
        "steps": steps,
        "search_bounded": private.search.bounded,
        # a planted bug (never for the correct implementation: its record is unchanged)
        **({} if private.implementation.is_correct else
           {"implementation": private.implementation.to_record()}),
    }


def train_model_dp(
    recipe: Recipe,
    features: ArrayLike,
    labels: ArrayLike,
    indices: ArrayLike,
    seed: int,
    device: str | torch.device = "cpu",
    num_classes: int | None = None,
    progress: bool = True,
    *,
    on_epoch_end: EpochCallback | None = None,
    desc: str = "training (DP-SGD)",
    checkpoints: CheckpointSpec | None = None,
    gradient_canaries: GradientCanaries | None = None,
    implementation: str | DPImplementation = "correct",
) -> TrainedModel:
    """Train ``recipe`` (which must have ``dp`` set) with DP-SGD; same seed, same weights.

    Arguments are as for :func:`miaudit.train.loop.train_model`. The returned module is the
    plain architecture (``build_model``'s state-dict keys, no Opacus wrapper) in eval mode;
    ``privacy`` holds ``epsilon_spent``, ``target_epsilon``, ``delta``, ``noise_multiplier``,
    ``max_grad_norm``, ``accountant``, ``sample_rate``, ``steps`` and ``search_bounded``
    (see :func:`find_noise`). ``checkpoints`` keeps ``snapshots`` as ``train_model`` does.

    ``gradient_canaries`` (:class:`~miaudit.train.gradient_canaries.GradientCanaries`): white-box
    gradient canaries added to the clipped gradients before the noise (Steinke, Nasr &
    Jagielski 2023); their record is left in ``gradient_canaries.record`` and their settings
    in ``privacy["gradient_canaries"]``. Such a model differs from the canary-free one, so it
    must not be cached under the canary-free key. Without it (the default) nothing changes:
    same weights, same privacy record.

    ``implementation``: a name of :data:`~miaudit.train.dp_implementations.IMPLEMENTATIONS`
    (``"correct"``, the default, changes nothing; the others plant a bug that leaves the
    accountant's claim unchanged and is recorded in ``privacy["implementation"]``). Such a
    model must not be cached under the recipe's key either.
    """
    impl = get_implementation(implementation)
    if recipe.dp is None:
        raise ConfigError("train_model_dp needs a recipe with dp set.")
    device = torch.device(device)
    rows = training_rows(features, labels, indices, device, num_classes)
    init_seed, shuffle_seed = common.derive_seeds(seed)
    input_shape = tuple(int(d) for d in rows.x.shape[1:])
    n = len(rows.idx)
    # Init, dropout and Opacus's noise draw from torch's global RNG: seeded, restored after.
    with common.isolated_rng(device, init_seed):
        private = _make_private(recipe, rows.x, rows.y, rows.n_classes, shuffle_seed,
                                gradient_canaries, impl)  # fmt: skip
        result = train_loop(
            private.strategy, private.loader, recipe, n, device, checkpoints=checkpoints,
            on_epoch_end=on_epoch_end, progress=progress, desc=desc,
        )  # fmt: skip
    privacy = _privacy_record(recipe, private, result.steps, 1.0 / steps_per_epoch(recipe, n))
    if gradient_canaries is not None:
        gradient_canaries.finish()
        privacy["gradient_canaries"] = gradient_canaries.describe()
    # A fresh, hook-free copy of the architecture carrying the trained weights.
    with common.isolated_rng(torch.device("cpu"), 0):
        plain = build_model(recipe.architecture, input_shape, rows.n_classes, **recipe.arch_params)
    plain.load_state_dict(private.strategy.module.state_dict(), strict=True)
    plain.to(device)
    return result.model(0, plain, recipe, seed, n, rows.n_classes, input_shape, privacy)


def privacy_at(privacy: dict[str, Any], step: int) -> dict[str, Any]:
    """The privacy record of a checkpoint after ``step`` of a run whose record is
    ``privacy``: the same noise and sampling, the epsilon of ``step`` steps by a fresh
    accountant of the same kind."""
    spent = epsilon_spent(
        privacy["accountant"], privacy["noise_multiplier"], privacy["sample_rate"], int(step),
        privacy["delta"],
    )  # fmt: skip
    return {**privacy, "epsilon_spent": spent, "steps": int(step)}
