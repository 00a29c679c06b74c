"""`miaudit audit`: the user's model as the target and reference models trained on public data,
as the source of a run (:class:`AuditSource`: load the model and data, build the bank, rank
the most exposed training samples); the shared steps (run folder, split check, evaluation,
verdict, report) are :mod:`miaudit.pipeline.orchestrator`'s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miaudit.config import compute_section
from miaudit.data.dataset import require_labels
from miaudit.errors import ConfigError
from miaudit.external.audit_bank import AuditBank, bank_summary, build_audit_bank, skip_reasons
from miaudit.external.audit_config import (
    AuditConfig,
    audit_signals,
    check_listed_attacks,
    dump_audit_config,
)
from miaudit.external.data import AuditData, build_audit_data
from miaudit.external.exposed import exposure_csv, rank_exposed, thumbnail_figure
from miaudit.external.hf_folder import default_attacks, hf_task, load_hf_target, reference_note
from miaudit.external.references import References, check_reference_inputs, reference_models
from miaudit.external.sources import Target, check_model_files, load_target
from miaudit.io import write_text
from miaudit.models.hf import CAUSAL_LM, is_adapter_folder
from miaudit.pipeline.evaluate import EvaluationOptions
from miaudit.pipeline.orchestrator import (
    Obtained,
    RunPlan,
    SplitRows,
    Written,
    check_attacks,
    orchestrate,
    run_folder,
)
from miaudit.records.outcomes import AuditResult
from miaudit.records.run_meta import DatasetFacts, RunMeta
from miaudit.report.exposure import EXPOSURE_FIGURE
from miaudit.runtime.devices import check_precision, resolve_device
from miaudit.train.model_cache import default_cache_dir
from miaudit.verdict.records import ReleaseVerdict

# what an attacker sees of each kind of target (the verdict's words)
_SEEN_AS = {"torch": "outputs (logits or probabilities)", "sklearn": "predicted probabilities",
            "function": "outputs", "outputs": "outputs", "hf": "outputs (logits or probabilities)"}


def run_dir(cfg: AuditConfig) -> Path:
    """The audit's run folder: ``output``, else ``runs/<name>``."""
    return run_folder(cfg.name, cfg.output)


def _reference_note(target: Target, refs: References, base_model: str | None = None) -> str:
    n = len(refs.modules)
    base = (f" The pretrained base model {base_model} is lm-base-reference's reference (the "
            "model before fine-tuning: what a text's likelihood owes to pretraining, not to the "
            "private data), queried, never trained.") if base_model else ""
    if n == 0 and base_model:
        return (f"No reference model was trained ({refs.reason}).{base} The attacks needing "
                "trained references did not run.")
    if n == 0:
        return (f"No reference models ({refs.reason}); only attacks on the target's own outputs "
                "ran. Reference-based attacks are usually far stronger at low FPR, so these "
                "figures likely understate the leak.")
    if target.kind == "hf":
        return reference_note(target, n, refs.recipe)
    if target.kind == "sklearn":
        return (f"The {n} reference models are clones of the estimator (same hyper-parameters) "
                "fitted on public data.")
    if target.kind == "torch":
        return (f"The {n} reference models share the model's architecture and were trained "
                "with the recipe stated in the audit config; if it differs from how the model "
                "was really trained, reference-based attacks are weaker than an informed "
                "attacker's.")
    return (f"The {n} reference models use a stand-in architecture, not the target's; "
            "reference-based attacks may understate the leak.")


def _facts(cfg: AuditConfig, data: AuditData, target: Target, refs: References
           ) -> dict[str, Any]:
    """The audit's own entries of its meta (:class:`~miaudit.records.run_meta.RunMeta`)."""
    return {
        "target": target.name,
        "target_kind": target.kind,
        "public_dataset": None if data.public is None else data.public.name,
        "members": int(data.members.sum()),
        "nonmembers": int((~data.members).sum()),
        "public_pool": data.n_pool,
        "population": data.n_population,
        "references": len(refs.modules),
        "reference_train_rows": (None if refs.membership is None or not refs.modules
                                 else int(refs.membership[0].sum())),
        "reference_recipe": refs.recipe,
        **(target.hf.meta() if target.hf is not None else {}),
    }


def _split_rows(data: AuditData) -> SplitRows:
    """The user's members and non-members as the model-free split check reads them: their
    rows' features or texts, and labels when the data have them."""
    n = data.n_audit
    texts = (data.texts[:n] if data.texts is not None
             else data.features[:n] if data.kind == "text" else None)
    # texts without labels (a causal LM's): the texts alone, no label feature
    labels = data.labels[:n] if data.data.labelled else None
    return SplitRows(data.members, features=None if texts is not None else data.features[:n],
                     labels=labels, texts=texts)


