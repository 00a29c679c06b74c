"""Shared machinery for attacks that learn a scorer from shadow models.

Shokri et al. (S&P 2017) and RAPID (He et al., CCS 2024) train an attack model on shadow models
whose membership the attacker knows. In a bank, every reference model can play shadow: reference
r becomes a shadow target through `TargetView.as_shadow(r)` (leave-one-out: its features are
computed against the *other* references, and the evaluated target is excluded entirely), and its
labels are `view.reference_membership[r]` on the samples where r is available to the view
(`reference_available[r]`: elsewhere it was set aside, and its label there would say something
about the target's membership; docs/algorithms.md §11). Nothing here reads the evaluated
target's scores to choose anything: the standardisation is fitted on shadow training rows
only, and the epoch (early stopping) and the public-data threshold are chosen on HELD-OUT
shadow rows, which lie on public samples only (not audited, not population, not canaries) and
were never trained on.

A featurizer maps a view to `(features [N, F], scorable [N])`: the features its target model
yields for every bank sample, and where they are defined (e.g. RAPID needs an OUT reference).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

from miaudit.attacks.registry import Scored, ThresholdRows
from miaudit.attacks.view import TargetView
from miaudit.errors import AttackError
from miaudit.runtime.progress import progress_bar
from miaudit.runtime.threads import cpu_threads

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


def build_shadow_split(
    view: TargetView,
    featurize: Featurizer,
    *,
    n_shadows: int | None = None,
    max_train_samples: int = 20_000,
    seed: int = 0,
    min_shadows: int = 1,
    holdout: float = 0.0,
    max_holdout_samples: int = 5_000,
) -> tuple[ShadowSet, ShadowSet]:
    """Training rows and held-out rows, pooled over shadows (featurized once each).

    Held out first, per shadow r: `holdout` of the smaller of its public members and public
    non-members (`TargetView.public`), as many of each, at most
    ceil(max_holdout_samples / n_shadows) rows (seeded). They choose the epoch and the
    public-data threshold, so they never lie on an audited, population or canary sample and
    are never trained on. Training rows are drawn from the rest as `build_shadow_set`
    describes; with `holdout` 0 nothing is held out and they are `build_shadow_set`'s.
    """
    if not 0.0 <= holdout < 1.0:
        raise AttackError(f"holdout={holdout} is invalid: use a fraction in [0, 1).")
    shadows = choose_shadows(view, n_shadows, min_shadows)
    rng = np.random.default_rng(seed)
    held_rng = np.random.default_rng([seed, 1])  # a stream of its own
    quota = max(2, -(-int(max_train_samples) // shadows.size))
    held_quota = -(-int(max_holdout_samples) // shadows.size)
    public = view.public
    parts: list[tuple[np.ndarray, ...]] = []
    held: list[tuple[np.ndarray, ...]] = []
    for r in shadows:
        features, scorable = featurize(view.as_shadow(int(r)))
        membership = view.reference_membership[r]
        usable = scorable & ~view.population & view.reference_available[r]
        if holdout > 0:
            sides = [np.flatnonzero(usable & public & side) for side in (membership, ~membership)]
            k = min(int(holdout * min(a.size for a in sides)), held_quota // 2)
            if k > 0:
                rows = np.concatenate([held_rng.choice(a, k, replace=False) for a in sides])
                held.append(_rows(features, membership, r, rows))
                usable = usable.copy()
                usable[rows] = False
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
        parts.append(_rows(features, membership, r, rows))
    if not parts:
        raise AttackError(
            "no shadow model has both members and non-members among the samples it can score; "
            "the bank's reference membership gives the scorer nothing to learn from."
        )
    features, labels, shadow, sample = (np.concatenate(p) for p in zip(*parts, strict=True))
    if labels.size > max_train_samples:
        keep = np.sort(rng.choice(labels.size, int(max_train_samples), replace=False))
        features, labels, shadow, sample = features[keep], labels[keep], shadow[keep], sample[keep]
    train = ShadowSet(np.asarray(features, dtype=np.float64), labels, shadow, sample)
    if not held:
        width = train.features.shape[1]
        empty = np.zeros(0, dtype=int)
        return train, ShadowSet(np.zeros((0, width)), np.zeros(0), empty, empty)
    columns = (np.concatenate(p) for p in zip(*held, strict=True))
    h_features, h_labels, h_shadow, h_sample = columns
    return train, ShadowSet(np.asarray(h_features, dtype=np.float64), h_labels, h_shadow, h_sample)


def _rows(
    features: np.ndarray, membership: np.ndarray, r: int, rows: np.ndarray
) -> tuple[np.ndarray, ...]:
    return features[rows], membership[rows].astype(np.float64), np.full(rows.size, r), rows


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
    labelled by `view.reference_membership[r]` (where r is available to the view). Each shadow
    is balanced by subsampling its larger class (seeded), then contributes at most
    ceil(max_train_samples / n_shadows) rows (half members), so memory stays bounded and each
    shadow weighs the same.
    """
    return build_shadow_split(view, featurize, n_shadows=n_shadows,
                              max_train_samples=max_train_samples, seed=seed,
                              min_shadows=min_shadows)[0]  # fmt: skip


_SCORE_CHUNK = 16_384  # rows scored at once; bounds the float64 activations (~70 MB)


