"""Train K models of any image/tabular architecture at once as one functional model.

:mod:`miaudit.train.stacked` stacks ``mlp`` with a written-out backward; every other
architecture in :data:`FUNCTIONAL` stacks here with ``torch.func``: the K models' parameters
and buffers are stacked along a leading axis (``stack_module_state``'s layout), one forward is
``vmap(functional_call(...))`` over them (a convolution becomes one grouped convolution, a
linear layer one batched product), each model's loss its own mean cross-entropy, and one
``backward`` of their sum gives each model the gradient of its own loss (the models share no
parameter). One optimizer steps all stacked tensors; every optimizer the recipes offer is
element-wise, so each slice is updated as the per-model optimizer updates its model.

What makes model ``k`` the model :func:`~miaudit.train.loop.train_model` trains with its seed:

* **initialisation**: ``build_model`` under its own init seed (:func:`common.isolated_rng`);
* **data order**: its own shuffle generator (the engine's :class:`ShuffledBatches`);
* **augmentation**: its own augmentation generator (seeded as ``engine.augmenter`` seeds it),
  drawing for its own slice of the batch (:func:`stacked_augmenter`);
* **dropout**: one-by-one, ``nn.Dropout`` draws from torch's global RNG, which continues
  from where the init left it. Here each model keeps that RNG state as its own generator, and
  each step draws every dropout layer's mask (in forward order) from it outside ``vmap``, with
  the kernel ``F.dropout`` uses (CPU: ``bernoulli_`` then ``div_``; CUDA: ``native_dropout``
  under the model's saved CUDA RNG state). Inside ``vmap`` a dropout layer multiplies by its
  mask, which is ``F.dropout``'s own last operation;
* **BatchNorm**: running mean/var and ``num_batches_tracked`` are stacked buffers passed to
  ``functional_call``; ``vmap``'s batch-norm rule updates each model's slice in place, so eval
  uses each model's own running statistics (no ``replace_all_batch_norm_modules_``).

The weights equal one-by-one training up to float rounding, not bit for bit: a grouped
convolution and a batch norm over ``K * C`` channels sum in another order than K separate
ones (tests/train/test_stacked_func.py states the tolerance per architecture). Which stack
size a device gets is ``trainer.stack_size``'s rule; DP-SGD and bf16 recipes never stack.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.runtime.threads import cpu_threads
from miaudit.train.augment import (
    StackedGenerators,
    augment_seed,
    build_augmentation,
    parse_augmentation,
)
from miaudit.train.checkpoints import CheckpointSpec
from miaudit.train.common import TrainedModel, derive_seeds, isolated_rng, make_optimizer
from miaudit.train.engine import BatchAugment, ShuffledBatches, train_loop
from miaudit.train.recipe import Recipe
from miaudit.train.rows import ArrayLike, as_device_tensor, check_indices

# Architectures whose modules vmap handles (conv, linear, pooling, ReLU, BatchNorm, Dropout):
# a new image/tabular architecture built from those stacks once it is named here.
FUNCTIONAL = ("mlp", "mnist-cnn", "cifar-cnn", "resnet18")


def can_stack_functional(recipe: Recipe) -> bool:
    """True if ``recipe``'s models can train here: a :data:`FUNCTIONAL` architecture, float32,
    no DP-SGD (Opacus trains one model at a time; bf16 runs under autocast, one by one)."""
    return recipe.dp is None and recipe.precision == "fp32" and recipe.architecture in FUNCTIONAL


def bytes_per_model(recipe: Recipe, input_shape: tuple[int, ...], num_classes: int) -> int:
    """A rough estimate of one stacked model's device memory in a step: float32 weights,
    gradients and optimizer state (momentum: 1, Adam: 2 per weight), and its batch's
    activations (every leaf module's output, once kept for the backward and once as its
    gradient; the input counted as one more output). For choosing a stack size, not exact."""
    with isolated_rng(torch.device("cpu"), 0):
        module = build_model(recipe.architecture, input_shape, num_classes, **recipe.arch_params)
    states = 2 if recipe.optimizer == "adam" else int(recipe.momentum > 0)
    weights = sum(p.numel() for p in module.parameters()) * (2 + states)
    sizes = [math.prod(input_shape)]
    hooks = [m.register_forward_hook(lambda mod, inp, out: sizes.append(out.numel() // 2))
             for m in module.modules() if not list(m.children())]  # fmt: skip
    with torch.no_grad():
        module.eval()(torch.zeros(2, *input_shape))  # eval: BatchNorm takes a batch of 2
    for hook in hooks:
        hook.remove()
    result: int = 4 * (weights + 2 * sum(sizes) * recipe.batch_size)
    return result


class _MaskedDropout(nn.Module):
    """``nn.Dropout`` with its mask drawn outside ``vmap`` (``mask``: set before each forward,
    already scaled by ``1 / (1 - p)``): ``input * mask``, as ``F.dropout`` ends."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.mask: torch.Tensor | None = None
        self.shape: tuple[int, ...] | None = None  # one sample's input shape (the probe's)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mask is None:  # the shape probe: record, pass through
            self.shape = tuple(x.shape[1:])
            return x
        return x * self.mask


