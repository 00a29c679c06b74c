"""A run refuses every attack it lists that its bank could never support before any model
trains (issue #33, item 5: `blind` on images was refused after 22 s of training), naming each
one, what the bank will lack and how to give it; what fits runs as before."""

from __future__ import annotations

import time

import numpy as np
import pytest
from sklearn.datasets import load_digits

from miaudit.cli.main import main
from miaudit.config import config_from_dict
from miaudit.errors import ConfigError
from miaudit.pipeline import run


def _config(tmp_path, **overrides):
    data = {"name": "fit", "seed": 0, "dataset": {"name": "digits"},
            "split": {"audit": 200, "public": 200, "population": 100}, "design": "offline",
            "models": 2, "recipe": {"architecture": "mlp", "epochs": 1, "batch_size": 64},
            "attacks": ["loss"], "metrics": {"bootstrap": 0},
            "output": str(tmp_path / "run"), "cache_dir": str(tmp_path / "cache")}
    return {**data, **overrides}


def _refused(tmp_path, **overrides) -> str:
    with pytest.raises(ConfigError) as refused:
        config_from_dict(_config(tmp_path, **overrides))
    return str(refused.value)


def _untrained(tmp_path) -> bool:
    cache = tmp_path / "cache"
    return not cache.exists() or not any(cache.rglob("*"))


def test_blind_on_digits_is_refused_before_any_model_trains(tmp_path, tiny_run_yaml, capsys):
    path = tiny_run_yaml(attacks=["loss", "blind"])
    start = time.perf_counter()
    assert main(["run", str(path)]) == 2
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err
    assert "1 attack listed in attacks cannot run on this run (blind), found before any " \
           "model trains" in err
    assert ("attack 'blind' cannot run: needs the samples' texts (their sizes, "
            "text_zlib_bytes and text_chars): this run's data (digits) are images, which have "
            "no text; run it on a text dataset") in err
    assert _untrained(tmp_path) and not (tmp_path / "runs").exists()
    assert seconds < 10  # a config check, not 22 s of training
    # a config built in Python that skipped the checks is refused by the run itself
    cfg = config_from_dict(_config(tmp_path))
    cfg.attacks = ["loss", "blind"]
    with pytest.raises(ConfigError, match="attack 'blind' cannot run"):
        run(cfg, progress=False, echo=False)
    assert _untrained(tmp_path)


def test_an_online_attack_on_the_offline_design_says_which_design_and_models_it_needs(tmp_path):
    why = _refused(tmp_path, attacks=["loss", "lira-online", "rmia-online"])
    assert "2 attacks listed in attacks cannot run on this run (lira-online, rmia-online)" in why
    assert ("attack 'lira-online' cannot run: needs at least 1 reference model trained ON the "
            "audit samples (an online attack; its family's offline attacks: lira-offline, "
            "lira-offline-fixed-variance, lira-offline-two-sided): design offline trains every "
            "reference model on the public pool, none on an audit sample; use design: online "
            "with models >= 4") in why
    # online, but too few models: the view sets one reference aside per sample
    why = _refused(tmp_path, design="online", models=3, attacks=["lira-online"])
    assert "with design online and models: 3, at most 0 of its 2 reference models are IN" in why
    assert "raise models to at least 4" in why
    config_from_dict(_config(tmp_path, design="online", models=4, attacks=["lira-online"]))


def test_a_channel_attack_without_its_channel(tmp_path):
    why = _refused(tmp_path, attacks=["gradient-norm"], signals={"grad_norm": False})
    assert ("attack 'gradient-norm' cannot run: needs the white-box channel 'grad_norm': "
            "signals.grad_norm is false: set it to true (or auto)") in why
    why = _refused(tmp_path, attacks=["boundary-distance"])
    assert "set signals.boundary_distance: true" in why
    config_from_dict(_config(tmp_path, attacks=["gradient-norm"]))  # auto computes it


def test_a_population_attack_without_population(tmp_path):
    why = _refused(tmp_path, attacks=["rmia", "qmia-label"],
                   split={"audit": 200, "public": 200, "population": 0})
    assert "(rmia, qmia-label)" in why
    assert ("needs population samples (attacker data no model trains on): split.population is "
            "0: no row is kept out of every model; give it rows") in why


def test_text_and_language_model_attacks_on_images(tmp_path):
    why = _refused(tmp_path, attacks=["loss", "zlib", "min-k-plus-plus", "blind"])
    assert "cannot run on this run (zlib, min-k-plus-plus, blind)" in why
    assert ("attack 'min-k-plus-plus' cannot run: needs a causal language model's per-token "
            "log-probabilities (a sequence bank) and the mean and std of log p(v) under each "
            "next-token distribution") in why
    assert "its models classifiers (mlp): train causal LMs on texts" in why


def test_too_few_references_say_how_many_models(tmp_path):
    why = _refused(tmp_path, models=1, attacks=["lira-offline"])
    assert "this run trains the target alone (models: 1); raise models to at least 2" in why
    why = _refused(tmp_path, attacks=["rapid"])
    assert ("needs at least 2 shadow/reference models with known membership that can train "
            "its scorer: this run has 1 reference model (models: 2); raise models to at least "
            "3") in why
    # enough references, but a balanced design's views leave no shadow a reference of its own
    why = _refused(tmp_path, design="online", models=4, attacks=["rapid"])
    assert ("with design online and models: 4, no reference can serve as a shadow it learns "
            "from") in why and "raise models to at least 5" in why


def test_image_attacks_are_accepted(tmp_path):
    cfg = config_from_dict(_config(tmp_path, models=3, attacks=[
        "loss", "entropy", "calibrated-loss", "lira-offline", "rmia", "qmia-label",
        "gradient-norm", "rapid"]))
    assert cfg.attacks[-1] == "rapid"


def test_a_user_npz_of_images_is_checked_once_loaded_before_training(tmp_path):
    """A .npz without kind is images or a table: only loading says which, so the config
    accepts blind and the run refuses it right after loading, before any model trains."""
    digits = load_digits()
    path = tmp_path / "images.npz"
    np.savez(path, X=digits.images[:, None] / 16.0, y=digits.target)
    cfg = config_from_dict(_config(tmp_path, dataset={"name": str(path)},
                                   attacks=["loss", "blind"]))
    with pytest.raises(ConfigError, match=r"this run's data \(images.npz\) are images, which "
                                          r"have no text"):
        run(cfg, progress=False, echo=False)
    assert _untrained(tmp_path)
