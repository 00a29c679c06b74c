"""The verdicts, typed: what :func:`~miaudit.verdict.strength.assess` measures
(:class:`Assessment`), the one-line verdict of every report (:class:`HeadlineVerdict`) and
`miaudit audit`'s release statement (:class:`ReleaseVerdict`). Each is built once, frozen;
``to_dict()`` is what summary.json and verdict.json hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LEVELS = ("exposed", "average-case", "not measured", "inconclusive", "none")


def _pair(ci: tuple[float, float] | None) -> list[float] | None:
    return None if ci is None else list(ci)


@dataclass(frozen=True)
class Figure:
    """One attack's TPR at one FPR, with its interval and the support it rests on."""

    fpr: float
    tpr: float
    tpr_ci: tuple[float, float] | None
    times_chance: float  # tpr / fpr
    n_members: int | None
    n_nonmembers: int | None
    expected_false_positives: float | None
    indicative: bool  # fewer than ten expected false positives

    def to_dict(self) -> dict[str, Any]:
        return {"fpr": self.fpr, "tpr": self.tpr, "tpr_ci": _pair(self.tpr_ci),
                "times_chance": self.times_chance, "n_members": self.n_members,
                "n_nonmembers": self.n_nonmembers,
                "expected_false_positives": self.expected_false_positives,
                "indicative": self.indicative}


@dataclass(frozen=True)
class Reason:
    """Why the audit cannot support its measured level: a ``code`` (``shifted-split``,
    ``input-mismatch``, ``near-chance``, ``few-nonmembers``), the ``text`` and its ``fix``."""

    code: str
    text: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "text": self.text, "fix": self.fix}


@dataclass(frozen=True)
class ShiftComparison:
    """The strongest model-free measurement of the split (``source``, its AUC, p-value and
    TPR at the headline FPR) beside the strongest attack's AUC and TPR there; ``exceeds``:
    whether the attack's TPR interval lies above the model-free TPR and its AUC above the
    model-free AUC."""

    source: str
    auc: float | None
    p_value: float
    tpr: float
    fpr: float
    attack: str
    attack_auc: float | None
    attack_tpr: float
    exceeds: bool

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "auc": self.auc, "p_value": self.p_value,
                "tpr": self.tpr, "fpr": self.fpr, "attack": self.attack,
                "attack_auc": self.attack_auc, "attack_tpr": self.attack_tpr,
                "exceeds": self.exceeds}


def _reasons(reasons: tuple[Reason, ...]) -> list[dict[str, str]]:
    return [r.to_dict() for r in reasons]


def _shift(shift: ShiftComparison | None) -> dict[str, Any] | None:
    return None if shift is None else shift.to_dict()


@dataclass(frozen=True)
class Assessment:
    """How worried to be, as numbers (:func:`~miaudit.verdict.strength.assess`): the
    ``level`` (one of :data:`LEVELS`), the strongest ``attack`` and the FPR ``key`` it is
    ranked at, its figure there (``main``) and at every FPR it reports (``figures``), the
    ``degree`` of an exposed level (far / well / slightly), the highest-AUC attack of an
    average-case level (``auc_attack``), the level before the checks (``measured``), why the
    level is inconclusive (``reasons``), the model-free comparison (``shift``), the level's
    corrected p-value and how it was corrected (``p_value``, ``correction``:
    :mod:`miaudit.verdict.significance`) and the attacks the null calibration does not cover
    (``unchecked``). Level
    ``none``: no attack on the model reported a TPR (``attack``, ``key``, ``main`` None)."""

    level: str
    attack: str | None = None
    key: str | None = None
    main: Figure | None = None
    figures: tuple[Figure, ...] = ()
    degree: str | None = None
    auc_attack: str | None = None
    measured: str = "none"
    reasons: tuple[Reason, ...] = ()
    shift: ShiftComparison | None = None
    p_value: float | None = None  # the level's figure under the null, corrected (Bonferroni)
    correction: str | None = None  # how: "corrected for choosing among 9 attacks (...)"
    unchecked: tuple[str, ...] = ()  # attacks on the model the null calibration does not cover

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "attack": self.attack, "key": self.key,
                "main": None if self.main is None else self.main.to_dict(),
                "figures": [f.to_dict() for f in self.figures], "degree": self.degree,
                "auc_attack": self.auc_attack, "measured": self.measured,
                "shift": _shift(self.shift), "reasons": _reasons(self.reasons),
                "p_value": self.p_value, "correction": self.correction,
                "unchecked": list(self.unchecked)}


