"""The documentation stands on its own: no build machine's paths, no private notes, and every
registered attack defined in docs/algorithms.md."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from miaudit.attacks import list_attacks

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ROOT / "docs" / "algorithms.md"
SCOPE = ("src", "tests", "docs", "examples", "bench", "README.md", "EXPERIMENTS.md")

# What no file of the repository may say: an absolute path of a machine it was built on, or a
# reference to notes that are not in the repository (cite the paper, or docs/algorithms.md).
FORBIDDEN = {
    "an absolute machine path": re.compile(r"(?<![\w.~-])/(?:work|root|home)/"),
    "a private notes folder": re.compile(r"shared/seeds"),
    "a document not in the repository": re.compile(r"\b(?:ALGORITHMS|DESIGN)\.md\b"),
    "a numbered note instead of the paper": re.compile(r"\b[Ss]eeds? 00\d\b"),
}


def _git_files() -> list[Path] | None:
    """Tracked and untracked-but-not-ignored files in SCOPE, or None outside a git checkout."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", *SCOPE],
            cwd=ROOT, capture_output=True, check=True, timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = [n for n in listed.decode("utf-8", "replace").split("\0") if n]
    return [ROOT / n for n in names] if names else None


def _walked_files() -> list[Path]:
    files = []
    for part in SCOPE:
        path = ROOT / part
        if path.is_file():
            files.append(path)
            continue
        for folder, dirs, names in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"
                       and not d.endswith(".egg-info")]
            files += [Path(folder) / n for n in names]
    return files


def repository_files() -> list[Path]:
    files = _git_files() or _walked_files()
    this = Path(__file__).resolve()
    return sorted(f for f in set(files) if f.is_file() and f.resolve() != this)


def test_the_scan_sees_the_repository():
    names = {f.relative_to(ROOT).as_posix() for f in repository_files()}
    assert {"README.md", "docs/algorithms.md", "src/miaudit/attacks/lira.py"} <= names


def test_no_machine_paths_or_private_notes():
    found = []
    for path in repository_files():
        data = path.read_bytes()
        if b"\0" in data:  # binary (figures, banks): no text to cite from
            continue
        text = data.decode("utf-8", "replace")
        for what, pattern in FORBIDDEN.items():
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}: {what}: {match.group(0)!r}")
    assert not found, "cite papers by name or docs/algorithms.md instead:\n" + "\n".join(found)


@pytest.mark.parametrize("spec", list_attacks(), ids=lambda spec: spec.name)
def test_every_attack_is_defined_in_docs_algorithms(spec):
    assert f"`{spec.name}`" in ALGORITHMS.read_text(encoding="utf-8"), (
        f"attack '{spec.name}' is registered but docs/algorithms.md does not define it"
    )


def test_readme_links_docs_algorithms():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    attacks = readme.split("## Attacks", 1)[1].split("\n## ", 1)[0]
    assert "(docs/algorithms.md)" in attacks


def readme_attack_table() -> list[dict[str, str]]:
    """The rows of the README's table of attacks (the first table under '## Attacks' with an
    'attack' column), as {header: cell}; a `\\|` inside a cell is part of the cell."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Attacks\n", 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines()]
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("|") and "| attack |" in line)
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))])
    header, rule, *rows = table
    assert set("".join(rule)) <= {"-", ":"}, "the second line of a markdown table is its rule"
    assert all(len(row) == len(header) for row in rows), "a row with a stray '|'"
    return [dict(zip(header, row, strict=True)) for row in rows]


def test_readme_attack_table_lists_every_registered_attack_once():
    rows = readme_attack_table()
    listed = [re.match(r"`([^`]+)`", row["attack"]).group(1) for row in rows]
    registered = sorted(spec.name for spec in list_attacks())
    assert sorted(listed) == registered, (
        f"missing from the README's attack table: {sorted(set(registered) - set(listed))}; "
        f"listed but not registered: {sorted(set(listed) - set(registered))}"
    )
    assert all(row["score"] and row["needs"] for row in rows), "each row says what it scores"
