from __future__ import annotations

import pandas as pd
import pytest
import yaml

from miaudit.cli.main import main
from miaudit.studies.registry import get_study, merge_config, resolve_config
from miaudit.studies.sweep import StudyError


def test_study_list(capsys):
    assert main(["study", "list"]) == 0
    assert "smoke" in capsys.readouterr().out


def test_study_command_runs_writes_config_table_summary_and_resumes(tmp_path, capsys):
    overrides = tmp_path / "small.yaml"
    overrides.write_text("repetitions: 1\nepochs: [2]\naudit: 200\n")
    out = tmp_path / "smoke"
    args = ["study", "smoke", "--config", str(overrides), "--executor", "serial", "--out",
            str(out), "--quiet"]
    assert main(args) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config == {"study": "smoke", "size": "cpu", "repetitions": 1, "epochs": [2],
                      "audit": 200}
    table = pd.read_csv(out / "results.csv")
    assert list(table["attack"]) == ["loss", "calibrated-loss"]
    assert "calibrated-loss" in (out / "summary.md").read_text()
    assert main(args) == 0  # everything done: nothing runs again, the summary is rewritten
    pd.testing.assert_frame_equal(pd.read_csv(out / "results.csv"), table)


def test_bad_study_inputs_are_clear_errors(tmp_path, capsys):
    assert main(["study", "smok"]) == 2
    assert "Did you mean 'smoke'" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("repetition: 3\n")
    assert main(["study", "smoke", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "Did you mean 'repetitions'" in capsys.readouterr().err
    assert main(["study", "smoke", "--ray-address", "auto"]) == 2
    with pytest.raises(StudyError, match="size"):
        resolve_config(get_study("smoke"), "gpu")


def test_merge_config_is_recursive_and_strict():
    base = {"a": 1, "b": {"c": 2, "d": 3}, "free": {}}
    merged = merge_config(base, {"b": {"c": 5}, "free": {"anything": 1}})
    assert merged == {"a": 1, "b": {"c": 5, "d": 3}, "free": {"anything": 1}}
    assert base["b"]["c"] == 2
    with pytest.raises(StudyError, match="b.e"):
        merge_config(base, {"b": {"e": 1}})


def test_merge_config_adds_dataset_entries_but_not_misspelt_keys_inside_them():
    base = {"datasets": {"adult": {"split": {"audit": 10}}}}
    merged = merge_config(base, {"datasets": {"digits": {"split": {"audit": 5}}}})
    assert merged["datasets"]["digits"] == {"split": {"audit": 5}}
    with pytest.raises(StudyError, match="datasets.adult.splt"):
        merge_config(base, {"datasets": {"adult": {"splt": {}}}})


def test_incomplete_new_dataset_entry_is_a_clear_error():
    study = get_study("calibration")
    config = resolve_config(study, "cpu", {"include": ["digits"],
                                           "datasets": {"digits": {"split": {"audit": 100}}}})
    with pytest.raises(StudyError, match="datasets.digits lacks recipe, forgetting"):
        study.cells(config)
