"""One run of `miaudit run` or `miaudit audit`: the steps both commands take, in one place.

A command differs from the other only in how it obtains the target and the reference models
(its :class:`ModelSource`: miaudit trains the models of a run's design; an audit loads the
user's model and trains references on public data). Everything else is done here, once:

1. the source checks its spec up front and resolves it into a :class:`RunPlan`, before any
   work (no model trains, no data loads, no folder is made for input that cannot run);
2. the run folder is staged (:class:`~miaudit.records.run_dir.StagedRunDir`): everything is
   written into a staging folder that replaces the previous run's files only on success;
3. the config is written, torch is seeded, the source obtains the models and queries them
   into a bank; training.json (where each model came from) and bank.npz are written;
4. the model-free split check on the audit rows, then every attack evaluated
   (:func:`~miaudit.pipeline.evaluate.evaluate_attacks`);
5. the source's own steps on the result (a run's forgetting copies, canaries, checkpoints);
6. the release verdict (:func:`~miaudit.verdict.release.make_verdict`), then what the
   source shows of it (an audit's most exposed samples);
7. the meta (:class:`~miaudit.records.run_meta.RunMeta`), verdict.txt / verdict.json and the
   report.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from matplotlib.figure import Figure

from miaudit.attacks import get_attack
from miaudit.attacks.registry import check_attack_params
from miaudit.config import MetricsConfig, identity_config
from miaudit.io import write_json, write_text
from miaudit.pipeline.evaluate import EvaluationOptions, evaluate_attacks
from miaudit.privacy.sections import privacy_line
from miaudit.records.outcomes import AuditResult
from miaudit.records.run_dir import StagedRunDir, check_run_name
from miaudit.records.run_meta import RunMeta
from miaudit.report import format_table, write_report
from miaudit.report.split import split_line
from miaudit.signals import SignalBank
from miaudit.train.cluster import write_training_document
from miaudit.train.common import TrainedModel
from miaudit.verdict.records import ReleaseVerdict, VerdictContext
from miaudit.verdict.release import make_verdict, verdict_text
from miaudit.verdict.split_check import split_check
from miaudit.verdict.strength import checks_of

BANK_FILE = "bank.npz"
TRAINING_FILE = "training.json"
VERDICT_FILES = ("verdict.txt", "verdict.json")


class PlannedConfig(Protocol):
    """What the plan reads of a command's config (a run's or an audit's)."""

    name: str
    output: str | None
    seed: int
    metrics: MetricsConfig

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RunPlan:
    """A checked spec, resolved: what the run folder is and how the shared steps run.

    ``command``: "run" or "audit" (the run folder's identity, the meta's layout);
    ``config_file`` / ``config_text``: the config as written into the folder;
    ``identity`` / ``defaults``: the config and its defaults as the folder's identity
    records them (:class:`~miaudit.records.run_dir.StagedRunDir`)."""

    command: str
    name: str
    output: str | None
    config_file: str
    config_text: str
    identity: Mapping[str, Any]
    defaults: Mapping[str, Any]
    seed: int
    metrics: MetricsConfig

    @classmethod
    def of(cls, command: str, cfg: PlannedConfig, defaults: PlannedConfig, config_file: str,
           config_text: str) -> RunPlan:
        """The plan of a checked config ``cfg`` written as ``config_text``: its name, output,
        seed and metrics; its identity beside ``defaults``' (its type's defaults; compute
        left out)."""
        return cls(command=command, name=cfg.name, output=cfg.output, config_file=config_file,
                   config_text=config_text, identity=identity_config(cfg.to_dict()),
                   defaults=identity_config(defaults.to_dict()), seed=cfg.seed,
                   metrics=cfg.metrics)

    @property
    def out(self) -> Path:
        """The run folder (:func:`run_folder`)."""
        return run_folder(self.name, self.output)


def run_folder(name: str, output: str | None) -> Path:
    """A run's folder: ``output``, else ``runs/<name>`` (the name checked: a config built in
    Python skipped its own check)."""
    check_run_name(name)
    return Path(output) if output else Path("runs") / name


@dataclass(frozen=True)
class SplitRows:
    """The audit rows as the model-free split check reads them
    (:func:`miaudit.verdict.split_check.split_check`): ``members`` over the audit rows, their
    ``features`` (None for texts), ``labels`` (None for texts without labels) and ``texts``."""

    members: np.ndarray
    features: np.ndarray | None = None
    labels: np.ndarray | None = None
    texts: np.ndarray | None = None


@dataclass
class Obtained:
    """What a source hands over once its target and references are queried into a bank.

    ``attacks``: the attacks listed, in order; ``skipped``: those the source already knows
    cannot run, with why (they are not scored; the evaluation adds those the bank cannot
    support when ``options.skip_unsupported``); ``options``: how the attacks are evaluated
    (the split check's record is added here); ``rows``: the dataset row of each audit sample;
    ``trained_models``: the models training.json lists; ``outputs``, ``references``,
    ``reference_note``: what the verdict says the attacker saw and how the references were
    made; ``ranked_samples``: whether :meth:`ModelSource.expose` lists the most exposed
    samples (the verdict's advice then points to them)."""

    bank: SignalBank
    target: int
    attacks: list[str]
    options: EvaluationOptions
    split: SplitRows
    rows: np.ndarray
    trained_models: Sequence[TrainedModel]
    outputs: str
    references: int
    reference_note: str
    skipped: dict[str, str] = field(default_factory=dict)
    ranked_samples: bool = False  # the source shows the samples the verdict's attack flags


