"""The split check in a report (docs/algorithms.md §20): whether the members can be told from
the non-members without the model, in one sentence. Reads the split check's record
(:func:`miaudit.verdict.strength.split_of`: :func:`miaudit.verdict.split_check.split_check`'s)
and the model-free attacks' metrics; computes nothing."""

from __future__ import annotations

from miaudit.formatting import fmt_auc, p_words
from miaudit.records.outcomes import AuditResult
from miaudit.verdict.split_check import SHIFT_P_VALUE, auc_p_value, is_model_free
from miaudit.verdict.split_record import SplitCheck, SplitSkipped
from miaudit.verdict.strength import confidence_of, split_of


def _p(p: float | None) -> str:
    if p is None:
        return "no test"
    if p > 0.99:  # a one-sided test of an AUC at or below 0.5
        return "p > 0.99"
    return "p " + p_words(p)


def _halves(split: SplitCheck) -> str:
    parts = []
    for h in split.halves:
        ci = h.auc_ci
        parts.append(fmt_auc(h.auc) + (f" [{fmt_auc(ci[0])}, {fmt_auc(ci[1])}]" if ci else ""))
    return " and ".join(parts)


def split_line(result: AuditResult, short: bool = False) -> str | None:
    """'Split check: members and non-members look exchangeable without the model (AUC 0.503;
    held-out halves 0.51 [0.48, 0.54] and 0.49 [0.46, 0.52]; p = 0.41; a ... classifier on
    ...).' or its shifted form, then each model-free attack's; None when the run has no split
    check and no model-free attack. ``short``: without the halves and the classifier (the
    terminal's form)."""
    split = split_of(result)
    words = []
    if isinstance(split, SplitSkipped):
        words.append(f"Split check: not run ({split.skipped}).")
    elif split is not None:
        auc = split.auc
        how = (f"a {split.classifier} classifier on {split.features}, cross-fitted on "
               f"two halves of {split.rows:,} audit rows"
               + (f" (a seeded subsample of {split.subsampled_from:,})"
                  if split.subsampled_from else "")
               + ", never reading the model")
        figures = (f"AUC {fmt_auc(auc)}; {_p(split.p_value)}" if short else
                   f"AUC {fmt_auc(auc)}; held-out halves {_halves(split)}; "
                   f"{_p(split.p_value)}")
        if split.shifted:
            words.append(
                f"Split check: members and non-members can be told apart without the model "
                f"({figures}" + ("" if short else f"; {how}") + "): the split is not random, "
                "and attack figures mix any leak with that difference.")
        else:
            words.append(
                f"Split check: members and non-members look exchangeable without the model "
                f"({figures}" + ("" if short else f"; {how}; shifted would need p < "
                                                  f"{split.shift_p_value:g}") + ").")
    confidence = confidence_of(result) or 0.95
    for o in result.outcomes:
        if is_model_free(o) and o.metrics.auc is not None:
            p = auc_p_value(o.metrics.auc, o.metrics.auc_ci, confidence)
            state = ("tells them apart without the model" if p is not None and p < SHIFT_P_VALUE
                     else "does not tell them apart")
            words.append(f"The model-free attack {o.name} {state} (AUC {fmt_auc(o.metrics.auc)}"
                         f", {_p(p)}).")
    return " ".join(words) or None
