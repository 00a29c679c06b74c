"""Every shipped example config is valid: run configs load (tests/test_config.py checks their
recipes too) and audit configs have only known keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from miaudit.config import load_config, read_yaml
from miaudit.external.audit_config import audit_config

EXAMPLES = Path(__file__).parents[1] / "examples"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_run_example_loads(path):
    cfg = load_config(path)
    assert cfg.name and cfg.attacks


def test_a_tabular_run_example_ships():
    kinds = {load_config(p).dataset.name for p in EXAMPLES.glob("*.yaml")}
    assert kinds & {"adult", "german-credit", "texas-health", "purchase-celeba"}


@pytest.mark.parametrize("path", sorted((EXAMPLES / "audit").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_audit_example_loads(path):
    cfg = audit_config(read_yaml(path, "audit config"))
    assert cfg.target_kind in {"torch", "sklearn", "hf"}
    assert cfg.data.dataset