def _functional_base(module: nn.Module, input_shape: tuple[int, ...]
                     ) -> tuple[nn.Module, list[_MaskedDropout]]:  # fmt: skip
    """A copy of ``module`` whose active dropout layers take masks, and those layers in the
    order a forward pass runs them (found by running one, which also records their shapes)."""
    base = copy.deepcopy(module).cpu()
    for name, child in list(base.named_modules()):
        for attr, sub in list(child.named_children()):
            if isinstance(sub, nn.modules.dropout._DropoutNd):
                if type(sub) is not nn.Dropout:
                    raise ConfigError(f"{type(sub).__name__} at {name}.{attr} cannot be stacked.")
                # p == 0: F.dropout returns its input and draws nothing
                setattr(child, attr, _MaskedDropout(sub.p) if sub.p > 0 else nn.Identity())
    order: list[_MaskedDropout] = []
    hooks = [m.register_forward_hook(lambda mod, *_: order.append(mod))
             for m in base.modules() if isinstance(m, _MaskedDropout)]  # fmt: skip
    with torch.no_grad(), isolated_rng(torch.device("cpu"), 0):
        base.eval()(torch.zeros(2, *input_shape))  # eval: no running-stat update, any size
    for hook in hooks:
        hook.remove()
    return base.train(), order


class DropoutStreams:
    """Each model's own dropout RNG: the state torch's global RNG had after its init, which is
    where ``train_model``'s dropout draws continue from."""

    def __init__(self, cpu_states: Sequence[torch.Tensor], init_seeds: Sequence[int],
                 device: torch.device) -> None:  # fmt: skip
        self.device = device
        self.cpu = []
        for state in cpu_states:
            gen = torch.Generator(device="cpu")
            gen.set_state(state)
            self.cpu.append(gen)
        # CUDA: init runs on the CPU, so each model's CUDA RNG is fresh from its init seed
        self.cuda = [torch.Generator(device=device).manual_seed(int(s)).get_state()
                     for s in init_seeds] if device.type == "cuda" else []  # fmt: skip

    def masks(self, layers: Sequence[_MaskedDropout], batch: int) -> list[torch.Tensor]:
        """Each layer's ``[K, batch, ...]`` scaled mask for one step, model by model."""
        if not layers:
            return []
        per_model = [self._cuda_masks(k, layers, batch) if self.cuda
                     else self._cpu_masks(k, layers, batch) for k in range(len(self.cpu))]
        return [torch.stack([m[i] for m in per_model]) for i in range(len(layers))]

    def _cpu_masks(self, k: int, layers: Sequence[_MaskedDropout], batch: int
                   ) -> list[torch.Tensor]:  # fmt: skip
        # F.dropout on the CPU: empty_like(input).bernoulli_(1 - p).div_(1 - p)
        out = []
        for layer in layers:
            assert layer.shape is not None
            noise = torch.empty(batch, *layer.shape).bernoulli_(1 - layer.p, generator=self.cpu[k])
            out.append(noise.div_(1 - layer.p).to(self.device))
        return out

    def _cuda_masks(self, k: int, layers: Sequence[_MaskedDropout], batch: int
                    ) -> list[torch.Tensor]:  # fmt: skip
        # F.dropout on CUDA is native_dropout on the default CUDA generator: run it under the
        # model's saved state (host-side seed and offset: no sync), keep the advanced state.
        default = torch.cuda.default_generators[self.device.index or torch.cuda.current_device()]
        saved = default.get_state()
        default.set_state(self.cuda[k])
        out = []
        for layer in layers:
            assert layer.shape is not None
            ones = torch.ones(batch, *layer.shape, device=self.device)
            _, keep = torch.native_dropout(ones, layer.p, True)
            out.append(keep.to(ones.dtype) * (1.0 / (1.0 - layer.p)))
        self.cuda[k] = default.get_state()
        default.set_state(saved)
        return out


