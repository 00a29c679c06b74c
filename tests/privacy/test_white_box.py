"""A run with white-box gradient canaries (``canaries: {kind: gradient}``; miaudit.privacy.
white_box, docs/algorithms.md §16): the DP-SGD target trained with them under its own cache
key, the references as without them, one family of bounds per white-box threat model in the
run's privacy audit (summary.json, the report, the terminal table), each worded with its
threat model and assumptions, the black-box families as they were, and a cached rerun giving
the same bounds from the stored record."""

from __future__ import annotations

import csv
import json
from html import unescape

import pytest

import miaudit
from miaudit.config import config_from_dict
from miaudit.pipeline import run
from miaudit.privacy.audit_record import PrivacyAudit
from miaudit.privacy.sections import (
    KNOWN_DATA_WORDS,
    THREAT_MODEL_WORDS,
    threat_model_words,
    white_box_lines,
)
from miaudit.records.privacy import FDP_ONE_RUN, ONE_RUN
from miaudit.report import format_table

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
M = 120


def _data(tmp, name, **canaries):
    return {
        "name": name, "seed": 1, "dataset": {"name": "digits"},
        "split": {"audit": 300, "public": 300, "population": 100}, "models": 2,
        "recipe": {"architecture": "mlp", "arch_params": {"hidden": 32}, "epochs": 2,
                   "batch_size": 64, "lr": 0.1, "dp": {"epsilon": 4, "accountant": "rdp"}},
        "attacks": ["loss", "rmia"], "metrics": {"bootstrap": 0},
        "canaries": {"kind": "gradient", "count": M, **canaries},
        "output": str(tmp / name), "cache_dir": str(tmp / "cache"),
    }


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("white-box")
    result, out = run(config_from_dict(_data(tmp, "wb")), progress=False, echo=False)
    return result, out, tmp


def test_both_white_box_families_are_in_the_summary_report_and_table(first):
    result, out, _ = first
    summary = json.loads((out / "summary.json").read_text())["privacy_audit"]
    families = summary["white_box"]["families"]
    assert [f["family"] for f in families] == ["white-box every-iterate",
                                               "white-box final-model"]
    for fam in families:
        assert fam["best"]["bound"] == ONE_RUN and fam["best_mu"]["bound"] == FDP_ONE_RUN
        assert fam["best"]["attack"] == "gradient canaries" and fam["bounds_compared"] == 1
        assert fam["best"]["m"] == M and fam["best"]["guesses"] == 24  # a tenth each way
        # a correct DP-SGD run at ε = 4: no white-box bound above the claim
        assert fam["best"]["epsilon"] < 4 and fam["claim_finding"] == "not exceeded"
    settings = summary["white_box"]["canaries"]
    assert settings["count"] == M and settings["direction"] == "dirac"
    assert settings["delta"] == 1e-5 and settings["delta_source"] == "the target's DP-SGD delta"
    assert 0 < settings["included"] < M
    # the every-iterate scoring options, by default DP's adversary with each step's σ
    assert settings["known_data"] is True and settings["noise_estimate"] == "per-step"
    # read back whole, and worded: each threat model and the f-DP bound's assumption
    audit = PrivacyAudit.from_dict(summary)
    assert audit == result.meta["privacy_audit"]
    lines = white_box_lines(audit)
    assert summary["white_box_lines"] == lines and len(lines) == 2
    for line, model in zip(lines, ("every-iterate", "final-model"), strict=True):
        assert line.startswith(f"White-box {model} ({threat_model_words(model, True)})")
        assert "μ-GDP assumed" in line and "if the trade-off curve is Gaussian" in line
    text = format_table(result, width=None)
    html = unescape((out / "report.html").read_text())
    for where in (text, html):
        assert "white-box every-iterate" in where and "white-box final-model" in where
        assert "Bonferroni family of its own" in where
        assert "less the other rows' clipped sum" in where and "each step's σ" in where
    # the black-box families as ever: the attacks' bounds, compared among themselves
    assert summary["bounds_compared"] == 2 and summary["canaries"] is None
    assert "Privacy: claimed ε 4" in text


def test_the_per_canary_file_and_the_references_keys(first):
    result, out, tmp = first
    rows = list(csv.DictReader((out / "gradient_canaries.csv").open()))
    assert len(rows) == M
    assert sum(int(r["included"]) for r in rows) == (
        result.meta["privacy_audit"].white_box.settings.included)
    assert all(int(r["steps_joined"]) == 0 for r in rows if r["included"] == "0")
    assert any(int(r["steps_joined"]) > 0 for r in rows if r["included"] == "1")
    assert result.meta["target_privacy"]["gradient_canaries"]["count"] == M


def test_a_cached_rerun_reloads_the_record_with_identical_bounds(first):
    result, _, tmp = first
    # the Python API path: the same config as a mapping, the same cache
    again = miaudit.run(_data(tmp, "wb-again"), progress=False)
    assert again.meta["models_trained"] == 0 and again.meta["models_from_cache"] == 2
    assert again.meta["privacy_audit"].white_box == result.meta["privacy_audit"].white_box


