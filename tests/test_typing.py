"""The whole package type-checks under mypy --strict (pinned in the dev extra, configured
under [tool.mypy] in pyproject.toml: pydantic's plugin for the config models; torch and the other
large libraries taken as Any), and so does the README's Python example as a user's type checker
sees it.

The example is read from README.md (every ```python block of its "## Python API" section, in
order, as one session), so it cannot drift from what is checked. A probe with a known error is
checked in the same run: a checker that could not see miaudit's types (an unresolved import is
Any under ignore_missing_imports) would pass anything, and fails on the probe instead. One cold
mypy run, its cache in a temporary folder: about 10 s on 2 cores.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PYPROJECT = ROOT / "pyproject.toml"
# what [tool.mypy] checks (a bare `mypy`): the whole package
PACKAGE = ("src/miaudit",)
# a call missing its required `data` argument: mypy must say so
PROBE = "import miaudit\n\nmiaudit.audit(model='outputs.npz')\n"
PROBE_ERROR = 'error: Missing positional argument "data" in call to "audit"'


def readme_api_examples() -> list[str]:
    """The ```python blocks of the README's "## Python API" section, in order."""
    text = README.read_text(encoding="utf-8")
    assert "\n## Python API\n" in text, "the README has no '## Python API' section"
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_api_section_has_a_python_example():
    blocks = readme_api_examples()
    assert blocks and all("miaudit" in b for b in blocks[:1])


def test_the_configured_files_are_the_ones_checked():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["mypy"]
    assert config["files"] == list(PACKAGE)
    assert config["strict"] is True


def test_mypy_strict_is_clean_on_the_package_and_the_readme_example(tmp_path):
    example = tmp_path / "readme_python_api.py"
    example.write_text("\n\n".join(readme_api_examples()), encoding="utf-8")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    command = [sys.executable, "-m", "mypy", "--config-file", str(PYPROJECT),
               "--cache-dir", str(tmp_path / "mypy-cache"), "--no-error-summary",
               "--show-absolute-path", str(example), str(probe), *PACKAGE]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 1 and not done.stderr.strip(), done.stdout + done.stderr
    assert any(line.startswith(f"{probe}:3:") and PROBE_ERROR in line for line in lines), (
        f"mypy did not see miaudit's types:\n{done.stdout}")
    others = [line for line in lines if str(probe) not in line]
    assert not others, "mypy errors (README example or the package):\n" + "\n".join(others)
