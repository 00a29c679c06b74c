import json

import numpy as np
import pytest
import yaml

from miaudit.attacks import TargetView
from miaudit.config import MetricsConfig, config_from_dict
from miaudit.errors import AttackError, ConfigError
from miaudit.pipeline import default_queries, evaluate_bank, public_threshold, run


def _tiny_config(tmp_path, **overrides):
    data = {
        "name": "tiny",
        "seed": 1,
        "dataset": {"name": "digits"},
        "split": {"audit": 200, "public": 200, "population": 100},
        "design": "offline",
        "models": 3,
        "recipe": {"architecture": "mlp", "epochs": 3, "batch_size": 64},
        "signals": {"queries": ["plain", "mirror"], "grad_norm": True},
        "attacks": ["loss", "confidence", "correctness", "gradient-norm"],
        "metrics": {"bootstrap": 20},
        "output": str(tmp_path / "run"),
        "cache_dir": str(tmp_path / "cache"),
    }
    data.update(overrides)
    return config_from_dict(data)


def test_run_writes_everything_and_reuses_cached_models(tmp_path, capsys):
    cfg = _tiny_config(tmp_path)
    result, out = run(cfg, progress=False)
    for name in ("config.yaml", "bank.npz", "metrics.json", "scores.csv", "roc.png",
                 "histograms.png", "report.html", "summary.json"):
        assert (out / name).exists(), name
    listed = json.loads((out / "summary.json").read_text())["files"]
    assert set(listed) == {p.name for p in out.iterdir()}  # every file of the run, no more
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["seed"] == 1 and saved["models"] == 3
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics) == cfg.attacks
    # the public-data threshold's own run is costed apart from scoring
    assert all(m["cost"]["threshold_seconds"] >= 0 for m in metrics.values())
    assert result.meta["models_trained"] == 3 and result.members.size == 200
    assert "loss" in capsys.readouterr().out
    again, _ = run(cfg, progress=False, echo=False)
    assert again.meta["models_trained"] == 0 and again.meta["models_from_cache"] == 3
    np.testing.assert_array_equal(again.outcome("loss").scores, result.outcome("loss").scores)


def test_forgetting_copies_calibrate_as_their_own_outcomes(tmp_path):
    cfg = _tiny_config(
        tmp_path,
        attacks=["loss", "calibrated-loss"],
        forgetting={"models": 2, "epochs": 1},
        signals={"queries": ["plain"]},
    )
    result, out = run(cfg, progress=False, echo=False)
    names = [o.name for o in result.outcomes]
    assert names == ["loss", "calibrated-loss", "calibrated-loss.forgetting"]
    forgetting = result.outcome("calibrated-loss.forgetting")
    assert forgetting.cost.models == 3  # the target and its two copies
    assert result.meta["forgetting_models"] == 2
    assert (out / "calibration.png").exists()
    assert not np.array_equal(forgetting.scores, result.outcome("calibrated-loss").scores)


def test_defended_outputs_and_label_only_channel(tmp_path):
    cfg = _tiny_config(
        tmp_path,
        attacks=["correctness", "augmentation-consistency", "boundary-distance",
                 "calibrated-boundary-distance"],
        signals={"queries": ["plain", "mirror"], "defence": "label-only",
                 "boundary_distance": True},
    )
    result, out = run(cfg, progress=False, echo=False)
    from miaudit.signals import SignalBank

    bank = SignalBank.load(out / "bank.npz")
    probs = np.exp(bank.logits) / np.exp(bank.logits).sum(-1, keepdims=True)
    assert np.allclose(probs.max(-1), 1.0, atol=1e-6)  # only the label was released
    assert bank.channels["boundary_distance"].shape == (3, bank.n_samples)
    # cost: HopSkipJump's recorded label queries to the target, not one per sample
    asked = bank.channels["boundary_distance_queries"][0][bank.audit].mean()
    assert asked > 100
    assert result.outcome("boundary-distance").cost.queries_per_sample == round(asked, 1)
    assert result.outcome("correctness").cost.queries_per_sample == 1
    from miaudit.report import format_table

    row = next(line for line in format_table(result).splitlines()
               if line.startswith("boundary-distance "))
    assert f" {round(asked):,} " in row  # a whole number of queries, not 1.1e+03
    assert result.outcome("augmentation-consistency").cost.queries_per_sample == 2


def test_unknown_attack_fails_before_training(tmp_path):
    with pytest.raises(AttackError, match="unknown attack 'lira-ofline'. Did you mean "
                                          "lira-offline"):
        _tiny_config(tmp_path, attacks=["loss", "lira-ofline"])  # the config refuses it
    cfg = _tiny_config(tmp_path)
    cfg.attacks = ["loss", "lira-ofline"]  # set after the checks: the run refuses it
    with pytest.raises(AttackError, match="unknown attack"):
        run(cfg, progress=False)
    assert not (tmp_path / "cache").exists()


