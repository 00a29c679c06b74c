import pytest

from miaudit.config import config_from_dict, dump_config, load_config
from miaudit.errors import ConfigError


def test_defaults_and_round_trip(tmp_path):
    cfg = config_from_dict({"name": "x", "dataset": {"name": "digits"}, "models": 3})
    path = tmp_path / "c.yaml"
    path.write_text(dump_config(cfg))
    again = load_config(path)
    assert again.to_dict() == cfg.to_dict()
    assert again.split.audit == 0.4 and again.models == 3


def test_unknown_key_names_it_and_suggests():
    with pytest.raises(ConfigError, match=r"unknown key 'atacks'.*Did you mean 'attacks'"):
        config_from_dict({"atacks": ["loss"]})
    with pytest.raises(ConfigError, match=r"unknown key 'split.audti'.*'audit'"):
        config_from_dict({"split": {"audti": 10}})


def test_bad_values_are_reported():
    with pytest.raises(ConfigError, match="design"):
        config_from_dict({"design": "both"})
    with pytest.raises(ConfigError, match="attack_params"):
        config_from_dict({"attacks": ["loss"], "attack_params": {"rmia": {"a": 1}}})
    with pytest.raises(ConfigError, match="mapping"):
        config_from_dict({"split": [1, 2]})
    for seed in (-3, True, 1.5):  # numpy's generators take no negative seed: refused first
        with pytest.raises(ConfigError, match="seed must be an integer >= 0"):
            config_from_dict({"seed": seed})


@pytest.mark.parametrize("data, match", [
    ({"metrics": {"bootstrap": "abc"}}, r"metrics\.bootstrap must be an integer >= 0.*'abc'"),
    ({"metrics": {"bootstrap": -1}}, r"metrics\.bootstrap must be an integer >= 0"),
    ({"metrics": {"bootstrap": True}}, r"metrics\.bootstrap must be an integer"),
    ({"metrics": {"fprs": 0.01}}, r"metrics\.fprs must be a non-empty list .*write \[0\.01\]"),
    ({"metrics": {"fprs": []}}, r"metrics\.fprs must be a non-empty list"),
    ({"metrics": {"fprs": ["x"]}}, r"metrics\.fprs must be a number"),
    ({"metrics": {"fprs": [0.01, 1.5]}}, r"metrics\.fprs must lie in \(0, 1\)"),
    ({"metrics": {"fprs": [0.01, 1.0]}}, r"metrics\.fprs must lie in \(0, 1\)"),  # a run's
    ({"metrics": {"recalls": 0.5}}, r"metrics\.recalls must be a non-empty list"),
    ({"metrics": {"confidence": 95}}, r"metrics\.confidence must lie in \(0, 1\)"),
    ({"metrics": {"split_check": "no"}}, r"metrics\.split_check must be true or false"),
    ({"models": True}, r"models must be an integer >= 1 .*got True"),
    ({"models": "3"}, r"models must be an integer >= 1"),
    ({"target": False}, r"target must be an integer model index"),
])
def test_wrong_types_are_config_errors_not_type_errors(data, match):
    """Values of the wrong type stop at the config with what to write instead (they used to
    pass and die later as a TypeError of numpy's)."""
    with pytest.raises(ConfigError, match=match):
        config_from_dict({"name": "x", "dataset": {"name": "digits"}, **data})


def test_metrics_accept_what_they_did():
    import numpy as np

    cfg = config_from_dict({"name": "x", "dataset": {"name": "digits"},
                            "metrics": {"fprs": (0.001, 0.1), "bootstrap": np.int64(0)}})
    assert cfg.metrics.fprs == [0.001, 0.1] and cfg.metrics.bootstrap == 0


def test_bad_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ConfigError, match="YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "none.yaml")