@dataclass(frozen=True)
class HeadlineVerdict:
    """The one-line verdict at the top of every report (``line``, its ``label`` and
    ``level``) and the figures it quotes: the strongest ``attack``'s TPR at ``fpr`` with its
    interval and support, the average-case ``auc_attack``, the ``reasons`` for an
    inconclusive level and the model-free comparison (``shift``)."""

    level: str
    label: str
    line: str
    attack: str | None = None
    fpr: float | None = None
    tpr: float | None = None
    tpr_ci: tuple[float, float] | None = None
    times_chance: float | None = None
    expected_false_positives: float | None = None
    n_nonmembers: int = 0
    indicative: bool = False
    auc_attack: str | None = None
    reasons: tuple[Reason, ...] = ()
    shift: ShiftComparison | None = None
    p_value: float | None = None  # the level's test, corrected (Assessment.p_value)
    correction: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """summary.json's ``verdict`` (a run's; `miaudit audit` adds its release statement):
        ``level``, ``label``, ``line`` and ``reasons`` only when nothing was measured."""
        head: dict[str, Any] = {"level": self.level, "label": self.label, "line": self.line}
        if self.level == "none":
            return {**head, "reasons": _reasons(self.reasons)}
        return {**head, "attack": self.attack, "fpr": self.fpr, "tpr": self.tpr,
                "tpr_ci": _pair(self.tpr_ci), "times_chance": self.times_chance,
                "expected_false_positives": self.expected_false_positives,
                "n_nonmembers": self.n_nonmembers, "indicative": self.indicative,
                "auc_attack": self.auc_attack, "reasons": _reasons(self.reasons),
                "shift": _shift(self.shift), "p_value": self.p_value,
                "correction": self.correction}


@dataclass(frozen=True)
class VerdictContext:
    """What the release statement (:func:`~miaudit.verdict.release.make_verdict`) says beside
    the figures, as the command that ran the audit knows it.

    ``outputs``: what an attacker sees (e.g. "probabilities"); ``references``: how many
    reference models the attacks had, ``reference_note``: how they were made; ``skipped``: how
    many listed attacks could not run; ``confidence``: the intervals' level (None: the run's
    config's, else 0.95); ``input_mismatch``: why the model's inputs look unlike its training
    data, or None (the verdict reads the check from ``result.meta["checks"]``; this words the
    caveat); ``privacy``: the empirical-ε line, or None; ``split``: the split check's line, or
    None; ``ranked_samples``: whether the caller shows the samples the strongest attack flags
    first (an audit's exposed.csv), which the advice then points to."""

    outputs: str = "outputs"
    references: int = 0
    reference_note: str = ""
    skipped: int = 0
    confidence: float | None = None
    input_mismatch: str | None = None
    privacy: str | None = None
    split: str | None = None
    ranked_samples: bool = False


@dataclass(frozen=True)
class ReleaseVerdict:
    """`miaudit audit`'s release statement (:func:`~miaudit.verdict.release.make_verdict`):
    the ``headline``, ``paragraphs`` and ``caveats`` in plain words, and the figures they
    quote (the strongest ``attack``'s TPR at ``fpr``, at every FPR it reports, and its AUC).
    Level ``none``: no attack ran (``attack`` None)."""

    level: str
    headline: str
    paragraphs: tuple[str, ...] = ()
    caveats: tuple[str, ...] = ()
    figures: tuple[Figure, ...] = ()
    attack: str | None = None
    fpr: float | None = None
    auc: float | None = None
    input_mismatch: str | None = None
    reasons: tuple[Reason, ...] = ()
    shift: ShiftComparison | None = None

    def to_dict(self) -> dict[str, Any]:
        """verdict.json (and summary.json's ``verdict``, with the verdict line added)."""
        figures = [f.to_dict() for f in self.figures]
        if self.level == "none":
            return {"level": self.level, "headline": self.headline,
                    "paragraphs": list(self.paragraphs), "caveats": list(self.caveats),
                    "figures": figures}
        return {"level": self.level, "attack": self.attack, "fpr": self.fpr,
                "figures": figures, "auc": self.auc, "headline": self.headline,
                "paragraphs": list(self.paragraphs), "caveats": list(self.caveats),
                "input_mismatch": self.input_mismatch, "reasons": _reasons(self.reasons),
                "shift": _shift(self.shift)}
