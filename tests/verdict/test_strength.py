"""Tests of the report's order by strength, the ★ mark, the verdict line and the captions,
on results whose metrics are set by hand (so the expected order is known)."""

from __future__ import annotations

import dataclasses
import html
import re

import numpy as np
import pytest

from miaudit.metrics import support_warning
from miaudit.records.outcomes import AttackCost, AttackOutcome, AuditResult
from miaudit.report import format_table
from miaudit.report.html import render_html
from miaudit.report.table import STRONGEST_MARK, build_table
from miaudit.verdict.headline import short_verdict, verdict_line
from miaudit.verdict.records import VerdictContext
from miaudit.verdict.release import make_verdict
from miaudit.verdict.strength import headline_fpr, ranked

PNG = b"\x89PNG\r\n\x1a\n"  # render_html embeds bytes as they are


def _metrics(tprs: dict[str, float], auc: float, n0: int, *, ci_low: float = 0.5,
             auc_ci: tuple[float, float] | None = None) -> dict:
    """Metrics as miaudit.metrics.evaluate writes them; each TPR's CI is [ci_low x, 1.5 x]."""
    return {
        "auc": auc,
        "auc_ci": list(auc_ci) if auc_ci else [auc - 0.02, auc + 0.02],
        "tpr_at_fpr": tprs,
        "tpr_at_fpr_ci": {k: [ci_low * v, 1.5 * v] for k, v in tprs.items()},
        "fpr_support": {k: {"n_nonmembers": n0, "expected_false_positives": n0 * float(k),
                            "warning": support_warning(n0, float(k))} for k in tprs},
        "n_members": n0, "n_nonmembers": n0, "n_unscorable": 0,
    }


def _result(n0: int = 2000, ci_low: float = 0.5) -> AuditResult:
    """Four attacks: at 1% FPR b is strongest, c and a tie (c has the higher AUC), d last;
    at 0.1% a is strongest and c, d report nothing."""
    specs = {
        "a": ({"0.001": 0.30, "0.01": 0.10}, 0.90),
        "b": ({"0.001": 0.01, "0.01": 0.20}, 0.60),
        "c": ({"0.01": 0.10}, 0.95),
        "d": ({"0.01": 0.05}, 0.99),
    }
    n = 2 * n0
    members = np.arange(n) < n0
    rng = np.random.default_rng(0)
    outcomes = [AttackOutcome.from_dicts(name, rng.normal(size=n),
                                         _metrics(tprs, auc, n0, ci_low=ci_low))
                for name, (tprs, auc) in specs.items()]
    return AuditResult(np.arange(n), members, outcomes, meta={"config": {"metrics": {
        "confidence": 0.9}}})


def _set_auc_ci(result: AuditResult, ci: tuple[float, float], *names: str) -> None:
    """Give the attacks ``names`` (default: all) the AUC interval ``ci``: the outcomes are
    frozen, so each is replaced by a copy."""
    result.outcomes = [
        dataclasses.replace(o, metrics=dataclasses.replace(o.metrics, auc_ci=ci))
        if not names or o.name in names else o for o in result.outcomes]


def _table_rows(text: str) -> list[str]:
    lines = text.splitlines()
    dashes = next(i for i, line in enumerate(lines) if line.startswith("---"))
    return [line.split()[0] for line in lines[dashes + 1:] if line.strip()][:4]


def test_sorted_by_tpr_at_the_supported_fpr_then_auc() -> None:
    result = _result(n0=2000)  # 2 expected FPs at 0.1%, 20 at 1%: rank at 1%
    assert headline_fpr(result) == "0.01"
    order, key = ranked(result)
    assert key == "0.01" and [o.name for o in order] == ["b", "c", "a", "d"]
    text = format_table(result)
    assert _table_rows(text) == ["b", "c", "a", "d"]
    first = next(line for line in text.splitlines() if line.startswith("b "))
    assert first.startswith(f"b {STRONGEST_MARK}")
    assert text.count(STRONGEST_MARK) == 2  # the row and the legend, nowhere else
    table = build_table(result)
    assert table.strongest == 0 and table.rows[0][0] == f"b {STRONGEST_MARK}"
    assert table.subheader[2:4] == ["2 exp. FP*", "20 exp. FP"]  # what each TPR rests on
    assert any("sorted strongest first by TPR@1%" in x and "then AUC" in x for x in table.legend)
    assert any("2,000 non-members" in x for x in table.legend)


