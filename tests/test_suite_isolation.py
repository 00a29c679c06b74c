"""The suite is independent of the user's caches (issue: tests passed only with a warm cache)."""

from __future__ import annotations

import os
from pathlib import Path

from miaudit.data import list_datasets
from miaudit.data.registry import default_data_dir
from miaudit.train.model_cache import default_cache_dir


def test_default_caches_are_the_suites_private_folders():
    # tests/conftest.py points both at a fresh temporary folder before any test runs
    assert default_cache_dir() == Path(os.environ["MIAUDIT_CACHE_DIR"])
    assert default_data_dir() == Path(os.environ["MIAUDIT_DATA_DIR"])
    assert default_cache_dir().parent.name.startswith("miaudit-tests-")
    home_cache = Path.home() / ".cache" / "miaudit"
    for folder in (default_cache_dir(), default_data_dir()):
        assert home_cache not in folder.parents


def test_only_embedded_datasets_are_present_to_the_suite():
    present = {d.name for d in list_datasets(None) if d.present}
    assert "digits" in present
    assert not present & {"mnist", "fashion-mnist", "adult", "german-credit", "cifar10"}