def test_named_recipes_and_reference_keywords():
    from miaudit.config import recipe_fields

    recipes = {"aug": {"augment": ["crop"]}, "wd": {"weight_decay": 0.01}}
    cfg = config_from_dict({"recipes": recipes, "recipe": "aug", "reference_recipe": "wd"})
    assert recipe_fields(cfg) == ({"augment": ["crop"]}, {"weight_decay": 0.01})
    cfg = config_from_dict({"recipe": {"epochs": 3}})
    assert recipe_fields(cfg) == ({"epochs": 3}, "target")
    for ref in ("target", "plain"):
        cfg = config_from_dict({"recipe": {"epochs": 3}, "reference_recipe": ref})
        assert recipe_fields(cfg)[1] == ref


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"recipes": {"aug": {}}, "recipe": "agu"}, r"'agu'.*Did you mean 'aug'"),
        ({"recipe": "aug"}, r"not in recipes.*\(none\)"),
        ({"reference_recipe": "plian"}, r"reference_recipe 'plian'.*Did you mean 'plain'"),
        ({"recipes": {"plain": {}}}, "reserved"),
        ({"recipes": {"x": [1]}}, r"recipes\.x must be a mapping"),
        ({"recipe": 3}, "recipe must be a mapping"),
        ({"reference_recipe": 3}, "reference_recipe must be a name"),
        ({"checkpoints": {"epochs": [0]}}, "positive integers"),
        ({"checkpoints": {"epoch": [2]}}, r"checkpoints\.epoch.*'epochs'"),
    ],
)
def test_bad_recipe_names_and_checkpoints(data, match):
    with pytest.raises(ConfigError, match=match):
        config_from_dict(data)


def test_example_configs_load_and_their_recipes_resolve():
    from pathlib import Path

    from miaudit.config import recipe_fields
    from miaudit.train import Recipe

    examples = sorted((Path(__file__).parents[1] / "examples").glob("*.yaml"))
    assert examples
    for path in examples:
        cfg = load_config(path)
        for name in [cfg.recipe, *cfg.recipes]:
            cfg.recipe = name
            target, ref = recipe_fields(cfg)
            Recipe.from_dict(target)  # every named recipe is a valid Recipe
    cfg = load_config(Path(__file__).parents[1] / "examples" / "fashion-mnist-recipes.yaml")
    assert set(cfg.recipes) >= {"none", "crop", "mirror", "cutout", "autoaugment", "all"}


def test_split_members_and_target_are_checked_up_front():
    cfg = config_from_dict({"split": {"audit": 1250, "public": 397, "members": 250}})
    assert cfg.split.members == 250 and config_from_dict({}).split.members is None
    for bad in (-1, 0, 1.5, "half", True):
        with pytest.raises(ConfigError, match="split.members must be a count"):
            config_from_dict({"split": {"members": bad}})
    with pytest.raises(ConfigError, match="smaller than split.audit"):
        config_from_dict({"split": {"audit": 100, "members": 100}})
    with pytest.raises(ConfigError, match="offline design"):
        config_from_dict({"design": "online", "split": {"members": 0.2}})
    with pytest.raises(ConfigError, match=r"target is 3, but the run has 2 models"):
        config_from_dict({"models": 2, "target": 3})


UNTRAINABLE = [("epochs", 0), ("epochs", -3), ("batch_size", 0), ("lr", 0), ("lr", 0.0),
               ("lr", -0.1), ("lr", float("nan")), ("lr", float("inf")), ("epochs", "3")]


@pytest.mark.parametrize(("key", "value"), UNTRAINABLE, ids=str)
@pytest.mark.parametrize(
    ("place", "data"),
    [
        ("recipe", lambda f: {"recipe": f}),
        ("reference_recipe", lambda f: {"reference_recipe": f}),
        ("recipes.strong", lambda f: {"recipes": {"strong": f}, "recipe": "strong"}),
        ("recipes.weak", lambda f: {"recipes": {"weak": f}}),  # named, even if unused
    ],
)
def test_recipes_that_cannot_train_are_refused_naming_the_key(place, data, key, value):
    with pytest.raises(ConfigError) as err:
        config_from_dict(data({key: value}))
    message = str(err.value)
    assert message.startswith(f"{place}.{key} is {value!r}, which cannot train a model")
    assert f"Set {place}.{key} to " in message  # and the fix


@pytest.mark.parametrize(("key", "value"), [("epochs", 0), ("lr", 0.0), ("lr", float("nan")),
                                            ("batch_size", 0), ("epochs", 1.5)], ids=str)
def test_forgetting_training_is_checked_like_a_recipe(key, value):
    with pytest.raises(ConfigError, match=rf"^forgetting\.{key} is .*Set forgetting\.{key} to"):
        config_from_dict({"forgetting": {"models": 2, key: value}})


def test_forgetting_needs_a_count_and_accepts_an_empty_section():
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="forgetting.models must be an integer >= 0"):
            config_from_dict({"forgetting": {"models": bad}})
    assert config_from_dict({"forgetting": None}).forgetting.models == 0


