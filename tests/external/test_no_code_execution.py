"""No implicit code execution in `miaudit audit` (issue #34): a malicious pickle planted in each
place the audit reads (its scikit-learn reference cache, an outputs/data/rows/bank .npz, torch
weights, a CIFAR batch) never runs, and the command ends with a clear error or a refit, never a
traceback; the code a config or flag names (--model, --predict, model.module) is imported only
after every other input was checked; the user's own --estimator pickle, the one documented
exception, is warned about in the command's output.

Every payload creates a marker file when unpickled (``open(marker, "w")``): each test first
proves its payload live, then that the marker is absent after miaudit read the file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import warnings
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pytest
import torch
import yaml

from miaudit.cli.main import main
from miaudit.external import references
from miaudit.external.references import SKLEARN_SUFFIX, SklearnCache, skops_types

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


class Planted:
    """Unpickling this object creates ``marker`` (``open(marker, "w")``, no shell): proof
    that the code stored in a pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.marker, "w"))


class SetState:
    """An object whose ``__setstate__`` creates the file its state names: what a skops file
    naming this class would run if its type were trusted."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __setstate__(self, state: dict[str, Any]) -> None:
        Path(state["marker"]).touch()
        self.__dict__.update(state)


@pytest.fixture
def marker(tmp_path) -> Path:
    path = tmp_path / "PWNED"
    live = tmp_path / "LIVE"
    pickle.loads(pickle.dumps(Planted(live)))  # the payload runs when unpickled ...
    assert live.exists()
    live.unlink()
    yield path
    assert not path.exists(), "a planted pickle ran"  # ... and never when miaudit reads it


def _digits_args(user) -> list[str]:
    return ["--data", "digits", "--members", str(user["members"]),
            "--nonmembers", str(user["nonmembers"]), "--quiet"]


# --- the scikit-learn reference cache ---------------------------------------------------------


def _plant_entry(json_path: Path, blob: bytes, suffix: str = SKLEARN_SUFFIX) -> Path:
    """Replace an entry's estimator file by ``blob`` and record its sha256 in the json, as
    someone who can write the cache folder would."""
    weights = json_path.with_suffix(suffix)
    weights.write_bytes(blob)
    meta = json.loads(json_path.read_text())
    meta["weights_sha256"] = hashlib.sha256(blob).hexdigest()
    json_path.write_text(json.dumps(meta))
    return weights


def _sklearn_audit(user, tmp_path, name: str) -> list[str]:
    return ["audit", "--estimator", str(user["mlp"]), *_digits_args(user),
            "--public-rows", str(user["public"]), "--references", "1",
            "--attacks", "loss,rmia", "--cache-dir", str(tmp_path / "cache"),
            "--out", str(tmp_path / name)]


def test_a_pickle_planted_in_the_sklearn_cache_never_runs_and_is_refitted(
    user, tmp_path, marker, caplog, capsys
):
    assert main(_sklearn_audit(user, tmp_path, "first")) == 0
    (entry,) = (tmp_path / "cache" / "sklearn").glob("*.json")
    assert entry.with_suffix(SKLEARN_SUFFIX).read_bytes()[:2] == b"PK"  # a skops zip
    planted = _plant_entry(entry, pickle.dumps(Planted(marker)))
    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(_sklearn_audit(user, tmp_path, "second")) == 0
    assert f"scikit-learn cache entry {planted} is corrupt or not miaudit's" in caplog.text
    assert "refitting it" in caplog.text and "Traceback" not in capsys.readouterr().err
    summary = json.loads((tmp_path / "second" / "summary.json").read_text())
    assert summary["references_trained"] == 1 and summary["references_from_cache"] == 0
    # the refit replaced the planted file with a skops file of its own, used by the next audit
    assert planted.read_bytes()[:2] == b"PK"
    assert main(_sklearn_audit(user, tmp_path, "third")) == 0
    third = json.loads((tmp_path / "third" / "summary.json").read_text())
    assert third["references_from_cache"] == 1


def _fitted_entry(user, root: Path) -> tuple[SklearnCache, Any, Path, tuple]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = digits.data[:300] / 16.0, digits.target[:300]
    estimator = joblib.load(user["mlp"])  # the user's own file (the test made it)
    args = (estimator, x, y, "fp", np.arange(300), 7)
    cache = SklearnCache(root)
    cache.get_or_fit(*args)
    (entry,) = root.glob("*.json")
    return cache, estimator, entry, args


def _skops(obj: Any) -> bytes:
    import skops.io as sio

    return sio.dumps(obj)


def _foreign_estimator(marker: Path) -> Any:
    """A fitted scikit-learn estimator carrying an object of a class of this test module."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(max_iter=5).fit(np.eye(10), np.arange(10))
    model.extra_ = SetState(marker)
    return model


