"""`miaudit audit`: load the user's model and data, build the bank, run every attack the audit
permits, rank the most exposed training samples, state what it means, write the report."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from miaudit.attacks import get_attack
from miaudit.attacks.registry import check_attack_params
from miaudit.config import compute_section, identity_config
from miaudit.data.dataset import require_labels
from miaudit.errors import ConfigError
from miaudit.external.audit_bank import bank_summary, build_audit_bank, skip_reasons
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
from miaudit.io import write_json, write_text
from miaudit.models.hf import CAUSAL_LM, is_adapter_folder
from miaudit.pipeline.evaluate import evaluate_bank
from miaudit.privacy.sections import privacy_line
from miaudit.records.outcomes import AuditResult
from miaudit.records.run_dir import StagedRunDir, check_run_name
from miaudit.report import format_table, write_report
from miaudit.report.exposure import EXPOSURE_FIGURE
from miaudit.report.split import split_line
from miaudit.runtime.devices import check_precision, resolve_device
from miaudit.train.cluster import write_training_document
from miaudit.train.model_cache import default_cache_dir
from miaudit.verdict.release import make_verdict, verdict_text
from miaudit.verdict.split_check import split_check

_SEEN_AS = {"torch": "outputs (logits or probabilities)", "sklearn": "predicted probabilities",
            "function": "outputs", "outputs": "outputs", "hf": "outputs (logits or probabilities)"}


def run_dir(cfg: AuditConfig) -> Path:
    check_run_name(cfg.name)  # an AuditConfig built in Python skipped its _check
    return Path(cfg.output) if cfg.output else Path("runs") / cfg.name


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


def _meta(cfg: AuditConfig, data: AuditData, target: Target, refs: References,
          seconds: float, device: str) -> dict[str, Any]:
    return {
        "run": cfg.name,
        "seed": cfg.seed,
        "target": target.name,
        "target_kind": target.kind,
        "dataset": data.data.name,
        "dataset_source": data.data.source,
        "dataset_preprocessing": data.data.preprocessing,
        "dataset_labels": "labelled" if data.data.labelled else "unlabelled",
        "public_dataset": None if data.public is None else data.public.name,
        "audit_samples": data.n_audit,
        "members": int(data.members.sum()),
        "nonmembers": int((~data.members).sum()),
        "public_pool": data.n_pool,
        "population": data.n_population,
        "references": len(refs.modules),
        "reference_train_rows": int(refs.membership[0].sum()) if refs.modules else None,
        "reference_recipe": refs.recipe,
        "references_trained": refs.trained,
        "references_from_cache": refs.reused,
        "queries": ", ".join(audit_signals(cfg, data.kind, target.kind)[0]),  # auto resolved
        **(target.hf.meta() if target.hf is not None else {}),
        "device": device,
        "seconds": round(seconds, 1),
        "config": cfg.to_dict(),
    }


def _split_check(cfg: AuditConfig, data: AuditData) -> dict[str, Any] | None:
    """The model-free split check on the user's members and non-members (their rows' features
    or texts, and labels when the data have them), None when the config turns it off."""
    if not cfg.metrics.split_check:
        return None
    n = data.n_audit
    texts = (data.texts[:n] if data.texts is not None
             else data.features[:n] if data.kind == "text" else None)
    # texts without labels (a causal LM's): the texts alone, no label feature
    labels = data.labels[:n] if data.data.labelled else None
    return split_check(data.members, features=None if texts is not None else data.features[:n],
                       labels=labels, texts=texts, metric_cfg=cfg.metrics, seed=cfg.seed)


def _claim(cfg: AuditConfig) -> dict[str, float] | None:
    """The model's stated (ε, δ) claim, as the ε bounds read a DP target's privacy record."""
    if cfg.model.dp_epsilon is None:
        return None
    return {"epsilon": float(cfg.model.dp_epsilon), "delta": float(cfg.model.dp_delta)}


def run_audit(
    cfg: AuditConfig, progress: bool = True, echo: bool = True, overwrite: bool = False,
    predict_words: Mapping[str, str] | None = None,
) -> tuple[AuditResult, Path]:
    """The whole audit; writes audit.yaml, training.json, bank.npz, exposed.csv, verdict.txt
    and the report. ``predict_words``: how the caller names ``model.predict`` in the message
    refusing a class there (:func:`miaudit.external.sources.prediction_function`; default
    the config's and the command line's words).

    Everything is written into a staging folder that replaces the previous run's files only
    when this audit succeeds (io.StagedRunDir): bad input or an interruption leaves the
    previous run intact."""
    task = hf_task(cfg)  # a model folder is checked before any other work
    names = cfg.attacks if cfg.attacks is not None else default_attacks(task)
    for name in names:
        get_attack(name)  # unknown names fail before any work
    check_attack_params(cfg.attack_params)  # so do parameters (an AuditConfig built in Python)
    # and attacks listed that the bank could not support (the default list skips them)
    check_listed_attacks(cfg, causal_lm=task == CAUSAL_LM, base_model=bool(
        cfg.model.base_model or (cfg.model.hf_model and is_adapter_folder(cfg.model.hf_model))))
    # the model's own files (weights, estimator, a .py file named), before any work; the code
    # that model.module / model.predict name is imported only once every input was checked
    # (in _audit_into, after the data, the rows and the references' inputs)
    check_model_files(cfg.model)
    cfg.compute = compute_section(cfg.compute)  # and where the references train
    out = run_dir(cfg)
    with StagedRunDir(out, command="audit", name=cfg.name, config=identity_config(cfg.to_dict()),
                      defaults=identity_config(AuditConfig().to_dict()),
                      overwrite=overwrite) as stage:
        result = _audit_into(cfg, names, stage, progress, predict_words)
    if echo:
        verdict = result.meta["verdict"]
        print(format_table(result))
        said = " ".join(verdict.caveats).lower()
        notes = [n for n in result.meta["warnings"]
                 if n.lower() not in said]  # else a caveat of the statement below says it
        for note in notes:
            print(f"note: {note}")
        if notes:
            print()
        print(verdict_text(verdict))
        rows = (result.meta.get("exposure") or {}).get("rows") or []
        if rows:
            print(f"Most exposed training samples ({verdict.attack}; all in exposed.csv):")
            for r in rows[:5]:
                label = f"label {r['label']}  " if r["label"] != "" else ""
                print(f"  #{r['rank']}  row {r['row']:>6}  {label}"
                      f"score {r['score']:.4g}  flagged at FPR {100 * r['flagged_at_fpr']:.3g}%")
        print(f"\nreport: {out / 'report.html'}")
    return result, out


def _audit_into(cfg: AuditConfig, names: list[str], out: Path, progress: bool,
                predict_words: Mapping[str, str] | None = None) -> AuditResult:
    """The work of `run_audit`, written into `out` (the staging folder)."""
    write_text(out / "audit.yaml", dump_audit_config(cfg))
    start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    check_precision(cfg.precision, device)  # bf16 not native: before the data loads
    data = build_audit_data(cfg)
    if cfg.model.hf_model:
        target, data = load_hf_target(cfg, data)
    elif data.kind == "text" and cfg.target_kind != "outputs":  # outputs need no features
        raise ConfigError(
            f"the audit data {data.data.name} are texts: audit a Hugging Face model folder "
            "(model.hf_model / --hf-model) or precomputed outputs on them; other models take "
            "numeric features."
        )
    else:
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
                             data.features[:64], predict_words)
    audit_signals(cfg, data.kind, target.kind)  # a model.augment for no images: before references
    # the attacks listed again, with the data's kind and the target as loaded (a user's .npz
    # is images or a table): before the target is queried or a reference trains
    check_listed_attacks(cfg, causal_lm=target.causal_lm, base_model=bool(cfg.model.base_model),
                         kind=data.kind, target_kind=target.kind)
    cache_root = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
    refs = reference_models(cfg, target, data, cache_root, device, progress)
    # where each reference model came from (none listed for scikit-learn clones or without
    # references): a node of the Ray cluster, this machine ("local") or the cache
    write_training_document(out, refs.trained_models)
    built = build_audit_bank(cfg, target, refs, data, device, progress)
    built.bank.save(out / "bank.npz")
    skipped = skip_reasons(names, built, refs)
    runnable = [n for n in names if n not in skipped]
    result = evaluate_bank(
        built.bank, 0, runnable, {k: v for k, v in cfg.attack_params.items() if k in runnable},
        cfg.metrics, cfg.seed, train_seconds=[0.0, *refs.train_seconds], skip_unsupported=True,
        progress=progress, target_privacy=_claim(cfg), membership="user",
        split_check=_split_check(cfg, data),
    )
    result.meta["checks"]["input_mismatch"] = built.mismatch
    result.rows = data.audit_rows  # scores.csv and the report name the user's data rows
    skipped.update(result.meta.get("skipped") or {})
    result.meta["skipped"] = {n: skipped[n] for n in names if n in skipped}
    verdict = make_verdict(result, {
        "outputs": "token probabilities" if target.causal_lm else _SEEN_AS[target.kind],
        "references": len(refs.modules),
        "reference_note": " ".join([_reference_note(target, refs, cfg.model.base_model),
                                    *refs.caveats]),
        "skipped": len(skipped),
        "confidence": cfg.metrics.confidence, "input_mismatch": built.mismatch,
        "privacy": privacy_line(result), "split": split_line(result),
    })
    figures = {}
    if verdict.attack:
        assert built.bank.logits is not None  # set by SignalBank
        predicted = (None if target.causal_lm  # an LM predicts tokens, not the label
                     else built.bank.logits[0, : data.n_audit, 0].argmax(axis=-1))
        ranked = rank_exposed(result, verdict.attack, data, int(data.members.sum()), predicted)
        if not data.data.labelled:  # texts without labels: no label to show (all read 0)
            ranked = [{**r, "label": ""} for r in ranked]
        top = ranked[: cfg.exposed]
        result.meta["exposure"] = {"attack": verdict.attack,
                                   "n_members": int(data.members.sum()), "rows": top}
        write_text(out / "exposed.csv", exposure_csv(ranked))
        figure = thumbnail_figure(top, data, verdict.attack)
        if figure is not None:
            figures[EXPOSURE_FIGURE] = figure
    result.meta["verdict"] = verdict
    result.meta.update(_meta(cfg, data, target, refs, time.perf_counter() - start, device))
    result.meta.update(bank_summary(built))
    if cfg.model.base_model:  # lm-base-reference's reference: the pretrained base, not trained
        result.meta["base_model"] = cfg.model.base_model
    result.meta["warnings"] = [*data.notes, *target.notes, *refs.notes, *built.notes]
    text = verdict_text(verdict)
    write_text(out / "verdict.txt", text)
    write_json(out / "verdict.json", verdict.to_dict())
    written = ["audit.yaml", "bank.npz", "training.json", "verdict.txt", "verdict.json"]
    if result.meta.get("exposure"):
        written.append("exposed.csv")
    write_report(result, out, extra_figures=figures or None, run_files=written)
    return result