def test_one_threat_model_reports_one_family_and_the_target_key_moves(first):
    _, _, tmp = first
    one = miaudit.run(_data(tmp, "wb-final", threat_models=["final-model"]), progress=False)
    families = one.meta["privacy_audit"].white_box.families
    assert [f.threat_model for f in families] == ["final-model"]
    assert one.meta["models_trained"] == 0  # the same canaries: the same cached target
    other = miaudit.run(_data(tmp, "wb-random", direction="random"), progress=False)
    assert other.meta["models_trained"] == 1  # other canaries: another target, same reference
    # without canaries: the canary-free target trains (its own key), the reference is reused
    plain = _data(tmp, "plain")
    plain["canaries"] = {"count": 0}
    none = miaudit.run(plain, progress=False)
    assert (none.meta["models_trained"], none.meta["models_from_cache"]) == (1, 1)
    assert none.meta["privacy_audit"].white_box is None
    assert "white_box" not in none.meta["privacy_audit"].to_dict()


def _known_data_run(tmp, name, known_data, **canaries):
    """A run whose canaries sit on random coordinates (where the rows' gradients land, so
    that subtracting them changes the every-iterate scores), its own cache."""
    data = _data(tmp, name, coordinates="random", known_data=known_data, **canaries)
    data["cache_dir"] = str(tmp / "cache-known-data")
    return miaudit.run(data, progress=False)


def _every_iterate_scores(out):
    rows = csv.DictReader((out / "gradient_canaries.csv").open())
    return [(float(r["every_iterate_score"]), float(r["final_model_score"])) for r in rows]


def test_known_data_changes_the_every_iterate_score_and_both_reports_say_which(first):
    _, _, tmp = first
    known = _known_data_run(tmp, "wb-known", True)
    blind = _known_data_run(tmp, "wb-blind", False, noise="estimated")
    # scoring-only options: the same cached target serves both
    assert (known.meta["models_trained"], blind.meta["models_trained"]) == (2, 0)
    a, b = _every_iterate_scores(tmp / "wb-known"), _every_iterate_scores(tmp / "wb-blind")
    assert [f for _, f in a] == [f for _, f in b]  # the final model's scores: the same
    assert sum(e != e2 for (e, _), (e2, _) in zip(a, b, strict=True)) > M // 2
    for result, on, out in ((known, True, tmp / "wb-known"), (blind, False, tmp / "wb-blind")):
        wb = result.meta["privacy_audit"].white_box
        assert wb.settings.known_data is on
        assert wb.settings.noise_estimate == ("per-step" if on else "estimated")
        summary = json.loads((out / "summary.json").read_text())
        assert summary["privacy_audit"]["white_box"]["canaries"]["known_data"] is on
        words = KNOWN_DATA_WORDS if on else THREAT_MODEL_WORDS["every-iterate"]
        assert summary["privacy_audit"]["white_box_lines"][0].startswith(
            f"White-box every-iterate ({words}): ")
        assert (("less the other rows' clipped sum" in format_table(result, width=None))
                is on)
    final = [w.meta["privacy_audit"].white_box.families[1] for w in (known, blind)]
    assert final[0] == final[1]  # the final-model family does not depend on them


def test_a_cached_record_without_the_rows_part_is_an_error_for_known_data_only(first):
    """A target cached before the record kept d: a known-data audit of it says what to do
    (never scores x under a known-data report); the auditor who does not need d reads it."""
    import dataclasses

    from miaudit.errors import ConfigError
    from miaudit.train.gradient_records import RECORD_SHA256, load_record, save_record

    _, _, tmp = first
    blind = _known_data_run(tmp, "wb-blind-before", False)
    stripped = 0
    for path in (tmp / "cache-known-data").glob("*.canaries.npz"):  # as older miaudit saved
        meta_path = path.parent / (path.name.removesuffix(".canaries.npz") + ".json")
        meta = json.loads(meta_path.read_text())
        record = load_record(path, meta[RECORD_SHA256])
        meta[RECORD_SHA256] = save_record(path, dataclasses.replace(record, data=None))
        meta_path.write_text(json.dumps(meta))
        stripped += 1
    assert stripped == 1
    with pytest.raises(ConfigError, match=r"known_data: true needs .* has none"):
        _known_data_run(tmp, "wb-old-known", True)
    again = _known_data_run(tmp, "wb-old-blind", False)
    assert again.meta["models_trained"] == 0  # the old entry is still served
    assert again.meta["privacy_audit"].white_box == blind.meta["privacy_audit"].white_box