@pytest.mark.parametrize("plant", ["pickle", "joblib", "foreign type", "a dict",
                                   "another estimator", "truncated zip"])
def test_every_planted_sklearn_entry_is_refitted_with_a_warning(
    user, tmp_path, marker, caplog, plant
):
    """The issue's cases on the cache itself: a pickle (or joblib dump) in place of the entry,
    a valid skops file holding a type outside scikit-learn/numpy/scipy (whose __setstate__
    would run), or something that is not the estimator (the issue's raw AttributeError)."""
    cache, estimator, entry, args = _fitted_entry(user, tmp_path / "cache")
    if plant == "joblib":
        path = tmp_path / "evil.joblib"
        joblib.dump(Planted(marker), path)
        blob = path.read_bytes()
    elif plant == "foreign type":
        blob = _skops(_foreign_estimator(marker))
        import skops.io as sio

        live = tmp_path / "live"
        bait = _skops(_foreign_estimator(live))
        sio.loads(bait, trusted=sio.get_untrusted_types(data=bait))  # trusted, it would run
        assert live.exists()
    elif plant == "a dict":
        blob = _skops({"coefs_": [1, 2, 3]})
    elif plant == "another estimator":
        from sklearn.naive_bayes import GaussianNB

        blob = _skops(GaussianNB().fit(np.eye(10), np.arange(10)))
    elif plant == "truncated zip":
        blob = entry.with_suffix(SKLEARN_SUFFIX).read_bytes()[:-100]
    else:
        blob = pickle.dumps(Planted(marker))
    planted = _plant_entry(entry, blob)
    again = SklearnCache(tmp_path / "cache")
    with caplog.at_level(logging.WARNING):
        model, _ = again.get_or_fit(*args)
    assert again.corrupt == 1 and again.misses == 1 and again.hits == 0
    assert f"scikit-learn cache entry {planted} is corrupt or not miaudit's" in caplog.text
    reason = {"foreign type": "not scikit-learn's, numpy's or scipy's",
              "a dict": "it holds a builtins.dict, not a",
              "another estimator": "it holds a sklearn.naive_bayes.GaussianNB"}
    assert reason.get(plant, "") in caplog.text
    assert type(model) is type(estimator) and model.random_state == 7
    assert SklearnCache(tmp_path / "cache").get_or_fit(*args)[0].random_state == 7


