"""Canaries and one-run auditing (Steinke, Nasr & Jagielski 2023; docs/algorithms.md §16):
rows outside the pools, each in the target's training set with probability ½, never in a
reference's; mislabelled labels in the target's training data, its cache key and the bank;
the one-run and canary threshold bounds of every attack; errors before any training."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from miaudit.config import config_from_dict
from miaudit.config.recipes import resolve_recipes
from miaudit.errors import ConfigError
from miaudit.pipeline import run
from miaudit.pipeline.canaries import canary_delta, check_canaries
from miaudit.privacy import min_canaries, mu_array
from miaudit.privacy.attack_bounds import correct_guesses, one_run_record
from miaudit.privacy.audit_record import PrivacyAudit
from miaudit.privacy.sections import BOUND_WORDS, privacy_line
from miaudit.protocol import make_design, make_split
from miaudit.records.outcomes import AttackMetrics
from miaudit.records.privacy import (
    CANARY_EPSILON_LOWER_BOUND,
    CANARY_GAUSSIAN_DP_LOWER_BOUND,
    FDP_ONE_RUN,
    GAUSSIAN_DP_LOWER_BOUND,
    ONE_RUN,
    OneRunEpsilon,
)
from miaudit.report import format_table
from miaudit.signals import SignalBank

ATTACKS = ["loss", "rmia", "correctness"]


def _config(tmp_path, name, **overrides):
    data = {
        "name": name, "seed": 2, "dataset": {"name": "digits"},
        "split": {"audit": 300, "public": 300, "population": 150},
        "models": 2,
        # Adam, long enough to memorise the mislabelled canaries it trains on
        "recipe": {"architecture": "mlp", "epochs": 100, "batch_size": 32, "optimizer": "adam",
                   "lr": 0.003},
        "attacks": ATTACKS, "metrics": {"bootstrap": 0},
        "output": str(tmp_path / name), "cache_dir": str(tmp_path / "cache"),
    }
    data.update(overrides)
    return config_from_dict(data)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same run without canaries, then with 100 mislabelled ones (one model cache)."""
    tmp = tmp_path_factory.mktemp("canaries")
    plain, _ = run(_config(tmp, "plain"), progress=False, echo=False)
    cfg = _config(tmp, "canaries", canaries={"count": 100})
    with_canaries, out = run(cfg, progress=False, echo=False)
    return plain, with_canaries, out, tmp


def test_canaries_leave_the_pools_and_the_references_as_they_were(runs):
    plain, result, out, _ = runs
    # the references were found in the cache: same rows, same labels, same keys
    assert result.meta["models_trained"] == 1 and result.meta["models_from_cache"] == 1
    np.testing.assert_array_equal(result.rows, plain.rows)
    np.testing.assert_array_equal(result.members, plain.members)
    bank = SignalBank.load(out / "bank.npz")
    assert bank.canary.sum() == 100 and not (bank.canary & (bank.audit | bank.population)).any()
    assert not bank.membership[1][bank.canary].any()  # the reference never trains on one
    assert result.meta["models"][0]["n_train"] == 150 + bank.membership[0][bank.canary].sum()