def test_sorted_at_the_lowest_fpr_when_it_is_supported() -> None:
    result = _result(n0=20000)  # 20 expected false positives at 0.1%
    order, key = ranked(result)
    assert key == "0.001"
    assert [o.name for o in order] == ["a", "b", "d", "c"]  # c, d: no TPR at 0.1%, by AUC
    assert _table_rows(format_table(result)) == ["a", "b", "d", "c"]


def test_unsupported_fprs_rank_at_the_best_supported_and_say_so() -> None:
    result = _result(n0=500)  # 0.5 and 5 expected false positives: neither is enough
    order, key = ranked(result)
    assert key == "0.01" and order[0].name == "b"
    legend = " ".join(build_table(result).legend)
    assert "no FPR rests on >= 10 expected false positives" in legend


def test_verdict_line_exposed_with_its_support() -> None:
    result = _result(n0=2000)  # b: 20% at 1% FPR, CI [10%, 30%] above 1%
    verdict = short_verdict(result)
    assert verdict.level == "exposed" and verdict.attack == "b"
    line = verdict.line
    assert line.startswith("Verdict: Exposed, far above chance. The strongest attack, b, ")
    assert "picks out 20.0% of members at 1% FPR (90% CI 10.0% to 30.0%), 20.0× chance" in line
    assert "rests on 20 expected false positives among 2,000 non-members" in line
    assert "Indicative" not in line and "\n" not in line
    # the audit's release statement rests on the same attack and level
    audit = make_verdict(result, VerdictContext(confidence=0.9))
    assert audit.attack == "b" and audit.level == "exposed"


def test_verdict_line_indicative_and_not_measured() -> None:
    few = short_verdict(_result(n0=500))
    assert few.level == "exposed" and few.indicative
    assert "Indicative only: this rests on 5 expected false positives among 500 non-members, " \
           "fewer than 10" in few.line
    weak = _result(n0=2000, ci_low=0.01)  # b's interval reaches down to 0.2%: below 1%
    _set_auc_ci(weak, (0.45, 0.55))
    verdict = short_verdict(weak)
    assert verdict.level == "not measured"
    assert verdict.line.startswith("Verdict: No measurable leak. The strongest attack at 1% "
                                      "FPR, b, picks out 20.0% of members")
    assert "where guessing gets 1%" in verdict.line
    assert make_verdict(weak).level == "not measured"
    # an audit that found the model's inputs mismatched never reads as a clearance
    weak.meta["checks"] = {"input_mismatch": "inputs look mismatched"}
    mismatched = short_verdict(weak)
    assert mismatched.level == "inconclusive"
    assert mismatched.line.startswith(
        "Verdict: Inconclusive. This audit cannot support a verdict: inputs look mismatched. "
        "To fix: feed the model exactly the values it was trained on.")
    assert "picks out 20.0% of members" in mismatched.line  # the figures stay, after it


def test_verdict_line_average_case_names_the_auc_attack() -> None:
    weak = _result(n0=2000, ci_low=0.01)
    _set_auc_ci(weak, (0.97, 0.995), "d")
    verdict = short_verdict(weak)
    assert verdict.level == "average-case" and verdict.auc_attack == "d"
    assert "But d ranks members above non-members on average: AUC 0.990 (90% CI 0.970 to " \
           "0.995; 0.5 is guessing; p < 0.0001 corrected for choosing among 4 attacks: 8 " \
           "tests, Bonferroni, family-wise α 0.1)." in verdict.line


def test_verdict_line_without_attacks() -> None:
    empty = AuditResult(np.arange(2), np.array([True, False]), [])
    assert short_verdict(empty).level == "none"
    assert verdict_line(empty).startswith("Verdict: Nothing measured. No attack reported")


