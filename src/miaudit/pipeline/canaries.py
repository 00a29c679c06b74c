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

import csv
import dataclasses
import io
from typing import Any

import numpy as np

from miaudit.config import RunConfig, check_white_box_target
from miaudit.config.canaries import check_canaries_section
from miaudit.config.recipes import Recipes, resolve_recipes
from miaudit.data import Dataset
from miaudit.errors import ConfigError
from miaudit.privacy import one_run_epsilon_from_counts
from miaudit.privacy.canaries import canary_kind, canary_labels, resolve_guesses
from miaudit.privacy.secrets import CanarySecret, draw_canary_texts
from miaudit.protocol import Design


def canary_delta(cfg: RunConfig, recipes: Recipes) -> float:
    """δ of the one-run bound: ``canaries.delta``, else the target recipe's DP-SGD δ, else
    ``metrics.epsilon_delta`` (what :class:`~miaudit.privacy.attack_bounds.EpsilonPlan` uses once
    the target's privacy record exists; the recipe's δ is the record's)."""
    if cfg.canaries.delta is not None:
        return float(cfg.canaries.delta)
    dp = recipes.target.dp
    return float(dp["delta"]) if dp else float(cfg.metrics.epsilon_delta)


def check_canaries(cfg: RunConfig, recipes: Recipes | None = None) -> None:
    """Before any work: can these canaries and guesses certify ε > 0 at all, even with every
    guess right? If not, :mod:`miaudit.privacy`'s ConfigError says how many guesses or canaries
    it would take (``min_guesses``, ``min_canaries``). ``recipes``: the run's, resolved by its
    plan (a study checking a config alone leaves them out: resolved here, when needed)."""
    # a RunConfig built in Python skipped the config's checks: the section's and the
    # recipe's (gradient canaries need dp) again, before any work
    cfg.canaries = check_canaries_section(cfg.canaries, cfg.design)
    check_white_box_target(cfg)
    m = cfg.canaries.count
    if not m:
        return
    from miaudit.models.text import CAUSAL_LM_ARCHITECTURES

    if recipes is None:
        recipes = resolve_recipes(cfg)
    causal = recipes.target.architecture in CAUSAL_LM_ARCHITECTURES
    if cfg.canaries.kind == "mislabelled" and causal:
        raise ConfigError("a causal LM trains on texts, not labels: mislabelled canaries "
                          "are the same texts; use canaries.kind: secret (or natural).")
    if canary_kind(cfg.canaries.kind).secret_texts and not causal:
        raise ConfigError("secret canaries are texts a causal LM may memorise (recipe."
                          "architecture gpt-small or hf-causal-lm on a text dataset); a "
                          "classifier's canaries are kind mislabelled or natural.")
    pairs = resolve_guesses(cfg.canaries.guesses, m)
    delta, alpha = canary_delta(cfg, recipes), cfg.canaries.alpha / len(pairs)
    for k_plus, k_minus in pairs:
        try:  # all r guesses right: the most any attack could show
            one_run_epsilon_from_counts(m, k_plus + k_minus, k_plus + k_minus, delta, alpha)
        except ConfigError as exc:
            split = (f" (alpha {cfg.canaries.alpha} shared by {len(pairs)} guess candidates)"
                     if len(pairs) > 1 else "")
            raise ConfigError(f"canaries (k_plus {k_plus}, k_minus {k_minus}){split}: "
                              f"{exc}") from exc


def canary_secrets(cfg: RunConfig) -> list[CanarySecret]:
    """The secret-bearing texts of ``canaries.kind: secret`` (seeded by the run's seed), one
    per canary row in split order; [] for other kinds."""
    if not cfg.canaries.count or not canary_kind(cfg.canaries.kind).secret_texts:
        return []
    return draw_canary_texts(cfg.canaries.secret_format, cfg.canaries.count, cfg.seed)


