"""The privacy audit in a report: the claimed ε beside the best bound, its Bonferroni wording,
the best μ-GDP bound and its ε estimate, the reasons for missing bounds, and nothing at all for
a result without bounds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from miaudit.metrics import evaluate
from miaudit.privacy.attack_bounds import (
    Halves,
    gaussian_dp_record,
    one_run_record,
    privacy_audit,
    threshold_record,
)
from miaudit.privacy.audit_record import CanarySettings, Claim, PrivacyAudit, PrivacySettings
from miaudit.privacy.sections import privacy_line, privacy_section
from miaudit.records.outcomes import AttackMetrics, AttackOutcome, AuditResult
from miaudit.records.privacy import (
    EPSILON_LOWER_BOUND,
    FDP_ONE_RUN,
    GAUSSIAN_DP_LOWER_BOUND,
    ThresholdGaussianDP,
)
from miaudit.report import format_table
from miaudit.report.html import render_html

N = 400


def _result(names: list[str], claim: dict | None = None, broken: str | None = None,
            mu: bool = False, membership: str = "miaudit", shifted: bool | None = None
            ) -> AuditResult:  # fmt: skip
    rng = np.random.default_rng(0)
    members = rng.random(N) < 0.5
    halves = Halves.of(members, 7, 1e-5, 0.05)
    outcomes = []
    for i, name in enumerate(names):
        scores = rng.normal(size=N) + (2.0 + i) * members
        why = "too few members" if name == broken else ""
        bounds = {EPSILON_LOWER_BOUND: threshold_record(scores, members,
                                                        None if why else halves, why)}
        if mu:
            bounds[GAUSSIAN_DP_LOWER_BOUND] = gaussian_dp_record(scores, members,
                                                                 None if why else halves, why)
        metrics = AttackMetrics.from_dict(evaluate(scores, members, n_bootstrap=0))
        outcomes.append(AttackOutcome(name=name, scores=scores,
                                      metrics=metrics.with_bounds(bounds)))
    settings = PrivacySettings(claimed=None if claim is None else Claim(**claim), alpha=0.05,
                               delta=1e-5, delta_source="metrics.epsilon_delta", split_seed=7,
                               membership=membership, split_shifted=shifted)
    return AuditResult(indices=np.arange(N), members=members, outcomes=outcomes,
                       meta={"privacy_audit": privacy_audit(outcomes, settings)})


def _with_metrics(result: AuditResult, **changes) -> None:
    """Every outcome's metrics with ``changes`` (the records are frozen: copies replace them)."""
    result.outcomes = [dataclasses.replace(o, metrics=dataclasses.replace(o.metrics, **changes))
                       for o in result.outcomes]


def test_one_bound_needs_no_bonferroni_and_several_say_it():
    one = privacy_line(_result(["loss"]))
    assert "(loss, threshold test on the audit samples; 95%)." in one
    two = privacy_line(_result(["loss", "rmia"]))
    assert "95% over 2 bounds, Bonferroni" in two and "(rmia," in two  # the stronger one


def test_a_claim_below_the_bound_is_refuted_and_one_above_it_is_not():
    low = privacy_line(_result(["loss"], claim={"epsilon": 0.1, "delta": 1e-5}))
    assert low.startswith("Privacy: claimed ε 0.1 (δ 1e-05)") and "does not hold" in low
    high = privacy_line(_result(["loss"], claim={"epsilon": 100.0, "delta": 1e-5}))
    assert "cannot confirm a claim" in high


def test_a_refutation_says_what_it_rests_on():
    claim = {"epsilon": 0.1, "delta": 1e-5}
    # miaudit drew the split at random: a proof, the claim does not hold
    drawn = _result(["loss"], claim=claim, membership="miaudit")
    assert drawn.meta["privacy_audit"].claim_finding == "refuted"
    assert drawn.meta["privacy_audit"].refutes_claim is True
    # the user's split: evidence against, assuming random membership; never "does not hold"
    for source in ("user", "unknown"):
        given = _result(["loss"], claim=claim, membership=source)
        audit, line = given.meta["privacy_audit"], privacy_line(given)
        assert audit.claim_finding == "evidence against" and audit.exceeds_claim is True
        assert audit.refutes_claim is False
        assert "does not hold" not in line
        assert "evidence against the claim, assuming the members were chosen at random" in line
    # a split told apart without the model: no refutation at all, whoever drew it
    shifted = _result(["loss"], claim=claim, membership="miaudit", shifted=True)
    audit, line = shifted.meta["privacy_audit"], privacy_line(shifted)
    assert audit.claim_finding == "withheld" and audit.refutes_claim is False
    assert "no refutation on that basis" in line and "does not hold" not in line
    # a bound below the claim: nothing to withhold
    high = _result(["loss"], claim={"epsilon": 100.0, "delta": 1e-5}, shifted=True)
    assert high.meta["privacy_audit"].claim_finding == "not exceeded"


