"""What the figures mean for a release decision, in plain words.

The statement rests on the TPR at a low FPR of the strongest attack that ran, with its
bootstrap interval: a leak is called *measurable* only when the interval's lower end lies
above the FPR (what guessing achieves). The headline FPR is the smallest reported FPR at which
at least ten false positives are expected among the non-members (else the largest reported),
so the sentence never rests on a handful of samples; every figure says how many non-members
it rests on. The statement does not pass or fail a model: the attacks give lower bounds on
what an attacker can do, and the release decision depends on the data and who can query.
"""

from __future__ import annotations

from miaudit.formatting import ci_words, fmt_auc, p_words, plural
from miaudit.formatting import pct as _pct
from miaudit.formatting import rate as _rate
from miaudit.records.outcomes import AttackOutcome, AuditResult
from miaudit.verdict.headline import reasons_sentence
from miaudit.verdict.records import Assessment, ReleaseVerdict, VerdictContext

# the ranking and the level are the report's (the table's ★ and every report's verdict line);
# this module words them as the release statement
from miaudit.verdict.strength import (
    INCONCLUSIVE,
    MIN_EXPECTED_FP,
    assess,
    confidence_of,
    headline_fpr,
    model_based,
    strongest_at,
)

__all__ = ["MIN_EXPECTED_FP", "VerdictContext", "headline_fpr", "strongest_at", "make_verdict",
           "verdict_text"]

_NO_CONTEXT = VerdictContext()


def _ci(ci: tuple[float, float] | None, confidence: int) -> str:
    return ci_words(ci, f"{confidence}% CI", missing="no confidence interval")


def make_verdict(result: AuditResult, context: VerdictContext = _NO_CONTEXT) -> ReleaseVerdict:
    """The plain-words statement and the figures it quotes (:class:`ReleaseVerdict`), with
    what the command knows beside them (:class:`VerdictContext`). The assessment's level is
    tested at the context's confidence (the same as the report's, which reads the run's
    config: a command makes its verdict before that config is recorded)."""
    level = (context.confidence if context.confidence is not None
             else confidence_of(result) or 0.95)
    found = assess(result, confidence=level)
    main = found.main
    if found.level == "none" or found.attack is None or main is None:
        return ReleaseVerdict(level="none", headline="No attack ran, so nothing was measured.")
    best = result.outcome(found.attack)
    confidence = int(round(100 * level))
    headline = _headline(result, found, best, confidence)
    paragraphs = [_support(best, found, confidence),
                  _advice(found, context.outputs, context.references, context.ranked_samples)]
    if context.privacy:  # the empirical ε beside the model's DP claim, if it has one
        paragraphs.append(context.privacy)
    if context.split:  # whether the split itself is told apart without the model
        paragraphs.append(context.split)
    caveats = _caveats(result, best, context)
    mismatch = context.input_mismatch
    said = any(r.code == "input-mismatch" for r in found.reasons)  # in the headline
    if mismatch and not said:  # figures of a model fed other values than it was trained on
        caveats.insert(0, mismatch[0].upper() + mismatch[1:])
        if found.level == "average-case":
            headline += (" But the model's inputs look mismatched with its training data (see "
                         "the first caveat), so the figures may understate the leak.")
    return ReleaseVerdict(level=found.level, headline=headline, paragraphs=tuple(paragraphs),
                          caveats=tuple(c for c in caveats if c), figures=found.figures,
                          attack=best.name, fpr=main.fpr, auc=best.metrics.auc,
                          input_mismatch=mismatch, reasons=found.reasons, shift=found.shift)


def _headline(result: AuditResult, found: Assessment, best: AttackOutcome,
              confidence: int) -> str:
    """The statement's first sentence(s): what the strongest attack found at the headline
    FPR, by level, with the caveats a reader must see there (no interval, few false
    positives)."""
    main = found.main
    assert main is not None
    fpr, tpr, ci = main.fpr, main.tpr, main.tpr_ci
    ci_text = _ci(ci, confidence)
    level = found.level
    if level == INCONCLUSIVE:
        headline = (
            "Inconclusive. " + reasons_sentence(found.reasons)
            + f" For the record, the strongest attack, {best.name}, flags {_pct(tpr)} of the "
            f"training samples at {_rate(fpr)} FPR ({ci_text}) where guessing flags "
            f"{_rate(fpr)}."
        )
    elif level == "exposed":
        ratio = main.times_chance
        degree = {"slightly": "slightly but measurably"}.get(found.degree or "", found.degree)
        headline = (
            f"Training-set membership is exposed: the strongest attack, {best.name}, picks out "
            f"{_pct(tpr)} of the training samples while wrongly flagging {_rate(fpr)} of the "
            f"non-members ({ci_text}), {ratio:.1f} times the rate of guessing, {degree} "
            "above chance."
        )
    else:
        headline = (
            f"No attack picked out training samples measurably better than guessing at "
            f"{_rate(fpr)} FPR: the strongest, {best.name}, flags {_pct(tpr)} of the training "
            f"samples ({ci_text}) where guessing flags {_rate(fpr)}."
        )
        # an AUC interval above 0.5 (average-case): never hidden by a null
        if level == "average-case" and found.auc_attack is not None:
            top = result.outcome(found.auc_attack)
            auc_ci = top.metrics.auc_ci
            headline += (
                f" But membership shows on average: {top.name} ranks training samples above "
                f"non-members with AUC {fmt_auc(top.metrics.auc)} "
                f"({ci_words(auc_ci, f'{confidence}% CI', fmt_auc)}; 0.5 is guessing)."
            )
    if found.correction and found.p_value is not None and level != INCONCLUSIVE:
        passes = "passes" if level in ("exposed", "average-case") else "does not pass"
        headline += (f" The figure {passes} the verdict's test: p {p_words(found.p_value)} "
                     f"{found.correction}.")
    if not ci:
        headline += (" Without a confidence interval (metrics.bootstrap: 0) this is a point "
                     "estimate only.")
    if main.indicative and level != INCONCLUSIVE:  # inconclusive: its reasons say it
        headline += (f" With {main.n_nonmembers:,} non-members this rests on "
                     f"{main.expected_false_positives:g} expected false positives, fewer than "
                     f"{MIN_EXPECTED_FP}: treat it as indicative, and audit with more "
                     "non-members to confirm it.")
    return headline


