"""Run directories replaced all-or-nothing, under a lock (miaudit.records.run_dir): a process
killed at each step of the final move leaves, once the next start has recovered, exactly the
old run or exactly the new one; two runs into one folder cannot both pass the check; run names
are names."""

import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from miaudit.errors import ConfigError
from miaudit.records import run_dir
from miaudit.records.run_dir import StagedRunDir, check_run_name, recover_run_dir

# The run a subprocess makes: argv = out, the step to die at ("" for none), the run's label
# (its config's seed and its files' contents), a file to touch once at "checked" then hold
# there for 3 s ("" for none), and optionally a file to wait for before starting (a barrier).
_RUN_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from miaudit.records import run_dir

    out, die_at, label, hold = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    if len(sys.argv) > 5:
        while not Path(sys.argv[5]).exists():
            time.sleep(0.005)

    def hook(step):
        if step == die_at:
            os._exit(9)  # as kill -9: no finally, no atexit
        if step == "checked" and hold:
            Path(hold).write_text(str(os.getpid()))
            time.sleep(3)

    run_dir.step_hook = hook
    with run_dir.StagedRunDir(out, keep=(out / "bank.npz",), command="run", name="demo",
                              config={"name": "demo", "seed": int(label)},
                              overwrite=True) as stage:
        files = {"config.yaml": f"seed: {label}\\n", "report.html": f"<p>{label}</p>",
                 "scores.csv": f"index,score\\n0,{label}\\n", "metrics.json": label}
        for name, text in files.items():
            (stage / name).write_text(text)
        (stage / "checkpoints").mkdir()
        (stage / "checkpoints" / "epoch-1.bin").write_text(f"weights {label}")
        listed = [*files, "checkpoints", "summary.json"]
        (stage / "summary.json").write_text(json.dumps({"run": label, "files": listed}))
    print("committed")
""")

STEPS = ["locked", "checked", "carrying", "staged", "set-aside", "swapped", "committed"]
OLD_AFTER = {"locked", "checked", "carrying", "staged", "set-aside"}  # killed before the swap


def _hashes(root):
    """Every entry under `root`: {relative path: sha256 of its bytes (None for a folder)}."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest()
                                       if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def _run(out, die_at="", label="1", hold=""):
    return subprocess.run([sys.executable, "-c", _RUN_SCRIPT, str(out), die_at, label, hold],
                          capture_output=True, text=True, timeout=120)


def _old_run(out):
    """A finished run (seed 0) in `out`, with a stale file of its own (calibration.png), the
    bank it was given (kept) and a file of the user's (notes.txt)."""
    done = _run(out, label="0")
    assert done.returncode == 0, done.stderr
    (out / "calibration.png").write_text("old png")  # listed: the new run does not write it
    summary = json.loads((out / "summary.json").read_text())
    summary["files"].insert(0, "calibration.png")
    (out / "summary.json").write_text(json.dumps(summary))
    (out / "bank.npz").write_text("the bank")  # the run's input: kept
    (out / "notes.txt").write_text("the user's own")  # not the run's: kept
    return _hashes(out)


@pytest.fixture(scope="module")
def expected_new(tmp_path_factory):
    """What the new run (seed 1) makes of the old one, uninterrupted."""
    out = tmp_path_factory.mktemp("reference") / "demo"
    _old_run(out)
    done = _run(out, label="1")
    assert done.returncode == 0, done.stderr
    new = _hashes(out)
    assert "calibration.png" not in new and "bank.npz" in new and "notes.txt" in new
    assert sorted(p.name for p in out.parent.iterdir()) == ["demo"]  # nothing left beside
    return new


@pytest.mark.parametrize("step", STEPS)
def test_a_run_killed_at_each_step_leaves_the_whole_old_or_the_whole_new_run(
        tmp_path, expected_new, caplog, step):
    out = tmp_path / "runs" / "demo"
    old = _old_run(out)
    assert old != expected_new
    killed = _run(out, die_at=step)
    assert killed.returncode == 9 and "committed" not in killed.stdout, killed.stderr
    if step == "set-aside":  # the half-state the recovery is for: the old run set aside
        assert not out.exists() and any(p.name.startswith(".demo.old-")
                                         for p in out.parent.iterdir())
    if step == "swapped":  # both present: the new run in place, the old one beside it
        assert _hashes(out) == expected_new
    # the next start (here a run that fails: it changes nothing itself) recovers
    with caplog.at_level(logging.WARNING), pytest.raises(RuntimeError), \
            StagedRunDir(out) as stage:
        (stage / "config.yaml").write_text("never committed")
        raise RuntimeError("the next run fails")
    assert _hashes(out) == (old if step in OLD_AFTER else expected_new)
    # nothing of the killed run is left beside the folder: no staging, old folder or lock
    assert sorted(p.name for p in out.parent.iterdir()) == ["demo"]
    assert "took over the lock" in caplog.text  # the killed run's, its pid dead
    if step == "set-aside":
        assert f"restored the previous run in {out}" in caplog.text
    if step == "swapped":
        assert "which is that run's, whole" in caplog.text


