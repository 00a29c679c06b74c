"""Which attack is strongest, and whether its figure shows a measurable leak (numbers only).

Shared by the results table (sort order, the ★ mark), the one-line verdict of every report and
the release statement of `miaudit audit` (:mod:`miaudit.audit.verdict`), so all three name the
same attack at the same FPR.

The *headline FPR* is the smallest reported FPR at which at least ten false positives are
expected among the non-members, else the largest reported (the best-supported one), so the
ranking never rests on a handful of samples. A leak is *measurable* when the bootstrap
interval of the strongest attack's TPR there lies above the FPR (what guessing achieves).
"""

from __future__ import annotations

from typing import Any

from miaudit.results import AttackOutcome, AuditResult, rate_key

MIN_EXPECTED_FP = 10


def fpr_keys(result: AuditResult) -> list[str]:
    """Every FPR key any attack reports, smallest first."""
    keys = {rate_key(fpr) for o in result.outcomes for fpr in o.summary.fprs}
    return sorted(keys, key=float)


def n_nonmembers(result: AuditResult) -> int:
    return max((int(o.summary.n_nonmembers or 0) for o in result.outcomes), default=0)


def expected_false_positives(result: AuditResult, key: str) -> float:
    """Non-members times the FPR: how many false positives the figure at `key` rests on."""
    return n_nonmembers(result) * float(key)


def headline_fpr(result: AuditResult) -> str | None:
    """The smallest reported FPR with >= 10 expected false positives, else the largest."""
    keys = fpr_keys(result)
    if not keys:
        return None
    n0 = n_nonmembers(result)
    good = [k for k in keys if n0 * float(k) >= MIN_EXPECTED_FP * (1 - 1e-12)]
    return good[0] if good else keys[-1]


def strength(outcome: AttackOutcome, key: str | None) -> tuple[float, float]:
    """Sort key: TPR at FPR `key`, then AUC (missing figures rank last)."""
    met = outcome.summary
    figure = met.find_tpr(key) if key else None
    return (-1.0 if figure is None else figure.tpr, -1.0 if met.auc is None else met.auc)


def ranked(result: AuditResult) -> tuple[list[AttackOutcome], str | None]:
    """The attacks strongest first (stable for ties) and the FPR key they are ranked at."""
    key = headline_fpr(result)
    return sorted(result.outcomes, key=lambda o: strength(o, key), reverse=True), key


def strongest_at(result: AuditResult, key: str) -> AttackOutcome | None:
    """The attack with the highest TPR at FPR `key` (ties: the higher AUC, then the first)."""
    return max(result.outcomes, key=lambda o: strength(o, key)) if result.outcomes else None


def figure_at(outcome: AttackOutcome, key: str) -> dict[str, Any]:
    """One attack's TPR at FPR `key` with its interval and the support it rests on."""
    met = outcome.summary
    figure = met.tpr_at(key)
    return {
        "fpr": float(key),
        "tpr": figure.tpr,
        "tpr_ci": None if figure.ci is None else list(figure.ci),
        "times_chance": figure.tpr / float(key),
        "n_members": met.n_members,
        "n_nonmembers": met.n_nonmembers,
        "expected_false_positives": figure.expected_false_positives,
        "indicative": figure.indicative,
    }


def assess(result: AuditResult) -> dict[str, Any]:
    """How worried to be, as numbers: ``level`` is ``exposed`` (the TPR interval at the
    headline FPR lies above it), ``average-case`` (no low-FPR leak, but some attack's AUC
    interval lies above 0.5), ``not measured`` or ``none`` (no attack reported a TPR).

    Also: ``attack`` (the strongest), ``key``, ``main`` (its :func:`figure_at` the headline
    FPR), ``figures`` (at every FPR it reports), ``degree`` (far / well / slightly, for an
    exposed level) and ``auc_attack`` (the highest-AUC attack, for the average case).
    """
    key = headline_fpr(result)
    best = strongest_at(result, key) if key else None
    if best is None or key is None or best.summary.find_tpr(key) is None:
        return {"level": "none", "attack": None, "key": None, "main": None, "figures": []}
    reported = best.summary.fprs
    figures = [figure_at(best, k) for k in fpr_keys(result) if float(k) in reported]
    main = next(f for f in figures if f["fpr"] == float(key))
    ci = main["tpr_ci"]
    measurable = ci[0] > main["fpr"] if ci else main["tpr"] > main["fpr"]
    out: dict[str, Any] = {"level": "exposed" if measurable else "not measured",
                           "attack": best.name, "key": key, "main": main, "figures": figures,
                           "degree": None, "auc_attack": None}
    if measurable:
        ratio = main["times_chance"]
        out["degree"] = "far" if ratio >= 10 else "well" if ratio >= 3 else "slightly"
    else:
        # An average-case signal (AUC interval above 0.5) is a leak too, if not yet a
        # confident one: never let a low-FPR null hide it.
        top = max(result.outcomes, key=lambda o: o.summary.auc or 0.0)
        auc_ci = top.summary.auc_ci
        if auc_ci and auc_ci[0] > 0.5:
            out["level"] = "average-case"
            out["auc_attack"] = top.name
    return out
