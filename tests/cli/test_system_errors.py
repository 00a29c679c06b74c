"""A fault of the system met on the way (a full disk for the report, the bank or the model
cache, a read-only output folder, no memory left) is one message, never a traceback: what
happened (the OS error and the path), what to do, and what was kept; exit 1 for a fault of the
machine, 2 for a folder that cannot be written (choose another). The faults are planted by
monkeypatching the failing call (as root, chmod stops nothing): no disk is filled."""

from __future__ import annotations

import errno
import json

import numpy as np
import pytest
import torch

from miaudit.cli.main import main
from miaudit.errors import (
    BankWriteError,
    CacheWriteError,
    WriteError,
    describe_os_error,
    os_error_number,
)
from miaudit.signals import SignalBank
from miaudit.train.model_cache import ModelCache
from miaudit.train.recipe import Recipe


def _safetensor_error(message: str) -> Exception:
    from safetensors import SafetensorError

    return SafetensorError(message)


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err and err.startswith("miaudit: error: ")


# --- the words ------------------------------------------------------------------------------

def test_os_errors_are_put_into_words_with_the_path_and_the_fix():
    what, todo = describe_os_error(OSError(errno.ENOSPC, "No space left", "/data/c/k.json"))
    assert what == "no space left on the device holding /data/c/k.json (ENOSPC)"
    assert "free space on the disk mounted at /" in todo and "`df -h /`" in todo
    what, todo = describe_os_error(OSError(errno.EROFS, "Read-only file system", "/ro/x"))
    assert "read-only" in what and "/ro/x" in what and "EROFS" in what
    assert "--out" in todo and "--cache-dir" in todo
    # safetensors' own error type names the OS error in its message only
    error = _safetensor_error('Error while serializing: I/O error: Read-only file system '
                              '(os error 30) at path "/ro/.tmpAB"')
    assert os_error_number(error) == errno.EROFS
    assert describe_os_error(error)[0] == ("the file system is read-only: cannot write "
                                           "/ro/.tmpAB (EROFS)")
    assert WriteError("x", errno.ENOSPC).exit_code == 1  # the machine's fault
    assert WriteError("x", errno.EROFS).exit_code == 2  # choose another folder


# --- the model cache ------------------------------------------------------------------------

def _tiny_job():
    x = torch.rand(40, 4)
    y = torch.arange(40) % 2
    recipe = Recipe(architecture="mlp", arch_params={"hidden": 4}, epochs=1, batch_size=20)
    return x, y, recipe


@pytest.mark.parametrize("fail", ["weights", "weights-safetensors", "metadata"])
def test_a_full_disk_for_the_cache_names_the_entry_and_keeps_nothing_half_written(
        tmp_path, monkeypatch, fail):
    import miaudit.train.model_cache as model_cache

    x, y, recipe = _tiny_job()
    if fail == "weights":
        def broken(state, path):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        monkeypatch.setattr(model_cache, "save_file", broken)
    elif fail == "weights-safetensors":
        def broken(state, path):
            raise _safetensor_error("Error while serializing: I/O error: No space left on "
                                    "device (os error 28)")
        monkeypatch.setattr(model_cache, "save_file", broken)
    else:
        def broken(path, obj):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        monkeypatch.setattr(model_cache, "write_json", broken)
    cache = ModelCache(tmp_path / "cache")
    with pytest.raises(CacheWriteError) as caught:
        cache.get_or_train("fp", np.arange(40), recipe, 0, features=x, labels=y,
                           progress=False)
    message = str(caught.value)
    assert f"in the model cache {tmp_path / 'cache'}" in message and "ENOSPC" in message
    assert "Nothing half-written is kept" in message and "free space" in message
    assert caught.value.exit_code == 1 and caught.value.errno == errno.ENOSPC
    # no entry, no weights without their json, no temporary file: a rerun trains it again
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == []
    monkeypatch.undo()
    model = cache.get_or_train("fp", np.arange(40), recipe, 0, features=x, labels=y,
                               progress=False)
    assert not model.from_cache and cache.contains(model.cache_key)


def test_a_read_only_cache_folder_is_a_message_naming_the_folder(tmp_path, monkeypatch):
    import miaudit.train.model_cache as model_cache

    def read_only(state, path):
        raise OSError(errno.EROFS, "Read-only file system", path)
    monkeypatch.setattr(model_cache, "save_file", read_only)
    x, y, recipe = _tiny_job()
    with pytest.raises(CacheWriteError, match=r"read-only.*choose a writable folder.*"
                                              r"--cache-dir") as caught:
        ModelCache(tmp_path / "c").get_or_train("fp", np.arange(40), recipe, 0, features=x,
                                                labels=y, progress=False)
    assert caught.value.exit_code == 2


# --- the bank ---------------------------------------------------------------------------------

def _bank() -> SignalBank:
    rng = np.random.default_rng(0)
    return SignalBank(logits=rng.normal(size=(2, 6, 1, 3)).astype(np.float32),
                      labels=np.arange(6) % 3, membership=np.array([[1, 0] * 3, [0, 1] * 3],
                                                                   bool))


