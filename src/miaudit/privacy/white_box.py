"""A run's white-box audit (``canaries.kind: gradient``; docs/algorithms.md §16): the
gradient canaries' record (:mod:`miaudit.train.gradient_canaries`) turned into one family of
bounds per white-box threat model (scored by :mod:`miaudit.privacy.gradient_canary_scores`),
and the per-canary file of the run directory.

Each threat model (``every-iterate``: the auditor sees every iterate; ``final-model``: the
final weights only) is a family of its own: :func:`~miaudit.privacy.gradient_canary_scores.
gradient_canary_audit` evaluates each (k₊, k₋) candidate at α / K and keeps the best, so its
one-run ε bound holds at 1 − α, and so does its f-DP μ bound (μ-GDP assumed). The black-box
families (the attacks' bounds, :func:`~miaudit.privacy.best_bound.privacy_audit`) are
untouched: a white-box bound is about a stronger auditor and is never compared with them.

The every-iterate score takes the section's ``known_data`` (x − d: the other rows' clipped
sum, recorded in training, subtracted, as DP's adversary may) and ``noise`` (the likelihood
score's σ: per step, for the run, or the accountant's); both are scoring-only, so the cached
target serves every choice, and a record that lacks d is never scored as if it had it.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import numpy as np

from miaudit.config.sections import CanariesConfig
from miaudit.errors import ConfigError
from miaudit.privacy import FDPOneRunBound, OneRunBound
from miaudit.privacy.audit_record import (
    BestBound,
    GradientCanarySettings,
    PrivacySettings,
    WhiteBoxAudit,
    WhiteBoxFamily,
    claim_finding,
)
from miaudit.privacy.canaries import resolve_guesses
from miaudit.privacy.gradient_canary_scores import (
    ThreatModelBounds,
    canary_scores,
    gradient_canary_audit,
)
from miaudit.records.privacy import FDP_ONE_RUN, ONE_RUN
from miaudit.train.gradient_canaries import GradientCanaryRecord

# the "attack" a white-box best bound names: no attack scored it, the canaries' record did
GRADIENT_CANARIES = "gradient canaries"


def _family(bounds: ThreatModelBounds, k: int, alpha: float,
            settings: PrivacySettings) -> WhiteBoxFamily:  # fmt: skip
    """One threat model's bounds as a family: its best ε (one-run) and μ (f-DP), each the
    best of k candidates at α / k (so at 1 − α), and what the ε says of the claim (the
    canaries' inclusion is miaudit's coin, and no split is involved: a proof either way)."""
    best = BestBound(OneRunBound(**bounds.one_run), GRADIENT_CANARIES, ONE_RUN, alpha)
    best_mu = BestBound(FDPOneRunBound(**bounds.fdp), GRADIENT_CANARIES, FDP_ONE_RUN, alpha)
    plain = PrivacySettings(claimed=settings.claimed, alpha=alpha, delta=best.delta,
                            delta_source="", split_seed=0, membership="miaudit")
    return WhiteBoxFamily(bounds.threat_model, k, best, best_mu, claim_finding(plain, best))


def _known_data(record: GradientCanaryRecord, canaries: CanariesConfig) -> bool:
    """Whether the every-iterate score subtracts the other rows' part d: ``known_data``, and
    only with a record that holds d. A record without it (a target cached before the model
    cache kept d) would otherwise be scored as ``known_data: false`` under a report saying
    true: a different auditor, silently. So it is an error that says how to get d."""
    if canaries.known_data and record.data is None:
        raise ConfigError(
            "canaries.known_data: true needs the other rows' part of each step (the record's "
            "data), and this target's gradient-canary record has none: it was cached before "
            "miaudit kept it. Set canaries.known_data: false to audit it as before, or have "
            "the target retrained: remove <cache_key>.json from the model cache (the "
            "target's cache_key in the run's training.json) or use another cache_dir.")
    return bool(canaries.known_data)


def white_box_audit(record: GradientCanaryRecord, canaries: CanariesConfig,
                    settings: PrivacySettings) -> WhiteBoxAudit:
    """The white-box families of a run with gradient canaries: ``canaries`` (the run's
    section: guesses, α, δ, score, known_data, noise, threat models) on ``record``, δ the
    section's or else the black-box audit's (``settings``: the target's DP-SGD δ), whose
    claim each family's best ε is read against. ConfigError when ``known_data`` asks for
    the rows' part d and the record has none (:func:`_known_data`)."""
    delta, source = ((float(canaries.delta), "canaries.delta") if canaries.delta is not None
                     else (settings.delta, settings.delta_source))
    known_data = _known_data(record, canaries)
    audit = gradient_canary_audit(record, guesses=canaries.guesses, delta=delta,
                                  alpha=canaries.alpha, score=canaries.score,
                                  noise=canaries.noise, known_data=known_data)
    pairs = resolve_guesses(canaries.guesses, record.m)
    by_model = {"every-iterate": audit.every_iterate, "final-model": audit.final_model}
    families = tuple(_family(by_model[t], len(pairs), canaries.alpha, settings)
                     for t in canaries.threat_models)
    used = GradientCanarySettings(
        count=record.m, included=int(record.included.sum()), direction=record.kind,
        coordinates=canaries.coordinates if record.kind == "dirac" else None,
        score=canaries.score, noise=float(audit.noise), noise_estimate=canaries.noise,
        known_data=known_data,
        noise_multiplier=float(record.noise_multiplier), steps=record.steps,
        sample_rate=float(record.sample_rate), alpha=float(canaries.alpha), delta=delta,
        delta_source=source, guesses=tuple(pairs))
    return WhiteBoxAudit(used, families)


def gradient_canaries_csv(record: GradientCanaryRecord, canaries: CanariesConfig) -> str:
    """``canary,coordinate,included,steps_joined,every_iterate_score,final_model_score``:
    each gradient canary (its flattened-parameter coordinate for a Dirac canary, else
    empty), whether it was in the run, in how many steps it joined the batch, and its score
    under each threat model (higher: guessed IN first)."""
    # the every-iterate score the bounds were read from (the same options)
    every = canary_scores(record, "every-iterate", canaries.score, canaries.noise,
                          _known_data(record, canaries))
    final = canary_scores(record, "final-model")
    coords: Any = (record.coordinates if record.coordinates is not None
                   else np.full(record.m, "", dtype=object))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["canary", "coordinate", "included", "steps_joined",
                     "every_iterate_score", "final_model_score"])
    for i in range(record.m):
        writer.writerow([i, coords[i], int(record.included[i]), int(record.sampled[i]),
                         f"{every[i]:.6g}", f"{final[i]:.6g}"])
    return buf.getvalue()
