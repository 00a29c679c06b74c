"""The verdict's own test: is the strongest attack's figure more than chance, once corrected
for having chosen it among every attack run (docs/algorithms.md §13)?

Under the null (the target's scores independent of its membership, which the designs
guarantee for everything the attacks see: docs/algorithms.md §11) the membership labels are
exchangeable given the scores, so each figure has an exact null distribution that needs only
the counts:

- TPR at FPR f: the members ranked above the (F+1)-th non-member, F the most false positives
  f allows among n0, follow the negative hypergeometric law (n1 members, n0 non-members,
  F + 1 non-members drawn). Ties can only stop a ROC point earlier, so the p-value is
  conservative with them.
- AUC: Mann–Whitney's U, one-sided, by its normal approximation without the tie correction
  (the largest variance: conservative with ties).

(:func:`miaudit.metrics.tpr_null_p_value`, :func:`miaudit.metrics.auc_null_p_value`.) The
verdict reads two figures per attack (its TPR at the headline FPR, its AUC) and picks the
strongest: the family is every such test, ``2 m`` for ``m`` attacks on the model, and a level
needs its p-value below ``alpha / (2 m)`` (Bonferroni; for the smallest p-value, Holm's first
step is the same). ``alpha`` is the run's ``1 - metrics.confidence``: the same family-wise
level as the ε bounds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Correction:
    """How the verdict's test is corrected: ``tests`` p-values in the family (two per
    attack on the model), each held to ``alpha / tests``."""

    alpha: float
    attacks: int

    @property
    def tests(self) -> int:
        return max(1, 2 * self.attacks)

    @property
    def level(self) -> float:
        """The p-value a single figure must stay below."""
        return self.alpha / self.tests

    def adjusted(self, p_value: float) -> float:
        """Bonferroni's adjusted p-value (capped at 1)."""
        return min(1.0, p_value * self.tests)

    def words(self) -> str:
        """'corrected for choosing among 9 attacks: 18 tests, Bonferroni, family-wise α 0.05'"""
        return (f"corrected for choosing among {self.attacks} attack"
                f"{'' if self.attacks == 1 else 's'}: {self.tests} tests, Bonferroni, "
                f"family-wise α {self.alpha:g}")
