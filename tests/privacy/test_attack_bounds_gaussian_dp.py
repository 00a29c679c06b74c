"""Every attack of a run also gets the μ-GDP lower bound (Nasr et al. 2023; docs/algorithms.md
§16) under the threshold ε bound's rules: the plan's halves, δ and α, τ chosen on the selection
half (to maximise μ) and counted on the other; typed in results, Bonferroni'd across attacks,
shown in the table; 0 without power, absent at δ = 0."""

from __future__ import annotations

import json

import numpy as np
import pytest

from miaudit.config import MetricsConfig
from miaudit.pipeline import evaluate_bank
from miaudit.privacy import attack_bounds as epsilon_module
from miaudit.privacy import (
    gaussian_dp_from_counts,
    gaussian_dp_lower_bound,
    split_halves,
)
from miaudit.privacy.attack_bounds import Halves, gaussian_dp_record, split_seed
from miaudit.privacy.sections import privacy_line
from miaudit.records.outcomes import AttackMetrics
from miaudit.records.privacy import (
    EPSILON_LOWER_BOUND,
    GAUSSIAN_DP_LOWER_BOUND,
    ThresholdGaussianDP,
)
from miaudit.report import format_table
from miaudit.report.table import build_table
from miaudit.report.write import metrics_document

ATTACKS = ["loss", "calibrated-loss", "correctness"]


@pytest.fixture(scope="module")
def result(digits_bank):
    return evaluate_bank(digits_bank, 0, ATTACKS, metric_cfg=MetricsConfig(bootstrap=0),
                         seed=3, progress=False)


def test_mu_is_the_librarys_bound_on_the_counted_half_at_the_selected_tau(result, digits_bank):
    members = digits_bank.membership[0][digits_bank.audit]
    select, count = split_halves(members, split_seed(3, 0))  # the ε bound's halves
    for outcome in result.outcomes:
        d = outcome.metrics.to_dict()
        entry = d[GAUSSIAN_DP_LOWER_BOUND]
        assert entry["selection"] == d[EPSILON_LOWER_BOUND]["selection"]
        s = outcome.scores
        tau = gaussian_dp_lower_bound(s[select], members[select], s[count], members[count],
                                      1e-5, 0.05).threshold  # maximises μ on the selection
        assert entry["threshold"] == tau
        flagged, m = s[count] >= tau, members[count]
        again = gaussian_dp_from_counts(int((flagged & ~m).sum()), int((~m).sum()),
                                        int((~flagged & m).sum()), int(m.sum()), 1e-5, 0.05, tau)
        assert {k: entry[k] for k in again.to_dict()} == again.to_dict()
        assert entry["method"] == "gaussian-dp estimate" and entry["unscorable"] == 0
    # the digits target's train/test gap: correctness certifies μ > 0 (0.177 at seed 3), and
    # its Gaussian ε estimate sits above the threshold ε bound (the whole curve, not a tail)
    gap = result.outcome("correctness").metrics
    assert gap.gaussian_dp_lower_bound.mu > 0.1
    assert gap.gaussian_dp_lower_bound.epsilon > gap.epsilon_lower_bound.epsilon > 0
    # the other attacks reach no μ > 0 on 500 counted samples: 0, never negative or None
    assert result.outcome("loss").metrics.gaussian_dp_lower_bound.mu == 0.0


def test_tau_never_sees_the_counted_half(threshold_spy, digits_bank):
    seen = threshold_spy
    members = digits_bank.membership[0][digits_bank.audit]
    scores = np.arange(members.size, dtype=float)  # each score names its sample
    halves = Halves.of(members, 11, 1e-5, 0.05)
    entry = gaussian_dp_record(scores, members, halves)
    assert np.array_equal(np.sort(seen[0]), halves.select.astype(float))
    # scrambling the counted scores moves the counts, never τ
    scrambled = scores.copy()
    scrambled[halves.count] = np.random.default_rng(0).permutation(scrambled[halves.count])
    assert (gaussian_dp_record(scrambled, members, halves).bound.threshold
            == entry.bound.threshold)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_tabulated_mu_objective_picks_the_librarys_threshold(seed):
    rng = np.random.default_rng(seed)
    flags = rng.random(2000) < 0.3
    scores = np.round(rng.normal(size=2000) + flags, 1)  # many ties
    scores[:4] = [np.inf, -np.inf, np.inf, -np.inf]
    halves = Halves.of(flags, seed, 1e-3, 0.1)
    s, c = halves.select, halves.count
    ours = gaussian_dp_record(scores, flags, halves).bound
    lib = gaussian_dp_lower_bound(scores[s], flags[s], scores[c], flags[c], 1e-3, 0.1)
    assert ours.threshold == lib.threshold and ours.mu == lib.mu
    assert ours.epsilon == lib.epsilon and ours.alpha == 0.1 and ours.delta == 1e-3


