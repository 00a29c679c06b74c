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
