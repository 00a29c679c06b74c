"""Cache keys move with the code that trains (miaudit.cache.code_version), and `miaudit cache
info | prune` tell reachable entries from stale ones and remove only the stale ones."""

import ast
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import miaudit
from miaudit import version
from miaudit.cache import code_version
from miaudit.cli.cache_admin import GRACE_SECONDS
from miaudit.cli.main import main
from miaudit.train import ModelCache, Recipe, key_for, model_cache, trainer
from miaudit.train.model_cache import forgetting_key

RECIPE = Recipe(architecture="mlp", arch_params={"hidden": 16}, epochs=1, batch_size=64)
IDX = np.arange(0, 200, 2)
FP = "digits-v1"
OTHER_DIGEST = "0" * 64


@pytest.fixture(autouse=True)
def fresh_digests():
    """Digests are computed once per process: recompute them around tests that patch code."""
    code_version.trainer_digest.cache_clear()
    code_version.sklearn_fit_digest.cache_clear()
    yield
    code_version.trainer_digest.cache_clear()
    code_version.sklearn_fit_digest.cache_clear()


@pytest.fixture
def calls(monkeypatch):
    counter = {"n": 0}
    real = trainer.train_models

    def counting(recipe, features, labels, index_sets, *args, **kwargs):
        counter["n"] += len(index_sets)
        return real(recipe, features, labels, index_sets, *args, **kwargs)

    monkeypatch.setattr(trainer, "train_models", counting)
    return counter


def get(store, digits, seed=0):
    x, y = digits
    return store.get_or_train(FP, IDX, RECIPE, seed, features=x, labels=y, progress=False)


# --- the digest -------------------------------------------------------------------------------

CODE = '''
"""A module."""
from __future__ import annotations

LR = 0.1


def step(weights: list[float], grad: list[float]) -> list[float]:
    """One step."""
    return [w - LR * g for w, g in zip(weights, grad)]  # plain SGD
'''

SAME_CODE = '''
"""A module, reworded."""
from __future__ import annotations
# a comment

LR = 0.1


def step(weights: "Sequence[float]", grad) -> "list":
    """One step of
    plain SGD."""

    return [w - LR * g
            for w, g in zip(weights, grad)]
'''


def test_comments_docstrings_annotations_and_layout_do_not_move_the_digest():
    assert code_version.normalised_source(CODE) == code_version.normalised_source(SAME_CODE)
    for change in ("LR = 0.2", "return [w + LR * g", "-> list[float]:\n    return []\n#"):
        old = {"LR = 0.2": "LR = 0.1", "return [w + LR * g": "return [w - LR * g",
               "-> list[float]:\n    return []\n#": "-> list[float]:"}[change]
        changed = CODE.replace(old, change, 1)
        assert changed != CODE
        assert code_version.normalised_source(changed) != code_version.normalised_source(CODE)
    # a function left with only its docstring still parses back
    ast.parse(code_version.normalised_source('def f():\n    """doc"""\n'))


def test_the_digest_follows_the_file_on_disk(tmp_path, monkeypatch):
    package = tmp_path / "cv_probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    module = package / "trainmod.py"
    module.write_text(CODE)
    monkeypatch.syspath_prepend(str(tmp_path))
    name = "cv_probe_pkg.trainmod"
    first = code_version.code_digest([name])
    module.write_text(SAME_CODE)
    assert code_version.code_digest([name]) == first
    module.write_text(CODE.replace("LR = 0.1", "LR = 0.01"))
    assert code_version.code_digest([name]) != first


def _miaudit_imports(module: str) -> set[str]:
    """The miaudit modules `module` imports (module level or inside functions)."""
    source = code_version.read_source(module)
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # `from a import b` imports the module a.b when there is one, else names of a
            found |= {f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}")
                      else node.module for a in node.names}
    return {m for m in found if m.startswith("miaudit")}


def _is_module(name: str) -> bool:
    try:
        return code_version.importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def test_every_training_module_is_placed():
    """Each module of miaudit.train and miaudit.models, and each miaudit module a listed one
    imports, is either in the digest or listed as left out with why: a new training module
    cannot be forgotten."""
    listed, left_out = set(code_version.TRAINER_CODE), set(code_version.NOT_TRAINER_CODE)
    assert not listed & left_out
    root = os.path.dirname(miaudit.__file__)
    packages = {}
    for package in ("train", "models"):
        for name in os.listdir(os.path.join(root, package)):
            if name.endswith(".py"):
                stem = name[:-3]
                packages[f"miaudit.{package}" + ("" if stem == "__init__" else f".{stem}")] = 1
    imported = set().union(*(_miaudit_imports(m) for m in listed))
    unplaced = (set(packages) | imported) - listed - left_out
    assert not unplaced, f"place in code_version.TRAINER_CODE or NOT_TRAINER_CODE: {unplaced}"
    assert len(code_version.trainer_digest()) == 64
    for name in (*listed, *code_version.SKLEARN_FIT_CODE):
        assert isinstance(code_version.read_source(name), str), name


