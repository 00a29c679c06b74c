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

from typing import Any

from miaudit.report.table import fmt_pct
from miaudit.results import AttackOutcome, AuditResult

MIN_EXPECTED_FP = 10


def _fprs(result: AuditResult) -> list[str]:
    keys = {k for o in result.outcomes for k in o.metrics.get("tpr_at_fpr", {})}
    return sorted(keys, key=float)


def headline_fpr(result: AuditResult) -> str | None:
    """The smallest reported FPR with >= 10 expected false positives, else the largest."""
    keys = _fprs(result)
    if not keys:
        return None
    n0 = max(int(o.metrics.get("n_nonmembers") or 0) for o in result.outcomes)
    good = [k for k in keys if n0 * float(k) >= MIN_EXPECTED_FP * (1 - 1e-12)]
    return good[0] if good else keys[-1]


def strongest_at(result: AuditResult, key: str) -> AttackOutcome | None:
    """The attack with the highest TPR at FPR `key` (ties: the higher AUC)."""
    def rank(o: AttackOutcome) -> tuple[float, float]:
        tpr = o.metrics.get("tpr_at_fpr", {}).get(key)
        auc = o.metrics.get("auc")
        return (-1.0 if tpr is None else tpr, -1.0 if auc is None else auc)

    return max(result.outcomes, key=rank) if result.outcomes else None


def _figure(o: AttackOutcome, key: str) -> dict[str, Any]:
    met = o.metrics
    support = (met.get("fpr_support") or {}).get(key) or {}
    tpr = met["tpr_at_fpr"][key]
    return {
        "fpr": float(key),
        "tpr": tpr,
        "tpr_ci": (met.get("tpr_at_fpr_ci") or {}).get(key),
        "times_chance": tpr / float(key),
        "n_members": met.get("n_members"),
        "n_nonmembers": met.get("n_nonmembers"),
        "expected_false_positives": support.get("expected_false_positives"),
        "indicative": support.get("warning") is not None,
    }


def _pct(value: float) -> str:
    return fmt_pct(value) + "%"


def _rate(fpr: float) -> str:
    return f"{100 * fpr:g}%"


def _ci(ci: list[float] | None, confidence: int) -> str:
    return f"{confidence}% CI {_pct(ci[0])} to {_pct(ci[1])}" if ci else "no confidence interval"