@pytest.mark.parametrize("number, code", [(errno.ENOSPC, 1), (errno.EROFS, 2)])
def test_a_bank_that_cannot_be_written_leaves_the_previous_one(tmp_path, monkeypatch, number,
                                                                code):
    import miaudit.signals.bank as bank_module

    path = tmp_path / "bank.npz"
    _bank().save(path)
    before = path.read_bytes()

    def full(handle, **arrays):
        handle.write(b"partial")
        raise OSError(number, "planted", str(path))
    monkeypatch.setattr(bank_module.np, "savez", full)
    with pytest.raises(BankWriteError) as caught:
        _bank().save(path)
    assert f"cannot write the signal bank {path}" in str(caught.value)
    assert errno.errorcode[number] in str(caught.value) and caught.value.exit_code == code
    assert "Nothing half-written is kept" in str(caught.value)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["bank.npz"]


# --- the report -------------------------------------------------------------------------------

def test_a_report_file_that_cannot_be_written_is_named(digits_bank, tmp_path, monkeypatch):
    """A write on a full disk names no file (the OS error has none): the report says which."""
    import miaudit.report.write as write
    from miaudit.api import attack

    result = attack(digits_bank, 0, ["loss"], seed=0)

    def full(path, content):
        raise OSError(errno.ENOSPC, "No space left on device")  # no filename, as write() has
    monkeypatch.setattr(write, "write_text", full)
    with pytest.raises(WriteError) as caught:
        write.write_report(result, tmp_path / "out")
    assert str(caught.value).startswith(f"cannot write the report file "
                                        f"{tmp_path / 'out' / 'scores.csv'}: no space left")
    assert caught.value.exit_code == 1


# --- through the command line -----------------------------------------------------------------

def test_a_full_disk_for_the_report_says_what_happened_what_to_do_and_what_was_kept(
        tiny_run_yaml, tmp_path, monkeypatch, capsys):
    import miaudit.pipeline.orchestrator as orchestrator

    report = tmp_path / "runs" / "tiny" / "report.html"

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(report))
    monkeypatch.setattr(orchestrator, "write_report", full)
    assert main(["run", str(tiny_run_yaml()), "--quiet"]) == 1
    err = capsys.readouterr().err
    _no_traceback(err)
    assert f"no space left on the device holding {report} (ENOSPC)" in err
    assert "to fix: free space on the disk mounted at" in err
    assert "kept: the output folder is replaced only when the command succeeds" in err
    assert "all 2 models this command trained are in the model cache" in err
    assert not report.exists()
    # the models are cached: the rerun trains nothing
    monkeypatch.undo()
    assert main(["run", str(tiny_run_yaml()), "--quiet"]) == 0
    trained = json.loads((tmp_path / "runs" / "tiny" / "training.json").read_text())
    assert trained["trained"] == 0 and trained["from_cache"] == 2


def test_a_full_cache_disk_through_the_command_line(tiny_run_yaml, tmp_path, monkeypatch,
                                                    capsys):
    import miaudit.train.model_cache as model_cache

    def full(state, path):
        raise _safetensor_error("Error while serializing: I/O error: No space left on device "
                                "(os error 28)")
    monkeypatch.setattr(model_cache, "save_file", full)
    assert main(["run", str(tiny_run_yaml()), "--quiet"]) == 1
    err = capsys.readouterr().err
    _no_traceback(err)
    assert "cannot store model" in err and str(tmp_path / "cache") in err and "ENOSPC" in err
    assert "no model of this command finished training and was stored" in err


def test_a_read_only_output_folder_is_a_message(tiny_run_yaml, tmp_path, monkeypatch, capsys):
    import os

    runs, mkdir = str(tmp_path / "runs"), os.mkdir

    def read_only(path, *args, **kwargs):
        if os.fspath(path).startswith(runs):
            raise OSError(errno.EROFS, "Read-only file system", os.fspath(path))
        return mkdir(path, *args, **kwargs)
    monkeypatch.setattr(os, "mkdir", read_only)
    assert main(["run", str(tiny_run_yaml()), "--quiet"]) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert "read-only" in err and runs in err and "--out" in err


def test_no_memory_left_is_a_message_and_other_errors_still_raise(monkeypatch, capsys,
                                                                  tmp_path):
    import miaudit.attacks as attacks


    def exhausted():
        raise MemoryError()
    monkeypatch.setattr(attacks, "list_attacks", exhausted)
    assert main(["attacks"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("miaudit: error: out of memory.") and "max_length" in err

    def full():
        raise _safetensor_error("I/O error: No space left on device (os error 28)")
    monkeypatch.setattr(attacks, "list_attacks", full)
    assert main(["attacks"]) == 1
    assert "(ENOSPC)" in capsys.readouterr().err

    def unnamed():  # a write on a full disk: the OS error names no file, the open one does
        with open(tmp_path / "big.bin", "wb") as handle:  # noqa: F841
            raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(attacks, "list_attacks", unnamed)
    assert main(["attacks"]) == 1
    assert f"holding {tmp_path / 'big.bin'} (ENOSPC)" in capsys.readouterr().err

    def bug():
        raise RuntimeError("a bug is a traceback, not a message")
    monkeypatch.setattr(attacks, "list_attacks", bug)
    with pytest.raises(RuntimeError):
        main(["attacks"])
