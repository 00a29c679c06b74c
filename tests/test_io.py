"""Staged run directories: a run replaces the previous one whole, or not at all."""

import json
import subprocess
import sys

import pytest

from miaudit.errors import ConfigError
from miaudit.io import StagedRunDir, clean_stale_staging


def _snapshot(root):
    """Every file and folder under `root`: {relative path: bytes (None for a folder)}."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def _write_run(folder, files, sub=None):
    for name, text in files.items():
        (folder / name).write_text(text)
    listed = list(files)
    if sub:
        (folder / sub).mkdir()
        (folder / sub / "inner.txt").write_text(f"{sub} of {folder.name}")
        listed.append(sub)
    (folder / "summary.json").write_text(json.dumps({"files": [*listed, "summary.json"]}))


def test_first_run_is_committed_by_one_rename(tmp_path):
    out = tmp_path / "runs" / "demo"
    with StagedRunDir(out) as stage:
        assert stage.parent == out.parent and stage.name.startswith(".demo.staging-")
        assert not out.exists()  # nothing of the run is visible before it succeeds
        _write_run(stage, {"config.yaml": "a: 1\n"}, sub="checkpoints")
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "config.yaml",
                                                       "summary.json"]
    assert [p.name for p in out.parent.iterdir()] == ["demo"]  # no staging folder left


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_a_failing_first_run_leaves_no_folder(tmp_path, error):
    out = tmp_path / "runs" / "deep" / "demo"
    with pytest.raises(type(error)), StagedRunDir(out) as stage:
        (stage / "config.yaml").write_text("a: 1\n")
        raise error
    assert list(tmp_path.iterdir()) == []  # not even the parent folders it created


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_a_failing_rerun_leaves_the_previous_run_untouched(tmp_path, error):
    out = tmp_path / "demo"
    with StagedRunDir(out) as stage:
        _write_run(stage, {"config.yaml": "good\n", "metrics.json": "{}"}, sub="checkpoints")
    before = _snapshot(tmp_path)
    with pytest.raises(type(error)), StagedRunDir(out) as stage:
        _write_run(stage, {"config.yaml": "bad\n"})
        raise error
    assert _snapshot(tmp_path) == before


def test_a_rerun_replaces_files_and_removes_the_previous_runs_stale_ones(tmp_path):
    out = tmp_path / "demo"
    with StagedRunDir(out) as stage:
        _write_run(stage, {"config.yaml": "old\n", "calibration.png": "old"}, sub="checkpoints")
    (out / "notes.txt").write_text("the user's own file")  # not listed: never the run's
    with StagedRunDir(out) as stage:
        _write_run(stage, {"config.yaml": "new\n", "bank.npz": "new"}, sub="checkpoints")
    assert sorted(p.name for p in out.iterdir()) == ["bank.npz", "checkpoints", "config.yaml",
                                                       "notes.txt", "summary.json"]
    assert (out / "config.yaml").read_text() == "new\n"
    assert (out / "checkpoints" / "inner.txt").read_text() == f"checkpoints of {stage.name}"
    assert json.loads((out / "summary.json").read_text())["files"] == [
        "config.yaml", "bank.npz", "checkpoints", "summary.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]


def test_kept_inputs_are_not_removed_as_stale(tmp_path):
    out = tmp_path / "demo"
    with StagedRunDir(out) as stage:
        _write_run(stage, {"config.yaml": "old\n", "bank.npz": "bank"})
    with StagedRunDir(out, keep=(out / "bank.npz",)) as stage:
        _write_run(stage, {"metrics.json": "{}"})
    assert (out / "bank.npz").read_text() == "bank" and not (out / "config.yaml").exists()


def test_a_killed_runs_staging_folder_is_removed_never_read(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    pid = int(dead.stdout)
    leftover = tmp_path / f".demo.staging-{pid}-abc123"
    leftover.mkdir()
    _write_run(leftover, {"config.yaml": "half-written\n"})
    other = tmp_path / ".other.staging-1-x"  # another run's: not ours to touch
    other.mkdir()
    assert clean_stale_staging(tmp_path / "demo") == [leftover]
    assert not leftover.exists() and other.exists()
    leftover.mkdir()
    with StagedRunDir(tmp_path / "demo") as stage:
        (stage / "config.yaml").write_text("fresh\n")
    assert not leftover.exists()
    assert (tmp_path / "demo" / "config.yaml").read_text() == "fresh\n"


def test_a_file_is_not_a_run_directory(tmp_path):
    (tmp_path / "taken").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        StagedRunDir(tmp_path / "taken")


def test_a_symlinked_run_directory_is_staged_beside_its_target(tmp_path):
    real = tmp_path / "disk" / "demo"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    with StagedRunDir(tmp_path / "link") as stage:
        assert stage.parent == real.parent
        (stage / "config.yaml").write_text("a: 1\n")
    assert (real / "config.yaml").read_text() == "a: 1\n"
    assert (tmp_path / "link").is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == [
        "disk", "link"]