def test_recipes_that_train_still_pass():
    good = {"epochs": 1, "batch_size": 1, "lr": 1e-5}
    cfg = config_from_dict({"recipe": good, "reference_recipe": {"epochs": 2.0, "lr": 3},
                            "recipes": {"s": good},
                            "forgetting": {"models": 1, "epochs": 1, "lr": 0.01}})
    assert cfg.recipe == good
    from miaudit.pipeline.models import resolve_recipes

    recipes = resolve_recipes(cfg)
    assert (recipes.target.epochs, recipes.target.lr) == (1, 1e-5)
    assert (recipes.reference.epochs, recipes.reference.lr) == (2, 3.0)


def test_resolving_an_unchecked_config_names_the_key():
    """A RunConfig built in Python, never validated: resolving its recipes (the first thing a
    run does, before any dataset loads) names the key."""
    from miaudit.config import RunConfig
    from miaudit.pipeline.models import resolve_recipes

    with pytest.raises(ConfigError, match=r"^recipes\.big\.lr is 0"):
        resolve_recipes(RunConfig(recipes={"big": {"lr": 0}}, recipe="big"))
    with pytest.raises(ConfigError, match=r"^reference_recipe\.batch_size is 0"):
        resolve_recipes(RunConfig(reference_recipe={"batch_size": 0}))


@pytest.mark.parametrize(("key", "value"), UNTRAINABLE, ids=str)
def test_audit_reference_recipes_that_cannot_train_are_refused(key, value):
    from miaudit.external.audit_config import audit_config

    data = {"model": {"estimator": "m.joblib"},
            "data": {"dataset": "digits", "members": "members.txt"},
            "references": {"recipe": {"epochs": 5, key: value}}}
    with pytest.raises(ConfigError) as err:
        audit_config(data)
    assert str(err.value).startswith(f"references.recipe.{key} is {value!r}, which cannot "
                                     "train a model")
    data["references"]["recipe"] = {"epochs": 5, "lr": 0.01, "batch_size": 32}
    assert audit_config(data).references.recipe["epochs"] == 5


