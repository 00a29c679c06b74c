"""White-box gradient canaries in one DP-SGD run, the trainer's side (docs/algorithms.md §16).

Steinke, Nasr & Jagielski, "Privacy Auditing with One (1) Training Run" (NeurIPS 2023), audit
DP-SGD in the white-box setting with *gradient canaries*: m vectors in parameter space, each
included in the run independently with probability ½ (seeded, drawn by the auditor), each
acting as one more training example whose clipped gradient is that vector. This module holds
the canaries, what puts them into Opacus's DP-SGD step (:class:`CanaryHook`, which
:class:`miaudit.train.dp_optimizers.CanaryDPOptimizer` calls) and what the run records; the
scores and one-run bounds of the two threat models read that record after training, in
:mod:`miaudit.privacy.gradient_canary_scores` (outside the training code: editing a bound
retrains nothing).

**The canaries.** ``kind="dirac"`` (the default): canary i is ``C·e_{j_i}``, the clipping norm
C on one coordinate ``j_i`` of the flattened parameters (a "Dirac canary"), m distinct
coordinates. Which coordinates (``coordinates``): ``"quiet"`` (default) ranks every coordinate
by the mean magnitude of the *clipped* per-sample gradients of up to ``probe_rows`` training
rows at initialisation (the largest over the initial weights and two seeded perturbations of
them, so that a unit merely inactive at initialisation does not look quiet) and takes the m
quietest (ties, e.g. the exact zeros of weights fed by
an always-blank input pixel, broken by a seeded shuffle); ``"random"`` takes m seeded uniform
coordinates. Why quiet: a canary's score is read on its coordinate, and every data gradient
that lands there is noise to the auditor. On quiet coordinates the data hardly moves the
weight, and the canary's own drift hardly changes the network's function (a weight fed by a
blank pixel has no effect at all). The choice uses the training data but never the inclusion
mask, which is drawn afterwards and independently: the one-run theorem needs only that.
``kind="random"``: canary i is C times a seeded uniformly random unit direction (dense: m × d
floats in memory, so for small models). ``norm`` (default 1): a canary is an example whose raw
gradient is ``norm``·C along its direction; DP-SGD's clipping cuts it to C (so the default and
any larger norm give the same run), an implementation that skips clipping
(:mod:`miaudit.train.dp_implementations`, ``no-clipping``) lets all of it through.

**Sampling.** A canary acts as one more example of the dataset, so it is Poisson-sampled like
every real row: at each step each *included* canary joins the batch independently with the
loader's sample rate q (its own seeded generator, not torch's global one); under an
implementation whose batches are a shuffle per epoch (``shuffled-batches``) each included
canary joins one uniformly random step of every epoch instead, as a row would. This is the setting
the paper audits (gradient canaries as examples of DP-SGD's dataset), and the one the
accountant's ε covers: a canary inserted at every step would have sample rate 1, for which
the claimed ε says nothing. The canaries' gradients are added to Opacus's summed clipped
gradients (``p.summed_grad``) right after ``clip_and_accumulate`` and before ``add_noise`` (by
the ``DPOptimizer`` subclass's ``clip_and_accumulate``), so the Gaussian noise (std σ·C) and
the division by the expected batch size apply to them exactly as to a real example's clipped
gradient.

**What is recorded** (:class:`GradientCanaryRecord`): for every step t and canary i,
``x[t, i] = B·⟨ĝ_t, u_i⟩ / C``, the privatised gradient ĝ_t the optimizer received (after
noise and the division by the expected batch size B) projected on the canary's unit direction
u_i, in units of C: N(0, σ²) noise, plus 1 when the canary joined step t, plus whatever the
data put there; and that last part alone, ``d[t, i] = ⟨S_t, u_i⟩ / C`` with S_t the summed
clipped gradients of the step's real rows (read before the canaries go in). One gather per
Dirac canary per step each. And the projections of the initial and final weights on each u_i.
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from miaudit.errors import ConfigError
from miaudit.train.gradient_canary_kinds import COORDINATES, KINDS

__all__ = ["GradientCanaries", "GradientCanaryRecord", "CanaryHook", "KINDS", "COORDINATES"]


@dataclass
class GradientCanaryRecord:
    """What one DP-SGD run with gradient canaries leaves for the auditor (module doc)."""

    included: np.ndarray  # bool [m]: canary i took part in the run (drawn with probability ½)
    projections: np.ndarray  # float64 [T, m]: x[t, i] = B·⟨ĝ_t, u_i⟩ / C
    initial: np.ndarray  # float64 [m]: ⟨θ_0, u_i⟩
    final: np.ndarray  # float64 [m]: ⟨θ_T, u_i⟩
    sampled: np.ndarray  # int64 [m]: steps canary i joined (0 for every excluded canary)
    coordinates: np.ndarray | None  # int64 [m]: the Dirac coordinates (None for random)
    kind: str
    noise_multiplier: float  # σ the accountant claims (not necessarily the one applied)
    sample_rate: float  # q
    max_grad_norm: float  # C
    expected_batch_size: float  # B
    data: np.ndarray | None = None  # float64 [T, m]: d[t, i] = ⟨S_t, u_i⟩ / C, the rows' part

    @property
    def m(self) -> int:
        return int(self.included.size)

    @property
    def steps(self) -> int:
        return int(self.projections.shape[0])


class GradientCanaries:
    """m gradient canaries for one DP-SGD run: pass to ``train_model_dp(...,
    gradient_canaries=...)``; after training, :attr:`record` holds what the run recorded.

    ``count``: m. ``kind``: ``"dirac"`` or ``"random"``. ``coordinates`` (Dirac only):
    ``"quiet"`` or ``"random"``. ``seed``: the canaries' own seed (coordinates, directions,
    inclusion, per-step sampling), independent of the model's. ``probe_rows``: training rows
    whose gradients rank the coordinates for ``"quiet"``. The object is reusable; each
    training run overwrites :attr:`record`.
    """

    def __init__(self, count: int, kind: str = "dirac", seed: int = 0,
                 coordinates: str = "quiet", probe_rows: int = 1024,
                 norm: float = 1.0) -> None:  # fmt: skip
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
            raise ConfigError(f"gradient canaries: count must be a whole number >= 1, "
                              f"got {count!r}.")
        if kind not in KINDS:
            raise ConfigError(f"gradient canaries: kind must be one of {KINDS}, got {kind!r}.")
        if coordinates not in COORDINATES:
            raise ConfigError(f"gradient canaries: coordinates must be one of {COORDINATES}, "
                              f"got {coordinates!r}.")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ConfigError(f"gradient canaries: seed must be an integer >= 0, got {seed!r}.")
        self.count, self.kind, self.seed = int(count), kind, int(seed)
        if isinstance(norm, bool) or not isinstance(norm, (int, float)) or not norm > 0:
            raise ConfigError(f"gradient canaries: norm (a multiple of the clipping norm) must "
                              f"be a number > 0, got {norm!r}.")
        self.coordinates, self.probe_rows = coordinates, int(probe_rows)
        self.norm = float(norm)
        self.record: GradientCanaryRecord | None = None
        self._hook: CanaryHook | None = None

    def describe(self) -> dict[str, Any]:
        """The canaries' settings (for the privacy record)."""
        out = {"count": self.count, "kind": self.kind, "seed": self.seed,
               "coordinates": self.coordinates if self.kind == "dirac" else None}
        return out if self.norm == 1.0 else {**out, "norm": self.norm}

    def included_mask(self) -> np.ndarray:
        """Which canaries take part: independent fair coins from the canaries' seed."""
        return np.random.default_rng([self.seed, 1]).random(self.count) < 0.5

    # --- the trainer's side (train/dp.py) ---------------------------------------------------

    def prepare(self, module: nn.Module, x: torch.Tensor, y: torch.Tensor,
                max_grad_norm: float) -> None:  # fmt: skip
        """Choose the canaries for ``module`` (before Opacus wraps it; uses no global RNG)."""
        params = [p for p in module.parameters() if p.requires_grad]
        d = sum(p.numel() for p in params)
        if self.count > d:
            raise ConfigError(f"gradient canaries: {self.count} canaries but the model has only "
                              f"{d} parameters (one coordinate per Dirac canary).")
        device = params[0].device
        coords: torch.Tensor | None = None
        directions: torch.Tensor | None = None
        if self.kind == "dirac":
            rng = np.random.default_rng([self.seed, 2])
            if self.coordinates == "random":
                picked = rng.choice(d, size=self.count, replace=False)
            else:
                quiet = _clipped_gradient_magnitude(module, x, y, max_grad_norm,
                                                    self.probe_rows, self.seed)
                tiebreak = rng.permutation(d)
                picked = np.lexsort((tiebreak, quiet))[: self.count]  # quietest first
            coords = torch.as_tensor(np.sort(picked), dtype=torch.int64)
        else:
            gen = torch.Generator(device="cpu").manual_seed(_derive(self.seed, 2))
            u = torch.randn(self.count, d, generator=gen, dtype=torch.float32)
            directions = (u / u.norm(dim=1, keepdim=True)).to(device)
        self._hook = CanaryHook(self, params, coords, directions)

    def attach(self, sample_rate: float, noise_multiplier: float, max_grad_norm: float,
               expected_batch_size: float, *, clipping: bool = True,
               shuffled_steps: int | None = None) -> CanaryHook:  # fmt: skip
        """The prepared canaries, set for one run's DP-SGD step (the
        :class:`~miaudit.train.dp_optimizers.CanaryDPOptimizer` calls the returned hook).
        ``noise_multiplier``: the claimed σ; ``max_grad_norm``: C; ``expected_batch_size``: B,
        Opacus's normaliser; ``clipping``: whether the implementation clips (the canaries'
        raw norm is cut to C); ``shuffled_steps``: steps per epoch of a shuffled-batch
        implementation (each included canary joins one random step of each epoch), None for
        Poisson sampling."""
        if self._hook is None:
            raise RuntimeError("GradientCanaries.prepare must run before attach")
        self._hook.attach(sample_rate, noise_multiplier, max_grad_norm, expected_batch_size,
                          clipping, shuffled_steps)
        return self._hook

    def finish(self) -> GradientCanaryRecord:
        """Collect the run's record into :attr:`record` (after training) and detach."""
        if self._hook is None:
            raise RuntimeError("GradientCanaries.finish called before a run")
        self.record = self._hook.finish()
        self._hook = None
        return self.record


