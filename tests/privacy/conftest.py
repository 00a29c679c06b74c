"""Fixtures shared by the pipeline's tests."""

from __future__ import annotations

import numpy as np
import pytest

from miaudit.privacy import attack_bounds as epsilon_module


@pytest.fixture
def threshold_spy(monkeypatch) -> list[np.ndarray]:
    """Every score array the ε / μ bounds choose τ on (`best_threshold`), in call order."""
    seen: list[np.ndarray] = []
    real = epsilon_module.best_threshold

    def spy(scores, flags, objective):
        seen.append(np.asarray(scores).copy())
        return real(scores, flags, objective)

    monkeypatch.setattr(epsilon_module, "best_threshold", spy)
    return seen
