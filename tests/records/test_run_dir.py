"""Staged run directories (miaudit.records.run_dir) and atomic files (miaudit.io): a run
replaces the previous one whole,
or not at all, and never another run unless told to."""

import json
import logging
import os
import stat
import subprocess
import sys

import pytest

from miaudit.errors import ConfigError
from miaudit.io import atomic_path, write_json
from miaudit.records.run_dir import API_TEMP_PREFIX, RunIdentity, StagedRunDir, clean_stale_staging


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


# --- file modes ---------------------------------------------------------------------------


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_files_follow_the_umask_whoever_writes_them(tmp_path, umask, mask, mode):
    """The mode of a new file (0o666 less the umask), even when the writer replaces the
    temporary file with its own 0600 one (as safetensors' save_file does)."""
    umask(mask)
    with atomic_path(tmp_path / "replaced.bin") as tmp:
        tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b"data")
        os.close(fd)
    write_json(tmp_path / "meta.json", {"a": 1})
    for name in ("replaced.bin", "meta.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name


# --- a folder holding another run ---------------------------------------------------------

_RUN = {"name": "demo", "seed": 0, "output": "runs/demo", "cache_dir": "/a"}


def _staged(out, command="run", config=_RUN, **kwargs):
    return StagedRunDir(out, command=command, name=config.get("name", ""), config=config,
                        **kwargs)


def _made(out, command="run", config=_RUN, files=None, **kwargs):
    with _staged(out, command, config, **kwargs) as stage:
        _write_run(stage, files or {"config.yaml": f"{command}\n", "calibration.png": "png"})


def test_the_run_records_what_made_it(tmp_path):
    out = tmp_path / "demo"
    _made(out)
    summary = json.loads((out / "summary.json").read_text())
    identity = summary["run_identity"]
    assert identity["command"] == "run" and identity["name"] == "demo"
    assert len(identity["config_digest"]) == 64
    assert list(summary)[-1] == "files"  # the file list stays last


def test_rerunning_the_same_config_replaces_its_own_run_silently(tmp_path, caplog):
    out = tmp_path / "demo"
    _made(out)
    # where it reads and writes (output, cache_dir, data_dir, device) is no part of the run
    elsewhere = {**_RUN, "output": "other", "cache_dir": "/b", "device": "cuda"}
    with caplog.at_level(logging.WARNING, logger="miaudit.io"):
        _made(out, config=elsewhere, files={"config.yaml": "again\n", "calibration.png": "2"})
    assert (out / "config.yaml").read_text() == "again\n"
    assert caplog.text == ""


@pytest.mark.parametrize("command, config, what", [
    ("attack", {"bank": "runs/demo/bank.npz", "target": 0}, "'demo', made by `miaudit run`."),
    ("run", {**_RUN, "seed": 1}, "'demo', made by `miaudit run` with a different config."),
])
def test_another_run_in_the_folder_is_refused_before_anything_is_written(
        tmp_path, command, config, what):
    out = tmp_path / "runs" / "demo"
    _made(out)
    (out / "notes.txt").write_text("the user's own")
    before = _snapshot(tmp_path)
    with pytest.raises(ConfigError) as refused, _staged(out, command, config):
        pytest.fail("the block must not run")
    message = str(refused.value)
    assert message.startswith(f"{out} already holds another run: {what}")
    assert (f"This `miaudit {command}` would replace its files (config.yaml, calibration.png, "
            "summary.json).") in message
    assert "Give --overwrite (overwrite=True in Python) to replace it, or --out another " \
           "folder." in message
    assert _snapshot(tmp_path) == before  # no staging folder, nothing moved


def test_overwrite_replaces_another_run_and_says_what_it_removed(tmp_path, caplog):
    out = tmp_path / "demo"
    _made(out)
    attack = {"bank": str(out / "bank.npz"), "target": 0}
    with caplog.at_level(logging.WARNING, logger="miaudit.io"):
        _made(out, "attack", attack, files={"metrics.json": "{}", "calibration.png": "new"},
              overwrite=True)
    assert not (out / "config.yaml").exists()
    assert json.loads((out / "summary.json").read_text())["run_identity"]["command"] == "attack"
    assert (f"replacing the run in {out} ('demo', made by `miaudit run`; --overwrite): removed "
            "config.yaml; replaced calibration.png") in caplog.text
    caplog.clear()
    _made(out, "attack", attack, files={"metrics.json": "{}", "calibration.png": "new"})
    assert caplog.text == ""  # now its own run: rerun without a word


def test_a_rerun_says_which_of_its_previous_files_it_removes(tmp_path, caplog):
    out = tmp_path / "demo"
    _made(out)
    with caplog.at_level(logging.WARNING, logger="miaudit.io"):
        _made(out, files={"config.yaml": "run\n"})
    assert (f"removed calibration.png from {out}: the previous run there wrote it, this one "
            "does not") in caplog.text


def test_folders_without_a_run_are_written_into_only_with_overwrite(tmp_path, caplog):
    """A non-empty folder of no miaudit run (the user's own files) is refused, unless
    overwrite: then the run's files go in beside the user's, which are kept."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "summary.json").write_text("my own notes, not a run's")
    (out / "data.csv").write_text("a,b\n")
    before = _snapshot(tmp_path)
    with pytest.raises(ConfigError) as refused:
        _made(out)
    assert str(refused.value) == (
        f"{out} is not empty and holds no miaudit run: it holds data.csv, summary.json. This "
        "`miaudit run` would write its files into it, replacing any of the same names. Give "
        "--out a new or empty folder, or --overwrite (overwrite=True in Python) to write into "
        "this one (its other files are kept). Nothing was written.")
    assert _snapshot(tmp_path) == before  # no lock, no staging folder left
    with caplog.at_level(logging.WARNING):
        _made(out, overwrite=True)
    assert f"writing into {out}, which held no miaudit run (--overwrite): replaced " \
           "summary.json" in caplog.text
    assert (out / "data.csv").read_text() == "a,b\n"
    assert (out / "config.yaml").read_text() == "run\n"
    # an empty folder, and one holding only the run's own inputs, are fine
    empty = tmp_path / "empty"
    empty.mkdir()
    _made(empty)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "bank.npz").write_text("bank")
    _made(inputs, keep=(inputs / "bank.npz",))
    assert (inputs / "bank.npz").read_text() == "bank"
    # a run of an earlier version (no identity recorded) is another run
    old = tmp_path / "old"
    old.mkdir()
    _write_run(old, {"config.yaml": "old\n"})
    summary = json.loads((old / "summary.json").read_text())
    (old / "summary.json").write_text(json.dumps({"run": "demo", **summary}))
    with pytest.raises(ConfigError, match=r"already holds another run: 'demo', made by an "
                                          r"earlier miaudit version"):
        _made(old)
    _made(old, overwrite=True)
    assert (old / "config.yaml").read_text() == "run\n"


def test_arrays_given_anew_to_the_python_api_are_the_same_run():
    """The API writes arrays given in memory to a new temporary folder each call."""
    def config(folder):
        return {"name": "audit", "data": {"members": f"/tmp/{API_TEMP_PREFIX}{folder}/m.npy"}}

    assert RunIdentity.of("audit", "audit", config("ab12")) == RunIdentity.of(
        "audit", "audit", config("zz99"))
    assert RunIdentity.of("audit", "audit", config("ab12")) != RunIdentity.of(
        "audit", "audit", {"name": "audit", "data": {"members": "/tmp/x/m.npy"}})


def test_fields_at_their_defaults_leave_the_identity_as_it_was():
    """A later version adding a config field (at its default) must not turn a rerun of the
    same YAML into 'another run'; a value that differs from its default still counts."""
    old = {"name": "demo", "seed": 0, "metrics": {"bootstrap": 20}}
    defaults = {"name": "audit", "seed": 0, "metrics": {"bootstrap": 200, "split_check": True}}
    new = {**old, "metrics": {"bootstrap": 20, "split_check": True}}
    before = RunIdentity.of("run", "demo", old, defaults)  # the config as recorded then
    assert RunIdentity.of("run", "demo", new, defaults) == before
    changed = {**old, "metrics": {"bootstrap": 20, "split_check": False}}
    assert RunIdentity.of("run", "demo", changed, defaults) != before
    assert RunIdentity.of("run", "demo", {**old, "seed": 1}, defaults) != before


def test_a_run_of_an_earlier_version_is_known_by_its_recorded_config(tmp_path, caplog):
    """Summaries written before run identities hold the run's name and config: the same
    config reruns into its folder after an upgrade, another is refused."""
    out = tmp_path / "demo"
    out.mkdir()
    _write_run(out, {"config.yaml": "old\n"})
    listed = json.loads((out / "summary.json").read_text())["files"]
    (out / "summary.json").write_text(json.dumps(
        {"run": "demo", "design": "offline", "config": _RUN, "files": listed}))
    before = _snapshot(tmp_path)
    with pytest.raises(ConfigError, match=r"already holds another run: 'demo', made by "
                                          r"`miaudit run` with a different config\."):
        _made(out, config={**_RUN, "seed": 5})
    with pytest.raises(ConfigError, match=r"'demo', made by `miaudit run`\. This `miaudit "
                                          r"audit` would"):
        _made(out, "audit", config={**_RUN, "seed": 5})
    assert _snapshot(tmp_path) == before
    with caplog.at_level(logging.WARNING, logger="miaudit.io"):
        _made(out)
    assert (out / "config.yaml").read_text() == "run\n" and caplog.text == ""
