"""The dp-bugs study (miaudit.studies.dp_bugs) on a seconds-sized setup: its cells, one run
per cell with both canary kinds, the table and summary, resuming without running a cell,
and bad configs refused before any training."""

from __future__ import annotations

import pandas as pd
import pytest

import miaudit.studies.dp_bugs  # noqa: F401  (registers the study)
from miaudit.studies import sweep
from miaudit.studies.dp_bugs import THREAT_MODELS, cells
from miaudit.studies.registry import get_study, resolve_config, run_study
from miaudit.studies.sweep import StudyError

TINY = {
    "setup": "tiny",
    "extra_setups": {"tiny": {
        "dataset": "digits", "train_rows": 300, "gradient_canaries": 1000,
        "input_canaries": 200,
        "recipe": {"architecture": "mlp", "arch_params": {"hidden": 32}, "lr": 0.5,
                   "epochs": 2, "batch_size": 200}}},
    "implementations": ["correct", "noise-once-per-epoch"],
    "epsilons": [8],
}
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_cpu_config_cells():
    config = resolve_config(get_study("dp-bugs"), "cpu")
    made = cells(config)
    assert len(made) == 7 * 2  # implementations x claimed ε 4 and 8
    assert [c.params["implementation"] for c in made[:7]] == config["implementations"]
    assert {c.params["epsilon"] for c in made} == {4.0, 8.0}
    assert config["seed"] not in (100, 101, 102)  # the development seeds


def test_tiny_study_runs_and_resumes(tmp_path, monkeypatch):
    table, out = run_study("dp-bugs", "cpu", TINY, executor="serial", out=tmp_path / "s",
                           progress=False)  # fmt: skip
    assert len(table) == 2 * len(THREAT_MODELS)
    assert list(table["threat_model"][:3]) == list(THREAT_MODELS)
    assert (table["claimed_epsilon"] - 8).abs().max() < 0.05  # the accountant's, both runs
    correct = table[table["implementation"] == "correct"]
    # lower bounds: a correct implementation's never exceed its claim
    assert (correct["eps_one_run"] <= correct["claimed_epsilon"]).all()
    assert (correct["fdp_epsilon"] <= correct["claimed_epsilon"]).all()
    assert not correct["refuted"].any()
    bugged = table[table["implementation"] == "noise-once-per-epoch"]
    assert (bugged["sigma_hat"] < correct["sigma_hat"].to_numpy()).all()  # the run shows it
    summary = (out / "summary.md").read_text()
    assert "## Claimed ε 8" in summary and "noise-once-per-epoch" in summary
    csv = pd.read_csv(out / "dp-bugs.csv")
    assert list(csv.columns[:4]) == ["target ε", "implementation", "threat model", "claimed ε"]
    assert len(csv) == len(table)

    def fail(*args, **kwargs):
        raise AssertionError("a finished cell ran again")

    monkeypatch.setattr(sweep, "_write_cell", fail)
    again, _ = run_study("dp-bugs", "cpu", TINY, executor="serial", out=tmp_path / "s",
                         progress=False)  # fmt: skip
    pd.testing.assert_frame_equal(again, table)


def test_bad_configs_fail_before_training():
    study = get_study("dp-bugs")
    with pytest.raises(Exception, match="Known: correct, noise-x0.5"):
        cells(resolve_config(study, "cpu", {**TINY, "implementations": ["noise-x2"]}))
    with pytest.raises(StudyError, match="setup 'nope'"):
        cells(resolve_config(study, "cpu", {"setup": "nope"}))
    with pytest.raises(StudyError, match="black_box_guesses"):
        cells(resolve_config(study, "cpu", {**TINY, "black_box_guesses": {"k_plus": 1,
                                                                          "k_minus": 0}}))