def make_verdict(result: AuditResult, context: dict[str, Any]) -> dict[str, Any]:
    """The plain-words statement and the figures it quotes.

    `context`: `outputs` (what an attacker sees, e.g. "probabilities"), `references` (count),
    `reference_note` (how references were made), `skipped` (count), `confidence` (of the CIs).
    """
    key = headline_fpr(result)
    best = strongest_at(result, key) if key else None
    if best is None or key is None:
        return {"level": "none", "headline": "No attack ran, so nothing was measured.",
                "paragraphs": [], "caveats": [], "figures": []}
    figures = [_figure(best, k) for k in _fprs(result) if k in best.metrics["tpr_at_fpr"]]
    main = next(f for f in figures if f["fpr"] == float(key))
    fpr, tpr, ci = main["fpr"], main["tpr"], main["tpr_ci"]
    measurable = ci[0] > fpr if ci else tpr > fpr
    confidence = int(round(100 * context.get("confidence", 0.95)))
    ci_text = _ci(ci, confidence)
    if measurable:
        ratio = main["times_chance"]
        degree = "far" if ratio >= 10 else "well" if ratio >= 3 else "slightly but measurably"
        level = "exposed"
        headline = (
            f"Training-set membership is exposed: the strongest attack, {best.name}, picks out "
            f"{_pct(tpr)} of the training samples while wrongly flagging {_rate(fpr)} of the "
            f"non-members ({ci_text}), {ratio:.1f} times the rate of guessing, {degree} "
            "above chance."
        )
    else:
        level = "not measured"
        headline = (
            f"No attack picked out training samples measurably better than guessing at "
            f"{_rate(fpr)} FPR: the strongest, {best.name}, flags {_pct(tpr)} of the training "
            f"samples ({ci_text}) where guessing flags {_rate(fpr)}."
        )
        # An average-case signal (AUC interval above 0.5) is a leak too, if not yet a
        # confident one: never let a low-FPR null hide it.
        top = max(result.outcomes, key=lambda o: o.metrics.get("auc") or 0.0)
        auc_ci = top.metrics.get("auc_ci")
        if auc_ci and auc_ci[0] > 0.5:
            level = "average-case"
            headline += (
                f" But membership shows on average: {top.name} ranks training samples above "
                f"non-members with AUC {top.metrics['auc']:.3f} ({confidence}% CI "
                f"{auc_ci[0]:.3f} to {auc_ci[1]:.3f}; 0.5 is guessing)."
            )
    if not ci:
        headline += (" Without a confidence interval (metrics.bootstrap: 0) this is a point "
                     "estimate only.")
    if main["indicative"]:
        headline += (f" With {main['n_nonmembers']:,} non-members this rests on "
                     f"{main['expected_false_positives']:g} expected false positives, fewer than "
                     f"{MIN_EXPECTED_FP}: treat it as indicative, and audit with more "
                     "non-members to confirm it.")
    support = []
    for f in figures:
        text = (f"at {_rate(f['fpr'])} FPR {best.name} finds {_pct(f['tpr'])} of members "
                f"({_ci(f['tpr_ci'], confidence)}); "
                f"{f['expected_false_positives']:g} false positives are expected there")
        if f["indicative"]:
            text += f" (fewer than {MIN_EXPECTED_FP}: indicative only)"
        support.append(text)
    auc = best.metrics.get("auc")
    paragraphs = [
        f"These rates rest on {main['n_members']:,} training samples and "
        f"{main['n_nonmembers']:,} non-members: " + "; ".join(support) + "."
        + (f" Its AUC is {auc:.3f} (0.5 is guessing)." if auc is not None else ""),
    ]
    outputs = context.get("outputs", "outputs")
    if level == "average-case":
        paragraphs.append(
            "For a release: with these attacks nobody singles out individual records with few "
            f"false alarms, but the model's {outputs} treat training samples measurably "
            "differently from other data, and stronger attacks (reference models trained like "
            "the target, more public data, more queries) typically turn such a difference into "
            "confident identifications at low FPR. Treat it as a warning sign, not a clearance: "
            "if the training data are sensitive, audit again with reference models, or reduce "
            "the gap (regularisation, fewer epochs, DP-SGD) before release."
        )
    elif measurable:
        paragraphs.append(
            f"For a release: someone who can obtain this model's {outputs} and holds data like "
            "the public data used here can tell, for some individual records, that they were in "
            "the training set, with few false alarms. If the training data are personal or "
            "confidential, treat releasing the model as disclosing that those records were used; "
            "the ranked samples below are the ones such an attacker finds first. More training "
            "data, stronger regularisation or fewer epochs, DP-SGD, or releasing only labels or "
            "rounded scores lower this figure; audit again after any of them."
        )
    else:
        resolution = 100 * MIN_EXPECTED_FP / max(main["n_nonmembers"], 1)
        paragraphs.append(
            "For a release: this audit found no measurable membership leak with these attacks, "
            "which is evidence, not proof, of privacy. It covers only the attacks that ran, with "
            f"{context.get('references', 0) or 'no'} reference model(s) and the public data "
            "given, and with "
            f"{main['n_nonmembers']:,} non-members it cannot resolve false-positive rates below "
            f"about {resolution:.2g}%. Stronger attacks (more reference models, the exact "
            "training recipe, more queries) can find leaks these did not."
        )
    caveats = [
        f"{best.name} is the strongest of {len(result.outcomes)} attacks on these same samples; "
        "picking the maximum favours it slightly, and its interval does not include that choice.",
        context.get("reference_note") or "",
        "Attack figures are lower bounds on what an attacker can do, never proof that one "
        "cannot do better.",
        "Whether to release depends on what the data are and who can query the model; these "
        "figures inform that decision, they do not make it.",
    ]
    if context.get("skipped"):
        caveats.insert(1, f"{context['skipped']} attack(s) could not run on this audit; the "
                          "table lists each with the reason.")
    return {"level": level, "attack": best.name, "fpr": fpr, "figures": figures,
            "auc": auc, "headline": headline, "paragraphs": paragraphs,
            "caveats": [c for c in caveats if c]}


def verdict_text(verdict: dict[str, Any]) -> str:
    """The statement as plain text for the terminal and verdict.txt."""
    import textwrap

    blocks = [verdict["headline"], *verdict["paragraphs"]]
    out = [textwrap.fill(b, 96) for b in blocks]
    out += [textwrap.fill(c, 96, initial_indent="- ", subsequent_indent="  ")
            for c in verdict["caveats"]]
    return "\n\n".join(out[: len(blocks)]) + ("\n\n" + "\n".join(out[len(blocks):])
                                              if verdict["caveats"] else "") + "\n"
