"""Shared machinery for attacks that learn a scorer from shadow models.

Shokri et al. (S&P 2017) and RAPID (He et al., CCS 2024) train an attack model on shadow models
whose membership the attacker knows. In a bank, every reference model can play shadow: reference
r becomes a shadow target through `TargetView.as_shadow(r)` (leave-one-out: its features are
computed against the *other* references, and the evaluated target is excluded entirely), and its
labels are `view.reference_membership[r]`. Nothing here reads the evaluated target's scores to
choose anything: the epoch count is fixed and the standardisation is fitted on shadow rows only.

A featurizer maps a view to `(features [N, F], scorable [N])`: the features its target model
yields for every bank sample, and where they are defined (e.g. RAPID needs an OUT reference).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from miaudit.attacks.base import TargetView
from miaudit.errors import AttackError
from miaudit.progress import progress_bar
from miaudit.threads import cpu_threads

Featurizer = Callable[[TargetView], tuple[np.ndarray, np.ndarray]]
# Fitted on shadow features; returns the transform applied to shadow and target features alike.
Preprocessor = Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]]


@dataclass
class ShadowSet:
    """Attack-training rows pooled over shadow models."""

    features: np.ndarray  # float64 [rows, F]; may hold NaN where the featurizer allows it
    labels: np.ndarray  # float64 [rows]: 1 = member of the shadow the row comes from
    shadow: np.ndarray  # int [rows]: reference index (in the parent view) of that shadow
    sample: np.ndarray  # int [rows]: bank index of the sample

    def __len__(self) -> int:
        return int(self.labels.size)


def choose_shadows(view: TargetView, n_shadows: int | None, minimum: int = 1) -> np.ndarray:
    """Reference indices that act as shadows: the first `n_shadows` (all when None)."""
    available = view.n_references
    if available < minimum:
        raise AttackError(
            f"needs at least {minimum} shadow/reference model(s) with known membership; "
            f"the bank has {available} besides the target. Train more reference models."
        )
    count = available if n_shadows is None else int(n_shadows)
    if not minimum <= count <= available:
        raise AttackError(
            f"n_shadows={n_shadows} is invalid: use between {minimum} and {available} "
            "(the number of references), or None for all."
        )
    return np.arange(count)


def build_shadow_set(
    view: TargetView,
    featurize: Featurizer,
    *,
    n_shadows: int | None = None,
    max_train_samples: int = 20_000,
    seed: int = 0,
    min_shadows: int = 1,
) -> ShadowSet:
    """Featurize every shadow view and pool its rows, balanced and capped.

    Rows of shadow r: non-population samples the featurizer can score on `view.as_shadow(r)`,
    labelled by `view.reference_membership[r]`. Each shadow is balanced by subsampling its larger
    class (seeded), then contributes at most ceil(max_train_samples / n_shadows) rows (half
    members), so memory stays bounded and each shadow weighs the same.
    """
    shadows = choose_shadows(view, n_shadows, min_shadows)
    rng = np.random.default_rng(seed)
    quota = max(2, -(-int(max_train_samples) // shadows.size))
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for r in shadows:
        features, scorable = featurize(view.as_shadow(int(r)))
        membership = view.reference_membership[r]
        usable = scorable & ~view.population
        members = np.flatnonzero(usable & membership)
        non_members = np.flatnonzero(usable & ~membership)
        per_side = min(members.size, non_members.size, quota // 2)
        if per_side == 0:
            continue  # this shadow has no member or no non-member to learn from
        rows = np.concatenate(
            [
                rng.choice(members, per_side, replace=False),
                rng.choice(non_members, per_side, replace=False),
            ]
        )
        parts.append(
            (features[rows], membership[rows].astype(np.float64), np.full(rows.size, r), rows)
        )
    if not parts:
        raise AttackError(
            "no shadow model has both members and non-members among the samples it can score; "
            "the bank's reference membership gives the scorer nothing to learn from."
        )
    features, labels, shadow, sample = (np.concatenate(p) for p in zip(*parts, strict=True))
    if labels.size > max_train_samples:
        keep = np.sort(rng.choice(labels.size, int(max_train_samples), replace=False))
        features, labels, shadow, sample = features[keep], labels[keep], shadow[keep], sample[keep]
    return ShadowSet(np.asarray(features, dtype=np.float64), labels, shadow, sample)


_SCORE_CHUNK = 16_384  # rows scored at once; bounds the float64 activations (~70 MB)


def _network(n_in: int, hidden: Sequence[int], dropout: Sequence[float]) -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    width = n_in
    for i, h in enumerate(hidden):
        layers += [torch.nn.Linear(width, int(h)), torch.nn.ReLU()]
        if i < len(dropout) and dropout[i] > 0:
            layers.append(torch.nn.Dropout(float(dropout[i])))
        width = int(h)
    layers.append(torch.nn.Linear(width, 1))  # a logit; the sigmoid lives in the loss
    return torch.nn.Sequential(*layers)


@dataclass
class MLPScorer:
    """A trained scorer: standardisation fitted on shadow rows, then an MLP giving a logit."""

    network: torch.nn.Sequential  # float64 copy, in eval mode
    mean: np.ndarray  # [F]
    scale: np.ndarray  # [F]

    def logit(self, features: np.ndarray) -> np.ndarray:
        """Member log-odds, float64 [rows]; NaN for rows with a NaN feature."""
        features = np.asarray(features, dtype=np.float64)
        out = np.full(features.shape[0], np.nan)
        ok = np.isfinite(features).all(axis=1)
        rows = np.flatnonzero(ok)
        with torch.no_grad(), cpu_threads(1):
            for start in range(0, rows.size, _SCORE_CHUNK):
                chunk = rows[start : start + _SCORE_CHUNK]
                x = torch.from_numpy((features[chunk] - self.mean) / self.scale)
                out[chunk] = self.network(x).squeeze(1).numpy()
        return out


def train_scorer(
    features: np.ndarray,
    labels: np.ndarray,
    *,
    hidden: Sequence[int] = (512, 256, 128),
    dropout: Sequence[float] = (0.2, 0.2),
    lr: float = 2e-4,
    weight_decay: float = 5e-4,
    epochs: int = 150,
    batch_size: int = 128,
    seed: int = 0,
    desc: str = "training the attack scorer",
) -> MLPScorer:
    """Train an MLP with BCE and Adam for a fixed number of epochs (no early stopping, no
    selection on anything evaluated). Seeded; leaves torch's global RNG state untouched.
    ``desc`` labels its progress bar over epochs (:mod:`miaudit.progress`)."""
    features = np.asarray(features, dtype=np.float64)
    if features.ndim != 2 or features.shape[0] != len(labels) or features.shape[0] == 0:
        raise AttackError(f"scorer training data has shape {features.shape}; need [rows>0, F].")
    if not np.isfinite(features).all():
        raise AttackError("scorer training features hold NaN/inf; impute or drop them first.")
    mean = features.mean(axis=0)
    scale = features.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)  # constant columns pass through centred
    x = torch.from_numpy(((features - mean) / scale).astype(np.float32))
    y = torch.from_numpy(np.asarray(labels, dtype=np.float32))
    n = x.shape[0]
    with torch.random.fork_rng(devices=[]), cpu_threads(1):
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        net = _network(x.shape[1], hidden, dropout)
        # foreach: one op per step for all parameters; the same numbers as the per-tensor
        # loop (checked bit for bit on RAPID's network), ~8% less time per step on one core.
        opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay, foreach=True)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        net.train()
        # Display only: the bar draws no random numbers, so the scorer is the same without it.
        with progress_bar(int(epochs), desc, "epoch", quick=True) as bar:
            for _ in range(int(epochs)):
                order = torch.randperm(n, generator=gen)
                for start in range(0, n, batch_size):
                    idx = order[start : start + batch_size]
                    opt.zero_grad(set_to_none=True)
                    loss_fn(net(x[idx]).squeeze(1), y[idx]).backward()
                    opt.step()
                bar.update(1)
    scorer = copy.deepcopy(net).double().eval()
    return MLPScorer(scorer, mean, scale)


def scorer_attack(
    view: TargetView,
    featurize: Featurizer,
    *,
    n_shadows: int | None,
    max_train_samples: int,
    seed: int,
    min_shadows: int = 1,
    preprocess: Preprocessor | None = None,
    **train_params: Any,
) -> np.ndarray:
    """Learn a scorer on shadow rows, then score the view's target: member log-odds per sample,
    NaN where the featurizer cannot score. `preprocess` (e.g. imputation) is fitted on the
    shadow rows only. `train_params` go to :func:`train_scorer` (`desc` included)."""
    rows = build_shadow_set(
        view,
        featurize,
        n_shadows=n_shadows,
        max_train_samples=max_train_samples,
        seed=seed,
        min_shadows=min_shadows,
    )
    transform = preprocess(rows.features) if preprocess is not None else _identity
    scorer = train_scorer(transform(rows.features), rows.labels, seed=seed, **train_params)
    features, scorable = featurize(view)
    scores = scorer.logit(transform(features))
    scores[~scorable] = np.nan
    return scores


def _identity(features: np.ndarray) -> np.ndarray:
    return features
