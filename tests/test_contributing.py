"""docs/contributing.md's worked examples run as written: every ```python block, in order, in
one namespace (the digits bank fixture and a study folder given), with the registries put back
as they were afterwards so the examples' names never leak into other tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from miaudit.attacks import registry as attacks_registry
from miaudit.data import registry as data_registry
from miaudit.models import registry as models_registry
from miaudit.studies import registry as studies_registry

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "contributing.md"


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of a markdown text, dedented (an indented block sits in a list)."""
    blocks = []
    for match in re.finditer(r"^( *)```python\n(.*?)^\1```", text, re.S | re.M):
        indent = len(match.group(1))
        blocks.append("\n".join(line[indent:] for line in match.group(2).splitlines()))
    return blocks


@pytest.fixture
def registries():
    """Snapshots of every registry the examples add to, restored after the test."""
    studies_registry._load_builtins()
    saved = [(module, name, dict(getattr(module, name))) for module, name in (
        (attacks_registry, "_REGISTRY"), (data_registry, "_REGISTRY"),
        (models_registry, "_REGISTRY"), (studies_registry, "_STUDIES"))]
    yield
    for module, name, snapshot in saved:
        table = getattr(module, name)
        table.clear()
        table.update(snapshot)


def test_the_guide_has_an_example_of_each_thing_people_add():
    text = GUIDE.read_text(encoding="utf-8")
    for heading in ("## Add an attack", "## Add a dataset", "## Add a model architecture",
                    "## Add a study", "## Tests", "## Benchmarks"):
        assert heading in text, heading
    assert len(python_blocks(text)) == 6


def test_the_guides_examples_run(registries, digits_bank, tmp_path):
    namespace = {"digits_bank": digits_bank, "study_root": tmp_path / "study"}
    for i, block in enumerate(python_blocks(GUIDE.read_text(encoding="utf-8"))):
        exec(compile(block, f"docs/contributing.md block {i + 1}", "exec"), namespace)
    # what the examples registered is there while they run ...
    assert "example-loss-gap" in attacks_registry._REGISTRY
    assert (tmp_path / "study" / "summary.csv").exists()


def test_the_examples_leave_no_trace(registries):
    # ... and gone after (the fixture restored the registries of the test above)
    assert "example-loss-gap" not in attacks_registry._REGISTRY
    assert "example-iris" not in data_registry._REGISTRY
    assert "example-linear" not in models_registry._REGISTRY
    assert "example-squares" not in studies_registry._STUDIES