def test_recovery_restores_the_set_aside_run_of_a_dead_process(tmp_path):
    """recover_run_dir on its own: the old run set aside and no run in place -> the old one
    back; set aside with a run in place -> the set-aside one deleted."""
    out = tmp_path / "demo"
    aside = tmp_path / ".demo.old-99999999"
    aside.mkdir()
    (aside / "summary.json").write_text("old")
    staging = tmp_path / ".demo.staging-99999999-abcd1234"
    staging.mkdir()
    done = recover_run_dir(out)
    assert (out / "summary.json").read_text() == "old" and not staging.exists()
    assert len(done) == 2 and done[0].startswith(f"restored the previous run in {out}")
    aside.mkdir()
    (aside / "summary.json").write_text("older")
    recover_run_dir(out)
    assert (out / "summary.json").read_text() == "old" and not aside.exists()
    assert recover_run_dir(out) == []


# --- the lock ----------------------------------------------------------------------------


def test_two_runs_into_one_new_folder_cannot_both_pass_the_check(tmp_path):
    """Two runs of different configs at once into one new folder: the first holds the lock
    (from its check to its commit, held open 3 s here), the second is refused naming it; the
    folder holds the winner's whole run."""
    out = tmp_path / "new"
    holding = tmp_path / "holding"
    first = subprocess.Popen([sys.executable, "-c", _RUN_SCRIPT, str(out), "", "1",
                              str(holding)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    deadline = time.monotonic() + 60
    while not holding.exists():  # past its check, not yet committed
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    second = _run(out, label="2")
    assert second.returncode != 0 and "committed" not in second.stdout
    refusal = second.stderr.strip().splitlines()[-1]
    assert refusal.startswith(f"miaudit.errors.ConfigError: {out} is being written by another "
                              f"miaudit run: pid {first.pid} (`-c ")
    assert "Nothing was written." in refusal and ".new.miaudit-lock" in refusal
    stdout, stderr = first.communicate(timeout=60)
    assert first.returncode == 0 and "committed" in stdout, stderr
    assert (out / "config.yaml").read_text() == "seed: 1\n"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"] == "1" and sorted(summary["files"]) == sorted(
        p.name for p in out.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["holding", "new"]  # lock released


def test_two_runs_started_at_once_one_wins_whole(tmp_path):
    """Both released by one barrier, both holding 3 s between their check and their commit:
    whichever takes the lock first commits, the other is refused; never both."""
    out, go = tmp_path / "new", tmp_path / "go"
    procs = {label: subprocess.Popen(
        [sys.executable, "-c", _RUN_SCRIPT, str(out), "", label, str(tmp_path / f"held-{label}"),
         str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for label in ("1", "2")}
    time.sleep(1.5)  # both imported and waiting at the barrier
    go.write_text("go")
    done = {label: (p.communicate(timeout=120), p.returncode) for label, p in procs.items()}
    won = [label for label, ((stdout, _), rc) in done.items() if rc == 0 and "committed" in stdout]
    assert len(won) == 1, done
    (lost,) = set(done) - set(won)
    assert "is being written by another miaudit run: pid " \
           f"{procs[won[0]].pid}" in done[lost][0][1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"] == won[0] and (out / "config.yaml").read_text() == f"seed: {won[0]}\n"
    assert sorted(summary["files"]) == sorted(p.name for p in out.iterdir())
    assert not (tmp_path / f"held-{lost}").exists()  # the loser never passed its check
    assert not list(tmp_path.glob(".new.*"))  # no lock, no staging folder left


def test_a_held_lock_refuses_a_second_run_in_the_same_process(tmp_path):
    out = tmp_path / "demo"
    with StagedRunDir(out) as stage:
        (stage / "a.txt").write_text("a")
        with pytest.raises(ConfigError, match=rf"pid {os.getpid()} \(`"), StagedRunDir(out):
            pytest.fail("the block must not run")
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]


def test_a_lock_whose_holder_is_gone_is_taken_over_with_a_warning(tmp_path, caplog):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    lock = tmp_path / ".demo.miaudit-lock"
    lock.write_text(json.dumps({"pid": int(dead.stdout), "command": "miaudit run a.yaml",
                                "host": socket.gethostname(), "started": "earlier",
                                "started_at": time.time() - 60}))
    with caplog.at_level(logging.WARNING), StagedRunDir(tmp_path / "demo") as stage:
        holder = json.loads(lock.read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        assert {"command", "started"} <= set(holder)
        (stage / "a.txt").write_text("a")
    assert (f"took over the lock {lock} of a miaudit run that no longer runs (pid "
            f"{int(dead.stdout)}, `miaudit run a.yaml`, since earlier)") in caplog.text
    assert not lock.exists()


def test_a_lock_of_another_host_or_a_live_process_is_never_taken_over(tmp_path):
    lock = tmp_path / ".demo.miaudit-lock"
    for holder in ({"pid": 1, "command": "miaudit audit", "host": socket.gethostname(),
                    "started": "t", "started_at": time.time()},  # a live process's
                   {"pid": 99999999, "command": "miaudit run b.yaml", "host": "elsewhere",
                    "started": "t"}):
        lock.write_text(json.dumps(holder))
        with pytest.raises(ConfigError) as refused, StagedRunDir(tmp_path / "demo"):
            pytest.fail("the block must not run")
        message = str(refused.value)
        assert (f"is being written by another miaudit run: pid {holder['pid']} "
                f"(`{holder['command']}`) on {holder['host']}, since t.") in message
        assert f"delete the lock file {lock}. Nothing was written." in message
        assert sorted(p.name for p in tmp_path.iterdir()) == [".demo.miaudit-lock"]


def test_the_lock_is_released_on_every_exit(tmp_path):
    out = tmp_path / "demo"
    for error in (RuntimeError("boom"), KeyboardInterrupt()):
        with pytest.raises(type(error)), StagedRunDir(out):
            raise error
        assert list(tmp_path.iterdir()) == []
    with StagedRunDir(out, command="run", name="demo", config={"seed": 0}) as stage:
        (stage / "summary.json").write_text(json.dumps({"files": ["summary.json"]}))
    with pytest.raises(ConfigError, match="already holds another run"), StagedRunDir(
            out, command="run", name="demo", config={"seed": 1}):
        pass
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]


def test_a_mount_point_is_replaced_file_by_file(tmp_path, monkeypatch):
    """A run directory that is a mount point cannot be renamed: its entries are replaced one
    by one (not atomic; documented) and its kept files stay."""
    out = tmp_path / "mounted"
    with StagedRunDir(out) as stage:
        (stage / "a.txt").write_text("old")
        (stage / "summary.json").write_text(json.dumps({"files": ["a.txt", "summary.json"]}))
    (out / "notes.txt").write_text("mine")
    monkeypatch.setattr(run_dir.os.path, "ismount", lambda path: str(path) == str(out))
    inode = out.stat().st_ino
    with StagedRunDir(out) as stage:
        (stage / "b.txt").write_text("new")
        (stage / "summary.json").write_text(json.dumps({"files": ["b.txt", "summary.json"]}))
    assert out.stat().st_ino == inode  # the same folder, its entries replaced
    assert sorted(p.name for p in out.iterdir()) == ["b.txt", "notes.txt", "summary.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["mounted"]


def test_kept_entries_are_linked_not_copied_and_the_old_folder_stays_whole(tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "bank.npz").write_bytes(np.arange(10).tobytes())
    inode = (out / "bank.npz").stat().st_ino
    seen = {}

    def hook(step):
        if step == "staged":  # the new folder is whole; the old one untouched
            seen["old"] = sorted(p.name for p in out.iterdir())
            seen["stage"] = sorted(p.name for p in next(tmp_path.glob(".demo.staging-*"))
                                   .iterdir())

    try:
        run_dir.step_hook = hook
        with StagedRunDir(out, keep=(out / "bank.npz",)) as stage:
            (stage / "report.html").write_text("r")
    finally:
        run_dir.step_hook = None
    assert seen == {"old": ["bank.npz"], "stage": ["bank.npz", "report.html"]}
    assert (out / "bank.npz").stat().st_ino == inode


# --- run names ---------------------------------------------------------------------------


@pytest.mark.parametrize("name, why", [
    ("../../../../tmp/x", "contains a path separator"),
    ("a\\b", "contains a path separator"),
    ("..", "starts with '.'"),
    (".hidden", "starts with '.'"),
    ("", "is empty"),
    (" demo", "starts or ends with a space"),
])
def test_a_run_name_is_a_plain_folder_name(name, why):
    with pytest.raises(ConfigError) as refused:
        check_run_name(name)
    message = str(refused.value)
    assert message.startswith(f"name {name!r} {why}")
    assert "--out FOLDER (output: FOLDER in the config). Nothing was written." in message
    check_run_name("digits-mlp_2 (v1.0)")  # any other folder name is fine


def test_configs_refuse_a_name_that_is_a_path(tmp_path):
    from miaudit.config import RunConfig, config_from_dict
    from miaudit.external.audit_config import audit_config
    from miaudit.pipeline.runner import run_dir_for

    with pytest.raises(ConfigError, match=r"name '../../../../tmp/x' contains a path "):
        config_from_dict({"name": "../../../../tmp/x"})
    with pytest.raises(ConfigError, match=r"name '../x' contains a path separator"):
        audit_config({"name": "../x", "model": {"outputs": "o.npz"},
                      "data": {"dataset": "digits", "members": "m.txt"}})
    with pytest.raises(ConfigError, match="contains a path separator"):
        run_dir_for(RunConfig(name="a/b"))  # built in Python: checked where it names a folder
