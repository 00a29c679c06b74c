"""Sweeps in these tests train real (tiny) models into a private model cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test (and its worker processes, which inherit the environment) gets its own
    model cache, so models are trained for real and tests do not share them."""
    cache = tmp_path / "model-cache"
    monkeypatch.setenv("MIAUDIT_CACHE_DIR", str(cache))
    return cache
