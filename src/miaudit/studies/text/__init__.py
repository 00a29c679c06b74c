"""`miaudit study text`: membership inference on text models, the encoder claim of RAPID (He et
al., "Is Difficulty Calibration All We Need?", CCS 2024: about 3x the TPR of difficulty
calibration on fine-tuned BERT-style models) and causal LMs with the LM attacks.

Two tables, one cell per (setup, repetition):

* **encoder**: all-MiniLM-L6-v2 (BERT architecture) fully fine-tuned as a ham/spam classifier
  on SpamAssassin mails; Yeom's loss, Watson's calibrated loss, LiRA offline, RMIA and RAPID
  (text queries: the plain text and seeded token perturbations), with the model-free blind
  baseline;
* **lm**: GPT-2-style causal LMs trained from scratch on the same mails (a byte-level BPE
  fitted on the public pool only); LM loss, zlib, Min-K%, Min-K%++, calibrated LM loss, LiRA
  offline, RMIA and RAPID on sequences, and blind.

Each cell trains (or loads from the model cache) a target and its references in the offline
design (references train on halves of the public pool, never on audit rows) and scores every
attack on the one bank. Rows carry AUC and TPR at 1% / 0.1% FPR with bootstrap intervals, how
many non-members each TPR rests on, the models' accuracy (or perplexity) and the wall times.
Tables and the paper's claim beside ours: :mod:`miaudit.studies.text.report`.
"""

from __future__ import annotations

import time
from typing import Any

from miaudit.signals.query import text_queries
from miaudit.studies.registry import register_study
from miaudit.studies.sweep import Cell, StudyError
from miaudit.studies.text.report import FPRS, summarize

ENCODER_ATTACKS = ["rapid", "lira-offline", "rmia", "calibrated-loss", "loss", "blind"]
LM_ATTACKS = ["lm-rapid", "lm-lira-offline", "lm-rmia", "lm-calibrated", "min-k-plus-plus",
              "min-k", "zlib", "lm-loss", "blind"]
TABLES = {"encoder": ENCODER_ATTACKS, "lm": LM_ATTACKS}

_SPAM = {"name": "spam-assassin", "max_length": 64}
# The target trains on a random half of the audit pool (1,000 mails), each reference on a
# random half of the public pool; the population pool is RMIA's z samples.
_SPLIT = {"audit": 2000, "public": 2000, "population": 400}

SETUPS: dict[str, dict[str, Any]] = {
    # Full fine-tuning with the usual BERT recipe (AdamW-style Adam, lr 5e-5, a few epochs);
    # chosen before any attack ran, not tuned on results.
    "minilm": {
        "table": "encoder",
        "dataset": dict(_SPAM),
        "split": dict(_SPLIT),
        "recipe": {"architecture": "minilm", "optimizer": "adam", "lr": 5e-5, "epochs": 4,
                   "batch_size": 16},
        "queries": text_queries(2),  # plain + token-dropout-1: each query is a full pass
    },
    "gpt-small": {
        "table": "lm",
        "dataset": {**_SPAM, "tokenizer": "bpe", "bpe_vocab_size": 4096},
        "split": dict(_SPLIT),
        "recipe": {"architecture": "gpt-small",
                   "arch_params": {"n_layer": 2, "n_embd": 128, "n_head": 4, "vocab_size": 4096},
                   "optimizer": "adam", "lr": 0.003, "epochs": 8, "batch_size": 32},
        "queries": ["plain"],
    },
    # Not in the default list: the small from-scratch text classifier, minutes on 2 cores.
    "text-cnn": {
        "table": "encoder",
        "dataset": dict(_SPAM),
        "split": dict(_SPLIT),
        "recipe": {"architecture": "text-cnn", "arch_params": {"embed_dim": 64, "channels": 64},
                   "optimizer": "adam", "lr": 0.003, "epochs": 20, "batch_size": 32},
        "queries": text_queries(8),
    },
}
_SETUP_KEYS = ("table", "dataset", "split", "recipe", "queries")


def run_config(params: dict[str, Any]) -> dict[str, Any]:
    """The pipeline config of one cell: the target and every reference, every query."""
    setup = params["setup"]
    attacks = list(params["attacks"])
    return {
        "name": f"text-{params['model']}",
        "seed": int(params["rep"]),
        "dataset": dict(setup["dataset"]),
        "split": dict(setup["split"]),
        "design": "offline",
        "models": 1 + int(params["references"]),
        "recipe": dict(setup["recipe"]),
        "signals": {"queries": list(setup["queries"])},
        "attacks": attacks,
        "attack_params": {name: dict(value) for name, value in params["attack_params"].items()
                          if name in attacks},
        "metrics": {"fprs": list(FPRS), "bootstrap": int(params["bootstrap"])},
        "device": params["device"],
    }


def _fit_columns(models: list[dict[str, Any]]) -> dict[str, Any]:
    """The target's and the references' mean accuracy (classifiers) or perplexity (LMs)."""
    target, refs = models[0], models[1:]
    kind = "acc" if "train_acc" in target else "ppl"
    mean = (lambda key: sum(r[key] for r in refs) / len(refs)) if refs else (lambda key: None)
    return {"fit": kind,
            "target_train": target[f"train_{kind}"], "target_test": target[f"test_{kind}"],
            "references_train": mean(f"train_{kind}"), "references_test": mean(f"test_{kind}")}


