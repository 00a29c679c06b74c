"""The canaries of a run (one-run auditing, docs/algorithms.md §16): checked before the
dataset loads, given their labels, and recorded.

The rows and the target's inclusion come from :mod:`miaudit.protocol` (``make_split``,
``make_design``); the labels from :mod:`miaudit.privacy.canaries`' kinds. The target trains on a
copy
of the dataset carrying the canaries' labels: its fingerprint (and so the target's cache key)
changes with mislabelled labels, and the rows it trains on change with the inclusion. The
references train on the dataset itself, on rows no canary touches: their keys do not change.
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np

from miaudit.config import RunConfig
from miaudit.data import Dataset
from miaudit.errors import ConfigError
from miaudit.pipeline.models import resolve_recipes
from miaudit.privacy import one_run_epsilon_from_counts
from miaudit.privacy.canaries import canary_labels, resolve_guesses
from miaudit.protocol import Design


def canary_delta(cfg: RunConfig) -> float:
    """δ of the one-run bound: ``canaries.delta``, else the target recipe's DP-SGD δ, else
    ``metrics.epsilon_delta`` (what :class:`~miaudit.privacy.attack_bounds.EpsilonPlan` uses once
    the target's privacy record exists; the recipe's δ is the record's)."""
    if cfg.canaries.delta is not None:
        return float(cfg.canaries.delta)
    dp = resolve_recipes(cfg).target.dp
    return float(dp["delta"]) if dp else float(cfg.metrics.epsilon_delta)


def check_canaries(cfg: RunConfig) -> None:
    """Before any work: can these canaries and guesses certify ε > 0 at all, even with every
    guess right? If not, :mod:`miaudit.privacy`'s ConfigError says how many guesses or canaries
    it would take (``min_guesses``, ``min_canaries``)."""
    m = cfg.canaries.count
    if not m:
        return
    if cfg.canaries.kind == "mislabelled":
        from miaudit.models.text import CAUSAL_LM_ARCHITECTURES

        if resolve_recipes(cfg).target.architecture in CAUSAL_LM_ARCHITECTURES:
            raise ConfigError("a causal LM trains on texts, not labels: mislabelled canaries "
                              "are the same texts; use canaries.kind: natural.")
    pairs = resolve_guesses(cfg.canaries.guesses, m)
    delta, alpha = canary_delta(cfg), cfg.canaries.alpha / len(pairs)
    for k_plus, k_minus in pairs:
        try:  # all r guesses right: the most any attack could show
            one_run_epsilon_from_counts(m, k_plus + k_minus, k_plus + k_minus, delta, alpha)
        except ConfigError as exc:
            split = (f" (alpha {cfg.canaries.alpha} shared by {len(pairs)} guess candidates)"
                     if len(pairs) > 1 else "")
            raise ConfigError(f"canaries (k_plus {k_plus}, k_minus {k_minus}){split}: "
                              f"{exc}") from exc


def target_dataset(dataset: Dataset, design: Design, cfg: RunConfig) -> Dataset:
    """The dataset the target trains on and the bank records: ``dataset`` with the canaries'
    labels (``dataset`` itself when there are no canaries or they keep their labels)."""
    rows = design.split.canaries
    if not rows.size:
        return dataset
    labels = canary_labels(cfg.canaries.kind, dataset.labels[rows], dataset.num_classes,
                           cfg.seed)
    if np.array_equal(labels, dataset.labels[rows]):
        return dataset
    relabelled = dataset.labels.copy()
    relabelled[rows] = labels
    # a new Dataset: its fingerprint (the cache key's dataset part) covers the new labels
    return dataclasses.replace(dataset, labels=relabelled)


def canaries_csv(design: Design, dataset: Dataset, original: Dataset) -> str:
    """``row,label,true_label,included``: each canary's dataset row, the label the target
    trained on (and the bank records), its true label and whether the target trained on it."""
    rows = design.split.canaries
    buf = io.StringIO()
    buf.write("row,label,true_label,included\n")
    for row, label, true, inc in zip(rows.tolist(), dataset.labels[rows].tolist(),
                                     original.labels[rows].tolist(),
                                     design.canary_included().tolist(), strict=True):
        buf.write(f"{row},{label},{true},{int(inc)}\n")
    return buf.getvalue()
