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