# --- keys -------------------------------------------------------------------------------------


def _edit_source(monkeypatch, module, edit):
    """Make the digest see `module`'s source edited by `edit` (what a process that imported
    the edited file sees)."""
    assert module in code_version.PINNED  # read when miaudit.train was imported
    monkeypatch.setitem(code_version.PINNED, module, edit(code_version.read_source(module)))
    code_version.trainer_digest.cache_clear()


def test_sources_are_read_as_the_code_is_imported(tmp_path, monkeypatch):
    """A file edited after the import does not move the digest of the process that runs the
    old code."""
    package = tmp_path / "cv_pinned_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text(CODE)
    monkeypatch.syspath_prepend(str(tmp_path))
    name = "cv_pinned_pkg.mod"
    code_version.pin_sources([name])
    first = code_version.code_digest([name])
    (package / "mod.py").write_text(CODE.replace("LR = 0.1", "LR = 0.01"))
    assert code_version.code_digest([name]) == first
    monkeypatch.delitem(code_version.PINNED, name)
    assert code_version.code_digest([name]) != first


def test_a_changed_training_loop_misses_the_cache_and_retrains(tmp_path, digits, calls,
                                                                monkeypatch):
    first = get(ModelCache(tmp_path), digits)
    key = key_for(FP, IDX, RECIPE, 0)
    with monkeypatch.context() as patch:  # a comment and a reworded docstring: still a hit
        _edit_source(patch, "miaudit.train.loop",
                     lambda s: "# reviewed\n" + s.replace('"""', '"""Reworded. ', 1))
        assert key_for(FP, IDX, RECIPE, 0) == key
        assert get(ModelCache(tmp_path), digits).from_cache and calls["n"] == 1
    with monkeypatch.context() as patch:  # a change to the loop's code: a miss
        _edit_source(patch, "miaudit.train.loop", lambda s: s + "\n_CHANGED = True\n")
        assert key_for(FP, IDX, RECIPE, 0) != key
        store = ModelCache(tmp_path)
        again = get(store, digits)
        assert not again.from_cache and calls["n"] == 2 and store.stats.misses == 1
        meta = json.loads((tmp_path / f"{key_for(FP, IDX, RECIPE, 0)}.json").read_text())
        assert meta["trainer_digest"] == code_version.trainer_digest()
    # the training itself is unchanged: the same weights from the same seed
    for name, tensor in first.module.state_dict().items():
        assert (again.module.state_dict()[name] == tensor).all()
    code_version.trainer_digest.cache_clear()
    assert get(ModelCache(tmp_path), digits).from_cache and calls["n"] == 2


def test_a_changed_trainer_digest_or_package_version_misses(tmp_path, digits, calls,
                                                             monkeypatch):
    get(ModelCache(tmp_path), digits)
    key = key_for(FP, IDX, RECIPE, 0)
    meta = json.loads((tmp_path / f"{key}.json").read_text())
    assert meta["trainer_digest"] == code_version.trainer_digest()
    assert (meta["miaudit_version"], meta["format"]) == (
        version.__version__, model_cache.CACHE_FORMAT)
    with monkeypatch.context() as patch:
        patch.setattr(code_version, "trainer_digest", lambda: OTHER_DIGEST)
        assert key_for(FP, IDX, RECIPE, 0) != key
        assert not get(ModelCache(tmp_path), digits).from_cache and calls["n"] == 2
    with monkeypatch.context() as patch:
        patch.setattr(version, "__version__", "99.0")
        other = key_for(FP, IDX, RECIPE, 0)
        assert other != key
        assert not get(ModelCache(tmp_path), digits).from_cache and calls["n"] == 3
        assert json.loads((tmp_path / f"{other}.json").read_text())["miaudit_version"] == "99.0"
    assert get(ModelCache(tmp_path), digits).from_cache and calls["n"] == 3


def test_forgetting_and_checkpoint_keys_move_with_the_trainer(monkeypatch):
    target = key_for(FP, IDX, RECIPE, 0)
    forgetting = forgetting_key(target, FP, IDX, RECIPE, 7)
    monkeypatch.setattr(code_version, "trainer_digest", lambda: OTHER_DIGEST)
    assert key_for(FP, IDX, RECIPE, 0) != target
    # even under the old target key, the copy's own fine-tuning code is in its key
    assert forgetting_key(target, FP, IDX, RECIPE, 7) != forgetting