def test_an_attack_needing_augmented_queries_fails_before_training(tmp_path):
    refused = (r"attack 'augmentation-consistency' cannot run: needs at least 1 augmented "
               r"query per sample beyond the plain one .*this run queries \['plain'\] \(as "
               r"signals.queries lists them\): list augmented views in signals.queries")
    with pytest.raises(ConfigError, match=refused):  # the config refuses it
        _tiny_config(tmp_path, attacks=["loss", "augmentation-consistency"],
                     signals={"queries": ["plain"]})
    cfg = _tiny_config(tmp_path, signals={"queries": ["plain"]})
    cfg.attacks = ["loss", "augmentation-consistency"]  # set after the checks: the run does
    with pytest.raises(ConfigError, match=refused):
        run(cfg, progress=False)
    assert not (tmp_path / "cache").exists()


def test_a_run_checks_its_split_and_draws_its_membership(tmp_path):
    result, out = run(_tiny_config(tmp_path, attacks=["loss"]), progress=False, echo=False)
    checks = result.meta["checks"]
    split = checks["split"]  # miaudit drew the split at random: nothing to find
    assert not split.shifted and split.rows == 200 and 0.35 < split.auc < 0.65
    assert checks["target_fit"]["n_members"] == 100 and not checks["target_fit"]["near_chance"]
    assert result.meta["privacy_audit"].settings.membership == "miaudit"
    assert result.meta["privacy_audit"].settings.split_shifted is False
    summary = json.loads((out / "summary.json").read_text())
    assert summary["checks"]["split"] == json.loads(json.dumps(split.to_dict()))
    off, _ = run(_tiny_config(tmp_path, attacks=["loss"], metrics={"split_check": False}),
                 progress=False, echo=False, overwrite=True)
    assert off.meta["checks"]["split"] is None


def test_unknown_recipe_field_is_a_config_error(tmp_path):
    """Refused by the config itself, before a run could start."""
    with pytest.raises(ConfigError, match="unknown recipe key 'epoch'.*Did you mean 'epochs'"):
        _tiny_config(tmp_path, recipe={"architecture": "mlp", "epoch": 3})


def test_public_threshold_uses_a_reference_on_public_samples_only(digits_bank):
    view = TargetView.of(digits_bank, 0)
    tau = public_threshold("loss", view, {})
    assert tau is not None and np.isfinite(tau)
    # the threshold does not depend on the target's logits or membership
    other = TargetView.of(digits_bank, 0)
    other._logits = digits_bank.logits.copy()
    other._logits[0] += 5.0
    assert public_threshold("loss", other, {}) == tau


def test_evaluate_bank_rejects_targets_without_both_classes(digits_bank):
    from miaudit.signals import SignalBank

    membership = digits_bank.membership.copy()
    membership[0, digits_bank.audit] = True
    bank = SignalBank(digits_bank.logits, digits_bank.labels, membership,
                      digits_bank.population, digits_bank.audit)
    with pytest.raises(AttackError, match="both members and non-members"):
        evaluate_bank(bank, 0, ["loss"])


def test_checkpoints_are_audited_with_references_at_the_same_position(tmp_path):
    cfg = _tiny_config(
        tmp_path, attacks=["loss", "lira-offline-fixed-variance"],
        signals={"queries": ["plain"]}, checkpoints={"epochs": [1, 2]},
    )  # fmt: skip
    result, out = run(cfg, progress=False, echo=False)
    rows = result.meta["checkpoints"]
    assert [r["checkpoint"] for r in rows] == ["epoch1", "epoch2", "final"]
    assert [r["epoch"] for r in rows] == [1.0, 2.0, 3.0]
    assert rows[-1]["attacks"]["loss"]["auc"] == result.outcome("loss").metrics.auc
    for label in ("epoch1", "epoch2"):
        sub = json.loads((out / "checkpoints" / label / "summary.json").read_text())
        assert sub["checkpoint"] == label and sub["n_models"] == 3
    assert rows[0]["attacks"]["loss"]["auc"] != rows[-1]["attacks"]["loss"]["auc"]
    listed = json.loads((out / "summary.json").read_text())["files"]
    assert {"checkpoints", "checkpoints.json", "checkpoints.md"} <= set(listed)
    table = (out / "checkpoints.md").read_text()
    assert "| epoch1 | 1 |" in table and "lira-offline-fixed-variance TPR@0.1% FPR" in table
    assert json.loads((out / "checkpoints.json").read_text()) == json.loads(json.dumps(rows))
    # every checkpoint is cached: the rerun trains nothing and scores the same
    again, _ = run(cfg, progress=False, echo=False)
    assert again.meta["models_trained"] == 0
    assert again.meta["checkpoints"][0]["attacks"] == rows[0]["attacks"]
    # the final models are the plain run's (checkpoints never change a run)
    plain, _ = run(_tiny_config(tmp_path, attacks=["loss"], signals={"queries": ["plain"]},
                                output=str(tmp_path / "plain")), progress=False, echo=False)
    assert plain.meta["models_trained"] == 0
    np.testing.assert_array_equal(plain.outcome("loss").scores, result.outcome("loss").scores)


