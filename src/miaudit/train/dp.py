"""DP-SGD training with Opacus: the path :func:`miaudit.train.trainer.train_model` takes for a
recipe with ``dp`` set.

``recipe.dp`` (validated by :func:`miaudit.train.recipe.check_dp`) names a target ``epsilon``,
``delta`` (default 1e-5), the per-sample clipping norm ``max_grad_norm`` and Opacus's
``accountant`` (``"prv"`` or ``"rdp"``). The noise multiplier is the smallest one the accountant
finds that reaches the target over ``recipe.epochs`` epochs; the epsilon actually spent, read
back from the same accountant after training, is recorded in :attr:`TrainedModel.privacy`
(and stored with the model by the cache).

This is the one training path that uses a ``DataLoader`` instead of the resident-tensor
batching of ``trainer.py``: the privacy guarantee rests on Poisson sampling of the batches
(each row joins each step's batch independently with rate ``1 / steps_per_epoch``, so the
expected batch size is about ``recipe.batch_size``), which Opacus's ``DPDataLoader`` provides.
The loader is a ``TensorDataset`` over the resident tensors with a seeded generator, and
Opacus's noise is drawn from torch's global RNG inside :func:`trainer.isolated_rng`, so the same
seed gives the same weights (``secure_mode`` is off: this is for auditing, not deployment).
The learning rate follows the recipe's schedule per optimizer step (``trainer.lr_at``).

Models with BatchNorm (``resnet18``) are rejected: per-sample gradients are undefined for it,
and swapping it for GroupNorm would change the architecture the model cache rebuilds.
"""

from __future__ import annotations

import functools
import math
import time
import warnings

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.train import trainer
from miaudit.train.recipe import Recipe
from miaudit.train.trainer import ArrayLike, EpochCallback, EpochInfo, TrainedModel


