"""A whole run: config checked, bank built, attacks evaluated, checkpoints audited, report
written, all into a staging folder that becomes the run directory only on success."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import torch

from miaudit.attacks import get_attack
from miaudit.attacks.registry import check_attack_params
from miaudit.config import (
    RunConfig,
    check_attacks_fit,
    compute_section,
    dump_config,
    identity_config,
)
from miaudit.config.plan import dataset_kind
from miaudit.io import write_text
from miaudit.pipeline.canaries import (
    canaries_csv,
    check_canaries,
    exposure_line,
    exposure_summary,
)
from miaudit.pipeline.checkpoint_audit import audit_checkpoints, checkpoints_table
from miaudit.pipeline.evaluate import evaluate_bank
from miaudit.pipeline.models import check_labels, resolve_recipes
from miaudit.pipeline.querying import BuiltBank, build_bank
from miaudit.privacy.best_bound import privacy_audit
from miaudit.privacy.white_box import gradient_canaries_csv, white_box_audit
from miaudit.records.outcomes import AttackOutcome, AuditResult
from miaudit.records.run_dir import StagedRunDir, check_run_name
from miaudit.report import format_table, write_report
from miaudit.report.plots import calibration_figure
from miaudit.train.cluster import write_training_document
from miaudit.verdict.split_check import split_check


def run_dir_for(cfg: RunConfig) -> Path:
    check_run_name(cfg.name)  # a RunConfig built in Python skipped its _check
    return Path(cfg.output) if cfg.output else Path("runs") / cfg.name


def _forgetting_outcomes(cfg: RunConfig, built: BuiltBank) -> list[AttackOutcome]:
    """The calibration attacks again, with the forgetting copies as their references;
    reported as `<attack>.forgetting`."""
    names = [a for a in cfg.attacks if get_attack(a).family == "calibration"]
    if built.forgetting_bank is None or not names:
        return []
    target = built.models[built.design.target]
    seconds = [target.train_seconds, *(tm.train_seconds for tm in built.forgetting)]
    result = evaluate_bank(
        built.forgetting_bank, 0, names, cfg.attack_params, cfg.metrics, cfg.seed,
        train_seconds=seconds, skip_unsupported=True, target_privacy=target.privacy,
        canaries=cfg.canaries, membership="miaudit",
    )
    return [dataclasses.replace(o, name=f"{o.name}.forgetting") for o in result.outcomes]


def _split_check(cfg: RunConfig, built: BuiltBank) -> dict[str, Any] | None:
    """The model-free split check on the target's audit samples: miaudit drew their membership
    at random, so it should find nothing (a check of the design, and the baseline the verdict
    compares attacks with). None when the config turns it off."""
    if not cfg.metrics.split_check:
        return None
    bank = built.bank
    assert bank is not None and bank.audit is not None  # build_bank queried the models
    rows = built.design.split.rows[bank.audit]  # dataset rows of the audit samples
    members = bank.membership[built.design.target][bank.audit]
    texts = None if built.texts is None else built.texts[rows]
    source = built.original or built.dataset  # the values before canaries relabelled any
    # texts without labels (a causal LM's): the texts alone, no label feature
    labels = source.labels[rows] if source.labelled else None
    return split_check(members, features=None if texts is not None else source.features[rows],
                       labels=labels, texts=texts, metric_cfg=cfg.metrics, seed=cfg.seed)


def _check_attacks_fit(cfg: RunConfig) -> None:
    """Every attack listed can run on the bank the run will build (config.check_attacks_fit),
    before any model trains: planned from the config, and for a dataset whose kind only
    loading tells (a user's .npz: images or a table) again with the kind it loads as. And a
    classifier recipe on a user's text file, which loads unlabelled without a label column,
    is refused here, before any work (pipeline.models.check_labels)."""
    check_attacks_fit(cfg)
    kind = dataset_kind(cfg.dataset.name, cfg.dataset.options, cfg.data_dir)
    if kind is None or (kind == "text" and _classifier_on_a_file(cfg)):
        from miaudit.data import load_dataset

        loaded = load_dataset(cfg.dataset.name, cfg.data_dir, **cfg.dataset.options)
        check_attacks_fit(cfg, loaded.kind)
        check_labels(cfg, loaded)


def _classifier_on_a_file(cfg: RunConfig) -> bool:
    """Whether a recipe of the run is a classifier and its dataset a user's file (a registry
    dataset always has labels)."""
    from miaudit.data import list_datasets
    from miaudit.models.text import CAUSAL_LM_ARCHITECTURES

    recipes = resolve_recipes(cfg)
    if all(r.architecture in CAUSAL_LM_ARCHITECTURES for r in (recipes.target,
                                                                recipes.reference)):
        return False
    return cfg.dataset.name not in {info.name for info in list_datasets(cfg.data_dir)}


def run(
    cfg: RunConfig, progress: bool = True, echo: bool = True, overwrite: bool = False
) -> tuple[AuditResult, Path]:
    """The whole audit; writes config.yaml, training.json, bank.npz and the report into the
    run directory.

    The config is checked before any work; everything is written into a staging folder that
    replaces the previous run's files only when this run succeeds (io.StagedRunDir), so a
    failing or interrupted run leaves the previous one intact."""
    for name in cfg.attacks:
        get_attack(name)
    check_attack_params(cfg.attack_params)  # a RunConfig built in Python skipped its _check
    resolve_recipes(cfg)  # a bad recipe field fails before the dataset loads
    _check_attacks_fit(cfg)  # an attack the bank could not support fails before training
    check_canaries(cfg)  # so do canaries that could never certify ε > 0
    cfg.compute = compute_section(cfg.compute)  # and a bad compute section
    out = run_dir_for(cfg)
    with StagedRunDir(out, command="run", name=cfg.name, config=identity_config(cfg.to_dict()),
                      defaults=identity_config(RunConfig().to_dict()),
                      overwrite=overwrite) as stage:
        result, checkpoints = _run_into(cfg, stage, progress)
    if echo:
        print(format_table(result))
        if checkpoints:
            print("\ncheckpoints (target and references at the same position):\n"
                  + checkpoints_table(checkpoints, cfg.metrics.fprs))
        if result.meta.get("canary_exposure"):
            print("\n" + exposure_line(result.meta["canary_exposure"]))
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
    assert built.bank is not None and built.bank.audit is not None  # query=True: a bank
    # where each of the design's models came from: a node of the Ray cluster, this machine
    # ("local") or the cache
    write_training_document(out, built.models)
    built.bank.save(out / "bank.npz")
    target = built.models[built.design.target]
    result = evaluate_bank(
        built.bank, built.design.target, cfg.attacks, cfg.attack_params, cfg.metrics, cfg.seed,
        train_seconds=[tm.train_seconds for tm in built.models], progress=progress,
        target_privacy=target.privacy, canaries=cfg.canaries, membership="miaudit",
        split_check=_split_check(cfg, built),
    )
    result.outcomes += _forgetting_outcomes(cfg, built)
    # the best bound again, over the forgetting outcomes' bounds too (Bonferroni over all)
    audit = privacy_audit(result.outcomes, result.meta["privacy_audit"])
    written = ["config.yaml", "bank.npz", "training.json"]
    if built.design.split.canaries.size:
        audit = audit.with_canary_kind(cfg.canaries.kind)
        write_text(out / "canaries.csv",
                   canaries_csv(built.design, built.dataset, built.original or built.dataset,
                                built.info.get("canary_secrets")))
        written.append("canaries.csv")
        if built.info.get("canary_secrets"):
            result.meta["canary_exposure"] = exposure_summary(
                built.info["canary_secrets"], built.design.canary_included())
    record = built.gradient_canaries
    if record is not None:  # white-box families of their own, beside the black-box ones
        audit = dataclasses.replace(audit, white_box=white_box_audit(
            record, cfg.canaries, audit.settings))
        write_text(out / "gradient_canaries.csv", gradient_canaries_csv(record, cfg.canaries))
        written.append("gradient_canaries.csv")
    result.meta["privacy_audit"] = audit
    result.meta.update({
        "recipes": resolve_recipes(cfg).describe(),
        "run": cfg.name,
        "seed": cfg.seed,
        "dataset": built.dataset.name,
        "dataset_source": built.dataset.source,
        "dataset_notes": built.dataset.notes,
        "dataset_preprocessing": built.dataset.preprocessing,
        "dataset_labels": "labelled" if built.dataset.labelled else "unlabelled",
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
        "target_privacy": getattr(target, "privacy", None),
        "device": built.info["device"],
        "seconds": round(time.perf_counter() - start, 1),
        "config": cfg.to_dict(),
    })
    checkpoints = None
    if built.models[built.design.target].checkpoints:
        checkpoints = audit_checkpoints(cfg, built, result, out, progress)
        result.meta["checkpoints"] = checkpoints
    notes = [*built.design.notes, *built.info.get("notes", [])]
    if notes:  # e.g. references trained on fewer rows than the target, texts cut
        result.meta["warnings"] = [*(result.meta.get("warnings") or []), *notes]
    result.rows = built.design.split.rows[result.indices]  # the report names dataset rows
    figure = calibration_figure(result)
    if checkpoints:
        written += ["checkpoints.json", "checkpoints.md", "checkpoints"]
    write_report(result, out, extra_figures={"calibration": figure} if figure else None,
                 run_files=written)
    return result, checkpoints