class FunctionalStack:
    """K modules of one architecture as stacked parameters and buffers (``[K, ...]`` each)."""

    def __init__(self, modules: Sequence[nn.Module], input_shape: tuple[int, ...]) -> None:
        if not modules:
            raise ConfigError("a functional stack needs at least one model.")
        self.base, self.dropouts = _functional_base(modules[0], input_shape)
        self.base.to(next(modules[0].parameters()).device)
        self.keys = list(modules[0].state_dict().keys())
        names = dict(modules[0].named_parameters())
        states = [m.state_dict() for m in modules]
        with torch.no_grad():
            stacked = {key: torch.stack([s[key].detach() for s in states]) for key in self.keys}
        self.params = {k: nn.Parameter(v.contiguous()) for k, v in stacked.items() if k in names}
        self.buffers = {k: v.contiguous() for k, v in stacked.items() if k not in names}
        self.models = len(modules)

    def logits(self, x: torch.Tensor, masks: Sequence[torch.Tensor]) -> torch.Tensor:
        """Each model's logits ``[K, B, classes]`` of its batch ``x [K, B, ...]``; updates the
        BatchNorm buffers in train mode."""

        def one(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
                xb: torch.Tensor, ms: list[torch.Tensor]) -> torch.Tensor:
            for layer, mask in zip(self.dropouts, ms, strict=True):
                layer.mask = mask
            try:
                return functional_call(self.base, (params, buffers), (xb,))
            finally:
                for layer in self.dropouts:
                    layer.mask = None

        return vmap(one)(self.params, self.buffers, x, list(masks))

    @torch.no_grad()
    def state_dicts(self) -> list[dict[str, torch.Tensor]]:
        """Each model's state dict (detached CPU copies, the module's key order)."""
        every = {**self.params, **self.buffers}
        return [{key: every[key][k].detach().cpu().clone() for key in self.keys}
                for k in range(self.models)]  # fmt: skip

    @torch.no_grad()
    def unstack_into(self, modules: Sequence[nn.Module]) -> None:
        every = {**self.params, **self.buffers}
        for k, module in enumerate(modules):
            for key, value in module.state_dict().items():
                value.copy_(every[key][k])


def stacked_augmenter(recipe: Recipe, input_shape: tuple[int, ...], seeds: Sequence[int]
                      ) -> BatchAugment | None:  # fmt: skip
    """The recipe's augmentation of a stacked batch (K models' equal slices, model after
    model): each model's slice with its own generator, seeded as ``engine.augmenter`` seeds
    it, so each draws what it draws one by one. Index-arithmetic steps run once on the whole
    batch (``StackedGenerators``); with ``autoaugment`` (kornia draws from the global RNG)
    each slice is augmented on its own."""
    augment = build_augmentation(recipe.augment, input_shape)
    if augment is None:
        return None
    gens = [torch.Generator(device="cpu").manual_seed(augment_seed(s)) for s in seeds]
    if all(name != "autoaugment" for name, _ in parse_augmentation(recipe.augment)):
        stacked = StackedGenerators(gens)
        return lambda xb: augment(xb, stacked)

    def per_model(xb: torch.Tensor) -> torch.Tensor:
        return torch.cat([augment(part, g) for part, g in zip(xb.chunk(len(gens)), gens,
                                                              strict=True)])  # fmt: skip

    return per_model


