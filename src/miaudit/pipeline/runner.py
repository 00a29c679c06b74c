"""`miaudit run`: the models of a config's design trained (or loaded from the model cache) by
miaudit, as the source of a run (:class:`RunSource`); the shared steps (run folder, split
check, evaluation, verdict, report) are :mod:`miaudit.pipeline.orchestrator`'s."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from miaudit.attacks import get_attack
from miaudit.config import (
    RunConfig,
    check_attacks_fit,
    compute_section,
    dump_config,
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
from miaudit.pipeline.evaluate import EvaluationOptions, evaluate_attacks
from miaudit.pipeline.models import Recipes, check_labels, resolve_recipes
from miaudit.pipeline.orchestrator import (
    Obtained,
    RunPlan,
    SplitRows,
    Written,
    check_attacks,
    orchestrate,
    run_folder,
)
from miaudit.pipeline.querying import BuiltBank, build_bank
from miaudit.privacy.best_bound import privacy_audit
from miaudit.privacy.white_box import gradient_canaries_csv, white_box_audit
from miaudit.records.outcomes import AttackOutcome, AuditResult
from miaudit.records.run_meta import DatasetFacts, RunMeta
from miaudit.report.plots import calibration_figure
from miaudit.verdict.records import ReleaseVerdict

# what an attacker sees of a classifier miaudit trained (the verdict's words)
_OUTPUTS = "outputs (logits or probabilities)"


def run_dir_for(cfg: RunConfig) -> Path:
    """The run folder of ``cfg``: ``output``, else ``runs/<name>``."""
    return run_folder(cfg.name, cfg.output)


def _forgetting_outcomes(cfg: RunConfig, built: BuiltBank) -> list[AttackOutcome]:
    """The calibration attacks again, with the forgetting copies as their references;
    reported as `<attack>.forgetting`."""
    names = [a for a in cfg.attacks if get_attack(a).family == "calibration"]
    if built.forgetting_bank is None or not names:
        return []
    target = built.models[built.design.target]
    seconds = [target.train_seconds, *(tm.train_seconds for tm in built.forgetting)]
    result = evaluate_attacks(built.forgetting_bank, 0, names, EvaluationOptions(
        params=cfg.attack_params, metrics=cfg.metrics, seed=cfg.seed, train_seconds=seconds,
        skip_unsupported=True, target_privacy=target.privacy, canaries=cfg.canaries,
        membership="miaudit"))
    return [dataclasses.replace(o, name=f"{o.name}.forgetting") for o in result.outcomes]


def _split_rows(built: BuiltBank) -> SplitRows:
    """The target's audit samples as the model-free split check reads them: miaudit drew
    their membership at random, so it should find nothing (a check of the design, and the
    baseline the verdict compares attacks with)."""
    bank = built.bank
    assert bank is not None and bank.audit is not None  # build_bank queried the models
    rows = built.design.split.rows[bank.audit]  # dataset rows of the audit samples
    members = bank.membership[built.design.target][bank.audit]
    texts = None if built.texts is None else built.texts[rows]
    source = built.original or built.dataset  # the values before canaries relabelled any
    # texts without labels (a causal LM's): the texts alone, no label feature
    labels = source.labels[rows] if source.labelled else None
    return SplitRows(members, features=None if texts is not None else source.features[rows],
                     labels=labels, texts=texts)


def _check_attacks_fit(cfg: RunConfig, recipes: Recipes) -> None:
    """Every attack listed can run on the bank the run will build (config.check_attacks_fit),
    before any model trains: planned from the config, and for a dataset whose kind only
    loading tells (a user's .npz: images or a table) again with the kind it loads as. And a
    classifier recipe on a user's text file, which loads unlabelled without a label column,
    is refused here, before any work (pipeline.models.check_labels)."""
    check_attacks_fit(cfg, recipes=recipes)
    kind = dataset_kind(cfg.dataset.name, cfg.dataset.options, cfg.data_dir)
    if kind is None or (kind == "text" and _classifier_on_a_file(cfg, recipes)):
        from miaudit.data import load_dataset

        loaded = load_dataset(cfg.dataset.name, cfg.data_dir, **cfg.dataset.options)
        check_attacks_fit(cfg, loaded.kind, recipes)
        check_labels(recipes, loaded)


def _classifier_on_a_file(cfg: RunConfig, recipes: Recipes) -> bool:
    """Whether a recipe of the run is a classifier and its dataset a user's file (a registry
    dataset always has labels)."""
    from miaudit.data import list_datasets
    from miaudit.models.text import CAUSAL_LM_ARCHITECTURES

    if all(r.architecture in CAUSAL_LM_ARCHITECTURES for r in (recipes.target,
                                                                recipes.reference)):
        return False
    return cfg.dataset.name not in {info.name for info in list_datasets(cfg.data_dir)}


def _reference_note(recipes: Recipes, n: int) -> str:
    """How the run's reference models were made, for the verdict's caveats."""
    if n == 0:
        return ("No reference models (the design has the target alone); only attacks on the "
                "target's own outputs ran. Reference-based attacks are usually far stronger at "
                "low FPR, so these figures likely understate the leak.")
    source = recipes.reference_source
    if source == "target":
        return (f"The {n} reference models were trained by this run with the target's own "
                "recipe, on rows drawn like its own: the attacks know how the model was "
                "trained, as an informed attacker would.")
    return (f"The {n} reference models were trained with another recipe than the target's "
            f"(reference_recipe: {source}); reference-based attacks are then weaker than an "
            "attacker's who knows how the model was trained.")


class RunSource:
    """`miaudit run`'s models (:class:`~miaudit.pipeline.orchestrator.ModelSource`): every
    model of the config's design trained here or loaded from the model cache, the target
    among them; the run's own steps: calibration-via-forgetting outcomes, canaries (the
    one-run bounds, canaries.csv, the secret canaries' exposure), white-box gradient canaries
    and the checkpoints' audits."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.recipes: Recipes | None = None  # resolved once, by plan(), for every step
        self.built: BuiltBank | None = None
        self.checkpoints: list[dict[str, Any]] | None = None

    def plan(self) -> RunPlan:
        cfg = self.cfg
        check_attacks(cfg.attacks, cfg.attack_params)
        # a bad recipe field fails before the dataset loads
        recipes = self.recipes = resolve_recipes(cfg)
        _check_attacks_fit(cfg, recipes)  # an attack the bank could not support: before training
        check_canaries(cfg, recipes)  # so do canaries that could never certify ε > 0
        cfg.compute = compute_section(cfg.compute)  # and a bad compute section
        return RunPlan.of("run", cfg, RunConfig(), "config.yaml", dump_config(cfg))

    def obtain(self, progress: bool) -> Obtained:
        cfg, recipes = self.cfg, self.recipes
        assert recipes is not None  # plan ran
        built = self.built = build_bank(cfg, progress, recipes=recipes)
        bank = built.bank
        assert bank is not None and bank.audit is not None  # query=True: a bank
        target = built.models[built.design.target]
        n_references = bank.n_models - 1
        return Obtained(
            bank=bank, target=built.design.target, attacks=list(cfg.attacks),
            options=EvaluationOptions(
                params=cfg.attack_params, metrics=cfg.metrics, seed=cfg.seed,
                train_seconds=[tm.train_seconds for tm in built.models], progress=progress,
                target_privacy=target.privacy, canaries=cfg.canaries, membership="miaudit"),
            split=_split_rows(built),
            rows=built.design.split.rows[np.flatnonzero(bank.audit)],
            trained_models=built.models,
            outputs="token probabilities" if bank.has_sequences else _OUTPUTS,
            references=n_references, reference_note=_reference_note(recipes, n_references),
        )

    def complete(self, result: AuditResult, obtained: Obtained, out: Path,
                 progress: bool) -> Written:
        cfg, built = self.cfg, self.built
        assert built is not None  # obtain ran
        result.outcomes += _forgetting_outcomes(cfg, built)
        # the best bound again, over the forgetting outcomes' bounds too (Bonferroni over all)
        audit = privacy_audit(result.outcomes, result.meta["privacy_audit"])
        written = Written()
        if built.design.split.canaries.size:
            audit = audit.with_canary_kind(cfg.canaries.kind)
            write_text(out / "canaries.csv",
                       canaries_csv(built.design, built.dataset, built.original or built.dataset,
                                    built.info.canary_secrets))
            written.files.append("canaries.csv")
            if built.info.canary_secrets:
                result.meta["canary_exposure"] = exposure_summary(
                    built.info.canary_secrets, built.design.canary_included())
        record = built.gradient_canaries
        if record is not None:  # white-box families of their own, beside the black-box ones
            audit = dataclasses.replace(audit, white_box=white_box_audit(
                record, cfg.canaries, audit.settings))
            write_text(out / "gradient_canaries.csv", gradient_canaries_csv(record, cfg.canaries))
            written.files.append("gradient_canaries.csv")
        result.meta["privacy_audit"] = audit
        if built.models[built.design.target].checkpoints:
            self.checkpoints = audit_checkpoints(cfg, built, result, out, progress)
            written.files += ["checkpoints.json", "checkpoints.md", "checkpoints"]
        figure = calibration_figure(result)
        if figure is not None:
            written.figures["calibration"] = figure
        return written

    def expose(self, result: AuditResult, verdict: ReleaseVerdict, obtained: Obtained,
               out: Path) -> Written:
        return Written()  # the report's figures show the run's exposure

    def record(self, result: AuditResult, obtained: Obtained, seconds: float) -> RunMeta:
        cfg, built, recipes = self.cfg, self.built, self.recipes
        assert built is not None and built.bank is not None  # obtain ran
        assert recipes is not None  # plan ran
        assert built.bank.audit is not None  # set by the bank
        target = built.models[built.design.target]
        after: dict[str, Any] = {}
        if self.checkpoints is not None:
            after["checkpoints"] = self.checkpoints
        notes = [*built.design.notes, *built.info.notes]
        if notes:  # e.g. references trained on fewer rows than the target, texts cut
            after["warnings"] = [*(result.meta.get("warnings") or []), *notes]
        return RunMeta(
            command="run", run=cfg.name, seed=cfg.seed, dataset=DatasetFacts.of(built.dataset),
            queries=", ".join(built.queries), audit_samples=int(built.bank.audit.sum()),
            trained=built.trained, from_cache=built.reused, device=built.info.device,
            seconds=round(seconds, 1), config=cfg.to_dict(),
            facts={
                "recipes": recipes.describe(),
                "dataset_notes": built.dataset.notes,
                "design": cfg.design,
                "n_models": built.design.n_models,
                "forgetting_models": len(built.forgetting),
                "train_wall_seconds": round(built.info.train_wall_seconds, 1),
                # what training them took originally (cached models keep their recorded
                # seconds)
                "train_seconds_original": round(
                    sum(tm.train_seconds for tm in [*built.models, *built.forgetting]), 1),
                "target_privacy": getattr(target, "privacy", None),
            },
            after=after,
        )

    def echo_lines(self, result: AuditResult) -> list[str]:
        lines = []
        if self.checkpoints:
            lines.append("\ncheckpoints (target and references at the same position):\n"
                         + checkpoints_table(self.checkpoints, self.cfg.metrics.fprs))
        if result.meta.get("canary_exposure"):
            lines.append("\n" + exposure_line(result.meta["canary_exposure"]))
        return lines


def run(
    cfg: RunConfig, progress: bool = True, echo: bool = True, overwrite: bool = False
) -> tuple[AuditResult, Path]:
    """The whole audit (:func:`~miaudit.pipeline.orchestrator.orchestrate` with
    :class:`RunSource`); writes config.yaml, training.json, bank.npz, verdict.txt,
    verdict.json and the report into the run directory.

    The config is checked before any work; everything is written into a staging folder that
    replaces the previous run's files only when this run succeeds (records.StagedRunDir), so
    a failing or interrupted run leaves the previous one intact."""
    return orchestrate(RunSource(cfg), progress=progress, echo=echo, overwrite=overwrite)