def test_verdict_is_first_line_of_terminal_and_html_body() -> None:
    result = _result()
    line = verdict_line(result)
    assert format_table(result).splitlines()[0] == line
    page = render_html(result, {})
    body = page.split("<body>\n", 1)[1]
    first = body.splitlines()[0]
    assert first.startswith('<p class="verdict bad">') and "far above chance" in first
    assert html.unescape(re.sub(r"<[^>]+>", "", first)) == line


def test_html_table_sorted_with_the_strongest_row_marked() -> None:
    page = render_html(_result(), {})
    table = page[page.index("<h2>Results</h2>"):page.index("<h2>What this means</h2>")]
    names = re.findall(r"<tr[^>]*><td>([^<]+)</td>", table)
    assert names == [f"b {STRONGEST_MARK}", "c", "a", "d"]
    assert re.search(r'<tr class="strongest"><td>b ★</td>', table)
    assert table.count('class="strongest"') == 1
    assert "<small>20 exp. FP</small>" in table and "<small>2 exp. FP*</small>" in table
    assert "sorted strongest first by TPR@1%" in table  # the legend under the table
    assert "The attack that leaked most here is <b>b</b>" in page


@pytest.mark.parametrize("name", ["roc", "histograms", "calibration", "exposed", "mine"])
def test_every_figure_has_a_real_caption(name: str) -> None:
    page = render_html(_result(), {name: PNG})
    caption = re.search(r"<figcaption>(.*?)</figcaption>", page, re.S).group(1)
    assert len(caption.split()) >= 8 and caption.strip() != name
    expected = {"roc": "log-log", "histograms": "rank", "calibration": "Watson",
                "exposed": "most exposed", "mine": "mine.png"}[name]
    assert expected in caption


def _split(auc: float, shifted: bool, tpr: float = 0.02) -> dict:
    """A split check's record as miaudit.verdict.split_check writes it (figures by hand)."""
    return {"classifier": "gradient-boosted trees", "features": "the 4 feature values",
            "folds": 2, "rows": 4000, "subsampled_from": None, "confidence": 0.9,
            "metrics": {"auc": auc, "auc_ci": None, "tpr_at_fpr": {"0.001": tpr / 5,
                                                                    "0.01": tpr}},
            "halves": [{"auc": auc, "auc_ci": [auc - 0.02, auc + 0.02], "p_value": 1e-9}] * 2,
            "p_value": 1e-9 if shifted else 0.4, "shift_p_value": 0.001, "shifted": shifted}


def test_a_shifted_split_makes_every_level_inconclusive_with_the_comparison() -> None:
    exposed = _result(n0=2000)
    assert short_verdict(exposed).level == "exposed"
    exposed.meta["checks"] = {"split": _split(0.55, shifted=True)}
    verdict = short_verdict(exposed)
    assert verdict.level == "inconclusive" and verdict.label == "Inconclusive"
    assert [r.code for r in verdict.reasons] == ["shifted-split"]
    # b's TPR interval [10%, 30%] at 1% lies above the check's 2%, its AUC 0.60 above 0.55
    assert verdict.shift.exceeds
    line = verdict.line
    assert "the split check tells members from non-members without the model (AUC 0.550" in line
    assert "exceeds it (TPR 20% against 2% at 1% FPR" in line
    assert "no DP claim is refuted on a shifted split" in line
    # a split check that finds nothing leaves the verdict alone
    exposed.meta["checks"] = {"split": _split(0.51, shifted=False)}
    assert short_verdict(exposed).level == "exposed"


def test_an_attack_below_the_model_free_baseline_does_not_exceed_it() -> None:
    result = _result(n0=2000)
    result.meta["checks"] = {"split": _split(0.9, shifted=True, tpr=0.5)}
    shift = short_verdict(result).shift
    assert not shift.exceeds and shift.tpr == 0.5
    assert "does not exceed it" in short_verdict(result).line


