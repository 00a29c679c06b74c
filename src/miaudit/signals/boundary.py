"""Label-only distance to the decision boundary, for the channel ``boundary_distance``.

Choquette-Choo et al. ("Label-Only Membership Inference Attacks", ICML 2021) score a sample by
how far it lies from the target's decision boundary, found with HopSkipJump (Chen, Jordan &
Wainwright, "HopSkipJumpAttack: A Query-Efficient Decision-Based Attack", IEEE S&P 2020), an
attack that sees only predicted labels. This module implements untargeted L2 HopSkipJump in
torch, batched over samples, calling the model only as ``module(x).argmax(-1)``:

1. initialise each correctly classified sample from the nearest point of a pool of dataset
   rows the model labels differently (or, failing that, uniform noise spanning the features'
   range), and binary-search the segment to the boundary;
2. repeat ``steps`` times: estimate the boundary's normal at the current boundary point by
   Monte-Carlo sign estimates over ``estimates`` random unit directions (with HSJA's baseline
   correction), step along it by the geometric step-size search of HSJA, and binary-search back
   to the boundary between the input and the new point.

The distance returned is the L2 distance (over all input features) between the input and the
closest adversarial point found, so it is an *upper bound* of the true distance: more steps or
estimates can only tighten it. Samples the model already misclassifies get 0. No clipping to
a data range is applied unless ``clip`` is given.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from miaudit.runtime.malloc import keep_freed_memory
from miaudit.signals.bank import QUERIES_SUFFIX

CHANNEL = "boundary_distance"


def _predict(module: torch.nn.Module, x: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    with torch.no_grad():
        return module(x.view(-1, *shape)).argmax(dim=-1)


def _binary_search(
    adversarial: _Oracle, x0: torch.Tensor, xa: torch.Tensor, steps: int
) -> torch.Tensor:
    """Boundary points between x0 (not adversarial) and xa (adversarial), on xa's side."""
    low = torch.zeros(len(x0), 1, dtype=x0.dtype)
    high = torch.ones(len(x0), 1, dtype=x0.dtype)
    for _ in range(steps):
        mid = (low + high) / 2
        hit = adversarial(x0 + mid * (xa - x0)).unsqueeze(1)
        high = torch.where(hit, mid, high)
        low = torch.where(hit, low, mid)
    return x0 + high * (xa - x0)


