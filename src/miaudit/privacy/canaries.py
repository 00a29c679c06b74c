"""Canaries for one-run auditing (Steinke, Nasr & Jagielski 2023; docs/algorithms.md §16).

A run with ``canaries: {count: m, ...}`` carves m dataset rows outside the audit, public and
population pools (:func:`miaudit.protocol.make_split`); each is included in the *target's*
training set independently with probability ½ (:func:`miaudit.protocol.make_design`) and never
in a reference's. This module holds what is canary-specific and needs no model:

- the canary kinds, a registry (``canaries.kind``): how a canary's label is made;
- the guesses (``canaries.guesses``): the (k₊, k₋) pairs, fixed before any inclusion is seen.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from miaudit.errors import ConfigError
from miaudit.registry import Registry

# Default guesses: IN for the top tenth of the canaries' scores, OUT for the bottom tenth.
DEFAULT_GUESS_FRACTION = 0.1


@dataclass(frozen=True)
class CanaryKind:
    """A registered kind: ``relabel(labels, num_classes, rng)`` gives the canaries' labels."""

    name: str
    description: str
    relabel: Callable[[np.ndarray, int, np.random.Generator], np.ndarray]
    # the rows' texts are replaced by secret-bearing texts (causal LMs; canaries.secret_format)
    secret_texts: bool = False
    # not rows at all: vectors in DP-SGD's gradients (kind gradient, white-box; relabel unused)
    white_box: bool = False


_KINDS: Registry[CanaryKind] = Registry(
    "canary kind", ConfigError, unknown="canaries.kind must be one of {known}; got {name!r}.{hint}",
    ordered=False,
)


def register_canary_kind(
    name: str, description: str, secret_texts: bool = False, white_box: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a canary kind under ``name`` (run configs name it in ``canaries.kind``)."""
    return _KINDS.decorator(
        name, lambda relabel: CanaryKind(name, description, relabel, secret_texts, white_box))


def canary_kind_names() -> list[str]:
    return _KINDS.names()


def canary_kind(name: str) -> CanaryKind:
    return _KINDS.get(name)


@register_canary_kind("mislabelled", "the true label replaced by a seeded uniformly random "
                                     "other class (an outlier the model must memorise)")
def _mislabelled(labels: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    if num_classes < 2:
        raise ConfigError("mislabelled canaries need at least 2 classes; use kind: natural.")
    # a shift of 1..C-1 classes: uniform over the other classes, never the true one
    return (labels + rng.integers(1, num_classes, size=labels.shape)) % num_classes


@register_canary_kind("natural", "the rows as they are, with their true labels")
def _natural(labels: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    result: np.ndarray = labels.copy()
    return result


@register_canary_kind(
    "secret", "text canaries for causal LMs (Carlini et al. 2019, \"The Secret Sharer\"): "
    "each row's text replaced by a seeded secret-bearing text of canaries.secret_format, e.g. "
    "'my account number is 4829 3301'; exposure and greedy extraction reported per canary",
    secret_texts=True)
def _secret(labels: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    result: np.ndarray = labels.copy()
    return result


@register_canary_kind(
    "gradient", "white-box gradient canaries (Steinke, Nasr & Jagielski 2023): vectors of norm "
    "max_grad_norm added to a DP-SGD target's clipped gradients, each canary in the run with "
    "probability ½; scored from every iterate and from the final model "
    "(miaudit.train.gradient_canaries)", white_box=True)
def _gradient(labels: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    result: np.ndarray = labels.copy()  # never called: gradient canaries take no rows
    return result


def canary_labels(kind: str, labels: np.ndarray, num_classes: int, seed: int) -> np.ndarray:
    """The labels the canaries carry (and the target trains on), int64 [m], seeded."""
    rng = np.random.default_rng([seed, 4])
    labels = np.asarray(labels, dtype=np.int64)
    return canary_kind(kind).relabel(labels, num_classes, rng).astype(np.int64)


def _guess_count(value: Any, m: int, name: str) -> int:
    """A count of guesses: an integer >= 0 or a fraction in (0, 1) of the m canaries."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"canaries.guesses {name} must be a count or a fraction in (0, 1) of "
                          f"the canaries; got {value!r}.")
    if isinstance(value, numbers.Integral):
        if value < 0:
            raise ConfigError(f"canaries.guesses {name} must be >= 0; got {value}.")
        return int(value)
    if not 0 < float(value) < 1:
        raise ConfigError(f"canaries.guesses {name} as a fraction must lie in (0, 1); "
                          f"got {value!r}.")
    return int(round(float(value) * m))


def resolve_guesses(guesses: Any, m: int) -> list[tuple[int, int]]:
    """``canaries.guesses`` as (k₊, k₋) pairs for m canaries.

    None: one pair, a tenth of the canaries each way. A mapping ``{k_plus, k_minus}``: one
    pair. A list of such mappings: candidates, each evaluated at α / len(list) (Bonferroni), the
    best reported. Counts or fractions of m; each pair needs 1 <= k₊ + k₋ <= m. Fixed here,
    before any canary's inclusion is known: never tuned on it.
    """
    if guesses is None:  # at least one IN guess, so that a tiny m meets min_canaries' message
        k = max(1, int(m * DEFAULT_GUESS_FRACTION))
        guesses = {"k_plus": k, "k_minus": min(k, m - k)}
    items = guesses if isinstance(guesses, list) else [guesses]
    if not items:
        raise ConfigError("canaries.guesses is an empty list: give at least one "
                          "{k_plus, k_minus} pair, or leave it out for the default.")
    pairs = []
    for item in items:
        if not isinstance(item, dict) or set(item) != {"k_plus", "k_minus"}:
            raise ConfigError(
                f"canaries.guesses entries must be mappings {{k_plus: N, k_minus: N}} (IN "
                f"guesses on the highest scores, OUT guesses on the lowest); got {item!r}."
            )
        pair = (_guess_count(item["k_plus"], m, "k_plus"),
                _guess_count(item["k_minus"], m, "k_minus"))
        if not 1 <= sum(pair) <= m:
            raise ConfigError(
                f"canaries.guesses k_plus + k_minus = {sum(pair)} must be between 1 and the "
                f"number of canaries ({m}): the two guess sets may not overlap."
            )
        pairs.append(pair)
    return pairs
