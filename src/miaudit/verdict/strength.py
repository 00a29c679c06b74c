"""Which attack is strongest, and whether its figure shows a measurable leak (numbers only).

Shared by the results table (sort order, the ★ mark), the one-line verdict of every report and
the release statement of `miaudit audit` (:mod:`miaudit.verdict.release`), so all three name the
same attack at the same FPR.

The *headline FPR* is the smallest reported FPR at which at least ten false positives are
expected among the non-members, else the largest reported (the best-supported one), so the
ranking never rests on a handful of samples. A leak is *measurable* when the strongest
attack's TPR there passes the verdict's own test, corrected for having chosen it among every
attack run (:mod:`miaudit.verdict.significance`: exact null p-values, Bonferroni over two
figures per attack, family-wise α = 1 - the run's confidence), and its bootstrap interval lies
above the FPR (what guessing achieves). The same holds for the average-case level and the AUC.
Only attacks whose null calibration the suite covers (:attr:`AttackSpec.null_checked`) can
carry a leak; others are shown, not relied on.

Model-free attacks (``blind``: they read no model) are never the strongest attack: they
measure the split, not the model. The verdict is *inconclusive* where the audit cannot
support "no measurable leak" (:func:`inconclusive_reasons`): a split told apart without the
model, inputs that look mismatched, a target near chance on its own training rows, too few
non-members for the figure shown (docs/algorithms.md §13); nor can it support a leak found by
a target that learnt nothing (an artefact, not a leak) or in a design whose references say
something about the target's membership (the design check, §11).
"""

from __future__ import annotations

from typing import Any

from miaudit.attacks.registry import list_attacks
from miaudit.formatting import p_words
from miaudit.metrics import auc_null_p_value, tpr_null_p_value
from miaudit.records.outcomes import AttackOutcome, AuditResult, rate_key
from miaudit.verdict.records import Assessment, Figure, Reason, ShiftComparison
from miaudit.verdict.significance import Correction
from miaudit.verdict.split_check import is_model_free, model_free_evidence
from miaudit.verdict.split_record import SplitRecord, split_record

MIN_EXPECTED_FP = 10
INCONCLUSIVE = "inconclusive"