def target_dataset(dataset: Dataset, design: Design, cfg: RunConfig,
                   canary_features: np.ndarray | None = None) -> Dataset:  # fmt: skip
    """The dataset the target trains on and the bank records: ``dataset`` with the canaries'
    labels, and with ``canary_features`` (the secret texts' token ids, one row per canary) in
    the canary rows; ``dataset`` itself when nothing changes. References train on
    ``dataset``: no row of theirs changes, nor their cache keys."""
    rows = design.split.canaries
    if not rows.size:
        return dataset
    if canary_features is not None:
        features = dataset.features.copy()
        features[rows] = canary_features
        dataset = dataclasses.replace(dataset, features=features)
    labels = canary_labels(cfg.canaries.kind, dataset.labels[rows], dataset.num_classes,
                           cfg.seed)
    if np.array_equal(labels, dataset.labels[rows]):
        return dataset
    relabelled = dataset.labels.copy()
    relabelled[rows] = labels
    # a new Dataset: its fingerprint (the cache key's dataset part) covers the new labels
    return dataclasses.replace(dataset, labels=relabelled)


def canaries_csv(design: Design, dataset: Dataset, original: Dataset,
                 secrets: list[dict[str, Any]] | None = None) -> str:  # fmt: skip
    """``row,label,true_label,included``: each canary's dataset row, the label the target
    trained on (and the bank records), its true label and whether the target trained on it;
    with ``secrets`` (secret canaries: one dict per canary), their text, exposure and greedy
    extraction columns after those."""
    rows = design.split.canaries
    extra = list(secrets[0]) if secrets else []
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["row", "label", "true_label", "included", *extra])
    for i, (row, label, true, inc) in enumerate(zip(
            rows.tolist(), dataset.labels[rows].tolist(), original.labels[rows].tolist(),
            design.canary_included().tolist(), strict=True)):
        writer.writerow([row, label, true, int(inc), *(secrets[i][k] for k in extra)]
                        if secrets else [row, label, true, int(inc)])
    return buf.getvalue()


def exposure_summary(secrets: list[dict[str, Any]], included: np.ndarray) -> dict[str, Any]:
    """The secret canaries' exposure (Carlini et al. 2019) in the target's training set and
    out of it: median and maximum exposure (sampled and extrapolated) and how many secrets
    greedy decoding wrote out. Those out of the training set are the yardstick: exposure
    that members show and non-members do not is memorisation."""
    included = np.asarray(included, dtype=bool)

    def side(mask: np.ndarray) -> dict[str, Any]:
        rows = [s for s, keep in zip(secrets, mask, strict=True) if keep]
        if not rows:
            return {"canaries": 0}
        sampled = np.array([r["exposure"] for r in rows])
        extrapolated = np.array([r["exposure_extrapolated"] for r in rows])
        return {"canaries": len(rows),
                "median_exposure": round(float(np.median(sampled)), 3),
                "max_exposure": round(float(sampled.max()), 3),
                "median_exposure_extrapolated": round(float(np.nanmedian(extrapolated)), 3)
                if np.isfinite(extrapolated).any() else None,
                "extracted": int(sum(r["extracted"] for r in rows))}

    return {"included": side(included), "excluded": side(~included),
            "max_sampled_exposure": secrets[0]["max_sampled_exposure"]}


def exposure_line(summary: dict[str, Any]) -> str:
    """The secret canaries' exposure in one sentence (the run's terminal output)."""
    inside, outside = summary["included"], summary["excluded"]

    def part(side: dict[str, Any], where: str) -> str:
        if not side["canaries"]:
            return f"none {where}"
        return (f"{side['canaries']} {where}: median {side['median_exposure']:.2f} bits, max "
                f"{side['max_exposure']:.2f}, {side['extracted']} written out by greedy "
                "decoding")

    return ("Secret canaries' exposure (Carlini et al. 2019; sampled, at most "
            f"{summary['max_sampled_exposure']:.2f} bits): {part(inside, 'in training')}; "
            f"{part(outside, 'out of it (the yardstick)')}; per canary in canaries.csv.")
