"""The privacy audit in a report (docs/algorithms.md §16): the target's claimed ε beside the
best empirical lower bound (and the best μ-GDP lower bound), and per attack the bounds with
what each rests on.

Reads ``result.meta["privacy_audit"]`` (a :class:`~miaudit.privacy.audit_record.PrivacyAudit`,
:func:`miaudit.privacy.best_bound.privacy_audit`) and the attacks' metrics; computes nothing.
The per-attack bounds each hold at 1 − α on their own; the best is the one recounted at α / K
over the K bounds compared (Bonferroni), and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from miaudit.formatting import fmt_epsilon
from miaudit.privacy.audit_record import BestBound, GradientCanarySettings, PrivacyAudit
from miaudit.records.outcomes import AttackOutcome, AuditResult
from miaudit.records.privacy import (
    CANARY_EPSILON_LOWER_BOUND,
    CANARY_GAUSSIAN_DP_LOWER_BOUND,
    EPSILON_KEYS,
    EPSILON_LOWER_BOUND,
    EVIDENCE_AGAINST,
    FDP_ONE_RUN,
    GAUSSIAN_DP_LOWER_BOUND,
    GAUSSIAN_DP_OF,
    NOT_EXCEEDED,
    ONE_RUN,
    REFUTED,
    WITHHELD,
)

if TYPE_CHECKING:
    from miaudit.privacy import OneRunBound

# the words for each bound, where a sentence names one (FDP_ONE_RUN: a best μ only, no
# attack's metrics key)
BOUND_WORDS = {
    EPSILON_LOWER_BOUND: "threshold test on the audit samples",
    GAUSSIAN_DP_LOWER_BOUND: "threshold test on the audit samples",
    CANARY_EPSILON_LOWER_BOUND: "threshold test on the canaries",
    CANARY_GAUSSIAN_DP_LOWER_BOUND: "threshold test on the canaries",
    ONE_RUN: "one-run guesses on the canaries",
    FDP_ONE_RUN: "one-run f-DP guesses on the canaries",
}
# what a best μ of kind FDP_ONE_RUN rests on beyond the threshold μ bounds' words
FDP_BASIS = "μ-GDP assumed, Mahloujifar, Melis & Chaudhuri 2025"
# the results table's columns: (metrics key, header), the canary one only with canaries
EPSILON_LB = "ε lb"
MU_LB = "μ lb"
ONE_RUN_LB = "ε 1-run"
TABLE_COLUMNS = ((EPSILON_LOWER_BOUND, EPSILON_LB), (GAUSSIAN_DP_LOWER_BOUND, MU_LB),
                 (ONE_RUN, ONE_RUN_LB))
# a μ-GDP key -> the threshold ε key of the same samples (and halves)
EPSILON_OF_MU = {mu: eps for eps, mu in GAUSSIAN_DP_OF.items()}
MU_KEYS = tuple(EPSILON_OF_MU)


def recorded_audit(result: AuditResult) -> PrivacyAudit | None:
    """The run's privacy audit (None when it computed none); a dict (summary.json's
    ``privacy_audit``, as older callers stored it) is read as one."""
    audit = (result.meta or {}).get("privacy_audit")
    if isinstance(audit, dict):
        return PrivacyAudit.from_dict(audit)
    return audit if isinstance(audit, PrivacyAudit) else None


def confidence(alpha: float) -> str:
    """α as a confidence: 0.05 -> '95%'."""
    return f"{100 * (1 - float(alpha)):g}%"


def _over(k: int, alpha: float) -> str:
    """'95% over 3 bounds, Bonferroni', or '95%' for one bound."""
    return f"{confidence(alpha)} over {k} bounds, Bonferroni" if k > 1 else confidence(alpha)


def privacy_line(result: AuditResult) -> str | None:
    """'Privacy: claimed ε 8 (δ 1e-05); best empirical lower bound 0.42 (rmia, threshold test
    on the audit samples; 95% over 3 bounds, Bonferroni).', then the best μ-GDP bound's
    sentence (:func:`mu_sentence`) when the run has one. None when the run computed none."""
    audit = recorded_audit(result)
    if audit is None:
        return None
    claim, best = audit.settings.claimed, audit.best
    head = (f"claimed ε {fmt_epsilon(claim.epsilon)} (δ {claim.delta:g})" if claim
            else "no DP claim recorded for the target")
    mu = mu_sentence(audit)
    if best is None:
        return f"Privacy: {head}; no attack gave an ε lower bound." + mu
    over = _over(audit.bounds_compared, best.family_alpha)
    if best.epsilon <= 0:  # nothing to name: every bound is 0
        return f"Privacy: {head}; no attack certifies ε > 0 ({over})." + mu
    line = (f"Privacy: {head}; best empirical lower bound {fmt_epsilon(best.epsilon)} at "
            f"δ {best.delta:g} ({best.attack}, {BOUND_WORDS[best.kind]}; {over}).")
    if claim and audit.claim_finding in CLAIM_WORDS:
        line += " " + CLAIM_WORDS[audit.claim_finding]
    return line + mu


# what the best bound says of the claim (miaudit.privacy.audit_record.claim_finding), in words
CLAIM_WORDS = {
    REFUTED: "It exceeds the claimed ε: the privacy claim does not hold.",
    EVIDENCE_AGAINST: (
        "It exceeds the claimed ε: evidence against the claim, assuming the members were "
        "chosen at random from the same data as the non-members (a split the user gives is "
        "covered by no proof; canaries or a run whose split miaudit draws are)."),
    WITHHELD: (
        "It exceeds the claimed ε, but the members can be told from the non-members without "
        "the model (the split check), so the bound may measure the split rather than the "
        "model: no refutation on that basis."),
    NOT_EXCEEDED: "It does not exceed the claim (a lower bound cannot confirm a claim).",
}


def mu_sentence(audit: PrivacyAudit) -> str:
    """' Gaussian DP: best μ lower bound 1.2 (rmia, threshold test on the audit samples; 95%
    over 3 bounds, Bonferroni), ε ≈ 3.1 at δ 1e-05 if the trade-off curve is Gaussian (an
    estimate).' with its leading space; '' when the run has no μ bound (δ = 0, or results
    written before runs had one). A one-run f-DP best μ also says what it rests on
    (:data:`FDP_BASIS`): its μ refutes μ-GDP claims only (the section's legend says more),
    and its ε, like every ε from μ, holds only if the target's trade-off curve is Gaussian."""
    best: BestBound | None = audit.best_mu
    if best is None or best.mu is None:
        return ""
    over = _over(audit.mu_bounds_compared, best.family_alpha)
    if best.mu <= 0:
        return f" Gaussian DP: no attack certifies μ > 0 ({over})."
    basis = f"; {FDP_BASIS}" if best.kind == FDP_ONE_RUN else ""
    return (f" Gaussian DP: best μ lower bound {fmt_epsilon(best.mu)} ({best.attack}, "
            f"{BOUND_WORDS.get(best.kind, best.kind)}; {over}{basis}), "
            f"ε ≈ {fmt_epsilon(best.epsilon)} at "
            f"δ {best.delta:g} if the trade-off curve is Gaussian (an estimate).")


def bound_cell(outcome: AttackOutcome, key: str) -> str:
    """A bound's figure in a table cell (ε, or μ for a Gaussian-DP bound); '-' without one."""
    record = getattr(outcome.metrics, key)
    return "-" if record is None else fmt_epsilon(record.value)


def table_columns(result: AuditResult) -> list[tuple[str, str]]:
    """The (metrics key, header) of the ε columns of the results table that some attack has."""
    return [(key, header) for key, header in TABLE_COLUMNS
            if any(getattr(o.metrics, key) is not None for o in result.outcomes)]


def epsilon_legend(headers: list[str]) -> str:
    """What the ε and μ columns of the results table mean (those in ``headers``)."""
    words = {EPSILON_LB: "the ε lower bound each attack certifies on its own (threshold test "
                         "on the audit samples)",
             MU_LB: "its μ-GDP lower bound on the same halves (Nasr et al. 2023; 0 = no "
                    "evidence against any μ)",
             ONE_RUN_LB: "its one-run bound on the canaries"}
    return "; ".join(f"{h}: {words[h]}" for h in headers) + "."


def column_support(result: AuditResult, key: str) -> str:
    """What an ε column's figures rest on, for the table's subheader: '95%, δ 1e-05' ('95%'
    for μ, which needs no δ)."""
    audit = recorded_audit(result)
    if audit is None:
        return ""
    where: Any = audit.settings.canaries if key == ONE_RUN else audit.settings
    if where is None:
        return ""
    if key in MU_KEYS:
        return confidence(where.alpha)
    return f"{confidence(where.alpha)}, δ {where.delta:g}"


def missing_notes(result: AuditResult) -> list[str]:
    """'loss: no ε bound from the threshold test on the audit samples (why)' for each bound not
    given; a missing μ bound only when its samples' ε bound was given (else the ε note says
    why: the same halves)."""
    notes = []
    for o in result.outcomes:
        m = o.metrics
        # the attacks' own bounds only (FDP_ONE_RUN is computed for the best μ, not recorded)
        for key, words in ((k, w) for k, w in BOUND_WORDS.items() if k in EPSILON_KEYS):
            record = getattr(m, key)
            if record is None or record.bound is not None:
                continue
            if key in MU_KEYS:
                eps = getattr(m, EPSILON_OF_MU[key])
                if eps is None or eps.bound is None:
                    continue
            what = "μ" if key in MU_KEYS else "ε"
            notes.append(f"{o.name}: no {what} bound from the {words} ({record.reason})")
    return notes


# what each white-box threat model's auditor sees (miaudit.privacy.gradient_canary_scores); the
# every-iterate one as scored without canaries.known_data
THREAT_MODEL_WORDS = {
    "every-iterate": "the auditor sees every iterate θ₀ … θ_T, as DP-SGD's accounting assumes, "
                     "but not the other rows' gradients",
    "final-model": "the auditor sees the initial and the final weights only",
}
# the every-iterate auditor with canaries.known_data: DP's own adversary, all of it
KNOWN_DATA_WORDS = ("the auditor sees every iterate θ₀ … θ_T and knows the other rows' "
                    "clipped gradients, as DP-SGD's accounting assumes")


def threat_model_words(threat_model: str, known_data: bool) -> str:
    """What the auditor of ``threat_model`` knows; ``known_data`` (the every-iterate score
    subtracted the other rows' clipped sum) changes the every-iterate auditor only."""
    if threat_model == "every-iterate" and known_data:
        return KNOWN_DATA_WORDS
    return THREAT_MODEL_WORDS[threat_model]


def _noise_words(s: GradientCanarySettings) -> str:
    """How the every-iterate likelihood score's σ was had (canaries.noise)."""
    claimed = f"the accountant claims {s.noise_multiplier:.3g}"
    if s.noise_estimate == "per-step":
        return f"each step's σ read off the run, {s.noise:.3g} over all steps; {claimed}"
    if s.noise_estimate == "claimed":
        return f"σ {s.noise:.3g}, the accountant's"
    return f"σ {s.noise:.3g} read off the run; {claimed}"
WHITE_BOX_HEADER = ["threat model", "ε one-run", "μ f-DP", "ε est. (μ)", "m", "k₊", "k₋", "r",
                    "v", "α", "δ"]


def white_box_lines(audit: PrivacyAudit | None) -> list[str]:
    """One sentence per white-box family of a run with gradient canaries ([] without):
    'White-box every-iterate (the auditor sees every iterate ...): one-run ε lower bound 0.9
    at δ 1e-05 (...; 95% over 1 candidate, Bonferroni); f-DP μ lower bound 0.4 (μ-GDP
    assumed, ...), ε ≈ 1.6 ... It does not exceed the claim ...'."""
    if audit is None or audit.white_box is None:
        return []
    m = audit.white_box.settings.count
    known_data = audit.white_box.settings.known_data
    lines = []
    for fam in audit.white_box.families:
        head = (f"White-box {fam.threat_model} "
                f"({threat_model_words(fam.threat_model, known_data)}): ")
        k = fam.bounds_compared
        over = (f"{confidence(fam.best.family_alpha)} over {k} guess candidates, Bonferroni"
                if fam.best is not None and k > 1 else
                confidence(fam.best.family_alpha) if fam.best is not None else "")
        best, mu = fam.best, fam.best_mu
        if best is None or best.epsilon <= 0:
            text = head + f"no one-run ε > 0 certified by {m} gradient canaries ({over})."
        else:
            b = cast("OneRunBound", best.bound)  # a white-box best ε is a one-run bound
            text = (head + f"one-run ε lower bound {fmt_epsilon(best.epsilon)} at δ "
                    f"{best.delta:g} ({m} gradient canaries, {b.guesses} guesses, "
                    f"{b.correct} right; {over}).")
        if mu is not None and mu.mu is not None:
            text += (f" f-DP: μ lower bound {fmt_epsilon(mu.mu)} ({FDP_BASIS}; "
                     f"{confidence(mu.family_alpha)}), ε ≈ {fmt_epsilon(mu.epsilon)} at δ "
                     f"{mu.delta:g} if the trade-off curve is Gaussian (an estimate).")
        if fam.claim_finding in CLAIM_WORDS and best is not None and best.epsilon > 0:
            text += " " + CLAIM_WORDS[fam.claim_finding]
        lines.append(text)
    return lines


def _white_box_rows(audit: PrivacyAudit) -> list[list[str]]:
    """A row per white-box family: its best ε and μ, μ's ε estimate, and the ε's counts."""
    assert audit.white_box is not None
    rows = []
    for fam in audit.white_box.families:
        b = None if fam.best is None else cast("OneRunBound", fam.best.bound)
        mu, alpha = fam.best_mu, 0.0 if fam.best is None else fam.best.family_alpha
        rows.append([fam.family,
                     "-" if fam.best is None else fmt_epsilon(fam.best.epsilon),
                     "-" if mu is None else fmt_epsilon(mu.mu),
                     "-" if mu is None else fmt_epsilon(mu.epsilon),
                     *(["-"] * 7 if b is None else
                       [str(b.m), str(b.k_plus), str(b.k_minus), str(b.guesses),
                        str(b.correct), f"{alpha:g}", f"{b.delta:g}"])])
    return rows


def _white_box_legend(audit: PrivacyAudit) -> list[str]:
    assert audit.white_box is not None
    s = audit.white_box.settings
    where = f", {s.coordinates} coordinates" if s.coordinates else ""
    minus = " less the other rows' clipped sum, which DP's adversary knows" if s.known_data else ""
    k = len(s.guesses)
    each = ("on the one (k₊, k₋) guess pair fixed in advance" if k == 1 else
            f"each the best of {k} (k₊, k₋) candidates fixed in advance, each at α / {k}")
    return [
        f"White-box (Steinke, Nasr & Jagielski 2023): {s.count} gradient canaries "
        f"({s.direction}{where}; each a vector of the clipping norm, one more example of "
        f"DP-SGD's dataset, Poisson-sampled at rate {s.sample_rate:.4g} over {s.steps} "
        f"steps), {s.included} in the run (each with probability ½). Every iterate: the "
        f"{s.score} score of each step's privatised gradient{minus} ({_noise_words(s)}); "
        f"final model: ⟨θ₀ − θ_T, u⟩. Each "
        f"threat model is a Bonferroni family of its own: its ε (one-run) and its μ (f-DP, "
        f"Mahloujifar, Melis & Chaudhuri 2025: it rejects μ-GDP curves only, and its ε holds "
        f"only if the trade-off curve is Gaussian), {each}, so each holds at 1 − α; δ from "
        f"{s.delta_source}. The table's "
        f"counts are the ε's. They rest on the DP-SGD guarantee for each canary's inclusion "
        f"(miaudit's coin): a white-box bound above the claim refutes it.",
        "The black-box bounds (the attacks' rows above, the line's best) are about an auditor "
        "who queries the final model only, and are a family of their own.",
    ]


@dataclass
class PrivacySection:
    """The 'Privacy audit' section: its line, a table per attack and what the table means;
    with gradient canaries, a line and a row per white-box family."""

    line: str
    header: list[str]
    rows: list[list[str]]
    legend: list[str] = field(default_factory=list)
    white_box_lines: list[str] = field(default_factory=list)
    white_box_header: list[str] = field(default_factory=list)
    white_box_rows: list[list[str]] = field(default_factory=list)


def privacy_section(result: AuditResult) -> PrivacySection | None:
    """Per attack: the threshold bound on the audit samples (FP of n₀, FN of n₁ counted on
    the half that did not choose τ), its μ-GDP bound and that μ's ε estimate (when the run
    has μ bounds) and, with canaries, the canary threshold bound (and μ bound) and the
    one-run bound with m, k₊, k₋, r, v, α and δ. None when the run computed no bound."""
    audit, line = recorded_audit(result), privacy_line(result)
    if audit is None or line is None:
        return None
    settings = audit.settings
    canaries = settings.canaries
    has = {key: any(getattr(o.metrics, key) is not None for o in result.outcomes)
           for key in MU_KEYS}
    header = ["attack", "ε lb (audit)", "FP / n₀", "FN / n₁"]
    header += ["μ lb (audit)", "ε est. (μ)"] if has[GAUSSIAN_DP_LOWER_BOUND] else []
    if canaries:
        header += ["ε lb (canaries)"]
        header += ["μ lb (canaries)"] if has[CANARY_GAUSSIAN_DP_LOWER_BOUND] else []
        header += ["ε one-run", "m", "k₊", "k₋", "r", "v", "α", "δ"]
    rows = []
    for o in result.outcomes:
        m = o.metrics
        audit_lb = m.epsilon_lower_bound
        b = None if audit_lb is None else audit_lb.bound
        row = [o.name, bound_cell(o, EPSILON_LOWER_BOUND),
               "-" if b is None else f"{b.fp} / {b.n_nonmembers}",
               "-" if b is None else f"{b.fn} / {b.n_members}"]
        if has[GAUSSIAN_DP_LOWER_BOUND]:
            gdp = m.gaussian_dp_lower_bound
            row += [bound_cell(o, GAUSSIAN_DP_LOWER_BOUND),
                    fmt_epsilon(None if gdp is None else gdp.epsilon)]
        if canaries:
            one = None if m.one_run is None else m.one_run.bound
            row += [bound_cell(o, CANARY_EPSILON_LOWER_BOUND)]
            row += [bound_cell(o, CANARY_GAUSSIAN_DP_LOWER_BOUND)] if has[
                CANARY_GAUSSIAN_DP_LOWER_BOUND] else []
            row += [bound_cell(o, ONE_RUN)]
            row += (["-"] * 7 if one is None else
                    [str(one.m), str(one.k_plus), str(one.k_minus), str(one.guesses),
                     str(one.correct), f"{one.alpha:g}", f"{one.delta:g}"])
        rows.append(row)
    legend = [
        f"ε lb: the ε an attack's threshold test certifies (Clopper–Pearson, "
        f"{confidence(settings.alpha)} on its own, δ {settings.delta:g} from "
        f"{settings.delta_source}); τ chosen on a seeded half of the samples (seed "
        f"{settings.split_seed}), FP and FN counted on the other half.",
    ]
    if any(has.values()):
        legend.append(
            "μ lb: the μ-GDP lower bound of the same threshold test (Nasr et al. 2023, "
            "\"Tight Auditing\": μ ≥ Φ⁻¹(1 − FPR⁺) + Φ⁻¹(1 − FNR⁺), the same Clopper–Pearson "
            "bounds, α and halves; τ chosen on the selection half to maximise μ). ε est. (μ): "
            "the ε of a μ-GDP mechanism at that δ, a lower bound only if the target's "
            "trade-off curve is Gaussian (DP-SGD's is close to it)."
        )
    if canaries:
        legend.append(
            f"Canaries: {canaries.count} ({canaries.kind or 'canaries'}), "
            f"{canaries.included} in the target's training set (each with probability ½); "
            f"one-run (Steinke, Nasr & Jagielski 2023): IN guesses on the k₊ highest scores, "
            f"OUT on the k₋ lowest, r guesses, v right; α per (k₊, k₋) candidate "
            f"({len(canaries.guesses)} fixed in advance, Bonferroni), δ from "
            f"{canaries.delta_source}."
        )
    best_mu = audit.best_mu
    if best_mu is not None and best_mu.kind == FDP_ONE_RUN:
        legend.append(
            "Best μ (the line above): the one-run f-DP bound (Mahloujifar, Melis & Chaudhuri "
            "2025, \"Auditing f-Differential Privacy in One Run\") on the same guesses' counts "
            "(r, v): it rejects every μ-GDP curve below μ, so it refutes only μ-GDP claims; "
            "each (k₊, k₋) candidate is one more test of the μ family, and its ε at δ is a "
            "lower bound only if the target's trade-off curve is Gaussian (an estimate)."
        )
    legend.append("A best bound over several attacks holds only with each recounted at α / K "
                  "(the line above); a single attack's bound holds at 1 − α on its own.")
    if audit.white_box is None:
        return PrivacySection(line=line, header=header, rows=rows, legend=legend)
    return PrivacySection(line=line, header=header, rows=rows,
                          legend=legend + _white_box_legend(audit),
                          white_box_lines=white_box_lines(audit),
                          white_box_header=list(WHITE_BOX_HEADER),
                          white_box_rows=_white_box_rows(audit))
