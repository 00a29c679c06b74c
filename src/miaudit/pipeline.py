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
from miaudit.io import write_text
from miaudit.protocol import Design, make_design, make_split
from miaudit.report import format_table, write_report
from miaudit.results import AttackOutcome, AuditResult
from miaudit.signals import SignalBank
from miaudit.signals.query import per_sample_grad_norms, query_logits
from miaudit.train import ModelCache, Recipe, TrainedModel

# Attacks that read only query 0 of the target (the rest average over all queries).
_SINGLE_QUERY = {"correctness", "gradient-norm"}


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
    info: dict[str, Any] = field(default_factory=dict)


def _recipes(cfg: RunConfig) -> tuple[Recipe, Recipe]:
    target = Recipe.from_dict(cfg.recipe)
    reference = target if cfg.reference_recipe is None else Recipe.from_dict(cfg.reference_recipe)
    return target, reference


def build_bank(cfg: RunConfig, progress: bool = True) -> BuiltBank:
    """Train or load every model of the design and query them into a bank."""
    device = resolve_device(cfg.device)
    dataset = load_dataset(cfg.dataset.name, cfg.dataset.data_dir, **cfg.dataset.options)
    split = make_split(
        len(dataset), cfg.split.audit, cfg.split.public, cfg.split.population, cfg.seed
    )
    design = make_design(split, cfg.models, cfg.design, cfg.seed, cfg.target)
    target_recipe, reference_recipe = _recipes(cfg)
    cache = ModelCache(Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir())
    models = []
    for m in range(design.n_models):
        recipe = target_recipe if m == design.target else reference_recipe
        role = "target" if m == design.target else f"model {m}"
        models.append(
            cache.get_or_train(
                dataset.fingerprint(),
                design.training_rows(m),
                recipe,
                seed=cfg.seed * 10_000 + m,
                device=device,
                features=dataset.features,
                labels=dataset.labels,
                num_classes=dataset.num_classes,
                progress=progress,
                desc=f"training {role} ({m + 1}/{design.n_models})",
            )
        )
    rows = split.rows
    queries = cfg.signals.queries or (["plain", "mirror"] if dataset.kind == "image" else ["plain"])
    start = time.perf_counter()
    logits = query_logits(
        [tm.module for tm in models], dataset.features, rows, queries, dataset.kind, device,
        cfg.signals.batch_size, progress,
    )
    channels = {}
    if cfg.signals.grad_norm:
        channels["grad_norm"] = np.stack(
            [per_sample_grad_norms(tm.module, dataset.features, dataset.labels, rows, device)
             for tm in models]
        )
    bank = SignalBank(
        logits=logits,
        labels=dataset.labels[rows],
        membership=design.membership,
        population=design.population_mask(),
        audit=design.audit_mask(),
        channels=channels,
    )
    return BuiltBank(
        bank=bank, design=design, dataset=dataset, models=models, queries=list(queries),
        trained=cache.stats.misses, reused=cache.stats.hits,
        info={"query_seconds": time.perf_counter() - start, "device": device},
    )


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
) -> AuditResult:
    """Score every attack for `target` and evaluate it on the bank's audit samples.

    With `skip_unsupported`, attacks the bank cannot support (no references, no channel, ...)
    are listed in `meta["skipped"]` with the reason instead of failing the whole run.
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
    for name in attacks:
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
        threshold = public_threshold(name, view, params) if thresholds else None
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
            "queries_per_sample": 1 if name in _SINGLE_QUERY else bank.n_queries,
            "score_seconds": round(result.seconds, 4),
        }
        if train_seconds is not None:
            cost["train_seconds"] = round(float(sum(train_seconds[m] for m in used)), 2)
        outcomes.append(AttackOutcome(name=name, scores=scores, metrics=metric, cost=cost))
    return AuditResult(
        indices=np.nonzero(bank.audit)[0], members=members, outcomes=outcomes,
        meta={"target": target, "models": model_accuracies(bank), "skipped": skipped},
    )


def run_dir_for(cfg: RunConfig) -> Path:
    return Path(cfg.output) if cfg.output else Path("runs") / cfg.name


def run(cfg: RunConfig, progress: bool = True, echo: bool = True) -> tuple[AuditResult, Path]:
    """The whole audit; writes config.yaml, bank.npz and the report into the run directory."""
    for name in cfg.attacks:
        get_attack(name)
    out = run_dir_for(cfg)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "config.yaml", dump_config(cfg))
    start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    built = build_bank(cfg, progress)
    built.bank.save(out / "bank.npz")
    result = evaluate_bank(
        built.bank, built.design.target, cfg.attacks, cfg.attack_params, cfg.metrics, cfg.seed,
        train_seconds=[tm.train_seconds for tm in built.models],
    )
    result.meta.update({
        "run": cfg.name,
        "seed": cfg.seed,
        "dataset": built.dataset.name,
        "dataset_source": built.dataset.source,
        "dataset_notes": built.dataset.notes,
        "design": cfg.design,
        "n_models": built.design.n_models,
        "queries": ", ".join(built.queries),
        "audit_samples": int(built.bank.audit.sum()),
        "models_trained": built.trained,
        "models_from_cache": built.reused,
        "device": built.info["device"],
        "seconds": round(time.perf_counter() - start, 1),
        "config": cfg.to_dict(),
    })
    write_report(result, out)
    if echo:
        print(format_table(result))
        print(f"\nreport: {out / 'report.html'}")
    return result, out