def test_the_audit_is_a_frozen_record_whose_json_reads_back_equal():
    result = _result(["loss", "rmia"], claim={"epsilon": 0.1, "delta": 1e-5,
                                              "accountant": "rdp"}, mu=True)
    audit = result.meta["privacy_audit"]
    assert isinstance(audit, PrivacyAudit)
    with pytest.raises(dataclasses.FrozenInstanceError):
        audit.bounds_compared = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        audit.settings.alpha = 0.1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        audit.best.attack = "x"  # type: ignore[union-attr,misc]
    data = audit.to_dict()
    assert list(data) == ["claimed", "alpha", "delta", "delta_source", "split_seed", "canaries",
                          "membership", "split_shifted", "bounds_compared", "best",
                          "exceeds_claim", "refutes_claim", "claim_finding",
                          "mu_bounds_compared", "best_mu"]
    assert data["claimed"] == {"epsilon": 0.1, "delta": 1e-5, "accountant": "rdp"}
    assert list(data["best"])[-3:] == ["attack", "bound", "family_alpha"]
    assert data["best"]["epsilon"] == audit.best.epsilon and data["best_mu"]["mu"] > 0
    assert PrivacyAudit.from_dict(data) == audit
    # again over the same outcomes, from the audit itself: the same audit
    assert privacy_audit(result.outcomes, audit) == audit


def test_results_written_before_claim_findings_still_read():
    result = _result(["loss"], claim={"epsilon": 0.1, "delta": 1e-5})
    old = result.meta["privacy_audit"].to_dict()  # as an older summary.json holds it
    for key in ("claim_finding", "exceeds_claim", "mu_bounds_compared", "best_mu"):
        del old[key]
    result.meta["privacy_audit"] = old
    assert "does not hold" in privacy_line(result)
    typed = PrivacyAudit.from_dict(old)
    assert typed.claim_finding == "refuted" and typed.best_mu is None


def test_bounds_of_zero_name_no_attack():
    result = _result(["loss"])
    # scores unrelated to membership: every bound is 0
    _with_metrics(result, epsilon_lower_bound=threshold_record(
        np.zeros(N), result.members, Halves.of(result.members, 7, 1e-5, 0.05)))
    result.meta["privacy_audit"] = privacy_audit(result.outcomes, result.meta["privacy_audit"])
    assert privacy_line(result) == ("Privacy: no DP claim recorded for the target; no attack "
                                    "certifies ε > 0 (95%).")


def test_missing_bounds_are_explained_and_not_counted():
    result = _result(["loss", "rmia"], broken="rmia")
    assert result.meta["privacy_audit"].bounds_compared == 1
    text = format_table(result)
    assert "rmia: no ε bound from the threshold test on the audit samples (too few members)" \
        in text
    section = privacy_section(result)
    assert section.rows[1][:2] == ["rmia", "-"]
    assert "Privacy audit" in render_html(result, {})


def test_a_result_without_bounds_shows_none():
    result = _result(["loss"])
    result.meta = {}
    _with_metrics(result, epsilon_lower_bound=None)
    assert privacy_line(result) is None and privacy_section(result) is None
    text = format_table(result)
    assert "ε lb" not in text and "Privacy" not in text
    assert "Privacy audit" not in render_html(result, {})