def test_an_old_joblib_entry_is_never_read_and_is_pruned(user, tmp_path, marker, capsys):
    """Format 1's ``<key>.joblib`` pickles are unreachable: a key of this code never names
    them, `cache info` lists them stale and `cache prune` removes them, unread."""
    root = tmp_path / "cache"
    _fitted_entry(user, root / "sklearn")
    old = "a" * 64
    blob = pickle.dumps(Planted(marker))
    (root / "sklearn" / f"{old}.joblib").write_bytes(blob)
    (root / "sklearn" / f"{old}.json").write_text(json.dumps({
        "format": 1, "weights_sha256": hashlib.sha256(blob).hexdigest(), "fit_seconds": 1.0}))
    assert main(["cache", "info", "--verify", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert "1 reachable by this code" in out and "1 stale" in out and "0 corrupt" in out
    assert "stale: .joblib pickle of an earlier format, never loaded" in out
    assert main(["cache", "prune", "--cache-dir", str(root)]) == 0
    assert f"stale sklearn entry {old}" in capsys.readouterr().out
    assert sorted(p.suffix for p in (root / "sklearn").iterdir()) == [".json", SKLEARN_SUFFIX]


def test_an_estimator_of_a_class_of_ones_own_is_refitted_not_cached(tmp_path):
    """The cache loads only scikit-learn, numpy and scipy types, so it never stores what it
    would not load back: references of a user's subclass are fitted every audit (a note)."""
    from sklearn.linear_model import LogisticRegression

    class Mine(LogisticRegression):
        pass

    x, y = np.random.default_rng(0).normal(size=(60, 4)), np.arange(60) % 3
    cache = SklearnCache(tmp_path)
    model, _ = cache.get_or_fit(Mine(max_iter=50), x, y, "fp", np.arange(60), 3)
    assert isinstance(model, Mine) and list(tmp_path.iterdir()) == []
    assert "are not cached" in cache.notes[0] and "Mine" in cache.notes[0]


@pytest.mark.parametrize("name, loaders, trusted", [
    ("sklearn.tree._tree.Tree", {"TreeNode"}, True),
    ("sklearn.neural_network._stochastic_optimizers.AdamOptimizer", {"ObjectNode"}, True),
    ("sklearn.feature_selection._univariate_selection.f_classif", {"FunctionNode"}, True),
    ("builtins.exec", {"FunctionNode"}, False),
    ("builtins.eval", {"ObjectNode"}, False),
    ("os.system", {"FunctionNode"}, False),
    ("subprocess.Popen", {"ConstructorFromReduceNode"}, False),
    ("numpy.memmap", {"ConstructorFromReduceNode"}, False),  # would write a file
    ("numpy.testing.runstring", {"FunctionNode"}, False),  # exec() in numpy's test helpers
    ("sklearn.utils._param_validation.Integral", {"ObjectNode"}, False),  # numbers', re-exported
    ("sklearn.nonexistent_module.Thing", {"ObjectNode"}, False),  # would need an import
    ("sklearnx.Evil", {"ObjectNode"}, False),
])
def test_the_trusted_types_are_library_classes_already_imported(name, loaders, trusted):
    import sklearn.feature_selection  # noqa: F401  (as a pipeline holding f_classif would)
    import sklearn.neural_network  # noqa: F401
    import sklearn.tree  # noqa: F401
    import sklearn.utils._param_validation  # noqa: F401

    assert references._library_type(name, loaders) is trusted


def test_the_trusted_list_is_computed_from_the_file_never_true(tmp_path):
    from sklearn.ensemble import RandomForestClassifier

    forest = RandomForestClassifier(3, random_state=0).fit(np.eye(10), np.arange(10))
    trusted, refused = skops_types(_skops(forest))
    assert trusted == ["sklearn.tree._tree.Tree"] and refused == []
    trusted, refused = skops_types(_skops(_foreign_estimator(tmp_path / "m")))
    assert trusted == [] and refused == [f"{SetState.__module__}.SetState"]


# --- the user's --estimator pickle: the one exception, warned about ---------------------------


def test_the_estimator_pickle_is_warned_about_in_the_output(user, tmp_path, caplog, capsys):
    with caplog.at_level(logging.WARNING):
        assert main(["audit", "--estimator", str(user["mlp"]), *_digits_args(user),
                     "--references", "0", "--attacks", "loss",
                     "--out", str(tmp_path / "run")]) == 0
    said = [r for r in caplog.records if "unpickles it" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING  # shown without -v
    assert "runs any code stored in the file" in said[0].getMessage()
    assert "--outputs" in said[0].getMessage() and "--predict" in said[0].getMessage()
    out = capsys.readouterr().out
    assert f"note: loading {user['mlp']} unpickles it" in out  # and in the report's notes
    assert "unpickles it" in (tmp_path / "run" / "report.html").read_text()


def test_a_missing_estimator_is_refused_before_any_warning(user, tmp_path, caplog, capsys):
    with caplog.at_level(logging.WARNING):
        assert main(["audit", "--estimator", str(tmp_path / "none.joblib"),
                     *_digits_args(user), "--out", str(tmp_path / "run")]) == 2
    assert "estimator file" in capsys.readouterr().err and "unpickles" not in caplog.text


# --- code named by --model / --predict / model.module: imported after every other check -------

EVIL_MODULE = '''
import pathlib
pathlib.Path({marker!r}).touch()  # runs at import

import numpy as np
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, hidden: int = 32, classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(),
                                  nn.Linear(hidden, classes))

    def forward(self, x):
        return self.body(x)


def predict_proba(x):
    z = x.reshape(len(x), -1) @ np.random.default_rng(0).normal(size=(64, 10))
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
'''


@pytest.fixture
def evil(tmp_path) -> tuple[Path, Path]:
    """A module that creates a marker file when imported, and that marker."""
    imported = tmp_path / "IMPORTED"
    path = tmp_path / "evil.py"
    path.write_text(EVIL_MODULE.format(marker=str(imported)))
    return path, imported


def _torch_args(user, evil_py, weights, **over) -> list[str]:
    args = {"--model": f"{evil_py}:Net", "--weights": str(weights), "--data": "digits",
            "--members": str(user["members"]), "--nonmembers": str(user["nonmembers"]),
            "--public-rows": str(user["public"]), "--references": "1",
            "--recipe": "{optimizer: adam, lr: 0.01, epochs: 1, batch_size: 64}",
            "--attacks": "loss,rmia"}
    args.update(over)
    return ["audit", *[x for kv in args.items() for x in kv if kv[1] is not None], "--quiet"]


def test_a_model_class_with_a_missing_weights_file_is_never_imported(
    user, tmp_path, evil, capsys
):
    """The issue's case: `--model evil.py:Class` with a missing --weights file is refused
    with the weights error, and the module never ran."""
    evil_py, imported = evil
    missing = tmp_path / "missing.safetensors"
    assert main([*_torch_args(user, evil_py, missing), "--out", str(tmp_path / "run"),
                 "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert f"weights file {missing} does not exist" in err and "Traceback" not in err
    assert not imported.exists()
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("case", ["members file", "member rows", "recipe key",
                                  "public pool", "attacks", "weights content"])
def test_every_other_input_is_checked_before_the_model_module_is_imported(
    user, split, tmp_path, evil, capsys, case
):
    evil_py, imported = evil
    (tmp_path / "bad_rows.txt").write_text("1\n2\n5000\n")
    np.savetxt(tmp_path / "few.txt", split["public"][:100], fmt="%d")  # < the 300 members
    torch.save({"body.1.weight": torch.zeros(3)}, tmp_path / "wrong.pt")
    over, message = {
        "members file": ({"--members": str(tmp_path / "none.txt")}, "does not exist"),
        "member rows": ({"--members": str(tmp_path / "bad_rows.txt")}, "5000"),
        "recipe key": ({"--recipe": "{epohcs: 3}"}, "epohcs"),
        "public pool": ({"--public-rows": str(tmp_path / "few.txt")}, "public pool has only"),
        "attacks": ({"--attacks": "no-such-attack"}, "no-such-attack"),
        "weights content": ({"--weights": str(tmp_path / "wrong.pt")}, None),
    }[case]
    weights = over.pop("--weights", user["safetensors"])
    assert main([*_torch_args(user, evil_py, weights, **over),
                 "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert "miaudit: error:" in err and (message is None or message in err)
    if case != "weights content":  # a state dict of tensors, read without the class
        assert not imported.exists(), case
    else:  # its keys are checked against the class, once imported: the weights still first
        assert "do not fit the architecture" in err


def test_a_config_naming_code_is_checked_before_it_is_imported(user, tmp_path, evil, capsys):
    evil_py, imported = evil
    config = {"model": {"module": f"{evil_py}:Net", "weights": "missing.safetensors"},
              "data": {"dataset": "digits", "members": str(user["members"])}}
    (tmp_path / "audit.yaml").write_text(yaml.safe_dump(config))
    assert main(["audit", "--config", str(tmp_path / "audit.yaml"),
                 "--out", str(tmp_path / "run")]) == 2
    assert "missing.safetensors does not exist" in capsys.readouterr().err
    assert not imported.exists()


def test_a_prediction_function_is_imported_only_after_the_data_and_rows(
    user, tmp_path, evil, capsys
):
    evil_py, imported = evil
    base = ["audit", "--predict", f"{evil_py}:predict_proba", "--data", "digits",
            "--nonmembers", str(user["nonmembers"]), "--attacks", "loss", "--quiet",
            "--out", str(tmp_path / "run")]
    assert main([*base, "--members", str(tmp_path / "none.txt")]) == 2
    assert "does not exist" in capsys.readouterr().err and not imported.exists()
    # a class named as a prediction function is still refused, once the data are checked
    assert main([*base, "--members", str(user["members"]), "--predict",
                 f"{evil_py}:Net"]) == 2
    assert "not a prediction function" in capsys.readouterr().err
    # all inputs good: the module was imported, which ran it (as the docs and --help say)
    assert imported.exists()
    assert main([*base, "--members", str(user["members"])]) == 0


def test_the_python_api_imports_a_named_function_only_after_the_checks(user, tmp_path, evil):
    import miaudit
    from miaudit.errors import DataError

    evil_py, imported = evil
    with pytest.raises(DataError, match="does not exist"):
        miaudit.audit(model=f"{evil_py}:predict_proba", data="digits",
                      members=tmp_path / "none.txt", references=0, attacks="loss",
                      out=tmp_path / "run", progress=False)
    assert not imported.exists()


# --- planted pickles in the files the audit reads ---------------------------------------------


def _object_npz(path: Path, marker: Path, **arrays: Any) -> Path:
    np.savez(path, **arrays, evil=np.array([Planted(marker)], dtype=object))
    return path


def test_an_outputs_npz_holding_a_pickle_is_refused(user, tmp_path, marker, capsys):
    path = tmp_path / "outputs.npz"
    np.savez(path, logits=np.array([Planted(marker)], dtype=object))
    assert main(["audit", "--outputs", str(path), *_digits_args(user),
                 "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"cannot read outputs file {path}" in err and "object arrays are refused" in err


def test_a_data_npz_holding_a_pickle_is_refused(user, tmp_path, marker, capsys):
    path = tmp_path / "data.npz"
    np.savez(path, X=np.array([[Planted(marker)]] * 4, dtype=object), y=np.arange(4))
    np.savez(tmp_path / "out.npz", logits=np.zeros((4, 4)))
    assert main(["audit", "--outputs", str(tmp_path / "out.npz"), "--data", str(path),
                 "--members", str(user["members"]), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "object arrays are refused" in err and "Traceback" not in err


def test_a_rows_npy_holding_a_pickle_is_refused(user, tmp_path, marker, capsys):
    path = tmp_path / "members.npy"
    np.save(path, np.array([Planted(marker)], dtype=object))
    assert main(["audit", "--predict", f"{user['nets']}:predict_proba", "--data", "digits",
                 "--members", str(path), "--out", str(tmp_path / "run")]) == 2
    assert "is not a list of integer row indices" in capsys.readouterr().err


def test_a_bank_holding_a_pickle_is_refused(tmp_path, marker, capsys):
    path = _object_npz(tmp_path / "bank.npz", marker, logits=np.zeros((2, 3, 1, 2)),
                       labels=np.zeros(3, dtype=np.int64),
                       membership=np.zeros((2, 3), dtype=bool))
    assert main(["attack", str(path), "--target", "0", "--out", str(tmp_path / "out")]) == 2
    assert f"bank file {path} cannot be read" in capsys.readouterr().err


def test_torch_weights_holding_a_pickle_are_refused(user, tmp_path, marker, evil, capsys):
    evil_py, imported = evil
    weights = tmp_path / "model.pt"
    torch.save({"body.1.weight": Planted(marker)}, weights)
    assert main([*_torch_args(user, evil_py, weights), "--out", str(tmp_path / "run"),
                 "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert "cannot be loaded with torch.load(weights_only=True)" in err
    assert not imported.exists()  # and the class was not imported for it


def test_a_cifar_batch_holding_a_pickle_is_refused(user, tmp_path, marker, capsys):
    folder = tmp_path / "data" / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (folder / name).write_bytes(pickle.dumps({b"data": Planted(marker)}, protocol=2))
    np.savez(tmp_path / "out.npz", logits=np.zeros((4, 10)))
    assert main(["audit", "--outputs", str(tmp_path / "out.npz"), "--data", "cifar10",
                 "--data-dir", str(tmp_path / "data"), "--members", str(user["members"]),
                 "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "refusing to unpickle" in err and "data_batch_1" in err


def test_torch_reference_cache_entry_replaced_by_a_pickle_is_retrained(
    user, tmp_path, marker, caplog, capsys
):
    """A model-cache entry (safetensors + json) whose weights someone replaced by a pickle,
    with its sha256 updated: read with safetensors, refused, retrained with a warning."""
    args = [*_torch_args(user, user["nets"], user["safetensors"]),
            "--cache-dir", str(tmp_path / "cache")]
    assert main([*args, "--out", str(tmp_path / "first")]) == 0
    (entry,) = (tmp_path / "cache").glob("*.json")
    planted = _plant_entry(entry, pickle.dumps(Planted(marker)), ".safetensors")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main([*args, "--out", str(tmp_path / "second")]) == 0
    assert entry.stem in caplog.text and "corrupt" in caplog.text
    assert "Traceback" not in capsys.readouterr().err
    assert planted.read_bytes()[:1] != b"\x80"  # retrained: safetensors again
    summary = json.loads((tmp_path / "second" / "summary.json").read_text())
    assert summary["references_trained"] == 1


def test_payloads_are_live(tmp_path):
    """The planted files would run their payload if read the unsafe way."""
    marker = tmp_path / "m"
    path = _object_npz(tmp_path / "x.npz", marker)
    with np.load(path, allow_pickle=True) as data:
        data["evil"]
    assert marker.exists()
    marker.unlink()
    torch.save({"w": Planted(marker)}, tmp_path / "x.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.load(tmp_path / "x.pt", weights_only=False)
    assert marker.exists()
    marker.unlink()
    joblib.load(_write(tmp_path / "x.joblib", pickle.dumps(Planted(marker))))
    assert marker.exists()


def _write(path: Path, blob: bytes) -> Path:
    path.write_bytes(blob)
    return path


def test_a_hugging_face_folder_with_a_pickled_bin_is_refused(tmp_path, marker, capsys):
    """transformers reads a folder's pytorch_model.bin with torch.load(weights_only=True): the
    planted pickle never runs (and no trust_remote_code: the folder's own code never runs)."""
    transformers = pytest.importorskip("transformers")
    from miaudit.models.text import train_bpe

    texts = [f"text number {i} about {'cats' if i % 2 else 'dogs'}" for i in range(80)]
    (tmp_path / "texts.csv").write_text(
        "text,label\n" + "".join(f"{t},{i % 4}\n" for i, t in enumerate(texts)))
    np.savetxt(tmp_path / "members.txt", np.arange(20), fmt="%d")
    folder = tmp_path / "clf"
    with torch.random.fork_rng():
        transformers.BertForSequenceClassification(transformers.BertConfig(
            vocab_size=300, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=32, num_labels=4,
            pad_token_id=0)).save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=train_bpe(texts, vocab_size=300), pad_token="<pad>", bos_token="<s>",
        eos_token="</s>").save_pretrained(folder)
    (folder / "model.safetensors").unlink()
    torch.save({"bert.embeddings.word_embeddings.weight": Planted(marker)},
               folder / "pytorch_model.bin")
    argv = ["audit", "--hf-model", str(folder), "--data", str(tmp_path / "texts.csv"),
            "--text-column", "text", "--label-column", "label",
            "--members", str(tmp_path / "members.txt"), "--references", "0",
            "--attacks", "loss", "--quiet", "--out", str(tmp_path / "run")]
    code = main(argv)  # nothing ran (the marker fixture checks): a message, no traceback
    assert code == 2 and "Weights only load failed" in capsys.readouterr().err