def test_reference_recipe_names_and_plain(tmp_path):
    base = {"architecture": "mlp", "epochs": 2, "batch_size": 64}
    smoothed = {**base, "label_smoothing": 0.2, "weight_decay": 1e-3,
                "arch_params": {"dropout": 0.3}}  # fmt: skip
    cfg = _tiny_config(
        tmp_path, attacks=["loss", "calibrated-loss"], signals={"queries": ["plain"]},
        recipes={"smoothed": smoothed, "short": {**base, "epochs": 1}},
        recipe="smoothed", reference_recipe="plain",
    )  # fmt: skip
    result, out = run(cfg, progress=False, echo=False)
    recipes = result.meta["recipes"]
    assert recipes["reference_source"] == "plain"
    assert recipes["target"]["label_smoothing"] == 0.2
    assert recipes["reference"] == {**recipes["target"], "label_smoothing": 0.0,
                                    "weight_decay": 0.0, "arch_params": {}}  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert summary["recipes"]["reference_key"] == recipes["reference_key"]
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["recipe"] == "smoothed" and saved["reference_recipe"] == "plain"
    named = _tiny_config(tmp_path, attacks=["loss"], signals={"queries": ["plain"]},
                         recipes={"smoothed": smoothed, "short": {**base, "epochs": 1}},
                         recipe="smoothed", reference_recipe="short",
                         output=str(tmp_path / "named"))  # fmt: skip
    again, _ = run(named, progress=False, echo=False)
    assert again.meta["recipes"]["reference"]["epochs"] == 1
    assert again.meta["recipes"]["reference_source"] == "short"
    assert again.meta["models_trained"] == 2  # the target came from the cache


def test_default_queries_follow_the_attacks_papers():
    assert default_queries("tabular", ["rapid", "loss"]) == ["plain"]
    assert default_queries("image", ["loss", "lira-offline"]) == ["plain", "mirror"]
    rapid = default_queries("image", ["loss", "rapid"])  # RAPID: 8 augmented queries
    assert len(rapid) == 8 and rapid[:2] == ["plain", "mirror"] and rapid[-1] == "crop-flip-6"
    assert default_queries("image", ["rapid-hybrid"]) == rapid
    # with the recipe's augmentation: only what it trains with (a mirror-only model: two)
    assert default_queries("image", ["rapid"], ["mirror"]) == ["plain", "mirror"]
    assert default_queries("image", ["rapid"], ["crop", "mirror"]) == rapid
    with pytest.raises(AttackError, match="unknown attack"):
        default_queries("image", ["rapdi"])


