"""The verdicts are frozen records, built once: assess's Assessment, the headline verdict and
the release statement, each with the JSON content (keys and their order) summary.json and
verdict.json held when they were dicts."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from miaudit import metrics
from miaudit.records.outcomes import AttackOutcome, AuditResult
from miaudit.verdict.headline import short_verdict
from miaudit.verdict.records import (
    Assessment,
    Figure,
    HeadlineVerdict,
    Reason,
    ReleaseVerdict,
    ShiftComparison,
    VerdictContext,
)
from miaudit.verdict.release import make_verdict, verdict_text
from miaudit.verdict.strength import assess

FIGURE_KEYS = ["fpr", "tpr", "tpr_ci", "times_chance", "n_members", "n_nonmembers",
               "expected_false_positives", "indicative"]
HEADLINE_KEYS = ["level", "label", "line", "attack", "fpr", "tpr", "tpr_ci", "times_chance",
                 "expected_false_positives", "n_nonmembers", "indicative", "auc_attack",
                 "reasons", "shift", "p_value", "correction"]
RELEASE_KEYS = ["level", "attack", "fpr", "figures", "auc", "headline", "paragraphs",
                "caveats", "input_mismatch", "reasons", "shift"]


def _result(shift: float = 2.0, n: int = 2000) -> AuditResult:
    rng = np.random.default_rng(0)
    members = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    outcomes = []
    for name, s in (("weak", 0.0), ("strong", shift)):
        scores = rng.normal(size=2 * n) + s * members
        outcomes.append(AttackOutcome.from_dicts(name, scores, metrics.evaluate(
            scores, members, n_bootstrap=100)))
    return AuditResult(np.arange(2 * n), members, outcomes)


def test_assess_is_a_frozen_record_of_the_strongest_attack():
    found = assess(_result())
    assert isinstance(found, Assessment) and found.level == "exposed"
    assert found.attack == "strong" and found.key == "0.01" and found.measured == "exposed"
    assert isinstance(found.main, Figure) and found.main in found.figures
    assert found.main.fpr == 0.01 and found.degree in ("far", "well", "slightly")
    assert found.reasons == () and found.shift is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.level = "none"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.main.tpr = 0.0  # type: ignore[misc,union-attr]
    assert list(found.main.to_dict()) == FIGURE_KEYS
    assert isinstance(found.main.to_dict()["tpr_ci"], list)  # JSON: a list, as before
    none = assess(AuditResult(np.arange(2), np.array([True, False]), []))
    assert none == Assessment(level="none") and none.main is None and none.figures == ()


def test_the_headline_verdict_holds_the_figures_it_quotes():
    result = _result()
    verdict = short_verdict(result)
    main = assess(result).main
    assert isinstance(verdict, HeadlineVerdict) and verdict.level == "exposed"
    assert (verdict.fpr, verdict.tpr, verdict.tpr_ci) == (main.fpr, main.tpr, main.tpr_ci)
    assert verdict.line.startswith(f"Verdict: {verdict.label}. The strongest attack, strong")
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.line = ""  # type: ignore[misc]
    data = verdict.to_dict()
    assert list(data) == HEADLINE_KEYS
    assert data["tpr_ci"] == list(main.tpr_ci) and data["reasons"] == [] and data["shift"] is None
    assert json.loads(json.dumps(data)) == data  # JSON-ready
    empty = short_verdict(AuditResult(np.arange(2), np.array([True, False]), []))
    assert empty.to_dict() == {"level": "none", "label": "Nothing measured",
                               "line": empty.line, "reasons": []}


def test_the_release_statement_is_a_record_and_verdict_json_its_dict():
    result = _result()
    verdict = make_verdict(result, VerdictContext(references=2, reference_note="note"))
    assert isinstance(verdict, ReleaseVerdict) and verdict.attack == "strong"
    assert isinstance(verdict.paragraphs, tuple) and isinstance(verdict.caveats, tuple)
    assert verdict.figures == assess(result).figures and "note" in verdict.caveats
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.headline = ""  # type: ignore[misc]
    data = verdict.to_dict()
    assert list(data) == RELEASE_KEYS
    assert [list(f) for f in data["figures"]] == [FIGURE_KEYS] * len(verdict.figures)
    assert data["paragraphs"] == list(verdict.paragraphs) and data["auc"] == verdict.auc
    assert json.loads(json.dumps(data)) == data
    assert " ".join(verdict.headline.split()) in " ".join(verdict_text(verdict).split())
    none = make_verdict(AuditResult(np.arange(2), np.array([True, False]), []))
    assert none.to_dict() == {"level": "none",
                              "headline": "No attack ran, so nothing was measured.",
                              "paragraphs": [], "caveats": [], "figures": []}


def test_reasons_and_the_shift_comparison_serialise_as_before():
    reason = Reason("few-nonmembers", "too few", "audit with more")
    assert reason.to_dict() == {"code": "few-nonmembers", "text": "too few",
                                "fix": "audit with more"}
    shift = ShiftComparison(source="the split check", auc=0.6, p_value=1e-6, tpr=0.02,
                            fpr=0.01, attack="rmia", attack_auc=0.7, attack_tpr=0.1,
                            exceeds=True)
    assert list(shift.to_dict()) == ["source", "auc", "p_value", "tpr", "fpr", "attack",
                                     "attack_auc", "attack_tpr", "exceeds"]
    verdict = HeadlineVerdict(level="inconclusive", label="Inconclusive", line="Verdict: x",
                              reasons=(reason,), shift=shift)
    assert verdict.to_dict()["reasons"] == [reason.to_dict()]
    assert verdict.to_dict()["shift"] == shift.to_dict()
    with pytest.raises(dataclasses.FrozenInstanceError):
        reason.fix = ""  # type: ignore[misc]
