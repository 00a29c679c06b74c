"""docs/config-reference.md is generated from the config models' descriptions (never written
twice): the committed file is the generated text, and every key of both configs is in it."""

from __future__ import annotations

from pathlib import Path

from miaudit.config import RunConfig
from miaudit.external.audit_spec import AuditConfig
from miaudit.external.audit_spec_docs import config_reference

DOC = Path(__file__).parents[2] / "docs" / "config-reference.md"


def test_the_committed_reference_is_the_generated_one() -> None:
    assert DOC.read_text(encoding="utf-8") == config_reference(), (
        "docs/config-reference.md is stale: run `python -m miaudit.external.audit_spec_docs`")


def test_every_key_has_a_description_and_a_row() -> None:
    text = config_reference()
    for cls in (RunConfig, AuditConfig):
        for name, info in cls.model_fields.items():
            assert info.description, f"{cls.__name__}.{name} has no description"
            assert f"| `{name}` |" in text
    assert "| `canaries.threat_models` |" in text and "| `model.hf_model` |" in text