def test_no_power_gives_zero_and_no_bound_says_why():
    flags = np.arange(40) % 2 == 0
    halves = Halves.of(flags, 0, 1e-5, 0.05)
    flat = gaussian_dp_record(np.zeros(40), flags, halves)  # one score for all: chance
    assert flat.mu == 0.0 and flat.epsilon == 0.0
    assert ThresholdGaussianDP.from_dict(flat.to_dict()) == flat
    none = gaussian_dp_record(np.full(40, np.nan), flags, halves)
    assert none.to_dict() == {"mu": None, "reason": "the attack scored no sample"}
    typed = ThresholdGaussianDP.from_dict(none.to_dict())
    assert typed.mu is None and typed.epsilon is None and typed == none
    lone = np.array([True] + [False] * 9)  # one member: no halves, the ε bound's reason
    no_halves, why = epsilon_module._halves(lone, 0, 1e-5, 0.05)
    assert gaussian_dp_record(np.zeros(10), lone, no_halves, why).to_dict() == {
        "mu": None, "reason": why}


def test_metrics_json_round_trips_through_the_typed_results(result):
    written = json.loads(json.dumps(metrics_document(result)))
    for outcome in result.outcomes:
        metrics = {k: v for k, v in written[outcome.name].items() if k != "cost"}
        typed = AttackMetrics.from_dict(metrics)
        assert typed == outcome.metrics  # read back equal to the record it was written from
        assert json.dumps(typed.to_dict()) == json.dumps(metrics)  # keys, order, values
        gdp = typed.gaussian_dp_lower_bound
        assert gdp.mu == metrics[GAUSSIAN_DP_LOWER_BOUND]["mu"]
        assert gdp.epsilon == metrics[GAUSSIAN_DP_LOWER_BOUND]["epsilon"]
        assert gdp.selection_seed == split_seed(3, 0) and gdp.bound.n_members > 0
    frame = result.to_frame()
    rows = frame[frame.metric == GAUSSIAN_DP_LOWER_BOUND]
    assert list(rows.attack) == ATTACKS
    assert list(rows.value) == [o.metrics.gaussian_dp_lower_bound.mu for o in result.outcomes]


def test_the_best_mu_is_bonferroni_over_the_attacks(result):
    audit = result.meta["privacy_audit"]
    k = audit.mu_bounds_compared
    assert k == len(ATTACKS) and audit.bounds_compared == len(ATTACKS)  # ε's K unchanged
    best = audit.best_mu.to_dict()
    recounted = {}
    for o in result.outcomes:
        b = o.metrics.gaussian_dp_lower_bound.bound
        recounted[o.name] = gaussian_dp_from_counts(b.fp, b.n_nonmembers, b.fn, b.n_members,
                                                    b.delta, 0.05 / k, b.threshold)
    top = max(recounted, key=lambda name: recounted[name].mu)
    assert best["attack"] == top and best["bound"] == GAUSSIAN_DP_LOWER_BOUND
    assert best["mu"] == recounted[top].mu and best["epsilon"] == recounted[top].epsilon
    assert best["alpha"] == 0.05 / k and best["family_alpha"] == 0.05
    assert 0 < best["mu"] < max(o.metrics.gaussian_dp_lower_bound.mu for o in result.outcomes)
    line = privacy_line(result)
    assert f"Gaussian DP: best μ lower bound {best['mu']:.3g} ({top}," in line
    assert f"95% over {k} bounds, Bonferroni), ε ≈ {best['epsilon']:.3g} at δ 1e-05" in line


def test_the_table_shows_mu_beside_epsilon(result):
    table = build_table(result)
    eps_at = table.header.index("ε lb")
    assert table.header[eps_at + 1] == "μ lb" and table.subheader[eps_at + 1] == "95%"
    for row in table.rows:
        metrics = result.outcome(row[0].removesuffix(" ★")).metrics
        assert row[eps_at] == f"{metrics.epsilon_lower_bound.epsilon:.3g}"
        assert row[eps_at + 1] == f"{metrics.gaussian_dp_lower_bound.mu:.3g}"
    assert "0.177" in [row[eps_at + 1] for row in table.rows]  # correctness
    text = format_table(result)
    assert "μ lb" in text and "μ lb: its μ-GDP lower bound on the same halves" in text


def test_no_mu_at_delta_zero(digits_bank):
    pure = evaluate_bank(digits_bank, 0, ["loss"], seed=3, progress=False,
                         metric_cfg=MetricsConfig(bootstrap=0, epsilon_delta=0.0))
    metrics = pure.outcome("loss").metrics
    assert metrics.epsilon_lower_bound.bound.delta == 0.0
    assert metrics.gaussian_dp_lower_bound is None
    assert GAUSSIAN_DP_LOWER_BOUND not in metrics.to_dict()
    audit = pure.meta["privacy_audit"]
    assert audit.mu_bounds_compared == 0 and audit.best_mu is None
    assert "μ lb" not in format_table(pure) and "Gaussian DP" not in privacy_line(pure)