@functools.lru_cache(maxsize=256)
def noise_multiplier(
    epsilon: float, delta: float, sample_rate: float, epochs: int, accountant: str
) -> float:
    """Opacus's noise multiplier for the target, exactly as ``make_private_with_epsilon``
    finds it (``get_noise_multiplier``, default tolerance); memoised, since the search takes
    seconds and every reference model of an audit asks the same question."""
    from opacus.accountants.utils import get_noise_multiplier

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # RDP: "optimal order is the largest"
            return float(
                get_noise_multiplier(
                    target_epsilon=epsilon,
                    target_delta=delta,
                    sample_rate=sample_rate,
                    epochs=epochs,
                    accountant=accountant,
                )
            )
    except ValueError as exc:  # "The privacy budget is too low."
        raise ConfigError(
            f"no noise multiplier reaches epsilon={epsilon}, delta={delta} over {epochs} "
            f"epochs at sample rate {sample_rate}: {exc}"
        ) from exc


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
) -> TrainedModel:
    """Train ``recipe`` (which must have ``dp`` set) with DP-SGD; same seed, same weights.

    Arguments are as for :func:`miaudit.train.trainer.train_model`. The returned module is the
    plain architecture (``build_model``'s state-dict keys, no Opacus wrapper) in eval mode;
    ``privacy`` holds ``epsilon_spent``, ``target_epsilon``, ``delta``, ``noise_multiplier``,
    ``max_grad_norm``, ``accountant``, ``sample_rate`` and ``steps``.
    """
    from opacus import PrivacyEngine
    from opacus.validators import ModuleValidator

    if recipe.dp is None:
        raise ConfigError("train_model_dp needs a recipe with dp set.")
    dp = dict(recipe.dp)
    device = torch.device(device)
    if len(features) != len(labels):
        raise ConfigError(f"features has {len(features)} rows but labels has {len(labels)}.")
    idx = trainer.check_indices(indices, len(features))
    n_classes = trainer.infer_num_classes(labels) if num_classes is None else int(num_classes)
    init_seed, shuffle_seed = trainer.derive_seeds(seed)
    x = trainer.gather_rows(features, idx, device, torch.float32)
    y = trainer.gather_rows(labels, idx, device, torch.int64)
    if int(y.min()) < 0 or int(y.max()) >= n_classes:
        raise ConfigError(
            f"training labels must lie in [0, {n_classes}) (num_classes), got range "
            f"[{int(y.min())}, {int(y.max())}]; pass the right num_classes."
        )
    input_shape = tuple(int(d) for d in x.shape[1:])
    n = len(idx)
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=recipe.batch_size,
        generator=torch.Generator(device="cpu").manual_seed(shuffle_seed),
    )
    steps_per_epoch = len(loader)
    total_steps = steps_per_epoch * recipe.epochs

    losses: list[float] = []
    start = time.perf_counter()
    with trainer.isolated_rng(device, init_seed):
        module = build_model(recipe.architecture, input_shape, n_classes, **recipe.arch_params)
        errors = ModuleValidator.validate(module, strict=False)
        if errors:
            raise ConfigError(
                f"architecture {recipe.architecture!r} cannot be trained with DP-SGD: "
                f"{'; '.join(str(e) for e in errors)}. Use one without BatchNorm "
                "(mlp, mnist-cnn, cifar-cnn)."
            )
        module.to(device).train()
        optimizer = trainer.make_optimizer(recipe, list(module.parameters()))
        sigma = noise_multiplier(
            dp["epsilon"], dp["delta"], 1.0 / steps_per_epoch, recipe.epochs, dp["accountant"]
        )
        # make_private with the memoised sigma: what make_private_with_epsilon does.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "Secure RNG turned off", ...
            engine = PrivacyEngine(accountant=dp["accountant"], secure_mode=False)
            dp_module, dp_optimizer, dp_loader = engine.make_private(
                module=module,
                optimizer=optimizer,
                data_loader=loader,
                noise_multiplier=sigma,
                max_grad_norm=dp["max_grad_norm"],
            )
        bar = tqdm(
            total=recipe.epochs,
            desc=desc,
            unit="epoch",
            leave=False,
            disable=not trainer._progress_enabled(progress),
        )
        step = 0
        with bar:
            for epoch in range(recipe.epochs):
                total, count, lr = 0.0, 0, recipe.lr
                for xb, yb in dp_loader:
                    lr = trainer.lr_at(recipe, step, total_steps)
                    for group in dp_optimizer.param_groups:
                        group["lr"] = lr
                    # sum / max(len, 1): the mean, but 0 (not nan) on an empty Poisson batch.
                    loss_sum = F.cross_entropy(dp_module(xb), yb, reduction="sum")
                    loss = loss_sum / max(len(yb), 1)
                    dp_optimizer.zero_grad(set_to_none=True)
                    with warnings.catch_warnings():  # "Full backward hook is firing ..."
                        warnings.simplefilter("ignore", UserWarning)
                        loss.backward()
                    dp_optimizer.step()
                    total += float(loss_sum.detach())
                    count += len(yb)
                    step += 1
                loss_mean = total / max(count, 1)
                losses.append(loss_mean)
                bar.set_postfix(loss=f"{loss_mean:.4f}", lr=f"{lr:.3g}")
                bar.update(1)
                if on_epoch_end is not None:
                    on_epoch_end(EpochInfo(epoch + 1, recipe.epochs, loss_mean, lr, module))
                    dp_module.train()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        spent = float(engine.get_epsilon(dp["delta"]))
    privacy = {
        "epsilon_spent": spent,
        "target_epsilon": dp["epsilon"],
        "delta": dp["delta"],
        "noise_multiplier": float(dp_optimizer.noise_multiplier),
        "max_grad_norm": dp["max_grad_norm"],
        "accountant": dp["accountant"],
        "sample_rate": 1.0 / steps_per_epoch,
        "steps": step,
    }
    # A fresh, hook-free copy of the architecture carrying the trained weights.
    with trainer.isolated_rng(torch.device("cpu"), 0):
        plain = build_model(recipe.architecture, input_shape, n_classes, **recipe.arch_params)
    plain.load_state_dict(module.state_dict(), strict=True)
    plain.to(device).eval()
    return TrainedModel(
        module=plain,
        recipe=recipe,
        seed=int(seed),
        train_seconds=seconds,
        samples_per_second=n * recipe.epochs / seconds if seconds > 0 else math.inf,
        n_train=n,
        num_classes=n_classes,
        input_shape=input_shape,
        losses=losses,
        privacy=privacy,
    )
