"""The audit pipeline: dataset -> protocol -> training -> signal bank -> attacks -> metrics.

`build_bank` trains (or loads from the content-addressed cache) every model the design needs
and queries them into a bank; `evaluate_bank` scores attacks on it. Neither writes the report;
`run` does both and writes everything into the run directory.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from miaudit import metrics
from miaudit.attacks import TargetView, get_attack, run_attack
from miaudit.config import MetricsConfig, RunConfig, dump_config
from miaudit.data import Dataset, load_dataset
from miaudit.errors import AttackError, ConfigError
from miaudit.io import StagedRunDir, write_text
from miaudit.pipeline_models import forgetting_models, resolve_recipes, train_design
from miaudit.progress import progress_bar
from miaudit.protocol import Design, make_design, make_split
from miaudit.report import format_table, write_report
from miaudit.report.plots import calibration_figure
from miaudit.results import AttackOutcome, AuditResult
from miaudit.signals import SignalBank
from miaudit.signals.boundary import boundary_channels
from miaudit.signals.defences import apply_defence
from miaudit.signals.query import augmented_queries, per_sample_grad_norms, query_logits
from miaudit.train import ModelCache, TrainedModel


def default_queries(kind: str, attacks: list[str]) -> list[str]:
    """Queries of a run that does not list them: plain for tabular data; for images, the
    largest number of augmented queries any of the run's attacks' papers makes (plain and
    mirror; 8 with RAPID: plain, mirror and 6 crop + flip draws)."""
    if kind != "image":
        return ["plain"]
    return augmented_queries(max([get_attack(a).image_queries for a in attacks] + [2]))


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device '{name}' asked for, but no CUDA device is available here.")
    return name


def default_cache_dir() -> Path:
    env = os.environ.get("MIAUDIT_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "miaudit" / "models"


@dataclass
class BuiltBank:
    """A bank with the models behind it and how they were obtained."""

    bank: SignalBank
    design: Design
    dataset: Dataset
    models: list[TrainedModel]
    queries: list[str]
    trained: int = 0
    reused: int = 0
    forgetting: list[TrainedModel] = field(default_factory=list)
    forgetting_bank: SignalBank | None = None  # the target + its forgetting copies
    info: dict[str, Any] = field(default_factory=dict)


def build_bank(cfg: RunConfig, progress: bool = True) -> BuiltBank:
    """Train or load every model of the design and query them into a bank."""
    device = resolve_device(cfg.device)
    dataset = load_dataset(cfg.dataset.name, cfg.dataset.data_dir, **cfg.dataset.options)
    split = make_split(
        len(dataset), cfg.split.audit, cfg.split.public, cfg.split.population, cfg.seed
    )
    design = make_design(split, cfg.models, cfg.design, cfg.seed, cfg.target, cfg.split.members)
    cache = ModelCache(Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir())
    start = time.perf_counter()
    models = train_design(cfg, dataset, design, cache, device, progress)
    copies = forgetting_models(cfg, dataset, design, models[design.target], cache, device)
    train_wall = time.perf_counter() - start
    queries = cfg.signals.queries or default_queries(dataset.kind, cfg.attacks)
    start = time.perf_counter()
    bank, forgetting_bank = query_bank(cfg, dataset, design, models, copies, queries, device,
                                       progress)  # fmt: skip
    return BuiltBank(
        bank=bank, design=design, dataset=dataset, models=models, queries=list(queries),
        trained=cache.stats.misses, reused=cache.stats.hits, forgetting=copies,
        forgetting_bank=forgetting_bank,
        info={"query_seconds": time.perf_counter() - start, "device": device,
              "train_wall_seconds": train_wall},
    )


def query_bank(
    cfg: RunConfig, dataset: Dataset, design: Design, models: list[TrainedModel],
    copies: list[TrainedModel], queries: list[str], device: str, progress: bool,
) -> tuple[SignalBank, SignalBank | None]:  # fmt: skip
    """Query the design's ``models`` (and forgetting ``copies``) on every sample of the split:
    the bank, and the forgetting bank (None without copies)."""
    rows = design.split.rows
    everyone = models + copies
    logits = query_logits(
        [tm.module for tm in everyone], dataset.features, rows, queries, dataset.kind, device,
        cfg.signals.batch_size, progress,
    )
    # The attacker sees the defended outputs; white-box channels come from the model itself.
    logits = apply_defence(logits, cfg.signals.defence)
    channels = {}
    if cfg.signals.boundary_distance:
        channels.update(boundary_channels(
            [tm.module for tm in everyone], dataset.features, dataset.labels, rows,
            seed=cfg.seed, device=device,
        ))
    if cfg.signals.grad_norm:
        channels["grad_norm"] = np.stack(
            [per_sample_grad_norms(tm.module, dataset.features, dataset.labels, rows, device)
             for tm in everyone]
        )
    n = design.n_models
    bank = SignalBank(
        logits=logits[:n],
        labels=dataset.labels[rows],
        membership=design.membership,
        population=design.population_mask(),
        audit=design.audit_mask(),
        channels={k: v[:n] for k, v in channels.items()},
    )
    forgetting_bank = None
    if copies:
        # target first, then its copies: OUT for every audit sample, IN on the public pool
        public = ~design.audit_mask() & ~design.population_mask()
        forgetting_bank = SignalBank(
            logits=np.concatenate([logits[[design.target]], logits[n:]]),
            labels=bank.labels,
            membership=np.vstack([design.membership[[design.target]],
                                  np.repeat(public[None], len(copies), axis=0)]),
            population=bank.population,
            audit=bank.audit,
            channels={k: np.concatenate([v[[design.target]], v[n:]])
                      for k, v in channels.items()},
        )
    return bank, forgetting_bank


def model_accuracies(bank: SignalBank) -> list[dict[str, Any]]:
    """Each model's train accuracy (on its members) and test accuracy (on the bank samples it
    did not train on, population included), from query 0 of the bank."""
    correct = bank.logits[:, :, 0, :].argmax(axis=-1) == bank.labels[None, :]
    rows = []
    for m in range(bank.n_models):
        members = bank.membership[m]
        rows.append({
            "model": m,
            "n_train": int(members.sum()),
            "train_acc": float(correct[m, members].mean()) if members.any() else None,
            "test_acc": float(correct[m, ~members].mean()) if (~members).any() else None,
        })
    return rows


def public_threshold(name: str, view: TargetView, params: dict[str, Any]) -> float | None:
    """Watson's accuracy threshold, chosen on public data only.

    A reference model plays the target (its own references exclude the real target); the
    threshold maximising accuracy on its members/non-members among non-audit, non-population
    samples is returned. None when no reference has such samples or the attack cannot run on
    the smaller reference set.
    """
    public = ~view.audit & ~view.population
    for r in range(view.n_references):
        known = view.reference_membership[r][public]
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
) -> AuditResult:
    """Score every attack for `target` and evaluate it on the bank's audit samples.

    With `skip_unsupported`, attacks the bank cannot support (no references, no channel, ...)
    are listed in `meta["skipped"]` with the reason instead of failing the whole run.
    `progress`: a bar over the attacks, naming the one running (see :mod:`miaudit.progress`).
    """
    metric_cfg = metric_cfg or MetricsConfig()
    attack_params = attack_params or {}
    for name in attacks:
        get_attack(name)  # unknown names fail before any work
    view = TargetView.of(bank, target)
    members = bank.membership[target][bank.audit]
    if members.all() or not members.any():
        raise AttackError(
            f"target {target} has {int(members.sum())} members among {members.size} audit "
            "samples; evaluation needs both members and non-members. Check the membership "
            "matrix and the audit mask."
        )
    outcomes = []
    skipped: dict[str, str] = {}
    # No rate or time left: it would be redrawn only between attacks, so stale while a
    # scorer (whose own bar shows its epochs) trains.
    names = progress_bar(len(attacks), "attacks", "attack", enabled=progress, iterable=attacks,
                         bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}{postfix}")  # fmt: skip
    for name in names:
        names.set_postfix_str(name)  # which one is running: scorers take far longer than others
        spec = get_attack(name)
        params = attack_params.get(name, {})
        if skip_unsupported:
            try:
                spec.needs.check(view, name)
            except AttackError as exc:
                skipped[name] = str(exc)
                continue
        result = run_attack(name, view, **params)
        scores = result.scores[bank.audit]
        started = time.perf_counter()
        threshold = public_threshold(name, view, params) if thresholds else None
        threshold_seconds = time.perf_counter() - started
        metric = metrics.evaluate(
            scores, members, fprs=metric_cfg.fprs, n_bootstrap=metric_cfg.bootstrap,
            confidence=metric_cfg.confidence, seed=seed, threshold=threshold,
            recalls=metric_cfg.recalls,
        )
        uses_references = any(
            (spec.needs.out_references, spec.needs.in_references, spec.needs.shadows)
        )
        used = [target] + (list(view.reference_ids) if uses_references else [])
        cost = {
            "models": len(used),
            "queries_per_sample": round(spec.queries_per_sample(view), 1),
            "score_seconds": round(result.seconds, 4),
        }
        if thresholds:  # the attack run again with a reference as target (scorers retrain)
            cost["threshold_seconds"] = round(threshold_seconds, 4)
        if train_seconds is not None:
            cost["train_seconds"] = round(float(sum(train_seconds[m] for m in used)), 2)
        outcomes.append(AttackOutcome(name=name, scores=scores, metrics=metric, cost=cost))
    return AuditResult(
        indices=np.nonzero(bank.audit)[0], members=members, outcomes=outcomes,
        meta={"target": target, "models": model_accuracies(bank), "skipped": skipped},
    )


def run_dir_for(cfg: RunConfig) -> Path:
    return Path(cfg.output) if cfg.output else Path("runs") / cfg.name


def _forgetting_outcomes(cfg: RunConfig, built: BuiltBank) -> list[AttackOutcome]:
    """The calibration attacks again, with the forgetting copies as their references;
    reported as `<attack>.forgetting`."""
    names = [a for a in cfg.attacks if get_attack(a).family == "calibration"]
    if built.forgetting_bank is None or not names:
        return []
    seconds = [built.models[built.design.target].train_seconds]
    seconds += [tm.train_seconds for tm in built.forgetting]
    result = evaluate_bank(
        built.forgetting_bank, 0, names, cfg.attack_params, cfg.metrics, cfg.seed,
        train_seconds=seconds, skip_unsupported=True,
    )
    for outcome in result.outcomes:
        outcome.name = f"{outcome.name}.forgetting"
    return result.outcomes


def run(cfg: RunConfig, progress: bool = True, echo: bool = True) -> tuple[AuditResult, Path]:
    """The whole audit; writes config.yaml, bank.npz and the report into the run directory.

    The config is checked before any work; everything is written into a staging folder that
    replaces the previous run's files only when this run succeeds (io.StagedRunDir), so a
    failing or interrupted run leaves the previous one intact."""
    for name in cfg.attacks:
        get_attack(name)
    resolve_recipes(cfg)  # a bad recipe field fails before the dataset loads
    out = run_dir_for(cfg)
    with StagedRunDir(out) as stage:
        result, checkpoints = _run_into(cfg, stage, progress)
    if echo:
        from miaudit.pipeline_checkpoints import markdown_table

        print(format_table(result))
        if checkpoints:
            print("\ncheckpoints (target and references at the same position):\n"
                  + markdown_table(checkpoints, cfg.metrics.fprs))
        print(f"\nreport: {out / 'report.html'}")
    return result, out


def _run_into(
    cfg: RunConfig, out: Path, progress: bool
) -> tuple[AuditResult, list[dict[str, Any]] | None]:
    """The work of `run`, written into `out` (the staging folder); the result and the
    checkpoint rows (None without checkpoints)."""
    write_text(out / "config.yaml", dump_config(cfg))
    start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    built = build_bank(cfg, progress)
    built.bank.save(out / "bank.npz")
    result = evaluate_bank(
        built.bank, built.design.target, cfg.attacks, cfg.attack_params, cfg.metrics, cfg.seed,
        train_seconds=[tm.train_seconds for tm in built.models], progress=progress,
    )
    result.outcomes += _forgetting_outcomes(cfg, built)
    result.meta.update({
        "recipes": resolve_recipes(cfg).describe(),
        "run": cfg.name,
        "seed": cfg.seed,
        "dataset": built.dataset.name,
        "dataset_source": built.dataset.source,
        "dataset_notes": built.dataset.notes,
        "design": cfg.design,
        "n_models": built.design.n_models,
        "forgetting_models": len(built.forgetting),
        "queries": ", ".join(built.queries),
        "audit_samples": int(built.bank.audit.sum()),
        "models_trained": built.trained,
        "models_from_cache": built.reused,
        "train_wall_seconds": round(built.info["train_wall_seconds"], 1),
        # what training them took originally (cached models keep their recorded seconds)
        "train_seconds_original": round(
            sum(tm.train_seconds for tm in [*built.models, *built.forgetting]), 1),
        "target_privacy": getattr(built.models[built.design.target], "privacy", None),
        "device": built.info["device"],
        "seconds": round(time.perf_counter() - start, 1),
        "config": cfg.to_dict(),
    })
    checkpoints = None
    if built.models[built.design.target].checkpoints:
        from miaudit.pipeline_checkpoints import audit_checkpoints

        checkpoints = audit_checkpoints(cfg, built, result, out, progress)
        result.meta["checkpoints"] = checkpoints
    if built.design.notes:  # e.g. references trained on fewer rows than the target
        result.meta["warnings"] = [*(result.meta.get("warnings") or []), *built.design.notes]
    result.rows = built.design.split.rows[result.indices]  # the report names dataset rows
    figure = calibration_figure(result)
    written = ["config.yaml", "bank.npz"]
    if checkpoints:
        written += ["checkpoints.json", "checkpoints.md", "checkpoints"]
    write_report(result, out, extra_figures={"calibration": figure} if figure else None,
                 run_files=written)
    return result, checkpoints
