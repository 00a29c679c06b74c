"""The one-line verdict at the top of every report (HTML, terminal, summary.json).

It says how worried to be, in plain words, from :func:`miaudit.verdict.strength.assess`: the
same attack, FPR and level as the table's ★ and as `miaudit audit`'s release statement, which
is the long form of this line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from miaudit.formatting import ci_words, fmt_auc, p_words, pct, rate
from miaudit.records.outcomes import AuditResult
from miaudit.verdict.records import HeadlineVerdict, Reason
from miaudit.verdict.strength import INCONCLUSIVE, MIN_EXPECTED_FP, assess, confidence_of

_LABELS = {
    "far": "Exposed, far above chance",
    "well": "Exposed, well above chance",
    "slightly": "Exposed, slightly but measurably above chance",
    "average-case": "Warning sign, an average-case leak only",
    "not measured": "No measurable leak",
    INCONCLUSIVE: "Inconclusive",
    "none": "Nothing measured",
}

__all__ = ["confidence_of", "short_verdict", "verdict_line", "reasons_sentence"]


def reasons_sentence(reasons: Sequence[Reason]) -> str:
    """'This audit cannot support a verdict: <why>; <why>. To fix: <fix>; <fix>.'"""
    why = "; ".join(r.text.rstrip(". ") for r in reasons)
    fixes = "; ".join(r.fix for r in reasons if r.fix)
    return f"This audit cannot support a verdict: {why}. To fix: {fixes}."


def _ci(ci: tuple[float, float] | None, confidence: float | None,
        fmt: Callable[[float], str] = pct) -> str:
    return ci_words(ci, f"{round(100 * confidence)}% CI" if confidence else "CI", fmt)


def short_verdict(result: AuditResult) -> HeadlineVerdict:
    """The verdict line and the figures it quotes (:class:`HeadlineVerdict`)."""
    found = assess(result)
    level = found.level
    main, best = found.main, found.attack
    if level == "none" or main is None:
        line = f"Verdict: {_LABELS['none']}. No attack reported a TPR at a low FPR."
        return HeadlineVerdict(level="none", label=_LABELS["none"], line=line)
    conf = confidence_of(result)
    fpr, tpr = main.fpr, main.tpr
    n0 = main.n_nonmembers or 0
    support = (f"rests on {main.expected_false_positives:g} expected false positives among "
               f"{n0:,} non-members")
    label = _LABELS[found.degree if level == "exposed" and found.degree else level]
    tested = ""
    if found.p_value is not None and found.correction:
        tested = f"p {p_words(found.p_value)} {found.correction}"
    if found.measured == "exposed":
        detail = (f"The strongest attack, {best}, picks out {pct(tpr)} of members at "
                  f"{rate(fpr)} FPR ({_ci(main.tpr_ci, conf)}), "
                  f"{main.times_chance:.1f}× chance" + (f" ({tested})." if tested else "."))
    else:
        detail = (f"The strongest attack at {rate(fpr)} FPR, {best}, picks out {pct(tpr)} of "
                  f"members ({_ci(main.tpr_ci, conf)}) where guessing gets {rate(fpr)}"
                  + (f" ({tested})." if tested and found.measured != "average-case" else "."))
    if any(r.code == "few-nonmembers" for r in found.reasons):
        pass  # the reasons say it, with the fix
    elif main.indicative:  # say so up front: the figure rests on a handful of samples
        detail += (f" Indicative only: this {support}, fewer than {MIN_EXPECTED_FP}; audit with "
                   "more non-members to confirm.")
    else:
        detail += f" This {support}."
    if found.measured == "average-case" and found.auc_attack is not None:
        top = result.outcome(found.auc_attack)
        auc_ci = top.metrics.auc_ci
        detail += (f" But {top.name} ranks members above non-members on average: AUC "
                   f"{fmt_auc(top.metrics.auc)} ({_ci(auc_ci, conf, fmt_auc)}; "
                   f"0.5 is guessing{'; ' + tested if tested else ''}).")
    if found.unchecked:
        names = ", ".join(found.unchecked)
        detail += (f" Not relied on: {names} (registered outside miaudit, so no null "
                   "calibration covers it; its figures are in the table).")
    if level == INCONCLUSIVE:  # why first: the figures after it are not a verdict
        detail = reasons_sentence(found.reasons) + " " + detail
    return HeadlineVerdict(
        level=level, label=label, line=f"Verdict: {label}. {detail}", attack=best, fpr=fpr,
        tpr=tpr, tpr_ci=main.tpr_ci, times_chance=main.times_chance,
        expected_false_positives=main.expected_false_positives, n_nonmembers=n0,
        indicative=main.indicative, auc_attack=found.auc_attack, reasons=found.reasons,
        shift=found.shift, p_value=found.p_value, correction=found.correction)


def verdict_line(result: AuditResult) -> str:
    return short_verdict(result).line