def test_the_best_mu_follows_the_epsilon_line_and_the_section_shows_each():
    result = _result(["loss", "rmia"], claim={"epsilon": 100.0, "delta": 1e-5}, mu=True)
    audit = result.meta["privacy_audit"]
    best = audit.best_mu
    assert audit.mu_bounds_compared == 2 and best.attack == "rmia"  # the stronger one
    line = privacy_line(result)
    assert line.endswith(
        f"cannot confirm a claim). Gaussian DP: best μ lower bound {best.mu:.3g} (rmia, "
        f"threshold test on the audit samples; 95% over 2 bounds, Bonferroni), ε ≈ "
        f"{best.epsilon:.3g} at δ 1e-05 if the trade-off curve is Gaussian (an estimate).")
    section = privacy_section(result)
    assert section.header[4:6] == ["μ lb (audit)", "ε est. (μ)"]
    for row, outcome in zip(section.rows, result.outcomes, strict=True):
        gdp = outcome.metrics.gaussian_dp_lower_bound
        assert row[4:6] == [f"{gdp.mu:.3g}", f"{gdp.epsilon:.3g}"] and gdp.mu > 1
    assert any("Tight Auditing" in item for item in section.legend)
    assert "μ lb (audit)" in render_html(result, {})


def test_an_fdp_best_mu_is_named_and_says_what_it_rests_on():
    """Canaries memorised almost perfectly: the one-run f-DP bound (Mahloujifar, Melis &
    Chaudhuri 2025) beats the threshold μ bound; the line names it and its assumption (μ-GDP,
    ε only for a Gaussian trade-off curve), in the terminal and HTML reports alike."""
    result = _result(["loss"], mu=True)
    rng = np.random.default_rng(3)
    m = 1000
    included = rng.random(m) < 0.5
    scores = included + rng.normal(scale=0.1, size=m)
    _with_metrics(result, one_run=one_run_record(scores, included, [(250, 250)], 1e-5, 0.05))
    canaries = CanarySettings(count=m, included=int(included.sum()), alpha=0.05, delta=1e-5,
                              delta_source="test", split_seed=3, guesses=((250, 250),))
    settings = dataclasses.replace(result.meta["privacy_audit"].settings, canaries=canaries)
    result.meta["privacy_audit"] = audit = privacy_audit(result.outcomes, settings)
    best = audit.best_mu
    assert best.kind == FDP_ONE_RUN and audit.mu_bounds_compared == 2
    line = privacy_line(result)
    assert line.endswith(
        f"Gaussian DP: best μ lower bound {best.mu:.3g} (loss, one-run f-DP guesses on the "
        f"canaries; 95% over 2 bounds, Bonferroni; μ-GDP assumed, Mahloujifar, Melis & "
        f"Chaudhuri 2025), ε ≈ {best.epsilon:.3g} at δ 1e-05 if the trade-off curve is "
        f"Gaussian (an estimate).")
    legend = [x for x in privacy_section(result).legend if "one-run f-DP bound" in x]
    assert len(legend) == 1 and "trade-off curve is Gaussian" in legend[0]
    text, html = format_table(result), render_html(result, {})
    for shown in (text, html):
        assert "one-run f-DP guesses on the canaries" in shown and "μ-GDP assumed" in shown
    assert "no ε bound" not in text and "fdp" not in text  # no attack records the kind
    # without the f-DP member, no such words
    result.meta["privacy_audit"] = privacy_audit(result.outcomes, settings, fdp_one_run=False)
    assert "f-DP" not in format_table(result) and "f-DP" not in render_html(result, {})


def test_no_power_says_no_mu_and_a_missing_mu_is_explained_once():
    result = _result(["loss"], mu=True)
    members = result.members
    halves = Halves.of(members, 7, 1e-5, 0.05)
    # one score for all: no attack has any power
    _with_metrics(result, epsilon_lower_bound=threshold_record(np.zeros(N), members, halves),
                  gaussian_dp_lower_bound=gaussian_dp_record(np.zeros(N), members, halves))
    result.meta["privacy_audit"] = privacy_audit(result.outcomes, result.meta["privacy_audit"])
    assert privacy_line(result).endswith(
        "no attack certifies ε > 0 (95%). Gaussian DP: no attack certifies μ > 0 (95%).")
    broken = _result(["loss", "rmia"], broken="rmia", mu=True)  # no halves: ε says why
    assert broken.meta["privacy_audit"].mu_bounds_compared == 1
    text = format_table(broken)
    assert "rmia: no ε bound from the threshold test" in text and "no μ bound" not in text
    first = broken.outcomes[0]
    broken.outcomes[0] = dataclasses.replace(first, metrics=dataclasses.replace(
        first.metrics, gaussian_dp_lower_bound=ThresholdGaussianDP(None, reason="odd")))
    assert "loss: no μ bound from the threshold test on the audit samples (odd)" in \
        format_table(broken)
