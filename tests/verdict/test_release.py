import dataclasses

import numpy as np

from miaudit import metrics
from miaudit.formatting import fmt_pct
from miaudit.records.outcomes import AttackOutcome, AuditResult
from miaudit.verdict.records import VerdictContext
from miaudit.verdict.release import headline_fpr, make_verdict, verdict_text


def _result(n1: int, n0: int, shift: float, seed: int = 0) -> AuditResult:
    rng = np.random.default_rng(seed)
    members = np.r_[np.ones(n1, bool), np.zeros(n0, bool)]
    outcomes = []
    for name, s in (("weak", 0.0), ("strong", shift)):
        scores = rng.normal(size=n1 + n0) + s * members
        outcomes.append(AttackOutcome.from_dicts(name, scores, metrics.evaluate(
            scores, members, n_bootstrap=200, seed=seed)))
    return AuditResult(indices=np.arange(n1 + n0), members=members, outcomes=outcomes)


CONTEXT = VerdictContext(outputs="probabilities", references=4, reference_note="refs note",
                         skipped=2, confidence=0.95)


def test_exposed_verdict_quotes_the_metrics():
    result = _result(2000, 2000, shift=2.0)
    verdict = make_verdict(result, CONTEXT)
    met = result.outcome("strong").metrics.to_dict()
    assert verdict.level == "exposed" and verdict.attack == "strong"
    assert headline_fpr(result) == "0.01"  # 2,000 x 0.1% = 2 expected false positives: too few
    main = next(f for f in verdict.figures if f.fpr == 0.01)
    assert main.tpr == met["tpr_at_fpr"]["0.01"]
    assert list(main.tpr_ci) == met["tpr_at_fpr_ci"]["0.01"]
    assert main.n_nonmembers == met["n_nonmembers"] == 2000
    assert main.expected_false_positives == 20.0 and not main.indicative
    low = next(f for f in verdict.figures if f.fpr == 0.001)
    assert low.indicative and low.tpr == met["tpr_at_fpr"]["0.001"]
    text = verdict_text(verdict)
    lo, hi = met["tpr_at_fpr_ci"]["0.01"]
    for quoted in (fmt_pct(main.tpr) + "%", f"{fmt_pct(lo)}% to {fmt_pct(hi)}%",
                   "2,000 non-members", "20 false positives", f"{met['auc']:.3f}",
                   f"{main.tpr / 0.01:.1f} times the rate of guessing"):
        assert quoted in " ".join(text.split()), quoted
    assert "2 attacks could not run" in text and "refs note" in text
    assert "indicative only" in text  # the 0.1% figure


def test_no_measurable_leak_is_not_called_safe():
    result = _result(20_000, 20_000, shift=0.0, seed=1)
    verdict = make_verdict(result, CONTEXT)
    assert headline_fpr(result) == "0.001"  # 20 expected false positives at 0.1%
    assert verdict.level == "not measured"
    main = next(f for f in verdict.figures if f.fpr == 0.001)
    assert main.tpr_ci[0] <= 0.001
    text = " ".join(verdict_text(verdict).split())
    assert "not proof" in text and "cannot resolve false-positive rates below about 0.05%" in text
    assert "exposed" not in verdict.headline


def test_few_nonmembers_make_the_headline_indicative():
    result = _result(300, 300, shift=2.5)
    verdict = make_verdict(result, CONTEXT)
    assert headline_fpr(result) == "0.01"  # the largest reported: none has 10 expected FPs
    assert "treat it as indicative" in verdict.headline
    assert "3 expected false positives" in verdict.headline
    empty = make_verdict(AuditResult(np.arange(2), np.array([True, False]), []), CONTEXT)
    assert empty.level == "none"


def test_an_average_case_leak_is_not_hidden_by_a_low_fpr_null():
    """Saturated scores (like a random forest's probability 1.0): 60% of members and 40% of
    non-members tie at the top, so no FPR below 40% is reachable, yet AUC is well above 0.5."""
    rng = np.random.default_rng(0)
    members = np.r_[np.ones(2000, bool), np.zeros(2000, bool)]
    top = np.where(members, rng.random(4000) < 0.6, rng.random(4000) < 0.4)
    scores = np.where(top, 1.0, rng.random(4000) * 0.5)
    result = AuditResult(np.arange(4000), members, [AttackOutcome.from_dicts(
        "loss", scores, metrics.evaluate(scores, members, n_bootstrap=200))])
    verdict = make_verdict(result, dataclasses.replace(CONTEXT, references=0))
    assert verdict.level == "average-case"
    assert result.outcome("loss").metrics.tpr_at(0.01).tpr == 0.0
    auc = result.outcome("loss").metrics.auc
    assert f"AUC {auc:.3f}" in verdict.headline and "warning sign" in verdict_text(verdict)


def test_mismatched_inputs_are_never_a_clearance():
    result = _result(20_000, 20_000, shift=0.0, seed=1)
    why = ("inputs look mismatched: the model is 8.3% accurate on its own training rows with "
           "preprocessing 'standard' but 100.0% with 'raw'; rerun with --preprocessing raw")
    result.meta["checks"] = {"input_mismatch": why}
    verdict = make_verdict(result, dataclasses.replace(CONTEXT, input_mismatch=why))
    assert verdict.level == "inconclusive" and verdict.input_mismatch == why
    assert [r.code for r in verdict.reasons] == ["input-mismatch"]
    assert not any("mismatched" in c for c in verdict.caveats)  # the headline says it
    assert verdict.headline.startswith("Inconclusive. This audit cannot support a verdict: "
                                          + why)
    text = " ".join(verdict_text(verdict).split())
    assert "--preprocessing raw" in text and "evidence, not proof" not in text
    assert "supports no statement either way" in text
    result.meta["checks"] = {}
    plain = make_verdict(result, CONTEXT)  # without a mismatch, nothing of it
    assert plain.input_mismatch is None and "mismatched" not in verdict_text(plain)


def test_the_advice_points_to_ranked_samples_only_where_the_caller_shows_them():
    result = _result(2000, 2000, shift=2.0)
    shown = make_verdict(result, dataclasses.replace(CONTEXT, ranked_samples=True))
    hidden = make_verdict(result, CONTEXT)  # a run: no exposed.csv
    assert shown.level == hidden.level == "exposed"
    assert "ranked samples below" in " ".join(shown.paragraphs)
    assert "ranked samples" not in " ".join(hidden.paragraphs)


def test_the_level_is_tested_at_the_contexts_confidence():
    """A command makes its verdict before its config is in the result's meta: the level's
    tests use the context's confidence, as the report (reading the config) does."""
    from miaudit.verdict.strength import assess

    for shift in np.linspace(0.05, 0.6, 12):  # a weak leak: its level depends on α
        result = _result(400, 400, shift=float(shift), seed=3)
        levels = {c: assess(result, confidence=c).level for c in (0.5, 0.999)}
        if levels[0.5] != levels[0.999]:
            break
    else:
        raise AssertionError("no shift whose level depends on the confidence")
    for c, level in levels.items():
        assert make_verdict(result, VerdictContext(confidence=c)).level == level
        assert assess(result, confidence=c).correction.endswith(f"α {1 - c:g}")
    result.meta["config"] = {"metrics": {"confidence": 0.5}}  # the report's source
    assert make_verdict(result).level == assess(result).level == levels[0.5]