class _Oracle:
    """phi(x) = the model's label differs from y (per sample), counting queries.

    Every call asks for the labels of the same number of inputs per sample of the batch (all
    b samples, or `estimates` probes of each), so `queries` is the count for each sample."""

    def __init__(self, module: torch.nn.Module, y: torch.Tensor, shape: tuple[int, ...]):
        self.module, self.y, self.shape = module, y, shape
        self.queries = 0

    def __call__(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        y = self.y if y is None else y
        self.queries += len(x) // len(self.y)
        return _predict(self.module, x, self.shape) != y


def boundary_channels(
    modules: list[torch.nn.Module], features: np.ndarray, labels: np.ndarray, rows: np.ndarray,
    **options: object,
) -> dict[str, np.ndarray]:
    """The bank channels of HopSkipJump for each module: `boundary_distance` float64 [M, R]
    and `boundary_distance_queries` (the label queries each sample's search cost), for the
    cost column. `options` go to `boundary_distances`."""
    distances = np.empty((len(modules), len(rows)))
    queries = np.empty((len(modules), len(rows)), dtype=np.int64)
    for k, module in enumerate(modules):
        distances[k] = boundary_distances(
            module, features, labels, rows, queries=queries[k], **options  # type: ignore[arg-type]
        )
    return {CHANNEL: distances, CHANNEL + QUERIES_SUFFIX: queries.astype(np.float64)}


def _clamp(x: torch.Tensor, clip: tuple[float, float] | None) -> torch.Tensor:
    return x if clip is None else x.clamp(*clip)


def boundary_distances(
    module: torch.nn.Module,
    features: np.ndarray,
    labels: np.ndarray,
    rows: np.ndarray,
    *,
    steps: int = 10,
    estimates: int = 50,
    search_steps: int = 25,
    pool: int = 512,
    seed: int = 0,
    clip: tuple[float, float] | None = None,
    device: str = "cpu",
    batch_size: int = 256,
    queries: np.ndarray | None = None,
) -> np.ndarray:
    """HopSkipJump L2 distance to `module`'s decision boundary per row, float64 [len(rows)].

    `features` [n, ...] and `labels` [n] are the whole dataset (rows not in `rows` serve as
    initialisation candidates too); 0 for rows the model misclassifies. Deterministic for a
    given `seed`. Cost per sample: about steps * (estimates + 2 * search_steps + 10) label
    queries; when `queries` (int64 [len(rows)]) is given, it receives each row's count (1 for a
    misclassified row: the check; the shared initialisation pool's labels are not counted).
    """
    module = module.eval().to(device)
    rows = np.asarray(rows, dtype=np.int64)
    shape = tuple(features.shape[1:])
    dim = int(np.prod(shape))
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    flat = torch.from_numpy(np.asarray(features, dtype=np.float32).reshape(len(features), dim))
    lo, hi = (flat.min().item(), flat.max().item()) if clip is None else clip
    # Initialisation pool: dataset rows with the model's labels, drawn once.
    take = torch.randperm(len(flat), generator=gen)[: min(pool, len(flat))]
    pool_x = flat[take].to(device)
    pool_pred = torch.cat([_predict(module, chunk, shape) for chunk in pool_x.split(1024)])
    out = np.zeros(len(rows), dtype=np.float64)
    with keep_freed_memory():  # each step reallocates the same probe batches (~40 MiB)
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            x0 = flat[batch].to(device)
            y = torch.from_numpy(np.asarray(labels)[batch].astype(np.int64)).to(device)
            correct = _predict(module, x0, shape) == y
            used = np.ones(len(batch), dtype=np.int64)  # the label check
            if correct.any():
                found, searched = _hsja(
                    module, x0[correct], y[correct], shape, pool_x, pool_pred, lo, hi, gen,
                    steps, estimates, search_steps, clip,
                )
                hit = correct.cpu().numpy()
                out[start : start + len(batch)][hit] = found
                used[hit] += searched
            if queries is not None:
                queries[start : start + len(batch)] = used
    return out


def _hsja(
    module: torch.nn.Module,
    x0: torch.Tensor,
    y: torch.Tensor,
    shape: tuple[int, ...],
    pool_x: torch.Tensor,
    pool_pred: torch.Tensor,
    lo: float,
    hi: float,
    gen: torch.Generator,
    steps: int,
    estimates: int,
    search_steps: int,
    clip: tuple[float, float] | None,
) -> tuple[np.ndarray, int]:
    """Distances of the batch, float64 [b], and the label queries made for each sample."""
    b, dim = x0.shape
    device = x0.device
    adversarial = _Oracle(module, y, shape)
    # 1. initial adversarial point: nearest differently-labelled pool point, else noise.
    gaps = torch.cdist(x0, pool_x)
    gaps = torch.where(pool_pred.unsqueeze(0) != y.unsqueeze(1), gaps, torch.inf)
    nearest = gaps.argmin(dim=1)
    start = pool_x[nearest].clone()
    missing = torch.isinf(gaps.min(dim=1).values)
    for _ in range(100):  # noise for samples whose label no pool point differs from
        if not missing.any():
            break
        noise = lo + (hi - lo) * torch.rand(b, dim, generator=gen).to(device)
        start[missing] = noise[missing]
        missing = missing & ~adversarial(start)
    ok = ~missing  # an adversarial start was found (else see the cap below)
    xb = _binary_search(adversarial, x0, start, search_steps)
    dist = (xb - x0).norm(dim=1)
    best = torch.where(ok, dist, torch.full_like(dist, float("inf")))
    # 2. HopSkipJump iterations (theta and delta as in Chen et al., Alg. 1, L2).
    theta = 1.0 / (math.sqrt(dim) * dim)
    for t in range(1, steps + 1):
        delta = (math.sqrt(dim) * theta * dist).clamp_min(1e-12)  # [b]
        u = torch.randn(b, estimates, dim, generator=gen).to(device)
        u = u / u.norm(dim=2, keepdim=True)
        probe = _clamp(xb.unsqueeze(1) + delta.view(b, 1, 1) * u, clip)
        u = (probe - xb.unsqueeze(1)) / delta.view(b, 1, 1)
        signs = adversarial(probe.reshape(b * estimates, dim), y.repeat_interleave(estimates))
        signs = signs.view(b, estimates).to(x0.dtype) * 2 - 1
        mean = signs.mean(dim=1, keepdim=True)
        centred = torch.where(mean.abs() == 1, signs, signs - mean)  # baseline (HSJA eq. 16)
        grad = (centred.unsqueeze(2) * u).mean(dim=1)
        grad = grad / grad.norm(dim=1, keepdim=True).clamp_min(1e-12)
        # Geometric step-size search: halve until the step stays adversarial.
        eps = dist / math.sqrt(t)
        moved = xb.clone()
        pending = torch.ones(b, dtype=torch.bool, device=device)
        for _ in range(15):
            trial = _clamp(xb + eps.unsqueeze(1) * grad, clip)
            hit = adversarial(trial) & pending
            moved[hit] = trial[hit]
            pending &= ~hit
            if not pending.any():
                break
            eps = torch.where(pending, eps / 2, eps)
        xb = _binary_search(adversarial, x0, moved, search_steps)
        dist = (xb - x0).norm(dim=1)
        best = torch.minimum(best, torch.where(ok, dist, best))
    # A sample no start was found for (the model predicts y everywhere tried) has no finite
    # boundary estimate; report the largest distance seen over the batch as a conservative cap.
    finite = torch.isfinite(best)
    if not finite.all():
        cap = best[finite].max() if finite.any() else torch.tensor(float(hi - lo) * dim**0.5)
        best = torch.where(finite, best, cap)
    return best.double().cpu().numpy(), adversarial.queries
