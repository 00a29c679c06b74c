"""Train K models of one recipe at once, with their weights stacked along a leading axis.

Audits train many small models of the same recipe on training sets of the same size (reference
models, the studies). Trained one at a time, a small MLP spends much of each step in
Python, autograd and optimizer bookkeeping rather than arithmetic; stacked, one step of K
models costs one batched matmul per layer (``torch.bmm`` over weights ``[K, out, in]``) and one
optimizer step over the stacked parameters, so that overhead is paid once for all K. The
backward pass is written out (the gradients of ``linear -> activation -> linear -> cross
entropy``), which saves autograd's graph bookkeeping: ~0.5 ms a step, 1.6x for one model.

The result equals K separate :func:`~miaudit.train.trainer.train_model` calls, bit for bit on
the CPUs we tested: each model is initialised by ``build_model`` under its own init seed and
draws its own per-epoch ``randperm`` from its own shuffle generator, exactly as ``train_model``
does; each gradient is computed by the same kernel with the same operands as autograd uses
for ``nn.Linear``/``nn.Tanh``/``nn.ReLU``/``F.cross_entropy`` (a batched product computes each
slice as the single product does); and every optimizer the recipes offer (SGD with
momentum/nesterov/weight decay, Adam) is element-wise, so one optimizer over stacked tensors
updates each slice as the per-model optimizer would. The cosine schedule is identical because
every model has the same number of steps. A BLAS that sums a batched product in another order
than a single one would make the weights differ at float rounding level.

Training runs the one loop (:func:`miaudit.train.engine.train_loop`) with
:class:`StackedStrategy`: the engine's batches hold each model's rows side by side, and one
step is the written-out backward plus one optimizer step. Label smoothing enters the
written-out loss gradient; checkpoints are copied out of the stacked weights at the same steps
as ``train_model`` copies them. Only architectures in
:data:`STACKABLE` (``mlp``, any width, activations in :data:`ACTIVATIONS`, no dropout: its masks
come from torch's global RNG in an order only autograd's loop reproduces) are stacked
here; the other image/tabular architectures (and ``mlp`` with dropout) stack through
``torch.func`` (:mod:`miaudit.train.stacked_func`, equal up to float rounding), and
:func:`train_groups` trains the rest one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.runtime.threads import cpu_threads
from miaudit.train.checkpoints import CheckpointSpec
from miaudit.train.common import TrainedModel, derive_seeds, isolated_rng, make_optimizer
from miaudit.train.engine import ShuffledBatches, train_loop
from miaudit.train.loop import train_model
from miaudit.train.recipe import Recipe
from miaudit.train.rows import ArrayLike, as_device_tensor, check_indices
from miaudit.train.stacked_func import can_stack_functional, train_stacked_functional

STACKABLE = ("mlp",)
_aten = torch.ops.aten

# activation name -> (forward, backward(grad_of_output, output)), the kernels autograd uses
ACTIVATIONS: dict[str, tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]] = {
    "tanh": (torch.tanh, _aten.tanh_backward),
    "relu": (torch.relu, lambda grad, out: _aten.threshold_backward(grad, out, 0)),
}


def can_stack(recipe: Recipe) -> bool:
    """True if models of ``recipe`` can be trained stacked (see :data:`STACKABLE`); never for
    DP-SGD recipes, which train one by one through Opacus (:mod:`miaudit.train.dp`), nor for
    ``precision: bf16`` ones, which train one by one under autocast (``loop``)."""
    return (
        recipe.dp is None
        and not recipe.augment  # augmentation runs in train_model's loop only
        and recipe.precision == "fp32"  # the written-out backward is float32's (bf16: autograd)
        and recipe.architecture in STACKABLE
        and recipe.arch_params.get("activation", "relu") in ACTIVATIONS
        and not recipe.arch_params.get("dropout", 0.0)
    )


def stacks(recipe: Recipe) -> bool:
    """True if ``recipe``'s models can train stacked by either path: the written-out backward
    (:func:`can_stack`) or ``torch.func`` (``stacked_func.can_stack_functional``)."""
    return can_stack(recipe) or can_stack_functional(recipe)


class StackedMLP:
    """K copies of ``miaudit.models.mlp.MLP``: parameters with a leading model axis.

    ``w1 [K, hidden, in]``, ``b1 [K, hidden]``, ``w2 [K, classes, hidden]``, ``b2 [K, classes]``
    (``nn.Linear``'s layout). :meth:`forward_backward` sets their ``.grad``.
    """

    def __init__(
        self, modules: Sequence[nn.Module], activation: str, label_smoothing: float = 0.0
    ) -> None:
        if not modules:
            raise ConfigError("StackedMLP needs at least one model.")
        self.act, self.act_backward = ACTIVATIONS[activation]
        self.smoothing = float(label_smoothing)

        def stack(get: Callable[[nn.Module], torch.Tensor]) -> nn.Parameter:
            return nn.Parameter(torch.stack([get(m).detach() for m in modules]).contiguous())

        self.w1 = stack(lambda m: m.hidden.weight)
        self.b1 = stack(lambda m: m.hidden.bias)
        self.w2 = stack(lambda m: m.head.weight)
        self.b2 = stack(lambda m: m.head.bias)

    def parameters(self) -> list[nn.Parameter]:
        return [self.w1, self.b1, self.w2, self.b2]

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Hidden activations ``[K, B, hidden]`` and logits ``[K, B, classes]`` of ``x``."""
        h = self.act(torch.baddbmm(self.b1.unsqueeze(1), x, self.w1.transpose(1, 2)))
        return h, torch.baddbmm(self.b2.unsqueeze(1), h, self.w2.transpose(1, 2))

    @torch.no_grad()
    def forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Set each parameter's ``.grad`` to the gradient of each model's mean cross-entropy
        on its batch (``x [K, B, in]``, ``y [K * B]``); return the per-sample losses ``[K, B]``.

        Mirrors autograd on ``F.cross_entropy(module(x[k]), y[k])`` step by step: the
        mean-reduced NLL gradient ``-1/B`` at the labels, ``_log_softmax_backward_data``,
        ``addmm``'s gradients ``g^T @ input`` and ``g @ weight`` and the bias gradient
        ``g.sum`` over the batch, and the activation's own backward kernel. With label
        smoothing ``s`` over ``C`` classes the loss is ``(1 - s) * nll + s / C * sum(-logp)``
        (``F.cross_entropy``'s), whose gradient adds ``-s / (C B)`` at every class.
        """
        k, b = x.shape[0], x.shape[1]
        h, logits = self.forward(x)
        logp = torch.log_softmax(logits.view(k * b, -1), dim=1)
        target = y.unsqueeze(1)
        scale = float(-(torch.ones((), dtype=logp.dtype) / b))  # nll_loss's -grad/total_weight
        if self.smoothing:
            classes = logp.shape[1]
            grad = torch.full_like(logp, scale * self.smoothing / classes)
            # made on the device (no host-device copy per step): the same float32 values
            at_label = torch.full(target.shape, scale * (1.0 - self.smoothing), dtype=logp.dtype,
                                  device=logp.device)  # fmt: skip
            grad.scatter_add_(1, target, at_label)
            nll = logp.gather(1, target).view(k, b).neg_()
            smooth = logp.sum(1).view(k, b).neg_()
            loss = nll * (1.0 - self.smoothing) + smooth * (self.smoothing / classes)
        else:
            grad = torch.zeros_like(logp).scatter_(1, target, scale)
            loss = None
        grad = _aten._log_softmax_backward_data(grad, logp, 1, logp.dtype).view(k, b, -1)
        self.w2.grad = torch.bmm(grad.transpose(1, 2), h)
        self.b2.grad = grad.sum(1)
        grad = self.act_backward(torch.bmm(grad, self.w2), h)
        self.w1.grad = torch.bmm(grad.transpose(1, 2), x)
        self.b1.grad = grad.sum(1)
        return loss if loss is not None else logp.gather(1, target).view(k, b).neg_()

    @torch.no_grad()
    def state_dicts(self) -> list[dict[str, torch.Tensor]]:
        """Each model's weights as an ``MLP`` state dict (detached CPU copies)."""
        return [
            {
                "hidden.weight": self.w1[k].detach().cpu().clone(),
                "hidden.bias": self.b1[k].detach().cpu().clone(),
                "head.weight": self.w2[k].detach().cpu().clone(),
                "head.bias": self.b2[k].detach().cpu().clone(),
            }
            for k in range(self.w1.shape[0])
        ]

    @torch.no_grad()
    def unstack_into(self, modules: Sequence[nn.Module]) -> None:
        """Copy model k's weights into ``modules[k]`` (an ``MLP`` of the same shape)."""
        for k, module in enumerate(modules):
            module.hidden.weight.copy_(self.w1[k])
            module.hidden.bias.copy_(self.b1[k])
            module.head.weight.copy_(self.w2[k])
            module.head.bias.copy_(self.b2[k])


class StackedStrategy:
    """K models as one :class:`StackedMLP`: the written-out backward, then one optimizer step
    over the stacked parameters. A batch holds each model's rows, model after model."""

    module = None  # no single module: stacked training takes no epoch callbacks

    def __init__(self, net: StackedMLP, recipe: Recipe, n_train: int, device: torch.device
                 ) -> None:  # fmt: skip
        self.net, self.n = net, n_train
        self.models = int(net.w1.shape[0])
        self.optimizer = make_optimizer(recipe, net.parameters())
        self.total = torch.zeros(self.models, device=device)  # each model's summed loss

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> None:
        # forward_backward sets every .grad itself: no zero_grad needed
        b = len(yb) // self.models
        self.total.add_(self.net.forward_backward(xb.view(self.models, b, -1), yb).sum(1))
        self.optimizer.step()

    def epoch_losses(self) -> list[float]:
        losses = (self.total / self.n).cpu().numpy()  # the one host-device sync per epoch
        self.total.zero_()
        return [float(v) for v in losses]

    def snapshots(self) -> list[dict[str, torch.Tensor]]:
        result: list[dict[str, torch.Tensor]] = self.net.state_dicts()
        return result

    def resume(self) -> None:
        pass


class _Stack(NamedTuple):
    """The data of a stacked run: shared once, each model's rows as ids into it."""

    x: torch.Tensor  # float32 [N, features], flattened
    y: torch.Tensor  # int64 [N]
    members: torch.Tensor  # [K, n] sorted row ids of each model (CPU)
    n_classes: int
    input_shape: tuple[int, ...]  # one sample's shape before flattening


def _stack_rows(
    recipe: Recipe,
    features: ArrayLike,
    labels: ArrayLike,
    index_sets: Sequence[ArrayLike],
    seeds: Sequence[int],
    device: torch.device,
    num_classes: int | None,
) -> _Stack:
    """Check a stacked run's inputs (a stackable recipe, paired and equal-sized index sets,
    labels in range) and put its data on ``device`` once."""
    if not can_stack(recipe):
        raise ConfigError(
            f"recipe {recipe.architecture!r} {dict(recipe.arch_params)} cannot be trained "
            f"stacked; stackable: {', '.join(STACKABLE)} with activation in "
            f"{', '.join(ACTIVATIONS)}, no dropout, augmentation or dp, precision fp32."
        )
    if len(index_sets) != len(seeds) or not seeds:
        raise ConfigError(f"got {len(index_sets)} index sets and {len(seeds)} seeds; pair them.")
    if len(features) != len(labels):
        raise ConfigError(f"features has {len(features)} rows but labels has {len(labels)}.")
    idx = [check_indices(i, len(features)) for i in index_sets]
    if any(len(i) != len(idx[0]) for i in idx):
        sizes = sorted({len(i) for i in idx})
        raise ConfigError(f"stacked training needs equal training-set sizes, got {sizes}.")
    n_classes = (int(labels.max()) + 1) if num_classes is None else int(num_classes)
    # The data once, not once per model: each model's batch rows index the shared tensors.
    x = as_device_tensor(features, device, torch.float32)
    y = as_device_tensor(labels, device, torch.int64)
    members = torch.as_tensor(np.stack(idx))
    used = y.index_select(0, members.unique().to(y.device))
    if int(used.min()) < 0 or int(used.max()) >= n_classes:
        raise ConfigError(
            f"training labels must lie in [0, {n_classes}) (num_classes), got range "
            f"[{int(used.min())}, {int(used.max())}]; pass the right num_classes."
        )
    input_shape = tuple(int(d) for d in x.shape[1:])
    return _Stack(x.reshape(len(x), -1), y, members, n_classes, input_shape)


def train_stacked(
    recipe: Recipe,
    features: ArrayLike,
    labels: ArrayLike,
    index_sets: Sequence[ArrayLike],
    seeds: Sequence[int],
    device: str | torch.device = "cpu",
    num_classes: int | None = None,
    *,
    num_threads: int | None = None,
    checkpoints: CheckpointSpec | None = None,
    progress: bool = False,
    desc: str | None = None,
) -> list[TrainedModel]:
    """Train one model per (index set, seed) pair, all at once; the models ``train_model``
    would train (``checkpoints``: the same ``snapshots`` too).

    ``progress`` shows one bar over the stack's epochs (``desc``, default "training K models
    (stacked)"), with the models' mean loss; see :mod:`miaudit.runtime.progress`.

    Every index set must have the same size and ``recipe`` must be stackable
    (:func:`can_stack`). ``features``/``labels`` are as for ``train_model``. Each returned
    model is an ordinary module as ``build_model`` makes it, in eval mode; its
    ``train_seconds`` is its share (1/K) of the group's time, so its ``samples_per_second``
    is the group's throughput.
    """
    device = torch.device(device)
    data = _stack_rows(recipe, features, labels, index_sets, seeds, device, num_classes)
    n, k = int(data.members.shape[1]), len(seeds)
    split = [derive_seeds(s) for s in seeds]
    modules = []
    for init_seed, _ in split:  # each model initialised as train_model initialises it
        with isolated_rng(device, init_seed):
            module = build_model(recipe.architecture, data.input_shape, data.n_classes,
                                 **recipe.arch_params)  # fmt: skip
        modules.append(module.to(device))
    batches = ShuffledBatches(data.x, data.y, [s for _, s in split], recipe.batch_size,
                              data.members)  # fmt: skip
    with cpu_threads(num_threads):
        activation = recipe.arch_params.get("activation", "relu")
        net = StackedMLP(modules, activation, recipe.label_smoothing)
        result = train_loop(
            StackedStrategy(net, recipe, n, device), batches, recipe, n, device,
            checkpoints=checkpoints, progress=progress,
            desc=desc or f"training {k} model{'s' if k > 1 else ''} (stacked)",
        )  # fmt: skip
    net.unstack_into(modules)
    return [
        result.model(j, module, recipe, seed, n, data.n_classes, data.input_shape)
        for j, (module, seed) in enumerate(zip(modules, seeds, strict=True))
    ]


def plan_groups(
    sizes: Sequence[int], stackable: bool, max_stack: int, min_groups: int = 1
) -> list[list[int]]:
    """Job indices grouped for stacked training, largest groups first.

    Jobs with equal training-set size ``sizes[j]`` share groups of at most ``max_stack`` (as
    even as possible); unstackable recipes give one job per group. Groups are then split until
    there are at least ``min_groups`` (one per worker process) where the jobs allow it.
    """
    if max_stack < 1:
        raise ConfigError(f"max_stack must be >= 1, got {max_stack}.")
    if not stackable or max_stack == 1:
        return [[j] for j in range(len(sizes))]
    by_size: dict[int, list[int]] = {}
    for j, size in enumerate(sizes):
        by_size.setdefault(int(size), []).append(j)
    groups = []
    for jobs in by_size.values():
        groups += [list(part) for part in np.array_split(jobs, -(-len(jobs) // max_stack))]
    while len(groups) < min_groups:
        groups.sort(key=len, reverse=True)
        if len(groups[0]) < 2:
            break
        big = groups.pop(0)
        groups += [big[: len(big) // 2], big[len(big) // 2 :]]
    groups.sort(key=len, reverse=True)
    return [[int(j) for j in g] for g in groups]


def train_groups(
    recipe: Recipe,
    features: torch.Tensor,
    labels: torch.Tensor,
    index_sets: Sequence[ArrayLike],
    seeds: Sequence[int],
    groups: Sequence[Sequence[int]],
    device: str | torch.device,
    num_classes: int,
    *,
    progress: bool = False,
    num_threads: int | None = None,
    on_group: Callable[[list[int], list[TrainedModel]], None] | None = None,
    checkpoints: CheckpointSpec | None = None,
) -> list[TrainedModel]:
    """Train each group of jobs in this process: stacked where the recipe stacks (written-out
    backward: even a group of one, it is faster than autograd; ``torch.func``: groups of two
    or more), else one ``train_model`` call per job. Models in job order (None for jobs in no
    group).

    ``on_group(group, models)`` runs as each group finishes, before the next one starts.
    ``progress``: each group's epoch bar (see :func:`train_stacked`, ``train_model``)."""
    results: list[TrainedModel | None] = [None] * len(seeds)
    for group in groups:
        if can_stack(recipe):
            models = train_stacked(
                recipe,
                features,
                labels,
                [index_sets[j] for j in group],
                [seeds[j] for j in group],
                device,
                num_classes,
                num_threads=num_threads,
                checkpoints=checkpoints,
                progress=progress,
            )
        elif can_stack_functional(recipe) and len(group) > 1:
            models = train_stacked_functional(
                recipe, features, labels, [index_sets[j] for j in group],
                [seeds[j] for j in group], device, num_classes, num_threads=num_threads,
                checkpoints=checkpoints, progress=progress,
            )  # fmt: skip
        else:
            models = [
                train_model(
                    recipe, features, labels, index_sets[j], seeds[j], device, num_classes,
                    progress, desc=f"model {j + 1}/{len(seeds)}", num_threads=num_threads,
                    checkpoints=checkpoints,
                )  # fmt: skip
                for j in group
            ]
        for j, model in zip(group, models, strict=True):
            results[j] = model
        if on_group is not None:
            on_group(list(group), models)
    return results  # type: ignore[return-value]