def work(cell: Cell) -> list[dict[str, Any]]:
    """Train or load the cell's models, query them once, score every attack."""
    from miaudit.config import config_from_dict
    from miaudit.pipeline import build_bank, evaluate_bank, model_accuracies

    params = cell.params
    cfg = config_from_dict(run_config(params))
    start = time.perf_counter()
    built = build_bank(cfg, progress=False)
    build_seconds = time.perf_counter() - start
    if built.design.target != 0:
        raise StudyError("the text study expects the target to be model 0.")
    train_seconds = [float(tm.train_seconds) for tm in built.models]
    result = evaluate_bank(built.bank, 0, cfg.attacks, cfg.attack_params, cfg.metrics,
                           seed=cfg.seed, train_seconds=train_seconds, thresholds=False,
                           progress=False)  # fmt: skip
    fit = _fit_columns(model_accuracies(built.bank))
    notes = "; ".join(built.info["notes"])
    rows = []
    for o in result.outcomes:
        m, cost = o.metrics, o.cost
        rows.append({
            "table": params["setup"]["table"], "attack": o.name,
            **m.auc_columns(ci=True), **m.tpr_columns(FPRS, ci=True), **m.counts(),
            **fit,
            "n_references": int(params["references"]), "n_queries": len(built.queries),
            "queries": ",".join(built.queries),
            "max_length": int(cfg.dataset.max_length), "tokenizer": cfg.dataset.tokenizer,
            "truncation_note": notes,
            "cost_models": cost.models, "cost_train_s": cost.train_seconds,
            "cost_score_s": cost.score_seconds,
            "models_trained": built.trained, "models_from_cache": built.reused,
            "train_wall_s": built.info["train_wall_seconds"],
            "query_s": built.info["query_seconds"], "cell_build_s": build_seconds,
        })
    return rows


def cells(config: dict[str, Any]) -> list[Cell]:
    """One cell per (setup, repetition), setups in the config's order."""
    setups = {**config["setups"], **config["extra_setups"]}
    unknown = [name for name in config["models"] if name not in setups]
    if unknown:
        raise StudyError(f"models {unknown} have no entry under setups (known: "
                         f"{', '.join(setups)}); add one under extra_setups with "
                         f"{', '.join(_SETUP_KEYS)}.")
    for name in config["models"]:
        missing = [k for k in _SETUP_KEYS if k not in setups[name]]
        if missing:
            raise StudyError(f"setup {name!r} lacks {', '.join(missing)}.")
        if setups[name]["table"] not in TABLES:
            raise StudyError(f"setup {name!r}: table must be one of {', '.join(TABLES)}.")
    if int(config["references"]) < 2:
        raise StudyError("RAPID needs at least 2 references (its shadow models, leave-one-out).")
    attack_params = {
        name: {"max_train_samples": int(config["rapid_max_train_samples"])}
        for name in ("rapid", "lm-rapid")
    }
    # Offline design: every audit sample has every reference OUT; LiRA's equal-count rule
    # would score each against its first reference alone (see the rapid study).
    for name in ("lira-offline", "lm-lira-offline"):
        attack_params[name] = {"equal_counts": False}
    for name, extra in config["attack_params"].items():
        attack_params[name] = {**attack_params.get(name, {}), **extra}
    out = []
    for rep in range(int(config["repetitions"])):
        for name in config["models"]:
            setup = setups[name]
            out.append(Cell("text", {
                "model": name, "rep": rep, "setup": setup,
                "attacks": list(setup.get("attacks") or TABLES[setup["table"]]),
                "attack_params": attack_params, "references": int(config["references"]),
                "bootstrap": int(config["bootstrap"]), "device": config["device"]}))
    return out


_CPU = {
    "models": ["minilm", "gpt-small"],
    "setups": SETUPS,
    "extra_setups": {},  # {name: {table, dataset, split, recipe, queries[, attacks]}}
    "repetitions": 1,
    "references": 4,  # the paper's default
    "rapid_max_train_samples": 4000,
    "attack_params": {},
    "bootstrap": 200,
    "device": "cpu",
}

_PAPER_SPLIT = {"audit": 2800, "public": 2400, "population": 600}  # 5,800 of the 5,916 mails
_PAPER = {
    **_CPU,
    "setups": {
        **SETUPS,
        "minilm": {**SETUPS["minilm"], "dataset": {**_SPAM, "max_length": 128},
                   "split": _PAPER_SPLIT, "queries": text_queries(8)},
        "gpt-small": {**SETUPS["gpt-small"],
                      "dataset": {**SETUPS["gpt-small"]["dataset"], "max_length": 128},
                      "split": _PAPER_SPLIT,
                      "recipe": {**SETUPS["gpt-small"]["recipe"],
                                 "arch_params": {"n_layer": 4, "n_embd": 256, "n_head": 4,
                                                 "vocab_size": 4096}, "epochs": 20}},
    },
    "repetitions": 3,
    "rapid_max_train_samples": 20000,
    "device": "auto",
}


@register_study("text", description="text models: fine-tuned MiniLM (RAPID's ~3x over "
                "calibration, He et al. CCS 2024) and causal LMs with the LM attacks + blind")
class Text:
    """Membership inference on a fine-tuned encoder and on causal LMs (SpamAssassin mails)."""

    configs = {"cpu": _CPU, "paper": _PAPER}
    cells = staticmethod(cells)
    work = staticmethod(work)
    summarize = staticmethod(summarize)