def _fit(root, digits, seed=0):
    from sklearn.linear_model import LogisticRegression

    from miaudit.external.references import SklearnCache

    x, y = digits
    store = SklearnCache(root)
    store.get_or_fit(LogisticRegression(max_iter=20), x[:100].reshape(100, -1), y[:100], FP,
                     np.arange(100), seed)
    return store


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_sklearn_references_miss_when_the_fitting_code_or_a_version_changes(
    tmp_path, digits, monkeypatch
):
    import sklearn

    assert _fit(tmp_path, digits).misses == 1
    assert _fit(tmp_path, digits).hits == 1
    (meta_path,) = tmp_path.glob("*.json")
    meta = json.loads(meta_path.read_text())
    assert meta["fit_digest"] == code_version.sklearn_fit_digest()
    assert (meta["miaudit_version"], meta["sklearn_version"]) == (version.__version__,
                                                                  sklearn.__version__)
    for target, name, value in [(code_version, "sklearn_fit_digest", lambda: OTHER_DIGEST),
                                (version, "__version__", "99.0"),
                                (sklearn, "__version__", "0.1")]:
        with monkeypatch.context() as patch:
            patch.setattr(target, name, value)
            assert _fit(tmp_path, digits).misses == 1, name
    assert _fit(tmp_path, digits).hits == 1


# --- miaudit cache info | prune ---------------------------------------------------------------


def _dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _age(path, seconds=2 * GRACE_SECONDS):
    old = time.time() - seconds
    os.utime(path, (old, old))


@pytest.fixture
def mixed_cache(tmp_path, digits, monkeypatch):
    """A cache holding entries of every kind; returns (root, {kind: [paths]})."""
    root = tmp_path / "cache"

    def entry(seed):
        get(ModelCache(root), digits, seed=seed)
        key = key_for(FP, IDX, RECIPE, seed)
        return [root / f"{key}.json", root / f"{key}.safetensors"]

    reachable = entry(0)
    with monkeypatch.context() as patch:  # trained by other training code
        patch.setattr(code_version, "trainer_digest", lambda: OTHER_DIGEST)
        other_code = entry(1)
    with monkeypatch.context() as patch:  # an older miaudit
        patch.setattr(version, "__version__", "0.0.1")
        old_version = entry(2)
    # written before versions were recorded: the json without them, under another key
    legacy_key = "a" * 64
    meta = json.loads(reachable[0].read_text())
    for name in ("trainer_digest", "torch_version"):
        del meta[name]
    legacy = [root / f"{legacy_key}.json", root / f"{legacy_key}.safetensors"]
    legacy[0].write_text(json.dumps(meta))
    legacy[1].write_bytes(reachable[1].read_bytes())
    # loose files
    key = "b" * 64
    dead_temp = root / f".{key}.safetensors.{_dead_pid()}-abcd1234.tmp"
    old_temp = root / f".{key}.json.k3j4_9x2.tmp"  # before pids were in the names
    live_temp = root / f".{key}.json.{os.getpid()}-zz99yy88.tmp"
    young_temp = root / f".{'c' * 64}.safetensors.{_dead_pid()}-qwer5678.tmp"
    orphan_weights = root / f"{'d' * 64}.safetensors"
    young_weights = root / f"{'e' * 64}.safetensors"
    corrupt = root / f"{'f' * 64}.json"
    for path in (dead_temp, old_temp, live_temp, young_temp, orphan_weights, young_weights):
        path.write_bytes(b"x" * 100)
    corrupt.write_text("{not json")
    for path in (dead_temp, old_temp, live_temp, orphan_weights, corrupt):
        _age(path)
    (root / "pretrained" / "all-MiniLM-L6-v2-0.1.2").mkdir(parents=True)
    (root / "pretrained" / "all-MiniLM-L6-v2-0.1.2" / "EXTRACTED").write_text("zip\n")
    (root / "notes.txt").write_text("mine\n")
    # scikit-learn references: one of this code, one of an older miaudit
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _fit(root / "sklearn", digits, seed=0)
        sklearn_reachable = sorted((root / "sklearn").iterdir())
        with monkeypatch.context() as patch:
            patch.setattr(version, "__version__", "0.0.1")
            _fit(root / "sklearn", digits, seed=1)
    sklearn_stale = sorted(set((root / "sklearn").iterdir()) - set(sklearn_reachable))
    return root, {
        "reachable": reachable + sklearn_reachable,
        "stale": other_code + old_version + legacy + sklearn_stale,
        "orphans": [dead_temp, old_temp, orphan_weights, corrupt],
        "kept": [live_temp, young_temp, young_weights, root / "notes.txt",
                 root / "pretrained" / "all-MiniLM-L6-v2-0.1.2" / "EXTRACTED"],
    }


