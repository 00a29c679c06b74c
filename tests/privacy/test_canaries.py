"""Canary kinds and guesses (miaudit.privacy.canaries): mislabelled labels are another class,
natural
ones the true class, seeded; guesses are (k₊, k₋) pairs fixed from the config alone."""

from __future__ import annotations

import numpy as np
import pytest

from miaudit.config import GRADIENT_KIND
from miaudit.errors import ConfigError
from miaudit.privacy.canaries import (
    canary_kind,
    canary_kind_names,
    canary_labels,
    resolve_guesses,
)


def test_the_kinds_are_registered():
    assert canary_kind_names() == ["mislabelled", "natural", "secret", "gradient"]
    with pytest.raises(ConfigError,
                       match="canaries.kind must be one of mislabelled, natural, secret, gradient"):
        canary_labels("loud", np.zeros(3, dtype=int), 10, seed=0)
    # gradient canaries are not rows: the one white-box kind, named as the config names it
    assert [k for k in canary_kind_names() if canary_kind(k).white_box] == [GRADIENT_KIND]


def test_mislabelled_labels_are_another_class_and_natural_ones_are_true():
    labels = np.arange(1000) % 10
    wrong = canary_labels("mislabelled", labels, 10, seed=0)
    assert (wrong != labels).all() and wrong.min() >= 0 and wrong.max() <= 9
    assert len(np.unique(wrong[labels == 3])) == 9  # every other class occurs
    np.testing.assert_array_equal(wrong, canary_labels("mislabelled", labels, 10, seed=0))
    np.testing.assert_array_equal(canary_labels("natural", labels, 10, seed=0), labels)


def test_guesses_are_fixed_pairs():
    assert resolve_guesses(None, 200) == [(20, 20)]
    assert resolve_guesses({"k_plus": 0.05, "k_minus": 3}, 100) == [(5, 3)]
    assert resolve_guesses([{"k_plus": 5, "k_minus": 5}, {"k_plus": 10, "k_minus": 0}],
                           50) == [(5, 5), (10, 0)]
    for bad in ({"k_plus": 60, "k_minus": 60}, {"k_plus": 0, "k_minus": 0}, {"k_plus": 5},
                [], {"k_plus": -1, "k_minus": 2}):
        with pytest.raises(ConfigError, match="canaries.guesses"):
            resolve_guesses(bad, 100)


def test_a_tiny_count_still_guesses_so_that_the_design_check_can_say_how_many():
    assert resolve_guesses(None, 4) == [(1, 1)]
    assert resolve_guesses(None, 1) == [(1, 0)]