def _record(m=400, steps=10, seed=0):
    """A synthetic run whose canaries stand out (noise 0.1 where DP-SGD's σ would be ~1): the
    bug a white-box audit exists to catch."""
    import numpy as np

    from miaudit.train.gradient_canaries import GradientCanaryRecord

    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    x = included[None, :] + rng.normal(0, 0.1, (steps, m))
    return GradientCanaryRecord(
        included=included, projections=x, initial=np.zeros(m), final=-x.sum(axis=0),
        sampled=included * steps, coordinates=np.arange(m), kind="dirac",
        noise_multiplier=1.0, sample_rate=1.0, max_grad_norm=1.0, expected_batch_size=100.0,
        data=np.zeros_like(x))  # no other rows


def test_a_white_box_bound_above_the_claim_refutes_it_per_family():
    from miaudit.config import CanariesConfig
    from miaudit.privacy.audit_record import Claim, PrivacySettings
    from miaudit.privacy.white_box import white_box_audit

    settings = PrivacySettings(claimed=Claim(1.0, 1e-5), alpha=0.05, delta=1e-5,
                               delta_source="the target's DP-SGD delta", split_seed=0)
    section = CanariesConfig(kind="gradient", count=400, alpha=0.05,
                             guesses=[{"k_plus": 40, "k_minus": 40},
                                      {"k_plus": 100, "k_minus": 100}])
    wb = white_box_audit(_record(), section, settings)
    assert [f.family for f in wb.families] == ["white-box every-iterate",
                                               "white-box final-model"]
    for fam in wb.families:
        assert fam.bounds_compared == 2 and fam.best.family_alpha == 0.05
        assert fam.best.bound.alpha == pytest.approx(0.025)  # each candidate at α / K
        assert fam.best.epsilon > 1.0 and fam.claim_finding == "refuted"
        assert fam.best_mu.mu > 0 and fam.best_mu.kind == FDP_ONE_RUN
    audit = PrivacyAudit(settings, white_box=wb)
    assert PrivacyAudit.from_dict(audit.to_dict()) == audit
    lines = white_box_lines(audit)
    assert all("95% over 2 guess candidates, Bonferroni" in line for line in lines)
    assert all("the privacy claim does not hold" in line for line in lines)


def test_a_config_built_in_python_is_checked_again_before_any_work(tmp_path):
    from miaudit.errors import ConfigError
    from miaudit.pipeline.canaries import check_canaries

    cfg = config_from_dict(_data(tmp_path, "python"))
    no_dp = {k: v for k, v in cfg.recipe.items() if k != "dp"}
    with pytest.raises(ConfigError, match=r"has no dp: give it one"):
        cfg.recipe = no_dp  # changed after loading: the config checks the assignment
    assert "dp" in cfg.recipe  # and keeps its valid value
    unchecked = cfg.model_copy(update={"recipe": no_dp})  # pydantic's copy skips validation
    with pytest.raises(ConfigError, match=r"has no dp: give it one"):
        check_canaries(unchecked)
    with pytest.raises(ConfigError, match=r"has no dp"):
        run(unchecked, progress=False, echo=False)
    assert not (tmp_path / "python").exists()


def test_coverage_on_a_mechanism_of_known_privacy():
    """Full-batch steps of the exact Gaussian mechanism (q = 1, T = 4, σ = 4: each canary's
    every-iterate and final-model views are exactly μ-GDP with μ = √T/σ = 0.5): over 200
    seeded runs, a family's μ bound exceeds 0.5, and its ε bound the ε of 0.5-GDP at δ, in
    at most α of them (plus 3 binomial standard deviations)."""
    import math

    import numpy as np

    from miaudit.config import CanariesConfig
    from miaudit.privacy import gaussian_epsilon
    from miaudit.privacy.audit_record import PrivacySettings
    from miaudit.privacy.white_box import white_box_audit
    from miaudit.train.gradient_canaries import GradientCanaryRecord

    m, steps, sigma, mu, runs, alpha = 200, 4, 4.0, 0.5, 200, 0.05
    section = CanariesConfig(kind="gradient", count=m, alpha=alpha)
    settings = PrivacySettings(claimed=None, alpha=alpha, delta=1e-5, delta_source="test",
                               split_seed=0)
    true_eps = gaussian_epsilon(mu, 1e-5)
    over_mu = over_eps = 0
    for seed in range(runs):
        rng = np.random.default_rng(seed)
        included = rng.random(m) < 0.5
        x = included[None, :] + rng.normal(0, sigma, (steps, m))
        record = GradientCanaryRecord(
            included=included, projections=x, initial=np.zeros(m), final=-x.sum(axis=0),
            sampled=included * steps, coordinates=np.arange(m), kind="dirac",
            noise_multiplier=sigma, sample_rate=1.0, max_grad_norm=1.0,
            expected_batch_size=100.0, data=np.zeros_like(x))  # no other rows
        for fam in white_box_audit(record, section, settings).families:
            over_mu += fam.best_mu.mu > mu
            over_eps += fam.best.epsilon > true_eps
    trials = 2 * runs  # two families a run, each a test at α
    allowed = alpha * trials + 3 * math.sqrt(trials * alpha * (1 - alpha))
    assert over_mu <= allowed and over_eps <= allowed, (over_mu, over_eps, allowed)