def test_no_measurable_leak_needs_a_trained_target_and_enough_nonmembers() -> None:
    weak = _result(n0=2000, ci_low=0.01)
    _set_auc_ci(weak, (0.45, 0.55))
    assert short_verdict(weak).level == "not measured"
    weak.meta["checks"] = {"target_fit": {"train_accuracy": 0.07, "chance": 0.12, "floor": 0.2,
                                          "near_chance": True, "n_members": 2000}}
    verdict = short_verdict(weak)
    assert verdict.level == "inconclusive"
    assert "the target is 7% accurate on its own 2,000 training rows, where always guessing " \
           "the majority class gets 12%" in verdict.line
    release = make_verdict(weak, VerdictContext(references=4))
    assert release.level == "inconclusive" and "supports no statement either way" in \
        " ".join(release.paragraphs)
    # a mismatch explains a near-chance target already: one reason, not two
    weak.meta["checks"]["input_mismatch"] = "inputs look mismatched"
    assert [r.code for r in short_verdict(weak).reasons] == ["input-mismatch"]
    # too few non-members for the headline figure: 500 x 1% = 5 expected false positives
    few = _result(n0=500, ci_low=0.01)
    _set_auc_ci(few, (0.45, 0.55))
    verdict = short_verdict(few)
    assert [r.code for r in verdict.reasons] == ["few-nonmembers"]
    assert "audit with at least 1,000 non-members" in verdict.line
    assert "Indicative only" not in verdict.line  # said once, as the reason


def test_an_exposed_level_stands_with_mismatched_inputs() -> None:
    exposed = _result(n0=2000)
    exposed.meta["checks"] = {"input_mismatch": "inputs look mismatched",
                              "target_fit": {"train_accuracy": 0.9, "chance": 0.1,
                                             "floor": 0.19, "near_chance": False,
                                             "n_members": 2000}}
    assert short_verdict(exposed).level == "exposed"  # a leak found is a leak


@pytest.mark.parametrize("level", ["exposed", "average-case"])
def test_a_leak_found_in_an_untrained_target_is_an_artefact(level) -> None:
    """A target near chance on its own training rows cannot leak what an attack measures:
    the verdict says inconclusive, and why, whatever the attacks score."""
    result = _result(n0=2000, ci_low=0.5 if level == "exposed" else 0.01)
    if level == "average-case":
        _set_auc_ci(result, (0.97, 0.995), "d")
    fit = {"train_accuracy": 0.1, "chance": 0.11, "floor": 0.2, "near_chance": True,
           "n_members": 2000}
    result.meta["checks"] = {"target_fit": fit}
    verdict = short_verdict(result)
    assert verdict.level == "inconclusive"
    assert [r.code for r in verdict.reasons] == ["untrained-target"]
    assert "sign of an artefact" in verdict.line and "learnt (almost) nothing" in verdict.line


def test_a_model_free_attack_is_never_the_strongest() -> None:
    result = _result(n0=2000)
    result.outcomes = [dataclasses.replace(o, cost=AttackCost(models=0)) if o.name == "b" else o
                       for o in result.outcomes]  # as evaluate_bank records a model-free attack
    order, key = ranked(result)
    assert order[-1].name == "b" and key == "0.01"
    assert short_verdict(result).attack != "b"
    assert STRONGEST_MARK not in next(r for r in build_table(result).rows
                                      if r[0].startswith("b"))[0]


def test_release_advice_follows_what_the_audit_did() -> None:
    weak = _result(n0=2000, ci_low=0.01)
    _set_auc_ci(weak, (0.45, 0.55))
    without = " ".join(make_verdict(weak, VerdictContext(references=0)).paragraphs)
    assert "audit again with reference models (--references)" in without
    with_refs = " ".join(make_verdict(weak, VerdictContext(references=4)).paragraphs)
    assert "reference models (--references)" not in with_refs
    assert "more reference models trained exactly like the target" in with_refs
    assert "evidence, not proof, of privacy" not in with_refs
    average = _result(n0=2000, ci_low=0.01)
    _set_auc_ci(average, (0.97, 0.995), "d")
    text = " ".join(make_verdict(average, VerdictContext(references=4)).paragraphs)
    assert "audit again with reference models (--references)" not in text
