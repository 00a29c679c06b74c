"""A config validates every assignment (pydantic's validate_assignment): a refused value is a
ConfigError naming its key, and the config keeps its valid value, so nothing downstream reads
a config that failed its own checks."""

from __future__ import annotations

import pytest

from miaudit.config import MetricsConfig, config_from_dict
from miaudit.errors import ConfigError


def _gradient_run():
    return config_from_dict({"name": "x", "recipe": {"epochs": 2, "dp": {"epsilon": 4.0}},
                             "canaries": {"count": 10, "kind": "gradient"}})


def test_a_wrong_type_is_refused_and_the_value_kept():
    metrics = MetricsConfig()
    with pytest.raises(ConfigError, match=r"bootstrap"):
        metrics.bootstrap = "abc"
    assert metrics.bootstrap == MetricsConfig().bootstrap


def test_a_value_the_cross_field_checks_refuse_is_not_kept():
    cfg = _gradient_run()
    with pytest.raises(ConfigError, match=r"has no dp: give it one"):
        cfg.recipe = {"epochs": 2}
    assert cfg.recipe == {"epochs": 2, "dp": {"epsilon": 4.0}}
    cfg.recipe = {"epochs": 3, "dp": {"epsilon": 8.0}}  # a valid one is taken
    assert cfg.recipe["epochs"] == 3


def test_replace_validates_and_leaves_the_original():
    cfg = _gradient_run()
    with pytest.raises(ConfigError, match=r"target is 5"):
        cfg.replace(target=5)
    assert cfg.replace(models=3).models == 3 and cfg.models == 2