def _support(best: AttackOutcome, found: Assessment, confidence: int) -> str:
    """The paragraph of figures: the counts, each FPR's TPR with its interval and expected
    false positives, the AUC."""
    main = found.main
    assert main is not None
    support = []
    for f in found.figures:
        text = (f"at {_rate(f.fpr)} FPR {best.name} finds {_pct(f.tpr)} of members "
                f"({_ci(f.tpr_ci, confidence)}); "
                f"{f.expected_false_positives:g} false "
                f"{'positive is' if f.expected_false_positives == 1 else 'positives are'} "
                "expected there")
        if f.indicative:
            text += f" (fewer than {MIN_EXPECTED_FP}: indicative only)"
        support.append(text)
    auc = best.metrics.auc
    return (f"These rates rest on {main.n_members:,} training samples and "
            f"{main.n_nonmembers:,} non-members: " + "; ".join(support) + "."
            + (f" Its AUC is {fmt_auc(auc)} (0.5 is guessing)." if auc is not None else ""))


def _advice(found: Assessment, outputs: str, references: int, ranked: bool) -> str:
    """The "For a release" paragraph for the verdict's level."""
    main = found.main
    assert main is not None
    # advice follows what this audit did: reference models are the first step up only when
    # it had none
    stronger = ("audit again with reference models (--references) and the exact training "
                "recipe" if not references else
                "audit again with more reference models trained exactly like the target, more "
                "public data or more queries")
    if found.level == INCONCLUSIVE:
        return (
            "For a release: this audit supports no statement either way, neither a leak nor "
            "its absence, until the problems above are fixed. Fix them and audit again; until "
            "then treat the model as unaudited."
        )
    if found.level == "average-case":
        return (
            "For a release: with these attacks nobody singles out individual records with few "
            f"false alarms, but the model's {outputs} treat training samples measurably "
            "differently from other data, and stronger attacks (reference models trained like "
            "the target, more public data, more queries) typically turn such a difference into "
            "confident identifications at low FPR. Treat it as a warning sign, not a clearance: "
            f"if the training data are sensitive, {stronger}, or reduce the gap "
            "(regularisation, fewer epochs, DP-SGD) before release."
        )
    if found.level == "exposed":
        return (
            f"For a release: someone who can obtain this model's {outputs} and holds data like "
            "the public data used here can tell, for some individual records, that they were in "
            "the training set, with few false alarms. If the training data are personal or "
            "confidential, treat releasing the model as disclosing that those records were used"
            + ("; the ranked samples below are the ones such an attacker finds first. "
               if ranked else ". ")
            + "More training data, stronger regularisation or fewer epochs, DP-SGD, or "
            "releasing only labels or rounded scores lower this figure; audit again after any "
            "of them."
        )
    resolution = 100 * MIN_EXPECTED_FP / max(main.n_nonmembers or 0, 1)
    return (
        "For a release: this audit found no measurable membership leak with these attacks. "
        "That is evidence against a leak these attacks can see, not proof of privacy: it "
        f"covers only the attacks that ran, with {references or 'no'} reference model(s) "
        "and the public data given, and with "
        f"{main.n_nonmembers:,} non-members it cannot resolve false-positive rates below "
        f"about {resolution:.2g}%. Stronger attacks can find leaks these did not: to look "
        f"harder, {stronger}."
    )


def _caveats(result: AuditResult, best: AttackOutcome, context: VerdictContext) -> list[str]:
    """What every statement says about its own limits (empty entries dropped later)."""
    caveats = [
        f"{best.name} is the strongest of the {plural(len(model_based(result)), 'attack')} on "
        "the model, on these same samples; "
        "picking the maximum favours it slightly, and its interval does not include that choice.",
        context.reference_note,
        "Attack figures are lower bounds on what an attacker can do, never proof that one "
        "cannot do better.",
        "Whether to release depends on what the data are and who can query the model; these "
        "figures inform that decision, they do not make it.",
    ]
    if context.skipped:
        caveats.insert(1, f"{plural(context.skipped, 'attack')} could not run on this "
                          "audit; each is listed with the reason below the table.")
    return caveats


def verdict_text(verdict: ReleaseVerdict) -> str:
    """The statement as plain text for the terminal and verdict.txt."""
    import textwrap

    blocks = [verdict.headline, *verdict.paragraphs]
    # never break inside "non-members" or "held-out": the words are searched for as written
    out = [textwrap.fill(b, 96, break_on_hyphens=False) for b in blocks]
    out += [textwrap.fill(c, 96, initial_indent="- ", subsequent_indent="  ",
                          break_on_hyphens=False) for c in verdict.caveats]
    return "\n\n".join(out[: len(blocks)]) + ("\n\n" + "\n".join(out[len(blocks):])
                                              if verdict.caveats else "") + "\n"
