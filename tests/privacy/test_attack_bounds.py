"""Every attack of a run gets the Clopper–Pearson threshold ε bound (docs/algorithms.md §16):
τ chosen on a seeded half of the audit samples and counted on the other, at the target's DP δ
or metrics.epsilon_delta, typed in results, shown in the report; the best is Bonferroni'd."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from miaudit.config import MetricsConfig, config_from_dict
from miaudit.errors import ConfigError
from miaudit.pipeline import evaluate_bank
from miaudit.privacy import attack_bounds as epsilon_module
from miaudit.privacy import choose_threshold, epsilon_from_counts, split_halves
from miaudit.privacy.attack_bounds import Halves, split_seed, threshold_record
from miaudit.privacy.sections import privacy_line
from miaudit.records.outcomes import AttackMetrics
from miaudit.records.privacy import EPSILON_LOWER_BOUND, ThresholdEpsilon
from miaudit.report import format_table
from miaudit.report.html import render_html
from miaudit.signals import SignalBank

ATTACKS = ["loss", "calibrated-loss", "rmia", "correctness"]


@pytest.fixture(scope="module")
def result(digits_bank):
    return evaluate_bank(digits_bank, 0, ATTACKS, metric_cfg=MetricsConfig(bootstrap=0),
                         seed=3, progress=False)


def test_every_attack_has_a_bound_that_round_trips(result):
    for outcome in result.outcomes:
        d = outcome.metrics.to_dict()
        entry = d[EPSILON_LOWER_BOUND]
        assert entry["epsilon"] >= 0 and entry["method"] == "clopper-pearson threshold"
        assert entry["delta"] == 1e-5 and entry["alpha"] == 0.05  # metrics' defaults
        assert entry["selection"]["seed"] == split_seed(3, 0)
        typed = AttackMetrics.from_dict(d)
        assert typed == outcome.metrics and typed.to_dict() == d
        assert json.dumps(typed.to_dict()) == json.dumps(d)  # same key order
        assert typed.epsilon_lower_bound.epsilon == entry["epsilon"]
    frame = result.to_frame()
    rows = frame[frame.metric == EPSILON_LOWER_BOUND]
    assert list(rows.attack) == ATTACKS
    # the leaky target: a reference-calibrated attack certifies ε > 0
    assert max(rows.value) > 0


def test_tau_is_chosen_on_one_half_and_counted_on_the_other(result, digits_bank):
    members = digits_bank.membership[0][digits_bank.audit]
    entry = result.outcome("loss").metrics.epsilon_lower_bound.to_dict()
    select, count = split_halves(members, entry["selection"]["seed"])
    assert not np.intersect1d(select, count).size and select.size + count.size == members.size
    assert (entry["n_members"], entry["n_nonmembers"]) == (members[count].sum(),
                                                           (~members[count]).sum())
    scores = result.outcome("loss").scores
    halves = Halves.of(members, entry["selection"]["seed"], 1e-5, 0.05)
    again = threshold_record(scores, members, halves).to_dict()
    assert again["threshold"] == entry["threshold"] and again["fp"] == entry["fp"]
    # τ depends on the selection half only: scramble the counted scores, τ stays
    scrambled = scores.copy()
    scrambled[count] = np.random.default_rng(0).permutation(scrambled[count])
    moved = threshold_record(scrambled, members, halves).to_dict()
    assert moved["threshold"] == entry["threshold"]
    tau, counted = entry["threshold"], scrambled[count] >= entry["threshold"]
    assert moved["fp"] == int((counted & ~members[count]).sum())
    assert tau == choose_threshold(scores[select], members[select], 1e-5, 0.05)


def test_the_selection_never_sees_the_counted_samples(threshold_spy, digits_bank):
    seen = threshold_spy
    members = digits_bank.membership[0][digits_bank.audit]
    scores = np.arange(members.size, dtype=float)  # each score names its sample
    halves = Halves.of(members, 11, 0.0, 0.05)
    threshold_record(scores, members, halves)
    assert np.array_equal(np.sort(seen[0]), halves.select.astype(float))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_tabulated_objective_picks_the_librarys_threshold(seed):
    rng = np.random.default_rng(seed)
    flags = rng.random(3000) < 0.3
    scores = np.round(rng.normal(size=3000) + flags, 1)  # many ties
    scores[:5] = [np.inf, -np.inf, np.inf, -np.inf, 0.0]
    halves = Halves.of(flags, seed, 1e-3, 0.1)
    select = halves.select
    ours = threshold_record(scores, flags, halves).bound.threshold
    assert ours == choose_threshold(scores[select], flags[select], 1e-3, 0.1)


def test_missing_bounds_say_why_and_nan_counts_lowest():
    flags = np.array([True] + [False] * 9)  # one member: no halves
    halves, why = epsilon_module._halves(flags, 0, 0.0, 0.05)
    record = threshold_record(np.zeros(10), flags, halves, why)
    entry = record.to_dict()
    assert entry == {"epsilon": None, "reason": why} and "members" in why
    assert ThresholdEpsilon.from_dict(entry) == record
    flags = np.arange(40) % 2 == 0
    halves = Halves.of(flags, 0, 0.0, 0.05)
    none = threshold_record(np.full(40, np.nan), flags, halves)
    assert none.epsilon is None and "no sample" in none.reason
    some = np.where(flags, 1.0, 0.0)
    some[:6] = np.nan
    assert threshold_record(some, flags, halves).unscorable == 6


def test_the_best_bound_is_bonferroni_over_the_attacks(result):
    audit = result.meta["privacy_audit"]
    k = audit.bounds_compared
    assert k == len(ATTACKS) and audit.settings.claimed is None and audit.refutes_claim is None
    best = audit.best
    bound = result.outcome(best.attack).metrics.epsilon_lower_bound.bound
    again = epsilon_from_counts(bound.fp, bound.n_nonmembers, bound.fn, bound.n_members,
                                bound.delta, 0.05 / k, bound.threshold)
    assert best.bound == again and best.bound.alpha == 0.05 / k and best.family_alpha == 0.05
    assert best.epsilon <= max(o.metrics.epsilon_lower_bound.epsilon for o in
                               result.outcomes)  # α/K: never above the best single bound
    assert "Bonferroni" in privacy_line(result) and "no DP claim" in privacy_line(result)


def _leaky_bank(n: int = 600) -> SignalBank:
    """One model that is confident on its members only: a loss threshold separates them."""
    rng = np.random.default_rng(0)
    membership = np.zeros((1, n), dtype=bool)
    membership[0, rng.permutation(n)[: n // 2]] = True
    labels = rng.integers(0, 2, n)
    logits = rng.normal(size=(1, n, 1, 2)).astype(np.float32)
    logits[0, np.arange(n), 0, labels] += np.where(membership[0], 6.0, -6.0)
    return SignalBank(logits=logits, labels=labels, membership=membership)


@pytest.mark.parametrize("claimed, refuted", [(0.5, True), (50.0, False)])
def test_a_dp_target_is_audited_at_its_own_delta_and_its_claim_is_shown(claimed, refuted):
    claim = {"epsilon_spent": claimed, "delta": 1e-6, "target_epsilon": claimed}
    dp = evaluate_bank(_leaky_bank(), 0, ["loss", "confidence"], seed=0, progress=False,
                       metric_cfg=MetricsConfig(bootstrap=0, epsilon_delta=1e-3),
                       target_privacy=claim, membership="miaudit")
    bound = dp.outcome("loss").metrics.epsilon_lower_bound.bound
    assert bound.delta == 1e-6 and bound.epsilon > 2  # 300 + 300 samples, separated
    audit = dp.meta["privacy_audit"]
    assert audit.settings.claimed.epsilon == claimed
    assert audit.settings.claimed.target_epsilon == claimed
    assert audit.settings.delta_source == "the target's DP-SGD delta"
    line = privacy_line(dp)
    assert line.startswith(f"Privacy: claimed ε {claimed:g} (δ 1e-06); best empirical lower "
                           "bound")
    assert audit.refutes_claim is refuted and ("does not hold" in line) is refuted


def test_the_table_and_the_report_show_the_bounds(result):
    text = format_table(result)
    assert "ε lb" in text and "95%, δ 1e-05" in text and text.splitlines()[1].startswith(
        "Privacy: no DP claim")
    assert "ε 1-run" not in text and "Privacy audit" not in text  # no canaries: no section
    page = render_html(result, {})
    assert "<h2>Privacy audit</h2>" in page and "FP / n₀" in page


@pytest.mark.parametrize("metrics, message", [
    ({"epsilon_delta": 1.0}, "metrics.epsilon_delta must lie in [0, 1)"),
    ({"epsilon_delta": -1e-5}, "metrics.epsilon_delta"),
    ({"epsilon_alpha": 0}, "metrics.epsilon_alpha must lie in (0, 1)"),
    ({"epsilon_alpha": 1.5}, "metrics.epsilon_alpha"),
    ({"epsilon_alpha": "5%"}, "must be a number"),
    ({"epsilon_delta": "1e-5"}, "write 1.0e-5"),
])
def test_delta_and_alpha_are_checked(metrics, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_from_dict({"metrics": metrics})


def _text_shifted_bank(n: int = 600) -> SignalBank:
    """_leaky_bank whose members' texts are far more compressible than the non-members': the
    model-free blind baseline tells them apart without reading any model."""
    bank = _leaky_bank(n)
    members = bank.membership[0]
    chars = np.full(n, 400, dtype=np.int64)
    zbytes = np.where(members, 120, 300) + np.random.default_rng(1).integers(0, 40, n)
    return SignalBank(logits=bank.logits, labels=bank.labels, membership=bank.membership,
                      text_zlib_bytes=zbytes.astype(np.int64), text_chars=chars)


def test_model_free_attacks_bound_nothing_and_a_split_they_separate_refutes_nothing():
    claim = {"epsilon_spent": 0.5, "delta": 1e-6}
    result = evaluate_bank(_text_shifted_bank(), 0, ["loss", "blind"], seed=0, progress=False,
                           metric_cfg=MetricsConfig(bootstrap=50), target_privacy=claim,
                           membership="miaudit")
    blind = result.outcome("blind")
    assert blind.cost.models == 0 and blind.metrics.auc > 0.95  # the split, not the model
    record = blind.metrics.epsilon_lower_bound
    assert record.bound is None and "model-free" in record.reason
    audit = result.meta["privacy_audit"]
    assert audit.bounds_compared == 1 and audit.best.attack == "loss"
    assert audit.settings.split_shifted is True and audit.exceeds_claim is True
    assert audit.claim_finding == "withheld" and audit.refutes_claim is False
    line = privacy_line(result)
    assert "no refutation on that basis" in line and "does not hold" not in line
    # the same bank without the text shift: the claim does not hold
    plain = evaluate_bank(_leaky_bank(), 0, ["loss"], seed=0, progress=False,
                          metric_cfg=MetricsConfig(bootstrap=50), target_privacy=claim,
                          membership="miaudit")
    assert plain.meta["privacy_audit"].settings.split_shifted is None  # nothing model-free ran
    assert plain.meta["privacy_audit"].claim_finding == "refuted"


def test_a_bare_bank_or_a_users_split_is_evidence_against_a_claim_not_a_refutation():
    claim = {"epsilon_spent": 0.5, "delta": 1e-6}
    for membership in ("unknown", "user"):
        result = evaluate_bank(_leaky_bank(), 0, ["loss"], seed=0, progress=False,
                               metric_cfg=MetricsConfig(bootstrap=0), target_privacy=claim,
                               membership=membership)
        audit = result.meta["privacy_audit"]
        assert audit.settings.membership == membership
        assert audit.claim_finding == "evidence against" and not audit.refutes_claim
    with pytest.raises(ValueError, match="membership must be one of"):
        evaluate_bank(_leaky_bank(), 0, ["loss"], progress=False, membership="random")