def _network(n_in: int, hidden: Sequence[int], dropout: Sequence[float]) -> torch.nn.Sequential:
    import torch

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
    epochs: int = 0  # epochs whose weights it holds (the best one under early stopping)

    def logit(self, features: np.ndarray) -> np.ndarray:
        """Member log-odds, float64 [rows]; NaN for rows with a NaN feature."""
        import torch

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
    validation: tuple[np.ndarray, np.ndarray] | None = None,
    patience: int = 0,
) -> MLPScorer:
    """Train an MLP with BCE and Adam, seeded; leaves torch's global RNG state untouched.

    Without `validation` (or with `patience` 0) it trains the fixed `epochs`. With held-out
    shadow rows `validation` = (features, labels) and `patience` > 0 it stops early: after each
    epoch the BCE on those rows, and once `patience` epochs in a row bring no new best it stops
    and keeps the best epoch's weights (at most `epochs`). The held-out rows are the caller's
    to keep apart from anything evaluated (`build_shadow_split`). ``desc`` labels its progress
    bar over epochs (:mod:`miaudit.runtime.progress`)."""
    import torch

    features = _checked(features, labels, "training")
    mean = features.mean(axis=0)
    scale = features.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)  # constant columns pass through centred
    x = torch.from_numpy(((features - mean) / scale).astype(np.float32))
    y = torch.from_numpy(np.asarray(labels, dtype=np.float32))
    stop_early = validation is not None and patience > 0 and len(validation[1]) > 0
    if stop_early:
        assert validation is not None  # stop_early requires it
        v_features = _checked(validation[0], validation[1], "held-out")
        vx = torch.from_numpy(((v_features - mean) / scale).astype(np.float32))
        vy = torch.from_numpy(np.asarray(validation[1], dtype=np.float32))
    n = x.shape[0]
    best_loss, best_state, best_epoch, since_best = np.inf, None, int(epochs), 0
    with torch.random.fork_rng(devices=[]), cpu_threads(1):
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        net = _network(x.shape[1], hidden, dropout)
        # fused: one kernel per step for all parameters (~10% less time per step than
        # foreach on one core, measured on RAPID's network).
        opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay, fused=True)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        # Display only: the bar draws no random numbers, so the scorer is the same without it.
        with progress_bar(int(epochs), desc, "epoch", quick=True) as bar:
            for epoch in range(1, int(epochs) + 1):
                net.train()
                order = torch.randperm(n, generator=gen)
                # one gather per epoch, then contiguous slices: the batches of a per-step
                # gather, at less cost per step
                x_epoch, y_epoch = x[order], y[order]
                for start in range(0, n, batch_size):
                    opt.zero_grad(set_to_none=True)
                    batch = slice(start, start + batch_size)
                    loss_fn(net(x_epoch[batch]).squeeze(1), y_epoch[batch]).backward()
                    opt.step()
                bar.update(1)
                if not stop_early:
                    continue
                net.eval()
                with torch.no_grad():
                    held_loss = float(loss_fn(net(vx).squeeze(1), vy))
                if held_loss < best_loss:
                    best_loss, best_epoch, since_best = held_loss, epoch, 0
                    best_state = copy.deepcopy(net.state_dict())
                else:
                    since_best += 1
                    if since_best >= patience:
                        break
        if best_state is not None:
            net.load_state_dict(best_state)
    scorer = copy.deepcopy(net).double().eval()
    return MLPScorer(scorer, mean, scale, best_epoch)


def _checked(features: np.ndarray, labels: np.ndarray, what: str) -> np.ndarray:
    features = np.asarray(features, dtype=np.float64)
    if features.ndim != 2 or features.shape[0] != len(labels) or features.shape[0] == 0:
        raise AttackError(f"scorer {what} data has shape {features.shape}; need [rows>0, F].")
    if not np.isfinite(features).all():
        raise AttackError(f"scorer {what} features hold NaN/inf; impute or drop them first.")
    return features


def threshold_rows(held_out: ShadowSet, scores: np.ndarray) -> ThresholdRows:
    """The held-out shadow rows' scores and membership, for Watson's public-data threshold
    (`pipeline.evaluate` uses them instead of running the attack again)."""
    return ThresholdRows(np.asarray(scores, dtype=np.float64), held_out.labels.astype(bool),
                         held_out.sample.astype(np.int64))  # fmt: skip


def scorer_attack(
    view: TargetView,
    featurize: Featurizer,
    *,
    n_shadows: int | None,
    max_train_samples: int,
    seed: int,
    min_shadows: int = 1,
    preprocess: Preprocessor | None = None,
    holdout: float = 0.0,
    patience: int = 0,
    **train_params: Any,
) -> Scored:
    """Learn a scorer on shadow rows, then score the view's target: member log-odds per sample,
    NaN where the featurizer cannot score, with the held-out rows' scores for the threshold.

    `holdout` > 0 keeps that share of the shadows' public rows apart (`build_shadow_split`):
    early stopping (`patience` > 0) and the public-data threshold use them, nothing trains on
    them. `preprocess` (e.g. imputation) is fitted on the training rows only. `train_params` go
    to :func:`train_scorer` (`desc` included)."""
    rows, held_out = build_shadow_split(
        view,
        featurize,
        n_shadows=n_shadows,
        max_train_samples=max_train_samples,
        seed=seed,
        min_shadows=min_shadows,
        holdout=holdout,
    )
    transform = preprocess(rows.features) if preprocess is not None else _identity
    held_features = transform(held_out.features)
    scorer = train_scorer(transform(rows.features), rows.labels, seed=seed,
                          validation=(held_features, held_out.labels), patience=patience,
                          **train_params)  # fmt: skip
    features, scorable = featurize(view)
    scores = scorer.logit(transform(features))
    scores[~scorable] = np.nan
    if holdout == 0:
        return Scored(scores)  # no held-out rows: the pipeline reruns the attack for it
    return Scored(scores, threshold_rows(held_out, scorer.logit(held_features)))


def _identity(features: np.ndarray) -> np.ndarray:
    return features