def test_run_command_fails_fast_on_an_untrainable_recipe(tmp_path, capsys):
    """`miaudit run` with recipe {epochs: 0} used to train an untrained target; now it stops
    with exit code 2 and the message while reading the config: no run folder, no model."""
    from miaudit.cli.main import main

    config = tmp_path / "c.yaml"
    config.write_text(
        "name: untrained\ndataset: {name: digits}\n"
        "recipe: {architecture: mlp, arch_params: {hidden: 8}, epochs: 0}\n"
        f"output: {tmp_path / 'run'}\ncache_dir: {tmp_path / 'cache'}\n", encoding="utf-8")
    assert main(["run", str(config), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "recipe.epochs is 0, which cannot train a model" in err
    assert "Set recipe.epochs to 1 or more" in err
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


# --- renamed keys: the old spelling works for one release, with a warning ----------------

def test_dataset_data_dir_is_now_top_level_data_dir(tmp_path):
    from miaudit.config import RUN_RENAMED

    assert RUN_RENAMED == {"dataset.data_dir": "data_dir"}
    assert config_from_dict({"data_dir": "d"}).data_dir == "d"
    with pytest.warns(FutureWarning, match=r"`dataset.data_dir` is now `data_dir`"):
        cfg = config_from_dict({"dataset": {"name": "digits", "data_dir": "old"}})
    assert cfg.data_dir == "old" and cfg.dataset.name == "digits"
    assert "data_dir" not in cfg.to_dict()["dataset"]  # config.yaml spells it the new way
    path = tmp_path / "c.yaml"
    path.write_text("dataset: {name: digits, data_dir: fromfile}\n")
    with pytest.warns(FutureWarning, match=r"`dataset.data_dir` is now `data_dir`"):
        loaded = load_config(path)
    assert loaded.data_dir == "fromfile"
    again = tmp_path / "again.yaml"
    again.write_text(dump_config(loaded))  # the dump reloads without a warning
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_config(again).data_dir == "fromfile"


def test_renamed_key_given_twice_or_misspelt_is_refused():
    with pytest.raises(ConfigError, match=r"gives both 'data_dir' and 'dataset.data_dir'"):
        config_from_dict({"data_dir": "a", "dataset": {"data_dir": "b"}})
    with pytest.raises(ConfigError, match=r"unknown key 'dataset.data_dri'.*Did you mean "
                                          r"'data_dir' \(formerly 'dataset.data_dir'\)"):
        config_from_dict({"dataset": {"data_dri": "d"}})
    with pytest.raises(ConfigError, match=r"unknown key 'data_dri'.*Did you mean 'data_dir'"):
        config_from_dict({"data_dri": "d"})


def test_signals_typos_are_refused_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"'signals.querys'.*Did you mean 'queries'"):
        config_from_dict({"signals": {"querys": ["plain"]}})
    with pytest.raises(ConfigError, match=r"'signals.gradnorm'.*Did you mean 'grad_norm'"):
        config_from_dict({"signals": {"gradnorm": True}})
    assert config_from_dict({"signals": None}).signals.queries == "auto"


_DP_RECIPE = {"architecture": "mlp", "epochs": 2, "dp": {"epsilon": 4}}


@pytest.mark.parametrize("overrides, message", [
    ({"recipe": {"architecture": "mlp"}, "canaries": {"kind": "gradient", "count": 50}},
     r"no dp: give it one, e\.g\. recipe\.dp: \{epsilon: 4\}"),
    ({"canaries": {"kind": "gradient", "count": 50, "direction": "diracc"}},
     r"canaries\.direction must be one of dirac, random.*Did you mean 'dirac'"),
    ({"canaries": {"kind": "gradient", "count": 50, "coordinates": "loud"}},
     r"canaries\.coordinates must be one of quiet, random"),
    ({"canaries": {"kind": "gradient", "count": 50, "score": "max"}},
     r"canaries\.score must be one of likelihood, sum"),
    ({"canaries": {"kind": "gradient", "count": 50, "threat_models": ["black-box"]}},
     r"canaries\.threat_models must be a non-empty list .* every-iterate, final-model"),
    ({"canaries": {"kind": "gradient", "count": 50, "threat_models": []}},
     r"canaries\.threat_models must be a non-empty list"),
    ({"canaries": {"kind": "gradient", "count": 50, "probe_rows": 0}},
     r"canaries\.probe_rows must be an integer >= 1"),
    ({"canaries": {"kind": "gradient", "count": 50, "delta": 0.0}},
     r"canaries\.delta must be > 0 with kind gradient"),
    ({"canaries": {"kind": "gradient", "count": 50}, "checkpoints": {"epochs": [1]}},
     r"checkpoints are not supported with it"),
    ({"canaries": {"count": 50, "direction": "random"}},
     r"canaries\.direction is an option of gradient canaries: set canaries\.kind: gradient"),
    ({"canaries": {"kind": "gradient", "count": 50, "noise": "per_step"}},
     r"canaries\.noise must be one of per-step, estimated, claimed.*Did you mean 'per-step'"),
    ({"canaries": {"kind": "gradient", "count": 50, "noise": 1.0}},
     r"canaries\.noise must be one of per-step, estimated, claimed"),
    ({"canaries": {"kind": "gradient", "count": 50, "known_data": "false"}},
     r"canaries\.known_data must be true .* or false; got 'false'"),
    ({"canaries": {"count": 50, "known_data": False}},
     r"canaries\.known_data is an option of gradient canaries: set canaries\.kind: gradient"),
    ({"canaries": {"count": 50, "kind": "natural", "noise": "estimated"}},
     r"canaries\.noise is an option of gradient canaries"),
    ({"canaries": {"kind": "gradiant", "count": 50}}, r"canaries\.kind must be one of"),
])
def test_gradient_canary_config_errors_say_how_to_fix(overrides, message):
    data = {"name": "wb", "recipe": _DP_RECIPE, "design": "offline", **overrides}
    with pytest.raises(ConfigError, match=message):
        config_from_dict(data)


def test_gradient_canaries_take_no_rows_and_fit_any_design():
    cfg = config_from_dict({"name": "wb", "recipe": _DP_RECIPE, "design": "online",
                            "canaries": {"kind": "gradient", "count": 50,
                                         "threat_models": "final-model"}})
    assert cfg.canaries.white_box and cfg.canaries.rows == 0
    assert cfg.canaries.threat_models == ["final-model"]
    rows = config_from_dict({"name": "b", "canaries": {"count": 50}}).canaries
    assert not rows.white_box and rows.rows == 50


def test_the_every_iterate_scoring_options_default_to_dp_bugs_choice():
    """known_data and per-step σ by default (the dp-bugs study's, on its development seeds);
    each can be set back to the earlier auditor's."""
    default = config_from_dict({"name": "wb", "recipe": _DP_RECIPE,
                                "canaries": {"kind": "gradient", "count": 50}}).canaries
    assert (default.known_data, default.noise) == (True, "per-step")
    old = config_from_dict({"name": "wb", "recipe": _DP_RECIPE, "canaries": {
        "kind": "gradient", "count": 50, "known_data": False, "noise": "estimated"}}).canaries
    assert (old.known_data, old.noise) == (False, "estimated")