def test_inclusion_and_mislabelled_labels_are_recorded(runs):
    _, result, out, _ = runs
    bank = SignalBank.load(out / "bank.npz")
    with open(out / "canaries.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    included = np.array([int(r["included"]) for r in rows], dtype=bool)
    labels = np.array([int(r["label"]) for r in rows])
    true = np.array([int(r["true_label"]) for r in rows])
    np.testing.assert_array_equal(bank.membership[0][bank.canary], included)
    np.testing.assert_array_equal(bank.labels[bank.canary], labels)  # the bank has the label
    assert (labels != true).all() and 30 <= included.sum() <= 70
    canaries = result.meta["privacy_audit"].settings.canaries
    assert canaries.included == included.sum() and canaries.count == 100
    assert canaries.kind == "mislabelled"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["privacy_audit"]["canaries"]["kind"] == "mislabelled"  # written last
    assert list(summary["privacy_audit"]["canaries"])[-1] == "kind"
    assert "canaries.csv" in json.loads((out / "summary.json").read_text())["files"]


def test_every_attack_has_a_one_run_bound_and_an_overfit_target_leaks(runs):
    _, result, out, _ = runs
    written = json.loads((out / "metrics.json").read_text())
    for name in ATTACKS:
        entry = written[name][ONE_RUN]
        assert entry["epsilon"] >= 0 and entry["m"] == 100
        assert (entry["k_plus"], entry["k_minus"], entry["guesses"]) == (10, 10, 20)
        assert entry["alpha"] == 0.05 and entry["delta"] == 1e-5
        assert written[name][CANARY_EPSILON_LOWER_BOUND]["epsilon"] >= 0
        # the μ-GDP bound on the canaries: the canary threshold bound's halves, α and δ
        gdp, eps = written[name][CANARY_GAUSSIAN_DP_LOWER_BOUND], written[name][
            CANARY_EPSILON_LOWER_BOUND]
        assert gdp["mu"] >= 0 and gdp["selection"] == eps["selection"]
        assert (gdp["alpha"], gdp["delta"]) == (eps["alpha"], eps["delta"])
        assert gdp["n_members"] + gdp["selection"]["n_members"] == entry["included"]
        metrics = {k: v for k, v in written[name].items() if k != "cost"}
        typed = AttackMetrics.from_dict(metrics)
        assert typed == result.outcome(name).metrics  # read back equal to its record
        assert json.dumps(typed.to_dict()) == json.dumps(metrics)  # round trip, key order too
        assert typed.one_run.epsilon == entry["epsilon"]
        assert typed.canary_gaussian_dp_lower_bound.mu == gdp["mu"]
    # the non-DP target memorised its mislabelled canaries: some attack certifies ε > 0
    assert max(written[n][ONE_RUN]["epsilon"] for n in ATTACKS) > 0.5
    audit = result.meta["privacy_audit"]
    assert audit.best.epsilon > 0 and audit.bounds_compared == 9
    # μ: one threshold bound on the audit samples and one on the canaries per attack, and
    # one f-DP test per (k₊, k₋) candidate of each attack's one-run record (δ > 0)
    assert audit.mu_bounds_compared == _mu_tests(written) == 2 * len(ATTACKS) + len(
        ATTACKS) * len(audit.settings.canaries.guesses)
    frame = result.to_frame()
    assert set(frame[frame.metric == ONE_RUN].attack) == set(ATTACKS)
    text = format_table(result)
    assert "ε 1-run" in text and "Privacy audit" in text and "k₊" in text
    assert "μ lb (canaries)" in text


def _mu_tests(written: dict) -> int:
    """K_μ of a run's metrics.json (docs/algorithms.md §16): every threshold μ bound given,
    and every (k₊, k₋) candidate of a one-run record with a bound at δ > 0."""
    k = 0
    for name in ATTACKS:
        entries = written[name]
        k += sum(entries.get(key, {}).get("mu") is not None
                 for key in (GAUSSIAN_DP_LOWER_BOUND, CANARY_GAUSSIAN_DP_LOWER_BOUND))
        one = entries[ONE_RUN]
        if one.get("epsilon") is not None and one["delta"] > 0:
            k += len(one["candidates"])
    return k


def test_the_one_run_fdp_bound_can_be_the_best_mu_and_the_report_words_it(runs):
    """More guesses on the same mislabelled canaries (the guesses change no model: both
    models come from the cache): the one-run f-DP bound (Mahloujifar, Melis & Chaudhuri 2025)
    on the memorised canaries beats every threshold μ bound, and the report says so."""
    _, _, _, tmp = runs
    guesses = [{"k_plus": 25, "k_minus": 25}, {"k_plus": 40, "k_minus": 40}]
    cfg = _config(tmp, "fdp", canaries={"count": 100, "guesses": guesses})
    result, out = run(cfg, progress=False, echo=False)
    assert result.meta["models_trained"] == 0 and result.meta["models_from_cache"] == 2
    written = json.loads((out / "metrics.json").read_text())
    summary = json.loads((out / "summary.json").read_text())["privacy_audit"]
    assert summary["mu_bounds_compared"] == _mu_tests(written) == 2 * len(ATTACKS) + len(
        ATTACKS) * len(guesses)
    best = summary["best_mu"]
    assert best["bound"] == FDP_ONE_RUN and best["method"] == "one-run f-dp gaussian"
    assert best["alpha"] == pytest.approx(0.05 / summary["mu_bounds_compared"])
    # its counts are a candidate's of that attack's one-run record
    candidates = written[best["attack"]][ONE_RUN]["candidates"]
    assert {"k_plus": best["k_plus"], "k_minus": best["k_minus"],
            "correct": best["correct"]} in [
        {k: c[k] for k in ("k_plus", "k_minus", "correct")} for c in candidates]
    # above every threshold μ bound recounted at the same α / K (each alone, at α, may be
    # higher: the Bonferroni recount is what the best pays)
    each = 0.05 / summary["mu_bounds_compared"]
    recounted = [float(mu_array(e["fp"], e["n_nonmembers"], e["fn"], e["n_members"], each))
                 for e in (written[n][key] for n in ATTACKS for key in (
                     GAUSSIAN_DP_LOWER_BOUND, CANARY_GAUSSIAN_DP_LOWER_BOUND))]
    assert best["mu"] > max(recounted) and best["epsilon"] > 0
    audit = PrivacyAudit.from_dict(summary)  # read back, the f-DP kind included
    assert audit == result.meta["privacy_audit"] and audit.best_mu.kind == FDP_ONE_RUN
    line = privacy_line(result)
    assert BOUND_WORDS[FDP_ONE_RUN] in line and "μ-GDP assumed" in line
    assert "if the trade-off curve is Gaussian" in line
    assert summary["line"] == line
    text = format_table(result)
    assert BOUND_WORDS[FDP_ONE_RUN] in text and "Mahloujifar, Melis & Chaudhuri" in text


def test_the_target_key_follows_the_canary_labels(runs):
    _, _, _, tmp = runs
    natural = _config(tmp, "natural", canaries={"count": 100, "kind": "natural"})
    result, out = run(natural, progress=False, echo=False)
    # same rows and inclusion, true labels: a new target, the same reference
    assert result.meta["models_trained"] == 1 and result.meta["models_from_cache"] == 1
    bank = SignalBank.load(out / "bank.npz")
    with open(out / "canaries.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert all(r["label"] == r["true_label"] for r in rows)
    np.testing.assert_array_equal(bank.labels[bank.canary], [int(r["label"]) for r in rows])


def test_the_split_carves_canaries_outside_the_pools():
    plain = make_split(1000, 300, 300, 100, seed=4)
    split = make_split(1000, 300, 300, 100, seed=4, canaries=50)
    for pool in ("audit", "public", "population"):
        np.testing.assert_array_equal(getattr(split, pool), getattr(plain, pool))
    assert split.canaries.size == 50 and np.unique(split.rows).size == 750
    with pytest.raises(ConfigError, match="asks for 301 rows.*300 rows are free"):
        make_split(1000, 300, 300, 100, seed=4, canaries=301)


def test_inclusion_is_a_seeded_half_for_the_target_only():
    split = make_split(3000, 500, 500, 0, seed=0, canaries=1000)
    design = make_design(split, 3, "offline", seed=5, target=1)
    inc = design.canary_included()
    assert 450 <= inc.sum() <= 550
    np.testing.assert_array_equal(
        inc, make_design(split, 3, "offline", seed=5, target=1).canary_included())
    assert not np.array_equal(inc, make_design(split, 3, "offline", seed=6,
                                               target=1).canary_included())
    canary = design.canary_mask()
    assert not design.membership[[0, 2]][:, canary].any()
    plain = make_design(make_split(3000, 500, 500, 0, seed=0), 3, "offline", seed=5, target=1)
    np.testing.assert_array_equal(design.membership[:, ~canary], plain.membership)
    with pytest.raises(ConfigError, match="design: offline"):
        make_design(split, 3, "online", seed=0)


def test_candidates_share_alpha_and_the_best_is_reported():
    rng = np.random.default_rng(0)
    included = rng.random(400) < 0.5
    scores = included + rng.normal(scale=0.5, size=400)
    record = one_run_record(scores, included, [(20, 20), (40, 0)], 0.0, 0.05)
    typed = OneRunEpsilon.from_dict(record.to_dict())
    assert typed == record and typed.bound.alpha == 0.025 and typed.family_alpha == 0.05
    assert typed.epsilon == max(c.epsilon for c in typed.candidates) > 0


def test_a_candidate_that_cannot_certify_keeps_its_count():
    """Its ε None, its correct count recorded as one_run_epsilon counts it (for the one-run
    f-DP bound of the best μ); a record written before it (count None) reads back too."""
    rng = np.random.default_rng(1)
    included = rng.random(400) < 0.5
    scores = included + rng.normal(scale=0.5, size=400)
    # (1, 1): two guesses can never certify ε > 0 at δ = 1e-5; (40, 40) can
    record = one_run_record(scores, included, [(1, 1), (40, 40)], 1e-5, 0.05)
    weak, strong = record.candidates
    assert weak.epsilon is None and strong.epsilon is not None and record.bound is not None
    assert weak.correct == correct_guesses(scores, included, 1, 1) is not None
    assert strong.correct == correct_guesses(scores, included, 40, 40) == record.bound.correct
    assert OneRunEpsilon.from_dict(record.to_dict()) == record
    old = record.to_dict()
    old["candidates"][0]["correct"] = None  # as runs before the f-DP bound wrote it
    assert OneRunEpsilon.from_dict(old).candidates[0].correct is None
    assert correct_guesses(scores, included, 300, 200) is None  # more guesses than canaries


BASE = {"split": {"audit": 300, "public": 300, "population": 100}}


@pytest.mark.parametrize("overrides, message", [
    ({"canaries": {"count": 100, "kind": "loud"}}, "canaries.kind must be one of"),
    ({"canaries": {"count": 100}, "design": "online"}, "canaries need design: offline"),
    ({"canaries": {"count": 100, "delta": 1.0}}, "canaries.delta must lie in [0, 1)"),
    ({"canaries": {"count": 100, "alpha": 0.0}}, "canaries.alpha must lie in (0, 1)"),
    ({"canaries": {"count": 100, "alpha": 1}}, "canaries.alpha must lie in (0, 1)"),
    ({"canaries": {"count": -3}}, "canaries.count must be an integer >= 0"),
    ({"canaries": {"count": 10, "tries": 3}}, "unknown key 'canaries.tries'"),
])
def test_canary_config_errors(overrides, message):
    with pytest.raises(ConfigError) as caught:
        config_from_dict({**BASE, **overrides})
    assert message in str(caught.value)


def test_too_few_canaries_fail_before_training_with_the_number_needed(tmp_path, monkeypatch):
    needed = min_canaries(1e-5, 0.05)
    cfg = _config(tmp_path, "few", canaries={"count": needed - 1})

    def never(*args, **kwargs):
        raise AssertionError("the dataset must not even load")

    monkeypatch.setattr("miaudit.pipeline.querying.load_dataset", never)
    with pytest.raises(ConfigError, match=f"at least m = {needed} canaries"):
        run(cfg, progress=False, echo=False)
    assert not (tmp_path / "few").exists()


def test_a_dataset_without_room_for_the_canaries_is_refused(tmp_path):
    cfg = _config(tmp_path, "full", split={"audit": 0.4, "public": 0.4, "population": 0.2},
                  canaries={"count": 50})
    with pytest.raises(ConfigError, match="asks for 50 rows .* 0 rows are free"):
        run(cfg, progress=False, echo=False)


def test_a_dp_recipe_sets_the_canaries_delta(tmp_path):
    dp = {"architecture": "mlp", "epochs": 1, "dp": {"epsilon": 4.0, "delta": 1e-4}}
    cfg = _config(tmp_path, "dp", recipe=dp, canaries={"count": 100})
    assert canary_delta(cfg, resolve_recipes(cfg)) == 1e-4
    check_canaries(cfg)
    own = _config(tmp_path, "own", recipe=dp, canaries={"count": 100, "delta": 0.0})
    assert canary_delta(own, resolve_recipes(own)) == 0.0
    plain = _config(tmp_path, "plain", canaries={"count": 100})
    assert canary_delta(plain, resolve_recipes(plain)) == 1e-5