def _derive(seed: int, stream: int) -> int:
    return int(np.random.SeedSequence([seed, stream]).generate_state(1, dtype=np.uint64)[0] >> 1)


PROBE_PERTURBATIONS = 2  # perturbed copies of the initial weights probed besides them


def _clipped_gradient_magnitude(module: nn.Module, x: torch.Tensor, y: torch.Tensor,
                                max_grad_norm: float, probe_rows: int, seed: int
                                ) -> np.ndarray:  # fmt: skip
    """How loud each flattened coordinate is: the mean |clipped per-sample gradient| over up to
    ``probe_rows`` seeded training rows, the largest of that at the initial weights and at
    ``PROBE_PERTURBATIONS`` copies with every tensor perturbed by Gaussian noise of its own
    spread (seeded). Why the copies: a ReLU unit that happens to be inactive on every row at
    initialisation has exactly zero gradients there, yet wakes up during training; a weight fed
    by an input that is blank in every row is zero in every copy (and forever)."""
    gen = torch.Generator(device="cpu").manual_seed(_derive(seed, 5))
    loud = _probe(module, x, y, max_grad_norm, probe_rows, seed)
    for _ in range(PROBE_PERTURBATIONS):
        copy = deepcopy(module)
        with torch.no_grad():
            for p in copy.parameters():
                spread = float(p.std()) if p.numel() > 1 else 0.0
                spread = spread if spread > 0 else 0.1
                p.add_(spread * torch.randn(p.shape, generator=gen).to(p.device, p.dtype))
        loud = np.maximum(loud, _probe(copy, x, y, max_grad_norm, probe_rows, seed))
    return loud


