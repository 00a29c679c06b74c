"""The time estimate `miaudit study` prints before the first cell: measured on this device,
positive, printed before the cells run, and its probe models never reach the model cache;
its arithmetic against a plain sum; the rapid study's LiRA cell run small on other data."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from miaudit.cli.main import main
from miaudit.studies.estimate import (
    Estimate,
    RecipeTiming,
    _Estimator,
    duration,
    estimate_study,
    training_steps,
)
from miaudit.studies.registry import Study
from miaudit.studies.sweep import Cell, StudyError

LIRA_YAML = Path(__file__).resolve().parents[2] / "docs" / "studies" / "rapid" / "lira-cell.yaml"


def cached_models(cache: Path) -> int:
    return len(list(cache.glob("*.safetensors"))) if cache.exists() else 0


def tiny_lira_config(tmp_path: Path) -> Path:
    """The LiRA cell on 480 synthetic CIFAR-shaped images, a narrow airbench94 and 4 references
    (the cell's --config, then these overrides)."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 480)
    x = rng.random((480, 3, 32, 32), dtype=np.float32) * 0.5
    x[np.arange(480), y % 3] += 0.3  # some signal: the models learn something
    data = tmp_path / "images.npz"
    np.savez(data, X=x, y=y)
    config = yaml.safe_load(LIRA_YAML.read_text(encoding="utf-8"))
    config.update({
        "setups": {"cifar10-lira": {
            "dataset": str(data), "split": {"audit": 160, "public": 160, "population": 64},
            "recipe": {"arch_params": {"widths": [8, 8, 8]}, "batch_size": 16, "epochs": 2,
                       "epoch_fraction": 1.0}}},
        "references": [2, 4], "main_references": 4, "bootstrap": 0,
        "rapid_max_train_samples": 400, "attack_params": {"rapid": {"epochs": 3}}})
    path = tmp_path / "tiny-lira.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_the_estimate_is_printed_first_and_its_probes_are_never_cached(
        tmp_path, capsys, private_cache):
    config = tiny_lira_config(tmp_path)
    out = tmp_path / "study"
    estimate = estimate_study("rapid", "paper", config, out)
    assert estimate is not None and estimate.cells == 1 and estimate.cells_done == 0
    assert estimate.models_to_train == 5 and estimate.models_cached == 0  # target + 4
    assert estimate.train_seconds > 0 and estimate.query_seconds > 0
    [timing] = estimate.timings
    assert timing.architecture == "airbench94" and timing.device == "cpu"
    assert timing.stack == 1  # airbench94 trains one model at a time
    assert cached_models(private_cache) == 0  # the probes trained, nothing was stored

    args = ["study", "rapid", "--size", "paper", "--config", str(config), "--executor",
            "serial", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert printed.index("expected time (an estimate, measured on this device)") < printed.index(
        "1 cells: 0 done before, 1 to run")
    assert "airbench94 on cpu: stack 1 model per group" in printed
    assert cached_models(private_cache) == 5  # the cell's models, and only them

    # the LiRA cell ran on the other data: online design, every attack, their figures beside
    table = pd.read_csv(out / "results.csv")
    assert set(table["setup.design"]) == {"online"} and set(table["n_references"]) == {2, 4}
    assert {"lira-online", "lira-online-fixed-variance", "lira-offline-two-sided",
            "rmia-online", "rapid"} <= set(table["attack"])
    lira = pd.read_csv(out / "lira.csv")
    online = lira[(lira["attack"] == "lira-online") & (lira["references"] == 4)]
    assert online["their TPR@0.1% (%)"].tolist() == [pytest.approx(1.69)]
    assert "## LiRA cell (online design)" in (out / "summary.md").read_text(encoding="utf-8")

    assert main(args) == 0  # resumed: nothing left to estimate or train
    assert "expected time: nothing to run (1 cell already finished)." in capsys.readouterr().out
    assert cached_models(private_cache) == 5


def test_the_lira_cell_is_paper_sized():
    from miaudit.studies.rapid import cells, run_config
    from miaudit.studies.registry import get_study, resolve_config
    from miaudit.train.airbench import AIRBENCH94_RECIPE, airbench94_recipe

    [cell] = cells(resolve_config(get_study("rapid"), "paper", LIRA_YAML))
    run = run_config(cell.params)
    assert run["models"] == 65 and run["design"] == "online"  # the target + 64 references
    assert run["dataset"] == {"name": "cifar10"} and run["device"] == "auto"
    assert sum(run["split"].values()) == 60000  # all of CIFAR-10: 25,000 audited
    assert run["recipe"] == AIRBENCH94_RECIPE and run["signals"]["queries"] == ["plain", "mirror"]
    assert {"lira-online", "lira-online-fixed-variance", "lira-offline",
            "lira-offline-fixed-variance", "rmia", "rmia-online"} <= set(run["attacks"])
    assert cell.params["main_references"] == 64 and cell.params["references"][-1] == 64
    # each model trains on about 32/65 of the 50,000 audited and public images (LiRA: half):
    # 24 whole batches of 1,024 an epoch, 9.9 epochs
    assert training_steps(airbench94_recipe(), 50000 * 32 // 65) == math.ceil(24 * 9.9)


def test_absent_cifar10_fails_with_the_loaders_message_before_any_work(
        tmp_path, capsys, monkeypatch, private_cache):
    monkeypatch.setenv("MIAUDIT_DATA_DIR", str(tmp_path / "no-data"))
    out = tmp_path / "study"
    args = ["study", "rapid", "--size", "paper", "--config", str(LIRA_YAML), "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "dataset 'cifar10' is not present" in err and "miaudit data fetch cifar10" in err
    assert not out.exists() and cached_models(private_cache) == 0
    # --quiet skips the estimate: the cell itself fails with the same message
    assert main([*args, "--quiet", "--executor", "serial"]) == 2
    err = capsys.readouterr().err
    assert "1 of 1 cells failed" in err and "miaudit data fetch cifar10" in err


def test_the_training_estimate_is_the_sum_over_the_trainers_groups():
    """With the timing given, the estimate of a digits run is a plain sum: per stacked group
    of equal training sets, the start seconds + the steps of one model x the step seconds."""
    from miaudit.config import config_from_dict
    from miaudit.data import load_dataset
    from miaudit.pipeline.models import resolve_recipes
    from miaudit.protocol import make_design, make_split

    run = {"name": "estimate", "seed": 3, "dataset": {"name": "digits"},
           "split": {"audit": 400, "public": 400, "population": 200}, "design": "offline",
           "models": 7, "recipe": {"architecture": "mlp", "arch_params": {"hidden": 16},
                                   "epochs": 3, "batch_size": 32},
           "signals": {"queries": ["plain", "mirror"]}, "attacks": ["loss"], "device": "cpu"}
    cfg = config_from_dict(run)
    recipe = resolve_recipes(cfg).target
    timing = RecipeTiming("mlp", "cpu", stack=4, step_seconds=0.5, start_seconds=2.0,
                          query_seconds=1e-4, probe="given")
    estimate = Estimate(cells=1)
    estimator = _Estimator(estimate)
    estimator.timings[(recipe.key(), "cpu")] = timing
    estimator.add(run)
    dataset = load_dataset("digits")
    design = make_design(make_split(len(dataset), 400, 400, 200, 3), 7, "offline", 3)
    # the target on half the audit pool, each reference on half the public pool: 200 rows
    # each, one recipe, so all 7 train together in groups of at most 4, as even as possible
    # (4 + 3), each group 3 epochs of ceil(200 / 32) = 7 steps
    assert {len(design.training_rows(m)) for m in range(7)} == {200}
    expected = 2 * (2.0 + 3 * 7 * 0.5)
    assert estimate.models_to_train == 7 and estimate.train_seconds == pytest.approx(expected)
    assert estimate.query_seconds == pytest.approx(7 * 1000 * 2 * 1e-4)
    assert estimate.timings == []  # given, not measured


def test_a_study_may_declare_its_runs_or_not():
    def cells(config):
        return [Cell("estimate-test", {})]

    fields = dict(name="estimate-test", description="d", configs={"cpu": {}, "paper": {}},
                  cells=cells, work=print, summarize=print)
    assert Study(**fields).run_configs is None  # optional: no estimate
    with pytest.raises(StudyError, match="run_configs must be a function"):
        Study(**fields, run_configs="runs")


def test_durations_read_in_the_unit_a_reader_wants():
    assert [duration(s) for s in (42, 210, 7560, 3 * 86400)] == [
        "42 s", "3.5 min", "2.1 h", "3.0 days"]