def _files(root):
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_info_counts_reachable_stale_orphan_and_corrupt(mixed_cache, capsys):
    root, kinds = mixed_cache
    assert main(["cache", "info", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert "7 entries" in out  # torch: 1 reachable, 3 stale, 1 corrupt; sklearn: 1 and 1
    assert "2 reachable by this code" in out and "4 stale" in out and "1 corrupt" in out
    assert "orphan files: 3" in out and "files that may be in use (kept): 3" in out
    digest = code_version.trainer_digest()[:12]
    lines = out.splitlines()
    assert any(line.split()[:2] == ["torch", digest] and line.endswith("reachable")
               for line in lines)
    assert any(line.split()[:2] == ["torch", OTHER_DIGEST[:12]] and "stale: other trainer_digest"
               in line for line in lines)
    assert any("0.0.1" in line and "stale: other miaudit_version" in line and "torch" in line
               for line in lines)
    assert any(line.split()[:2] == ["torch", "(none)"]
               and "written before code versions were recorded" in line for line in lines)
    assert any(line.startswith("  sklearn ") and "stale: other miaudit_version" in line
               for line in lines)
    assert "not managed by prune: pretrained/" in out and "notes.txt" in out
    assert f"pid {os.getpid()}) still runs" in out
    assert "would remove 5 entries and 3 orphan files" in out  # 4 stale, 1 corrupt
    assert set(kinds["kept"]) <= set(_files(root))


def test_prune_dry_run_lists_and_removes_nothing(mixed_cache, capsys):
    root, kinds = mixed_cache
    before = _files(root)
    assert main(["cache", "prune", "--dry-run", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert _files(root) == before
    assert "dry run: would remove 5 entries and 3 orphan files" in out
    for path in kinds["stale"] + kinds["orphans"]:
        name = path.stem if path.suffix in (".json", ".safetensors", ".skops") else path.name
        assert name in out, path.name
    for path in kinds["reachable"]:
        assert path.stem not in out


def test_prune_removes_exactly_the_stale_entries_and_orphans(mixed_cache, capsys, digits,
                                                             calls):
    root, kinds = mixed_cache
    before = set(_files(root))
    assert main(["cache", "prune", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    removed = set(kinds["stale"] + kinds["orphans"])
    assert set(_files(root)) == before - removed
    assert "removed 5 entries and 3 orphan files" in out and "freed" in out
    assert "kept 2 reachable entries" in out
    # what this code reaches is still served from the cache
    assert get(ModelCache(root), digits).from_cache and calls["n"] == 0
    assert _fit(root / "sklearn", digits).hits == 1
    assert main(["cache", "info", "--cache-dir", str(root)]) == 0
    again = capsys.readouterr().out
    assert "2 reachable by this code" in again and "0 stale" in again and "0 corrupt" in again
    assert main(["cache", "prune", "--cache-dir", str(root)]) == 0
    assert "removed 0 entries and 0 orphan files" in capsys.readouterr().out


def test_prune_verify_removes_an_entry_whose_weights_do_not_match(tmp_path, digits, capsys):
    get(ModelCache(tmp_path), digits)
    key = key_for(FP, IDX, RECIPE, 0)
    weights = tmp_path / f"{key}.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[-5] ^= 0xFF
    weights.write_bytes(bytes(blob))
    assert main(["cache", "info", "--cache-dir", str(tmp_path)]) == 0
    assert "1 reachable by this code" in capsys.readouterr().out  # not hashed by default
    assert main(["cache", "info", "--verify", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "0 reachable by this code" in out and "1 corrupt" in out
    assert "hash does not match" in out
    assert main(["cache", "prune", "--verify", "--cache-dir", str(tmp_path)]) == 0
    assert "kept corrupt entry" in capsys.readouterr().out  # too young to be sure
    for path in tmp_path.iterdir():
        _age(path)
    assert main(["cache", "prune", "--verify", "--cache-dir", str(tmp_path)]) == 0
    assert "removed 1 entry and 0 orphan files" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_info_on_a_missing_folder(tmp_path, capsys):
    assert main(["cache", "info", "--cache-dir", str(tmp_path / "none")]) == 0
    assert "no model cache at" in capsys.readouterr().out
    assert main(["cache", "prune", "--cache-dir", str(tmp_path / "none")]) == 0
    assert "nothing to prune" in capsys.readouterr().out


def test_the_cache_command_defaults_to_the_cache_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MIAUDIT_CACHE_DIR", str(tmp_path))
    assert main(["cache", "info"]) == 0
    assert f"model cache {tmp_path}" in capsys.readouterr().out


def test_the_temp_file_names_carry_the_writer_pid(tmp_path):
    from miaudit.io import TEMP_FILE, atomic_path

    with atomic_path(tmp_path / "x.json") as tmp:
        match = TEMP_FILE.match(tmp.name)
        assert match and match["name"] == "x.json" and match["pid"] == str(os.getpid())
    assert TEMP_FILE.match(".x.json.k3j4_9x2.tmp")["pid"] is None