def _snapshot(root):
    """Every file and folder under `root`: {relative path: bytes (None for a folder)}."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("bad, message", [
    ({"recipe": {"architecture": "mlp", "epochz": 1}}, "epochz"),
    ({"dataset": {"name": "digitz"}}, "digitz"),
    ({"target": 2}, "target is 2"),
    ({"split": {"audit": 200, "public": 200, "population": 100, "members": 200}},
     "split.members"),
])
def test_a_failing_run_leaves_the_previous_run_byte_identical(tmp_path, capsys, bad, message,
                                                              tiny_run_yaml):
    from miaudit.cli.main import main

    assert main(["run", str(tiny_run_yaml()), "--quiet"]) == 0
    before = _snapshot(tmp_path / "runs")
    # --overwrite: another config's run may replace this one, yet bad input leaves it intact
    assert main(["run", str(tiny_run_yaml("bad", **bad)), "--quiet", "--overwrite"]) == 2
    assert message in capsys.readouterr().err
    assert _snapshot(tmp_path / "runs") == before  # same files, same bytes, no stray folder


def test_an_interrupted_run_keeps_the_previous_one_and_a_rerun_replaces_it(
    tmp_path, monkeypatch, capsys, tiny_run_yaml
):
    import miaudit.pipeline.orchestrator as orchestrator
    from miaudit.cli.main import main

    assert main(["run", str(tiny_run_yaml()), "--quiet"]) == 0
    out = tmp_path / "runs" / "tiny"
    assert (out / "calibration.png").exists()
    before = _snapshot(tmp_path / "runs")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    # after training and the bank: the staging folder holds config.yaml and bank.npz by now
    with monkeypatch.context() as patch:
        patch.setattr(orchestrator, "evaluate_attacks", interrupted)
        assert main(["run", str(tiny_run_yaml(seed=1)), "--quiet",
                     "--overwrite"]) == 130
    assert _snapshot(tmp_path / "runs") == before
    # a successful rerun replaces the run whole: no calibration figure (no calibrated-loss)
    # is left over from the previous run, and references on fewer rows are reported
    again = tiny_run_yaml("again", attacks=["loss"],
                        split={"audit": 200, "public": 100, "population": 100})
    assert main(["run", str(again), "--quiet"]) == 2  # another config: refused unless told
    assert main(["run", str(again), "--quiet", "--overwrite"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["files"]) == {p.name for p in out.iterdir()}
    assert not (out / "calibration.png").exists()
    assert yaml.safe_load((out / "config.yaml").read_text())["attacks"] == ["loss"]
    assert any("reference models train on 50 rows" in w for w in summary["warnings"])
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["tiny"]


def test_text_runs_query_plain_unless_rapid_asks_for_perturbations():
    assert default_queries("tokens", ["loss", "lira-offline"]) == ["plain"]
    queries = default_queries("tokens", ["loss", "rapid"])
    assert len(queries) == 8 and queries[:3] == ["plain", "token-dropout-1", "adjacent-swap-1"]
    assert default_queries("tabular", ["rapid"]) == ["plain"]


def test_scorer_thresholds_come_from_their_held_out_rows_without_a_rerun(
    digits_bank, monkeypatch
):
    from miaudit.pipeline import evaluate as evaluate_module

    calls = []
    real = evaluate_module.public_threshold
    monkeypatch.setattr(evaluate_module, "public_threshold",
                        lambda *a: calls.append(a[0]) or real(*a))  # fmt: skip
    params = {"rapid": {"epochs": 12, "max_train_samples": 2000}}
    result = evaluate_bank(digits_bank, 0, ["rapid", "loss"], attack_params=params,
                           metric_cfg=MetricsConfig(bootstrap=0), progress=False)  # fmt: skip
    assert calls == ["loss"]  # non-scorer attacks: the rerun with a reference as target
    run_ = evaluate_module.run_attack("rapid", TargetView.of(digits_bank, 0), **params["rapid"])
    expected = evaluate_module.rows_threshold(run_.threshold_rows)
    assert result.outcome("rapid").metrics.threshold == expected
    # holdout 0: no held-out rows, so the attack is rerun as before
    params = {"rapid": {**params["rapid"], "holdout": 0.0}}
    evaluate_bank(digits_bank, 0, ["rapid"], attack_params=params,
                  metric_cfg=MetricsConfig(bootstrap=0), progress=False)  # fmt: skip
    assert calls == ["loss", "rapid"]


def test_threshold_rows_on_audit_samples_are_refused(digits_bank, monkeypatch):
    from miaudit.attacks import registry

    def cheat(view):
        audit = np.flatnonzero(view.audit)[:4]
        rows = registry.ThresholdRows(np.zeros(4), np.array([0, 1, 0, 1], bool), audit)
        return registry.Scored(np.zeros(view.n_samples), rows)

    spec = registry.AttackSpec("cheat", cheat, registry.Needs(), "")
    monkeypatch.setitem(registry._REGISTRY, "cheat", spec)
    with pytest.raises(AttackError, match="public data only"):
        registry.run_attack("cheat", TargetView.of(digits_bank, 0))


def test_target_fit_flags_a_target_near_chance_on_its_own_training_rows():
    from miaudit.pipeline.evaluate import target_fit
    from miaudit.signals import SignalBank

    rng = np.random.default_rng(0)
    n, classes = 400, 10
    labels = rng.integers(0, classes, n)
    membership = np.zeros((2, n), dtype=bool)
    membership[0, :200] = True
    membership[1, 200:] = True
    untrained = np.zeros((2, n, 1, classes), dtype=np.float32)  # always predicts class 0
    fit = target_fit(SignalBank(logits=untrained, labels=labels, membership=membership), 0)
    share = np.bincount(labels[:200]).max() / 200
    assert fit["near_chance"] and fit["chance"] == share and fit["n_members"] == 200
    assert fit["train_accuracy"] == np.mean(labels[:200] == 0)
    trained = untrained.copy()
    trained[0, np.arange(n), 0, labels] = 5.0  # right on every row
    fit = target_fit(SignalBank(logits=trained, labels=labels, membership=membership), 0)
    assert fit["train_accuracy"] == 1.0 and not fit["near_chance"]