def _claim(cfg: AuditConfig) -> dict[str, float] | None:
    """The model's stated (ε, δ) claim, as the ε bounds read a DP target's privacy record."""
    epsilon, delta = cfg.model.dp_epsilon, cfg.model.dp_delta
    if epsilon is None or delta is None:  # the config gives both or neither
        return None
    return {"epsilon": float(epsilon), "delta": float(delta)}


@dataclass
class _Loaded:
    """What :meth:`AuditSource.obtain` loaded and built, for the audit's later steps."""

    data: AuditData
    target: Target
    refs: References
    built: AuditBank
    device: str


class AuditSource:
    """`miaudit audit`'s models (:class:`~miaudit.pipeline.orchestrator.ModelSource`): the
    user's model as the target, reference models trained on public data; the audit's own
    steps: the input-mismatch check and the most exposed training samples.
    ``predict_words``: how the caller names ``model.predict`` in the message refusing a
    class there (:func:`miaudit.external.sources.prediction_function`)."""

    def __init__(self, cfg: AuditConfig,
                 predict_words: Mapping[str, str] | None = None) -> None:
        self.cfg = cfg
        self.predict_words = predict_words
        self.names: list[str] = []
        self.loaded: _Loaded | None = None

    def plan(self) -> RunPlan:
        cfg = self.cfg
        task = hf_task(cfg)  # a model folder is checked before any other work
        self.names = list(cfg.attacks if cfg.attacks is not None else default_attacks(task))
        check_attacks(self.names, cfg.attack_params)  # unknown names or parameters
        # and attacks listed that the bank could not support (the default list skips them)
        check_listed_attacks(cfg, causal_lm=task == CAUSAL_LM, base_model=bool(
            cfg.model.base_model or (cfg.model.hf_model
                                     and is_adapter_folder(cfg.model.hf_model))))
        # the model's own files (weights, estimator, a .py file named), before any work; the
        # code that model.module / model.predict name is imported only once every input was
        # checked (in obtain, after the data, the rows and the references' inputs)
        check_model_files(cfg.model)
        cfg.compute = compute_section(cfg.compute)  # and where the references train
        return RunPlan.of("audit", cfg, AuditConfig(), "audit.yaml", dump_audit_config(cfg))

    def obtain(self, progress: bool) -> Obtained:
        cfg = self.cfg
        device = resolve_device(cfg.device)
        check_precision(cfg.precision, device)  # bf16 not native: before the data loads
        data = build_audit_data(cfg)
        target, data = self._target(data)
        # a model.augment for no images: before references
        audit_signals(cfg, data.kind, target.kind)
        # the attacks listed again, with the data's kind and the target as loaded (a user's
        # .npz is images or a table): before the target is queried or a reference trains
        check_listed_attacks(cfg, causal_lm=target.causal_lm,
                             base_model=bool(cfg.model.base_model), kind=data.kind,
                             target_kind=target.kind)
        cache_root = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
        refs = reference_models(cfg, target, data, cache_root, device, progress)
        built = build_audit_bank(cfg, target, refs, data, device, progress)
        self.loaded = _Loaded(data, target, refs, built, device)
        skipped = skip_reasons(self.names, built, refs)
        runnable = [n for n in self.names if n not in skipped]
        return Obtained(
            bank=built.bank, target=0, attacks=self.names, skipped=skipped,
            options=EvaluationOptions(
                params={k: v for k, v in cfg.attack_params.items() if k in runnable},
                metrics=cfg.metrics, seed=cfg.seed, train_seconds=[0.0, *refs.train_seconds],
                skip_unsupported=True, progress=progress, target_privacy=_claim(cfg),
                membership="user"),
            split=_split_rows(data),
            rows=data.audit_rows,  # scores.csv and the report name the user's data rows
            trained_models=refs.trained_models,
            outputs="token probabilities" if target.causal_lm else _SEEN_AS[target.kind],
            references=len(refs.modules),
            reference_note=" ".join([_reference_note(target, refs, cfg.model.base_model),
                                     *refs.caveats]),
            ranked_samples=True,  # exposed.csv: the model.exposed (>= 1) first flagged
        )

    def _target(self, data: AuditData) -> tuple[Target, AuditData]:
        """The user's model, loaded once every input it does not need was checked."""
        cfg = self.cfg
        if cfg.model.hf_model:
            return load_hf_target(cfg, data)
        if data.kind == "text" and cfg.target_kind != "outputs":  # outputs need no features
            raise ConfigError(
                f"the audit data {data.data.name} are texts: audit a Hugging Face model folder "
                "(model.hf_model / --hf-model) or precomputed outputs on them; other models "
                "take numeric features."
            )
        # texts reach here as precomputed outputs only: a classifier's, which need labels
        require_labels(data.data, "an audit of precomputed outputs (a classifier's)")
        if cfg.model.module or cfg.model.predict:  # what can be checked without their code,
            # before it is imported (load_target): the signals, the attacks listed and the
            # references' inputs, for the kind of target the config names
            kind = "torch" if cfg.model.module else "function"
            audit_signals(cfg, data.kind, kind)
            check_listed_attacks(cfg, causal_lm=False, base_model=bool(cfg.model.base_model),
                                 kind=data.kind, target_kind=kind)
            check_reference_inputs(cfg, data)
        target = load_target(cfg.model, data.input_shape, data.num_classes,
                             data.features[:64], self.predict_words)
        return target, data

    def complete(self, result: AuditResult, obtained: Obtained, out: Path,
                 progress: bool) -> Written:
        assert self.loaded is not None  # obtain ran
        # why the model's inputs look unlike its training data (None: they do not); the
        # verdict reads it from the checks
        result.meta["checks"]["input_mismatch"] = self.loaded.built.mismatch
        return Written()

    def expose(self, result: AuditResult, verdict: ReleaseVerdict, obtained: Obtained,
               out: Path) -> Written:
        """The training samples the verdict's attack flags first: exposed.csv, the report's
        section and thumbnails."""
        assert self.loaded is not None  # obtain ran
        cfg, data, target, bank = (self.cfg, self.loaded.data, self.loaded.target,
                                   self.loaded.built.bank)
        written = Written()
        if not verdict.attack:
            return written
        assert bank.logits is not None  # set by SignalBank
        predicted = (None if target.causal_lm  # an LM predicts tokens, not the label
                     else bank.logits[0, : data.n_audit, 0].argmax(axis=-1))
        ranked = rank_exposed(result, verdict.attack, data, int(data.members.sum()), predicted)
        if not data.data.labelled:  # texts without labels: no label to show (all read 0)
            ranked = [{**r, "label": ""} for r in ranked]
        top = ranked[: cfg.exposed]
        result.meta["exposure"] = {"attack": verdict.attack,
                                   "n_members": int(data.members.sum()), "rows": top}
        write_text(out / "exposed.csv", exposure_csv(ranked))
        written.files.append("exposed.csv")
        figure = thumbnail_figure(top, data, verdict.attack)
        if figure is not None:
            written.figures[EXPOSURE_FIGURE] = figure
        return written

    def record(self, result: AuditResult, obtained: Obtained, seconds: float) -> RunMeta:
        assert self.loaded is not None  # obtain ran
        cfg, loaded = self.cfg, self.loaded
        data, target, refs, built = loaded.data, loaded.target, loaded.refs, loaded.built
        after = bank_summary(built)
        if cfg.model.base_model:  # lm-base-reference's reference: the pretrained base model,
            after["base_model"] = cfg.model.base_model  # not trained
        after["warnings"] = [*data.notes, *target.notes, *refs.notes, *built.notes]
        return RunMeta(
            command="audit", run=cfg.name, seed=cfg.seed, dataset=DatasetFacts.of(data.data),
            # the queries as auto resolved them
            queries=", ".join(audit_signals(cfg, data.kind, target.kind)[0]),
            audit_samples=data.n_audit, trained=refs.trained, from_cache=refs.reused,
            device=loaded.device, seconds=round(seconds, 1), config=cfg.to_dict(),
            facts=_facts(cfg, data, target, refs), after=after,
        )

    def echo_lines(self, result: AuditResult) -> list[str]:
        verdict = result.meta["verdict"]
        rows = (result.meta.get("exposure") or {}).get("rows") or []
        if not rows:
            return []
        lines = [f"Most exposed training samples ({verdict.attack}; all in exposed.csv):"]
        for r in rows[:5]:
            label = f"label {r['label']}  " if r["label"] != "" else ""
            lines.append(f"  #{r['rank']}  row {r['row']:>6}  {label}"
                         f"score {r['score']:.4g}  flagged at FPR "
                         f"{100 * r['flagged_at_fpr']:.3g}%")
        return lines


def run_audit(
    cfg: AuditConfig, progress: bool = True, echo: bool = True, overwrite: bool = False,
    predict_words: Mapping[str, str] | None = None,
) -> tuple[AuditResult, Path]:
    """The whole audit (:func:`~miaudit.pipeline.orchestrator.orchestrate` with
    :class:`AuditSource`); writes audit.yaml, training.json, bank.npz, exposed.csv,
    verdict.txt, verdict.json and the report. ``predict_words``: how the caller names
    ``model.predict`` in the message refusing a class there
    (:func:`miaudit.external.sources.prediction_function`; default the config's and the
    command line's words).

    Everything is written into a staging folder that replaces the previous run's files only
    when this audit succeeds (records.StagedRunDir): bad input or an interruption leaves the
    previous run intact."""
    return orchestrate(AuditSource(cfg, predict_words), progress=progress, echo=echo,
                       overwrite=overwrite)