def confidence_of(result: AuditResult) -> float | None:
    """The CIs' confidence level as the run configured it (None when the run does not say)."""
    cfg = (result.meta or {}).get("config")
    metrics = cfg.get("metrics") if isinstance(cfg, dict) else None
    value = metrics.get("confidence") if isinstance(metrics, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def checks_of(result: AuditResult) -> dict[str, Any]:
    """``meta["checks"]``: ``split`` (the split check's record: :func:`split_of`), ``target_fit``,
    ``input_mismatch`` (each absent or None when not checked)."""
    checks = (result.meta or {}).get("checks")
    return checks if isinstance(checks, dict) else {}


def split_of(result: AuditResult) -> SplitRecord | None:
    """The split check's record (``meta["checks"]["split"]``, typed whichever form meta holds
    it in: :func:`miaudit.verdict.split_record.split_record`); None when it did not run."""
    return split_record(checks_of(result).get("split"))


def model_based(result: AuditResult) -> list[AttackOutcome]:
    """The outcomes of attacks that read a model and whose null calibration the suite covers
    (every attack miaudit registers; a name no registry knows here, e.g. read back from a
    file, counts as covered): the candidates for the strongest."""
    plugins = {spec.name for spec in list_attacks() if not spec.null_checked}
    return [o for o in result.outcomes if not is_model_free(o) and o.name not in plugins]


def unchecked(result: AuditResult) -> list[str]:
    """Attacks on the model that the suite's null calibration does not cover (registered
    outside miaudit): shown in the table, never the verdict's."""
    candidates = {o.name for o in model_based(result)}
    return [o.name for o in result.outcomes
            if not is_model_free(o) and o.name not in candidates]


def correction_of(result: AuditResult, confidence: float | None = None) -> Correction:
    """The verdict's family: two figures per candidate attack, at α = 1 - confidence
    (``confidence``, else the run's: :func:`confidence_of`, else 0.95)."""
    level = confidence if confidence is not None else confidence_of(result) or 0.95
    return Correction(alpha=1.0 - level,
                      attacks=max(1, len(model_based(result))))


def fpr_keys(result: AuditResult) -> list[str]:
    """Every FPR key any attack reports, smallest first."""
    keys = {rate_key(fpr) for o in result.outcomes for fpr in o.metrics.fprs}
    return sorted(keys, key=float)


def n_nonmembers(result: AuditResult) -> int:
    return max((int(o.metrics.n_nonmembers or 0) for o in result.outcomes), default=0)


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
    met = outcome.metrics
    figure = met.find_tpr(key) if key else None
    return (-1.0 if figure is None else figure.tpr, -1.0 if met.auc is None else met.auc)


def ranked(result: AuditResult) -> tuple[list[AttackOutcome], str | None]:
    """The attacks strongest first (stable for ties), model-free ones after every attack on
    the model, and the FPR key they are ranked at."""
    key = headline_fpr(result)
    return sorted(result.outcomes, key=lambda o: (not is_model_free(o), *strength(o, key)),
                  reverse=True), key


def strongest_at(result: AuditResult, key: str) -> AttackOutcome | None:
    """The attack on the model with the highest TPR at FPR `key` (ties: the higher AUC,
    then the first); never a model-free one."""
    candidates = model_based(result)
    return max(candidates, key=lambda o: strength(o, key)) if candidates else None


def figure_at(outcome: AttackOutcome, key: str) -> Figure:
    """One attack's TPR at FPR `key` with its interval and the support it rests on."""
    met = outcome.metrics
    figure = met.tpr_at(key)
    return Figure(fpr=float(key), tpr=figure.tpr, tpr_ci=figure.ci,
                  times_chance=figure.tpr / float(key), n_members=met.n_members,
                  n_nonmembers=met.n_nonmembers,
                  expected_false_positives=figure.expected_false_positives,
                  indicative=figure.indicative)


def assess(result: AuditResult, confidence: float | None = None) -> Assessment:
    """How worried to be, as numbers: ``level`` is ``exposed`` (the TPR interval at the
    headline FPR lies above it), ``average-case`` (no low-FPR leak, but some attack's AUC
    interval lies above 0.5), ``not measured``, ``inconclusive`` (the audit cannot support
    "no measurable leak", or its exposure may be the split's: ``reasons``) or ``none`` (no
    attack on the model reported a TPR).

    Also: ``attack`` (the strongest), ``key``, ``main`` (its :func:`figure_at` the headline
    FPR), ``figures`` (at every FPR it reports), ``degree`` (far / well / slightly, for an
    exposed level), ``auc_attack`` (the highest-AUC attack, for the average case),
    ``measured`` (the level before the checks), ``reasons`` (:func:`inconclusive_reasons`;
    the level is inconclusive when they apply) and ``shift`` (:func:`shift_comparison`, when
    a model-free measurement is clearly above chance). See :class:`Assessment`.
    ``confidence``: the level its tests use (None: the run's, :func:`confidence_of`).
    """
    key = headline_fpr(result)
    best = strongest_at(result, key) if key else None
    if best is None or key is None or best.metrics.find_tpr(key) is None:
        return Assessment(level="none")
    reported = best.metrics.fprs
    figures = tuple(figure_at(best, k) for k in fpr_keys(result) if float(k) in reported)
    main = next(f for f in figures if f.fpr == float(key))
    correction = correction_of(result, confidence)
    p_value = correction.adjusted(tpr_null_p_value(main.tpr, main.n_members or 0,
                                              main.n_nonmembers or 0, main.fpr))
    ci = main.tpr_ci
    above = ci[0] > main.fpr if ci else main.tpr > main.fpr
    measurable = above and p_value < correction.alpha
    level, degree, auc_attack = ("exposed" if measurable else "not measured"), None, None
    if measurable:
        ratio = main.times_chance
        degree = "far" if ratio >= 10 else "well" if ratio >= 3 else "slightly"
    else:
        # An average-case signal (AUC interval above 0.5, and its corrected test) is a leak
        # too, if not yet a confident one: never let a low-FPR null hide it.
        top = max(model_based(result), key=lambda o: o.metrics.auc or 0.0)
        met = top.metrics
        auc_p = correction.adjusted(auc_null_p_value(met.auc or 0.5, met.n_members or 0,
                                                met.n_nonmembers or 0))
        if met.auc_ci and met.auc_ci[0] > 0.5 and auc_p < correction.alpha:
            level, auc_attack, p_value = "average-case", top.name, auc_p
    shift = shift_comparison(result, best, main, 1.0 - correction.alpha)
    reasons = inconclusive_reasons(result, level, main, shift)
    return Assessment(level=INCONCLUSIVE if reasons else level, attack=best.name, key=key,
                      main=main, figures=figures, degree=degree, auc_attack=auc_attack,
                      measured=level, reasons=reasons, shift=shift, p_value=p_value,
                      correction=correction.words(), unchecked=tuple(unchecked(result)))


def shift_comparison(result: AuditResult, best: AttackOutcome, main: Figure,
                     confidence: float | None = None) -> ShiftComparison | None:
    """When a model-free measurement (the split check, or a model-free attack) tells the
    members from the non-members clearly above chance: the strongest such one beside the
    strongest attack: their AUCs and TPRs at the headline FPR, and ``exceeds``, whether the
    attack's TPR interval there lies above the model-free TPR and its AUC above the
    model-free AUC (then its exposure is more than the split's). None otherwise."""
    level = confidence if confidence is not None else confidence_of(result) or 0.95
    found = [e for e in model_free_evidence(split_of(result), result.outcomes, level)
             if e.shifted]
    if not found:
        return None
    base = found[0]
    assert base.p_value is not None  # shifted: its test found it
    base_tpr = base.tpr_at(main.fpr)
    ci = main.tpr_ci
    above = (ci[0] if ci else main.tpr) > base_tpr  # False when base_tpr is NaN
    auc = best.metrics.auc
    exceeds = bool(above and auc is not None and base.auc is not None and auc > base.auc)
    return ShiftComparison(source=base.source, auc=base.auc, p_value=base.p_value,
                           tpr=base_tpr, fpr=main.fpr, attack=best.name, attack_auc=auc,
                           attack_tpr=main.tpr, exceeds=exceeds)


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def inconclusive_reasons(result: AuditResult, measured: str, main: Figure,
                         shift: ShiftComparison | None) -> tuple[Reason, ...]:
    """Why the audit cannot support its ``measured`` level (the strongest attack's figure at
    the headline FPR: ``main``; the model-free comparison: ``shift``):

    - ``shifted-split``: a model-free measurement tells members from non-members clearly
      above chance (p < 0.001): whatever the level, the figures mix a leak with the shift (an
      attack exceeding the model-free baseline is said so, with by how much, but the model
      may read the shift better than the baseline);
    - for "no measurable leak" only: ``input-mismatch`` (the inputs look unlike the model's
      training data), ``near-chance`` (the target is near chance on its own training rows),
      ``few-nonmembers`` (the headline figure rests on fewer than 10 expected false
      positives).

    Empty: the measured level stands."""
    reasons = []
    if shift:
        p = shift.p_value
        compared = (f"TPR {_pct(shift.attack_tpr)} against {_pct(shift.tpr)} at "
                    f"{_pct(shift.fpr)} FPR, AUC {shift.attack_auc:.3f} against "
                    f"{shift.auc:.3f}")
        if shift.exceeds:
            beyond = (f"; the strongest attack, {shift.attack}, exceeds it ({compared}), but "
                      "part of that excess can still be the split, read better through the "
                      "model than from the rows")
        else:
            beyond = f"; the strongest attack, {shift.attack}, does not exceed it ({compared})"
        reasons.append(Reason(
            code="shifted-split",
            text=(f"{shift.source} tells members from non-members without the model "
                  f"(AUC {shift.auc:.3f}, p {p_words(p)}"
                  "), so they differ as data and the attack figures mix any leak with that "
                  "difference" + beyond),
            fix=("audit with non-members drawn from the same distribution as the members "
                 "(rows of the same source, period and selection that the model never "
                 "trained on, ideally a random split of one pool); no DP claim is refuted "
                 "on a shifted split"),
        ))
    checks = checks_of(result)
    design = checks.get("design")
    if design and design.get("dependent"):
        reasons.append(Reason(
            code="design-dependent",
            text=(f"the references' membership, as the attacks see it, tells the target's "
                  f"members from its non-members ({design.get('statistic')}: p "
                  f"{p_words(float(design.get('p_value', 0.0)))}, corrected over the "
                  "references), so an attack can read membership off the design without "
                  "querying the target"),
            fix=("draw the target's membership independently of the references' (a miaudit "
                 "design, or a balanced bank whose every sample is IN for the same number "
                 "of models, which the views undo; docs/algorithms.md §11)"),
        ))
    fit = checks.get("target_fit")
    if measured in ("exposed", "average-case") and fit and fit.get("near_chance"):
        reasons.append(Reason(
            code="untrained-target",
            text=(f"the target is {_pct(fit['train_accuracy'])} accurate on its own "
                  f"{fit['n_members']:,} training rows, where always guessing the majority "
                  f"class gets {_pct(fit['chance'])}: a model that learnt (almost) nothing "
                  "cannot leak what the attacks measure, so the figure is the sign of an "
                  "artefact (in the design, the split or the inputs), not a leak"),
            fix=("check how the members and non-members were drawn and what the model was "
                 "fed; audit the trained model, on the rows it trained on, fed as in "
                 "training"),
        ))
    if measured != "not measured":
        return tuple(reasons)
    mismatch = checks.get("input_mismatch")
    if mismatch:
        reasons.append(Reason(code="input-mismatch", text=mismatch,
                              fix="feed the model exactly the values it was trained on"))
    if fit and fit.get("near_chance") and not mismatch:  # a mismatch explains it already
        reasons.append(Reason(
            code="near-chance",
            text=(f"the target is {_pct(fit['train_accuracy'])} accurate on its own "
                  f"{fit['n_members']:,} training rows, where always guessing the majority "
                  f"class gets {_pct(fit['chance'])}: it learnt (almost) nothing, so "
                  "attacks finding nothing says nothing about a trained model"),
            fix=("audit the trained model, on the rows it trained on (the members), fed "
                 "as in training; in a run, a recipe that trains (epochs, learning rate)"),
        ))
    if main.indicative:
        fpr = main.fpr
        reasons.append(Reason(
            code="few-nonmembers",
            text=(f"with {main.n_nonmembers:,} non-members the figure at {_pct(fpr)} FPR "
                  f"rests on {main.expected_false_positives:g} expected false positives, "
                  f"fewer than {MIN_EXPECTED_FP}, too few to show a leak there"),
            fix=(f"audit with at least {MIN_EXPECTED_FP / fpr:,.0f} non-members (or report "
                 "a larger FPR in metrics.fprs)"),
        ))
    return tuple(reasons)