class FunctionalStrategy:
    """The engine's strategy for a :class:`FunctionalStack`: per model its augmentation and
    dropout draws, one vmapped forward, one backward, one optimizer step."""

    module = None  # no single module: stacked training takes no epoch callbacks

    def __init__(self, net: FunctionalStack, recipe: Recipe, n_train: int,
                 device: torch.device, streams: DropoutStreams) -> None:  # fmt: skip
        self.net, self.n, self.models = net, n_train, net.models
        self.optimizer = make_optimizer(recipe, list(net.params.values()))
        self.smoothing = recipe.label_smoothing
        self.streams = streams
        self.total = torch.zeros(self.models, device=device)  # each model's summed loss

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> None:
        b = len(yb) // self.models
        x = xb.view(self.models, b, *xb.shape[1:])
        logits = self.net.logits(x, self.streams.masks(self.net.dropouts, b))
        y = yb.view(self.models, b)
        loss = vmap(lambda lg, t: F.cross_entropy(lg, t, label_smoothing=self.smoothing))(
            logits, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()  # model k's parameters get the gradient of its own loss
        self.optimizer.step()
        self.total.add_(loss.detach(), alpha=b)  # on the device: no sync per step

    def epoch_losses(self) -> list[float]:
        losses = (self.total / self.n).cpu().numpy()  # the one host-device sync per epoch
        self.total.zero_()
        return [float(v) for v in losses]

    def snapshots(self) -> list[dict[str, torch.Tensor]]:
        result: list[dict[str, torch.Tensor]] = self.net.state_dicts()
        return result

    def resume(self) -> None:
        pass


def train_stacked_functional(
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
    """Train one model per (index set, seed) pair, all at once: the models ``train_model``
    trains, up to float rounding (see the module docstring); the same ``snapshots``.

    Every index set must have the same size and ``recipe`` must pass
    :func:`can_stack_functional`. Returned models are ordinary modules in eval mode; each one's
    ``train_seconds`` is its share (1/K) of the group's time."""
    if not can_stack_functional(recipe):
        raise ConfigError(
            f"recipe {recipe.architecture!r} cannot be trained stacked; stackable: "
            f"{', '.join(FUNCTIONAL)}, precision fp32, no dp."
        )
    if len(index_sets) != len(seeds) or not seeds:
        raise ConfigError(f"got {len(index_sets)} index sets and {len(seeds)} seeds; pair them.")
    device = torch.device(device)
    x = as_device_tensor(features, device, torch.float32)
    y = as_device_tensor(labels, device, torch.int64)
    idx = [check_indices(i, len(x)) for i in index_sets]
    if any(len(i) != len(idx[0]) for i in idx):
        raise ConfigError(f"stacked training needs equal training-set sizes, got "
                          f"{sorted({len(i) for i in idx})}.")  # fmt: skip
    members = torch.stack([torch.as_tensor(i) for i in idx])
    n_classes = int(y.max()) + 1 if num_classes is None else int(num_classes)
    used = y.index_select(0, members.unique().to(y.device))
    if int(used.min()) < 0 or int(used.max()) >= n_classes:
        raise ConfigError(f"training labels must lie in [0, {n_classes}) (num_classes), got "
                          f"[{int(used.min())}, {int(used.max())}]; pass the right num_classes.")
    n, k = int(members.shape[1]), len(seeds)
    input_shape = tuple(int(d) for d in x.shape[1:])
    split = [derive_seeds(s) for s in seeds]
    modules, states = [], []
    for init_seed, _ in split:  # each model initialised as train_model initialises it
        with isolated_rng(device, init_seed):
            module = build_model(recipe.architecture, input_shape, n_classes,
                                 **recipe.arch_params)  # fmt: skip
            states.append(torch.get_rng_state())  # where its dropout draws continue
        modules.append(module.to(device).train())
    streams = DropoutStreams(states, [s for s, _ in split], device)
    batches = ShuffledBatches(x, y, [s for _, s in split], recipe.batch_size, members)
    with cpu_threads(num_threads):
        net = FunctionalStack(modules, input_shape)
        result = train_loop(
            FunctionalStrategy(net, recipe, n, device, streams), batches, recipe, n, device,
            checkpoints=checkpoints, augment=stacked_augmenter(recipe, input_shape, seeds),
            progress=progress,
            desc=desc or f"training {k} model{'s' if k > 1 else ''} (stacked)",
        )  # fmt: skip
    net.unstack_into(modules)
    return [
        result.model(j, module, recipe, seed, n, n_classes, input_shape)
        for j, (module, seed) in enumerate(zip(modules, seeds, strict=True))
    ]
