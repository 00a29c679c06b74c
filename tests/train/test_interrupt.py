"""Ctrl-C during training: every finished model (stack) is already cached, the message says
exactly how many, and a rerun trains only the rest."""

import numpy as np
import pytest
import yaml

from miaudit.cli.main import main
from miaudit.config import config_from_dict
from miaudit.pipeline import build_bank
from miaudit.train import ModelCache, Recipe, stacked
from miaudit.train.ledger import training_ledger

RECIPE = Recipe(architecture="mlp", arch_params={"hidden": 16}, epochs=2, batch_size=64)
JOBS = [(np.arange(k * 50, k * 50 + 100), k) for k in range(4)]  # equal sizes: they stack


def interrupt_call(monkeypatch, module, name, at):
    """Make ``module.name`` raise KeyboardInterrupt on its ``at``-th call (1-based), as a
    Ctrl-C while that call trains; earlier calls run for real."""
    real = getattr(module, name)
    calls = {"n": 0}

    def wrapped(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)
    return calls


def complete_entries(root):
    """Keys of the cache entries under ``root`` a rerun would trust."""
    store = ModelCache(root)
    return [p.stem for p in sorted(root.glob("*.json")) if store.contains(p.stem)]


def train(root, digits, recipe=RECIPE, jobs=JOBS, **kw):
    x, y = digits
    store = ModelCache(root)
    models = store.get_or_train_many("fp", jobs, recipe, features=x, labels=y, progress=False,
                                     workers=1, **kw)  # fmt: skip
    return store, models


@pytest.fixture
def ledger():
    training_ledger().reset()
    yield training_ledger()
    training_ledger().reset()


def test_finished_stacks_are_cached_before_the_next_starts(tmp_path, digits, monkeypatch,
                                                           ledger):  # fmt: skip
    interrupt_call(monkeypatch, stacked, "train_stacked", at=2)  # 2 stacks of 2 models
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, digits, max_stack=2)
    assert (ledger.planned, ledger.stored) == (4, 2)
    assert ledger.interrupted_message() == (
        "interrupted: 2 of 4 models were trained and cached (rerun resumes from them); "
        "2 were not finished and will be trained again"
    )
    assert len(complete_entries(tmp_path)) == 2
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left
    monkeypatch.undo()
    store, models = train(tmp_path, digits, max_stack=2)
    assert (store.stats.hits, store.stats.misses) == (2, 2)
    assert [m.from_cache for m in models] == [True, True, False, False]


def test_models_trained_one_by_one_are_cached_as_each_finishes(tmp_path, digits, monkeypatch,
                                                                ledger):  # fmt: skip
    dropout = RECIPE.replace(arch_params={"hidden": 16, "dropout": 0.1})  # cannot stack
    interrupt_call(monkeypatch, stacked, "train_model", at=2)
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, digits, recipe=dropout, jobs=JOBS[:3])
    assert ledger.interrupted_message() == (
        "interrupted: 1 of 3 models were trained and cached (rerun resumes from them); "
        "2 were not finished and will be trained again"
    )
    assert len(complete_entries(tmp_path)) == 1
    monkeypatch.undo()
    store, _ = train(tmp_path, digits, recipe=dropout, jobs=JOBS[:3])
    assert (store.stats.hits, store.stats.misses) == (1, 2)


def test_interrupt_before_any_model_finished_caches_nothing(tmp_path, digits, monkeypatch,
                                                            ledger):  # fmt: skip
    interrupt_call(monkeypatch, stacked, "train_stacked", at=1)
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, digits)
    assert ledger.interrupted_message() == (
        "interrupted before any model finished training: nothing was cached"
    )
    assert list(tmp_path.iterdir()) == []


def test_ledger_messages_when_nothing_or_everything_was_trained():
    ledger = training_ledger().__class__()
    assert "trained no models" in ledger.interrupted_message()
    ledger.planned = ledger.stored = 3
    assert ledger.interrupted_message() == (
        "interrupted: all 3 models this run trained are cached (rerun resumes from them)"
    )


def _config(tmp_path):
    """Target and references with different recipes: the target trains (and is cached)
    first, then the two references in one stack."""
    data = {
        "name": "interrupted", "seed": 3, "dataset": {"name": "digits"},
        "split": {"audit": 200, "public": 200, "population": 100},
        "design": "offline", "models": 3,
        "recipe": {"architecture": "mlp", "epochs": 3, "batch_size": 64},
        "reference_recipe": {"architecture": "mlp", "epochs": 2, "batch_size": 64},
        "signals": {"queries": ["plain"], "grad_norm": False},
        "attacks": ["loss"], "metrics": {"bootstrap": 0},
        "output": str(tmp_path / "run"), "cache_dir": str(tmp_path / "cache"),
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


def test_cli_reports_what_an_interrupt_kept(tmp_path, monkeypatch, capsys):
    path, data = _config(tmp_path)
    interrupt_call(monkeypatch, stacked, "train_stacked", at=2)  # the references' stack
    assert main(["run", str(path), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == (
        "miaudit: interrupted: 1 of 3 models were trained and cached (rerun resumes from "
        "them); 2 were not finished and will be trained again."
    )
    assert len(complete_entries(tmp_path / "cache")) == 1
    monkeypatch.undo()
    built = build_bank(config_from_dict(data), progress=False)
    assert (built.trained, built.reused) == (2, 1)  # only the lost ones train again


def test_cli_says_when_nothing_was_cached(tmp_path, monkeypatch, capsys):
    path, _ = _config(tmp_path)
    interrupt_call(monkeypatch, stacked, "train_stacked", at=1)  # the target's
    assert main(["run", str(path), "--quiet"]) == 130
    assert capsys.readouterr().err.strip() == (
        "miaudit: interrupted before any model finished training: nothing was cached."
    )
    assert complete_entries(tmp_path / "cache") == []
