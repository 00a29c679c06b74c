"""One model trained by autograd: the plain strategy of the training loop, and ``train_model``.

:func:`train_model` is the entry point for one model: it checks the rows, seeds the model's
initialisation and dropout (:func:`common.isolated_rng`), builds the model and runs
:func:`miaudit.train.engine.train_loop` with a :class:`PlainStrategy` over the engine's shuffled,
index-sliced batches. A recipe with ``dp`` set goes to :mod:`miaudit.train.dp` instead.

A recipe with ``precision: bf16`` runs each step's forward pass and loss under bfloat16
autocast (:func:`miaudit.runtime.devices.autocast`; the backward and the optimizer step outside
it, on float32 weights: bf16 has float32's range, so no gradient scaler is needed); on a CPU
without native bfloat16 it is refused before any work. ``fp32`` runs no autocast at all.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.models.text import CAUSAL_LM_ARCHITECTURES
from miaudit.runtime.devices import autocast, check_precision
from miaudit.runtime.threads import cpu_threads
from miaudit.train import dp
from miaudit.train.checkpoints import CheckpointSpec
from miaudit.train.common import (
    EpochCallback,
    TrainedModel,
    derive_seeds,
    isolated_rng,
    make_optimizer,
    snapshot,
)
from miaudit.train.engine import ShuffledBatches, augmenter, train_loop
from miaudit.train.recipe import Recipe
from miaudit.train.rows import ArrayLike, training_rows


def is_causal_lm(module: nn.Module) -> bool:
    """Whether ``module`` is a causal language model (``causal_lm = True`` on its class, as
    :class:`miaudit.models.text.CausalLM`): it trains on the next-token loss, not on labels."""
    return bool(getattr(module, "causal_lm", False))


def _lm_loss(module: nn.Module, xb: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of a causal LM on float token ids ``xb`` [B, T]
    (:func:`miaudit.models.text.next_token_loss`'s value; imported here, not at module
    import), the columns every row pads cut first (no forward over padding)."""
    from miaudit.models.lm_parts import chunked_next_token_loss, training_parts
    from miaudit.models.text import lm_outputs, next_token_loss, trim_padding

    x = trim_padding(xb, module.pad_id)
    # the loss from the hidden states a chunk of positions at a time (no [B, T, V] logits),
    # in fp32 and under bf16 autocast alike; for a model that cannot be taken apart, the logits'
    parts = training_parts(module)
    if parts is not None:
        return chunked_next_token_loss(parts, x)
    logits, ids, pad = lm_outputs(module, x)
    return next_token_loss(logits, ids, pad)


class PlainStrategy:
    """One module, autograd's backward: mean cross-entropy on the labels (with the recipe's
    label smoothing), or a causal LM's next-token loss (labels unused). Forward and loss run
    in the recipe's precision (``bf16``: autocast; refused where bf16 is not native)."""

    models = 1

    def __init__(self, module: nn.Module, optimizer: torch.optim.Optimizer, recipe: Recipe,
                 device: torch.device) -> None:  # fmt: skip
        check_precision(recipe.precision, device)
        self.module, self.optimizer = module, optimizer
        self.smoothing = recipe.label_smoothing
        self.causal = is_causal_lm(module)
        self.device, self.precision = device, recipe.precision
        self.total = torch.zeros((), device=device)  # the epoch's summed loss, on the device
        self.count = 0

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> None:
        with autocast(self.device, self.precision):  # fp32: no autocast at all
            if self.causal:  # next-token loss over non-pad targets; labels are unused
                loss = _lm_loss(self.module, xb)
            else:
                loss = F.cross_entropy(self.module(xb), yb, label_smoothing=self.smoothing)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.total.add_(loss.detach(), alpha=len(xb))  # on the device: no sync per step
        self.count += len(xb)

    def epoch_losses(self) -> list[float]:
        loss = float(self.total) / self.count  # float(): the one host-device sync per epoch
        self.total.zero_()
        self.count = 0
        return [loss]

    def snapshots(self) -> list[dict[str, torch.Tensor]]:
        return [snapshot(self.module)]

    def resume(self) -> None:
        self.module.train()


def _check_dp_supported(recipe: Recipe) -> None:
    if recipe.architecture in CAUSAL_LM_ARCHITECTURES:
        raise ConfigError(
            f"recipe.dp (DP-SGD) is not supported for the causal LM "
            f"'{recipe.architecture}': Opacus computes per-sample gradients of a "
            "classification loss on labels, not of a next-token loss over padded "
            "sequences; train it without dp."
        )


def train_model(
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
    desc: str = "training",
    num_threads: int | None = None,
    checkpoints: CheckpointSpec | None = None,
) -> TrainedModel:
    """Train ``recipe`` on rows ``indices`` of ``features``/``labels``; same seed, same weights.

    ``features`` is float [N, ...], ``labels`` int [N] (numpy or torch, any device).
    ``num_classes`` defaults to ``labels.max() + 1`` over all rows, so models trained on
    different subsets of one dataset share an output size. Row order in ``indices`` is
    irrelevant. ``on_epoch_end`` (optional) runs after each epoch, e.g. to evaluate.
    ``num_threads`` sets torch's CPU threads for this call only (``None``: unchanged); small
    models on a busy machine train several times faster with 1. ``checkpoints`` (optional)
    names epochs/steps whose weights are kept in the result's ``snapshots`` ``{step: state}``.
    A recipe with ``dp`` set trains with DP-SGD (:func:`miaudit.train.dp.train_model_dp`).
    """
    check_precision(recipe.precision, device)  # bf16 without native support fails before any work
    if recipe.architecture == "airbench94":  # its own method: whitening, lookahead (airbench)
        from miaudit.train.airbench import train_model_airbench

        return train_model_airbench(
            recipe, features, labels, indices, seed, device, num_classes, progress,
            on_epoch_end=on_epoch_end, desc=desc, num_threads=num_threads,
            checkpoints=checkpoints,
        )  # fmt: skip
    if recipe.dp is not None:
        _check_dp_supported(recipe)
        with cpu_threads(num_threads):
            return dp.train_model_dp(
                recipe, features, labels, indices, seed, device, num_classes, progress,
                on_epoch_end=on_epoch_end, desc=desc, checkpoints=checkpoints,
            )  # fmt: skip
    device = torch.device(device)
    rows = training_rows(features, labels, indices, device, num_classes)
    init_seed, shuffle_seed = derive_seeds(seed)
    input_shape = tuple(int(d) for d in rows.x.shape[1:])
    batches = ShuffledBatches(rows.x, rows.y, [shuffle_seed], recipe.batch_size)
    augment = augmenter(recipe, input_shape, seed)
    # Init and dropout draw from torch's global RNG: seeded for this model, restored after.
    with isolated_rng(device, init_seed), cpu_threads(num_threads):
        module = build_model(recipe.architecture, input_shape, rows.n_classes,
                             **recipe.arch_params)  # fmt: skip
        module.to(device).train()
        optimizer = make_optimizer(recipe, list(module.parameters()))
        result = train_loop(
            PlainStrategy(module, optimizer, recipe, device), batches, recipe, len(rows.idx),
            device, checkpoints=checkpoints, augment=augment, on_epoch_end=on_epoch_end,
            progress=progress, desc=desc,
        )  # fmt: skip
    return result.model(0, module, recipe, seed, len(rows.idx), rows.n_classes, input_shape)