def _probe(module: nn.Module, x: torch.Tensor, y: torch.Tensor, max_grad_norm: float,
           probe_rows: int, seed: int) -> np.ndarray:  # fmt: skip
    """Mean |clipped per-sample gradient| of each flattened coordinate at ``module``'s weights
    (in eval mode, so no dropout draws from torch's global RNG)."""
    n = int(x.shape[0])
    rows = np.sort(np.random.default_rng([seed, 3]).permutation(n)[: max(1, min(probe_rows, n))])
    idx = torch.as_tensor(rows, device=x.device)
    xb, yb = x.index_select(0, idx), y.index_select(0, idx)
    names = [k for k, p in module.named_parameters() if p.requires_grad]
    params = {k: p.detach() for k, p in module.named_parameters() if p.requires_grad}
    was_training = module.training
    module.eval()
    try:
        def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            out = torch.func.functional_call(module, p, (xi[None],))
            return F.cross_entropy(out, yi[None])

        grads = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(params, xb, yb)
    finally:
        module.train(was_training)
    flat = torch.cat([grads[k].reshape(len(rows), -1) for k in names], dim=1)
    clip = (max_grad_norm / (flat.norm(dim=1, keepdim=True) + 1e-6)).clamp(max=1.0)
    result: np.ndarray = (flat * clip).abs().mean(dim=0).double().cpu().numpy()
    return result