@dataclass
class Written:
    """What a source's own step added to the run folder (file names, in the order listed in
    summary.json) and to the report (figures)."""

    files: list[str] = field(default_factory=list)
    figures: dict[str, Figure | bytes] = field(default_factory=dict)


class ModelSource(Protocol):
    """How a command obtains its target and reference models, and what it adds of its own."""

    def plan(self) -> RunPlan:
        """The spec checked up front (before any work) and resolved."""
        ...

    def obtain(self, progress: bool) -> Obtained:
        """The target and references trained or loaded, queried into a bank."""
        ...

    def complete(self, result: AuditResult, obtained: Obtained, out: Path,
                 progress: bool) -> Written:
        """The source's own steps on the evaluated result, before the verdict."""
        ...

    def expose(self, result: AuditResult, verdict: ReleaseVerdict, obtained: Obtained,
               out: Path) -> Written:
        """What the source shows of the verdict (an audit's most exposed samples)."""
        ...

    def record(self, result: AuditResult, obtained: Obtained, seconds: float) -> RunMeta:
        """The meta of the run, ``seconds`` after the models began to be obtained."""
        ...

    def echo_lines(self, result: AuditResult) -> list[str]:
        """The source's own lines of the terminal's summary, after the verdict."""
        ...


def check_attacks(names: Sequence[str], params: Any) -> None:
    """Unknown attack names and bad attack parameters fail before any work (a config built
    in Python skipped its own check)."""
    for name in names:
        get_attack(name)
    check_attack_params(params)


def orchestrate(source: ModelSource, progress: bool = True, echo: bool = True,
                overwrite: bool = False) -> tuple[AuditResult, Path]:
    """The whole run of ``source`` into its run folder (module docstring); the result and
    the folder. Bad input fails before the folder is staged; a failure or an interruption
    leaves the previous run's files intact."""
    plan = source.plan()
    out = plan.out
    with StagedRunDir(out, command=plan.command, name=plan.name, config=dict(plan.identity),
                      defaults=dict(plan.defaults), overwrite=overwrite) as stage:
        result = _run_into(source, plan, stage, progress)
    if echo:
        _echo(source, result, out)
    return result, out


def _run_into(source: ModelSource, plan: RunPlan, out: Path, progress: bool) -> AuditResult:
    """The work of :func:`orchestrate`, written into ``out`` (the staging folder)."""
    write_text(out / plan.config_file, plan.config_text)
    start = time.perf_counter()
    torch.manual_seed(plan.seed)
    obtained = source.obtain(progress)
    # where each model came from: a node of the Ray cluster, this machine ("local") or the
    # cache (none listed for scikit-learn clones, or without references)
    write_training_document(out, obtained.trained_models)
    obtained.bank.save(out / BANK_FILE)
    result = _evaluate(plan, obtained)
    result.rows = obtained.rows  # scores.csv and the report name dataset rows
    own = source.complete(result, obtained, out, progress)
    verdict = make_verdict(result, VerdictContext(
        outputs=obtained.outputs, references=obtained.references,
        reference_note=obtained.reference_note,
        skipped=len(result.meta.get("skipped") or {}),
        confidence=plan.metrics.confidence,
        input_mismatch=checks_of(result).get("input_mismatch"),
        privacy=privacy_line(result), split=split_line(result),
        ranked_samples=obtained.ranked_samples,
    ))
    shown = source.expose(result, verdict, obtained, out)
    result.meta["verdict"] = verdict
    record = source.record(result, obtained, time.perf_counter() - start)
    result.meta.update(record.to_dict())
    result.run_meta = record
    write_text(out / VERDICT_FILES[0], verdict_text(verdict))
    write_json(out / VERDICT_FILES[1], verdict.to_dict())
    files = [plan.config_file, BANK_FILE, TRAINING_FILE, *own.files, *VERDICT_FILES,
             *shown.files]
    figures = {**own.figures, **shown.figures}
    write_report(result, out, extra_figures=figures or None, run_files=files)
    return result


def _evaluate(plan: RunPlan, obtained: Obtained) -> AuditResult:
    """The split check, then every attack the source did not skip, evaluated; the skipped
    ones (the source's and the evaluation's) in ``meta["skipped"]``, in the listed order."""
    split = None
    if plan.metrics.split_check:  # else the config turned it off
        rows = obtained.split
        split = split_check(rows.members, features=rows.features, labels=rows.labels,
                            texts=rows.texts, metric_cfg=plan.metrics, seed=plan.seed)
    runnable = [n for n in obtained.attacks if n not in obtained.skipped]
    result = evaluate_attacks(obtained.bank, obtained.target, runnable,
                              dataclasses.replace(obtained.options, split_check=split))
    skipped = {**obtained.skipped, **(result.meta.get("skipped") or {})}
    result.meta["skipped"] = {n: skipped[n] for n in obtained.attacks if n in skipped}
    return result


def _echo(source: ModelSource, result: AuditResult, out: Path) -> None:
    """The terminal's summary: the table, the notes the verdict does not already say, the
    release statement, the source's own lines, where the report is."""
    verdict = result.meta["verdict"]
    print(format_table(result))
    said = " ".join(verdict.caveats).lower()
    notes = [n for n in result.meta.get("warnings") or []
             if n.lower() not in said]  # else a caveat of the statement below says it
    for note in notes:
        print(f"note: {note}")
    if notes:
        print()
    print(verdict_text(verdict))
    for line in source.echo_lines(result):
        print(line)
    print(f"\nreport: {out / 'report.html'}")
