"""Stage 2 of a run: every attack scored on a bank for one target and evaluated on the audit
samples (thresholds for balanced accuracy chosen on public data only), with its ε lower bounds
(:mod:`miaudit.privacy.attack_bounds`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from miaudit import metrics
from miaudit.attacks import TargetView, get_attack, run_attack
from miaudit.attacks.registry import AttackRun, ThresholdRows, check_attack_params
from miaudit.config import CanariesConfig, MetricsConfig
from miaudit.errors import AttackError
from miaudit.pipeline.design_check import design_check
from miaudit.privacy.attack_bounds import MODEL_FREE_REASON, EpsilonPlan
from miaudit.privacy.best_bound import privacy_audit
from miaudit.records.outcomes import AttackCost, AttackMetrics, AttackOutcome, AuditResult
from miaudit.runtime.progress import progress_bar
from miaudit.signals import SignalBank
from miaudit.verdict.split_check import split_shifted
from miaudit.verdict.split_record import SplitRecord


def model_accuracies(bank: SignalBank) -> list[dict[str, Any]]:
    """Each model's train accuracy (on its members) and test accuracy (on the bank samples it
    did not train on, population included), from query 0 of the bank. A sequence bank (causal
    LMs) has no accuracies: each model's mean token loss (the mean over samples of -mean
    log p per scored token) and its perplexity (exp of that loss), on members and non-members.
    Canaries are left out: a mislabelled canary is no measure of accuracy."""
    if bank.has_sequences:
        return _lm_losses(bank)
    assert bank.labels is not None  # SignalBank.__post_init__ sets it
    correct = bank.predicted_classes(0) == bank.labels[None, :]
    kept = _not_canaries(bank)
    correct = correct[:, kept]
    rows = []
    for m in range(bank.n_models):
        members = bank.membership[m][kept]
        rows.append({
            "model": m,
            "n_train": int(bank.membership[m].sum()),  # canaries included
            "train_acc": float(correct[m, members].mean()) if members.any() else None,
            "test_acc": float(correct[m, ~members].mean()) if (~members).any() else None,
        })
    return rows


def chance_floor(labels: np.ndarray) -> tuple[float, float]:
    """(chance, floor) for a classifier's accuracy on rows with these ``labels``: chance is
    the majority class's share (what always guessing it gets), and an accuracy below
    ``floor = chance + a tenth of the rest`` is near chance: the model learnt (almost)
    nothing, or is fed other inputs than it was trained on."""
    chance = float(np.bincount(labels).max() / max(labels.size, 1))
    return chance, chance + 0.1 * (1 - chance)


def target_fit(bank: SignalBank, target: int) -> dict[str, Any] | None:
    """The target's accuracy on its own training rows (query 0, canaries left out) against
    :func:`chance_floor`: ``near_chance`` when it learnt (almost) nothing, so that no attack
    finding nothing is no evidence. None for a sequence bank (LMs have no accuracy) or a
    target with no members outside the canaries."""
    if bank.has_sequences:
        return None
    rows = np.flatnonzero(bank.membership[target] & _not_canaries(bank))
    if rows.size == 0:
        return None
    assert bank.labels is not None  # SignalBank.__post_init__ sets it
    labels = bank.labels[rows]
    accuracy = float((bank.predicted_classes(0)[target, rows] == labels).mean())
    chance, floor = chance_floor(labels)
    return {"train_accuracy": accuracy, "chance": chance, "floor": floor,
            "near_chance": accuracy < floor, "n_members": int(rows.size)}


def _not_canaries(bank: SignalBank) -> np.ndarray:
    return np.ones(bank.n_samples, dtype=bool) if bank.canary is None else ~bank.canary


def _lm_losses(bank: SignalBank) -> list[dict[str, Any]]:
    kept = _not_canaries(bank)
    loss = -bank.sequence_loglik[:, kept]  # [M, N]: mean next-token loss of each sample's tokens
    rows = []
    for m in range(bank.n_models):
        members = bank.membership[m][kept]
        train = float(loss[m, members].mean()) if members.any() else None
        test = float(loss[m, ~members].mean()) if (~members).any() else None
        rows.append({
            "model": m,
            "n_train": int(bank.membership[m].sum()),
            "train_loss": train,
            "test_loss": test,
            "train_ppl": None if train is None else float(np.exp(train)),
            "test_ppl": None if test is None else float(np.exp(test)),
        })
    return rows


def public_threshold(name: str, view: TargetView, params: dict[str, Any]) -> float | None:
    """Watson et al.'s accuracy threshold (ICLR 2022, §4.1; docs/algorithms.md §12), chosen on
    public data only.

    A reference model plays the target (its own references exclude the real target); the
    threshold maximising accuracy on its members/non-members among non-audit, non-population,
    non-canary samples is returned. None when no reference has such samples or the attack
    cannot run on the smaller reference set.
    """
    for r in range(view.n_references):
        public = view.public & view.reference_available[r]  # r's rows that say nothing of
        known = view.reference_membership[r][public]       # the target's membership
        if known.all() or not known.any():
            continue
        shadow = view.as_shadow(r)
        try:
            scores = run_attack(name, shadow, **params).scores[public]
        except AttackError:
            return None
        finite = ~np.isnan(scores)
        if finite.sum() < 2 or known[finite].all() or not known[finite].any():
            continue
        return metrics.best_accuracy_threshold(scores[finite], known[finite])
    return None


def rows_threshold(rows: ThresholdRows) -> float | None:
    """Watson et al.'s accuracy threshold on an attack's own public rows (`ThresholdRows`:
    e.g. a scorer's held-out shadow rows, which `run_attack` checked lie on non-audit,
    non-population, non-canary samples). None when they hold no member or no non-member."""
    finite = ~np.isnan(rows.scores)
    scores, known = rows.scores[finite], rows.members[finite]
    if scores.size < 2 or known.all() or not known.any():
        return None
    return metrics.best_accuracy_threshold(scores, known)


def attack_threshold(
    result: AttackRun, view: TargetView, params: dict[str, Any]
) -> float | None:
    """The public-data threshold of an attack's run: on the rows it scored for it when it did
    (no second run), else `public_threshold` (the attack run again with a reference as
    target)."""
    if result.threshold_rows is not None:
        return rows_threshold(result.threshold_rows)
    return public_threshold(result.name, view, params)


@dataclass(frozen=True)
class EvaluationOptions:
    """How :func:`evaluate_attacks` scores and evaluates the attacks (the defaults: as
    ``miaudit attack`` does on a bare bank).

    ``params``: ``{attack: {param: value}}``; ``metrics``: the FPRs, bootstrap, confidence
    (default ``MetricsConfig()``); ``seed``: of the bootstrap and the bounds;
    ``train_seconds``: each model's recorded training seconds (an attack's cost counts those
    of the models it used), None when unknown; ``thresholds``: choose each attack's
    public-data threshold (balanced accuracy; off in studies that report none, which saves
    an attack run each); ``skip_unsupported``: list the attacks the bank cannot support in
    ``meta["skipped"]`` instead of failing; ``progress``: a bar over the attacks;
    ``target_privacy``: a DP-SGD target's privacy record (the claim the bounds audit);
    ``canaries``: the canary settings of the bounds on canaries; ``membership``: who drew the
    audit samples' membership ("miaudit", "user" or "unknown"); ``split_check``: the split
    check's record the caller ran on the audit rows
    (:mod:`miaudit.verdict.split_record`), or None."""

    params: Mapping[str, Mapping[str, Any]] | None = None
    metrics: MetricsConfig | None = None
    seed: int = 0
    train_seconds: Sequence[float] | None = None
    thresholds: bool = True
    skip_unsupported: bool = False
    progress: bool = True
    target_privacy: Mapping[str, Any] | None = None
    canaries: CanariesConfig | None = None
    membership: str = "unknown"
    split_check: SplitRecord | None = None


def evaluate_attacks(
    bank: SignalBank, target: int, attacks: Sequence[str],
    options: EvaluationOptions | None = None,
) -> AuditResult:
    """Score every attack for ``target`` and evaluate it on the bank's audit samples: the
    typed entry point of the pipeline, the studies' and the Python API's
    (``miaudit.api.evaluate_attacks``). ``options``: :class:`EvaluationOptions`.

    Each attack's metrics get its ε lower bounds (docs/algorithms.md §16): the threshold bound
    on the audit samples at the δ of ``target_privacy`` (else ``metrics.epsilon_delta``), and
    on a bank with canaries the one-run and threshold bounds on them (``canaries``: guesses,
    α, δ; default CanariesConfig()). ``meta["privacy_audit"]`` (a
    :class:`~miaudit.privacy.audit_record.PrivacyAudit`) names the best bound,
    Bonferroni-corrected over all of them, and what it says of the claim: ``membership`` is
    who drew the audit samples' membership (a threshold bound refutes a claim with a proof
    only when miaudit drew it at random; :func:`miaudit.privacy.audit_record.claim_finding`).
    A model-free attack (``blind``) gets no bound: it says nothing about the model.

    ``meta["checks"]``: ``split`` (the ``split_check`` option), ``target_fit``
    (:func:`target_fit`) and ``design`` (:func:`miaudit.pipeline.design_check.design_check`),
    which the verdict reads; a split that some model-free measurement tells apart withholds
    any refutation of the claim.
    """
    opts = options or EvaluationOptions()
    metric_cfg = opts.metrics or MetricsConfig()
    attacks = list(attacks)
    for name in attacks:
        get_attack(name)  # unknown names fail before any work
    attack_params = check_attack_params(opts.params)  # and so do their parameters
    view = TargetView.of(bank, target)
    assert bank.audit is not None  # SignalBank.__post_init__ sets it
    members = bank.membership[target][bank.audit]
    if members.all() or not members.any():
        raise AttackError(
            f"target {target} has {int(members.sum())} members among {members.size} audit "
            "samples; evaluation needs both members and non-members. Check the membership "
            "matrix and the audit mask."
        )
    plan = EpsilonPlan.of(bank, target, metric_cfg, opts.seed, opts.target_privacy,
                          opts.canaries, opts.membership)
    outcomes = []
    skipped: dict[str, str] = {}
    # No rate or time left: it would be redrawn only between attacks, so stale while a
    # scorer (whose own bar shows its epochs) trains.
    names = progress_bar(len(attacks), "attacks", "attack", enabled=opts.progress,
                         iterable=attacks,
                         bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}{postfix}")  # fmt: skip
    for name in names:
        names.set_postfix_str(name)  # which one is running: scorers take far longer than others
        spec = get_attack(name)
        if opts.skip_unsupported:
            try:
                spec.needs.check(view, name)
            except AttackError as exc:
                skipped[name] = str(exc)
                continue
        outcomes.append(_score(name, view, attack_params.get(name, {}), bank.audit, members,
                               plan, metric_cfg, opts.seed, opts.thresholds,
                               opts.train_seconds))
    settings = plan.settings(split_shifted(opts.split_check, outcomes, metric_cfg.confidence))
    return AuditResult(
        indices=np.nonzero(bank.audit)[0], members=members, outcomes=outcomes,
        meta={"target": target, "models": model_accuracies(bank), "skipped": skipped,
              "privacy_audit": privacy_audit(outcomes, settings),
              "checks": {"split": opts.split_check, "target_fit": target_fit(bank, target),
                         "design": design_check(view, members)}},
    )


def evaluate_bank(
    bank: SignalBank,
    target: int,
    attacks: list[str],
    attack_params: dict[str, dict[str, Any]] | None = None,
    metric_cfg: MetricsConfig | None = None,
    seed: int = 0,
    train_seconds: list[float] | None = None,
    thresholds: bool = True,
    skip_unsupported: bool = False,
    progress: bool = True,
    *,
    target_privacy: dict[str, Any] | None = None,
    canaries: CanariesConfig | None = None,
    membership: str = "unknown",
    split_check: SplitRecord | None = None,
) -> AuditResult:
    """:func:`evaluate_attacks` with its options as keyword arguments (the older spelling,
    kept for callers and tests written against it); the arguments are
    :class:`EvaluationOptions`' fields (``attack_params``: ``params``, ``metric_cfg``:
    ``metrics``)."""
    return evaluate_attacks(bank, target, attacks, EvaluationOptions(
        params=attack_params, metrics=metric_cfg, seed=seed, train_seconds=train_seconds,
        thresholds=thresholds, skip_unsupported=skip_unsupported, progress=progress,
        target_privacy=target_privacy, canaries=canaries, membership=membership,
        split_check=split_check))


def _score(name: str, view: TargetView, params: dict[str, Any], audit: np.ndarray,
           members: np.ndarray, plan: EpsilonPlan, metric_cfg: MetricsConfig, seed: int,
           thresholds: bool, train_seconds: Sequence[float] | None) -> AttackOutcome:
    """One attack on ``view``: its scores on the ``audit`` samples, evaluated against
    ``members`` (the target's membership there, which the attack never sees), with its ε
    bounds and its cost."""
    spec = get_attack(name)
    result = run_attack(name, view, **params)
    scores = result.scores[audit]
    started = time.perf_counter()
    threshold = attack_threshold(result, view, params) if thresholds else None
    threshold_seconds = time.perf_counter() - started
    metric = AttackMetrics.from_dict(metrics.evaluate(
        scores, members, fprs=metric_cfg.fprs, n_bootstrap=metric_cfg.bootstrap,
        confidence=metric_cfg.confidence, seed=seed, threshold=threshold,
        recalls=metric_cfg.recalls,
    )).with_bounds(plan.no_bounds(MODEL_FREE_REASON) if spec.model_free
                   else plan.bounds(result.scores))
    uses_references = any(
        (spec.needs.out_references, spec.needs.in_references, spec.needs.shadows)
    )
    used = [] if spec.model_free else (
        [view.target] + (list(view.reference_ids) if uses_references else []))
    cost = AttackCost(
        models=len(used),
        queries_per_sample=round(spec.queries_per_sample(view), 1),
        score_seconds=round(result.seconds, 4),
        # the attack run again with a reference as target, unless it scored public rows
        # of its own (a scorer's held-out shadow rows): then ~0
        threshold_seconds=round(threshold_seconds, 4) if thresholds else None,
        train_seconds=(None if train_seconds is None else
                       round(float(sum(train_seconds[m] for m in used)), 2)),
    )
    return AttackOutcome(name=name, scores=scores, metrics=metric, cost=cost)