class CanaryHook:
    """The canaries inside one run of Opacus's ``DPOptimizer.pre_step``, which runs
    ``clip_and_accumulate`` (per-sample clipping, sum into ``p.summed_grad``), ``add_noise``
    (``p.grad = p.summed_grad + N(0, σ²C²)``) and ``scale_grad`` (``p.grad /= B``).
    :class:`~miaudit.train.dp_optimizers.CanaryDPOptimizer` calls :meth:`after_clipping` at
    the end of the first, to add the canaries sampled this step to ``p.summed_grad`` (so noise
    and scaling treat them as examples), and :meth:`after_scaling` at the end of the last, to
    record the projections of the privatised ``p.grad``."""

    def __init__(self, owner: GradientCanaries, params: list[nn.Parameter],
                 coords: torch.Tensor | None, directions: torch.Tensor | None) -> None:  # fmt: skip
        self.owner, self.params = owner, params
        self.device = params[0].device
        self.sizes = [p.numel() for p in params]
        self.directions = directions
        self.included = torch.as_tensor(owner.included_mask(), device=self.device)
        self.pieces: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (param, local, ids)
        if coords is not None:
            offsets = np.cumsum([0, *self.sizes])
            c = coords.numpy()
            for k in range(len(params)):
                ids = np.flatnonzero((c >= offsets[k]) & (c < offsets[k + 1]))
                if ids.size:
                    self.pieces.append((k, torch.as_tensor(c[ids] - offsets[k], device=self.device),
                                        torch.as_tensor(ids, device=self.device)))
        self.coords = coords
        self.initial = self._project([p.detach() for p in params])
        self.rows: list[torch.Tensor] = []
        self.data_rows: list[torch.Tensor] = []
        self.sampled = torch.zeros(owner.count, dtype=torch.int64, device=self.device)
        self.gen = torch.Generator(device="cpu").manual_seed(_derive(owner.seed, 4))

    def _project(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """⟨t, u_i⟩ for every canary i, t the parameters' (or their gradients') flattening."""
        if self.directions is not None:
            flat = torch.cat([t.reshape(-1) for t in tensors])
            return self.directions @ flat.to(self.directions.dtype)
        out = torch.zeros(self.owner.count, dtype=torch.float32, device=self.device)
        for k, local, ids in self.pieces:
            out[ids] = tensors[k].reshape(-1).index_select(0, local).float()
        return out

    def attach(self, sample_rate: float, noise_multiplier: float, max_grad_norm: float,
               expected_batch_size: float, clipping: bool = True,
               shuffled_steps: int | None = None) -> None:  # fmt: skip
        self.q, self.sigma = float(sample_rate), float(noise_multiplier)
        self.C, self.B = float(max_grad_norm), float(expected_batch_size)
        # what one sampled canary adds: its raw norm, clipped to C unless the run skips it
        norm = self.owner.norm
        self.weight = self.C * (min(norm, 1.0) if clipping else norm)
        self.shuffled_steps, self.step = shuffled_steps, 0
        self.slot: torch.Tensor | None = None  # each canary's step of this epoch (shuffled)

    def after_clipping(self) -> None:
        """The rows' part d of this step (before the canaries go in), then the canaries."""
        self.data_rows.append(self._project([p.summed_grad for p in self.params]) / self.C)
        self._add()

    def after_scaling(self) -> None:
        """x of this step: the privatised, normalised gradient projected, in units of C/B."""
        grads = [p.grad for p in self.params]
        self.rows.append(self._project(grads) * (self.B / self.C))

    def _add(self) -> None:
        """The sampled canaries' vectors (norm C each) into ``p.summed_grad``."""
        k = self.shuffled_steps
        if k:  # shuffled batches: one uniformly random step of each epoch
            if self.step % k == 0:
                self.slot = torch.randint(k, (self.owner.count,), generator=self.gen)
            assert self.slot is not None  # drawn at step 0
            coin = (self.slot == self.step % k).to(self.device)
        else:
            coin = torch.rand(self.owner.count, generator=self.gen).to(self.device) < self.q
        self.step += 1
        joined = self.included & coin
        self.sampled += joined
        weight = joined.to(torch.float32) * self.weight
        if self.directions is not None:
            delta = weight @ self.directions
            for p, piece in zip(self.params, delta.split(self.sizes), strict=True):
                p.summed_grad.add_(piece.view_as(p.summed_grad).to(p.summed_grad.dtype))
            return
        for k, local, ids in self.pieces:
            p = self.params[k]
            add = torch.zeros(p.numel(), dtype=p.summed_grad.dtype, device=self.device)
            add.index_add_(0, local, weight[ids].to(add.dtype))
            p.summed_grad.add_(add.view_as(p.summed_grad))

    def finish(self) -> GradientCanaryRecord:
        final = self._project([p.detach() for p in self.params])
        m = self.owner.count
        proj = (torch.stack(self.rows).double().cpu().numpy() if self.rows
                else np.zeros((0, m)))  # fmt: skip
        data = (torch.stack(self.data_rows).double().cpu().numpy() if self.data_rows
                else np.zeros((0, m)))  # fmt: skip
        return GradientCanaryRecord(
            included=self.included.cpu().numpy().astype(bool),
            projections=proj,
            initial=self.initial.double().cpu().numpy(),
            final=final.double().cpu().numpy(),
            sampled=self.sampled.cpu().numpy().astype(np.int64),
            coordinates=None if self.coords is None else self.coords.numpy().astype(np.int64),
            kind=self.owner.kind,
            noise_multiplier=self.sigma,
            sample_rate=self.q,
            max_grad_norm=self.C,
            expected_batch_size=self.B,
            data=data if data.shape == proj.shape else None,
        )
