"""The audit's signal bank (the target is model 0, references after it) and the attacks it
cannot support, each with the reason, read from the attacks' `Needs` declarations.

A causal LM's bank also holds, when an attack to run reads them: the pretrained base model's
token log-probabilities (``model.base_model``, lm-base-reference's reference; its tokenizer
must match the model's) and ReCaLL's prefix-conditioned ones. ReCaLL's prefix is
:data:`RECALL_PREFIX_TEXTS` public texts (never audit samples; no model is trained on them as
a member of the target) drawn with the audit's seed and concatenated; prefix and text must fit
the model's positions together, so the prefix keeps its last ``positions - max_length``
tokens (the end that joins the text), and with no room left ReCaLL is skipped with why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from miaudit.attacks import get_attack, list_attacks
from miaudit.errors import ConfigError, DataError
from miaudit.external.audit_config import AuditConfig, audit_signals
from miaudit.external.data import AuditData, other_preprocessing
from miaudit.external.hf_folder import lm_fit, load_base_reference
from miaudit.external.references import References
from miaudit.external.sources import Target
from miaudit.formatting import plural
from miaudit.models.hf import max_positions
from miaudit.signals import SignalBank
from miaudit.signals.assemble import SignalSpec, assemble_bank, query_signals
from miaudit.signals.query import query_logits
from miaudit.signals.sequence import RECALL_PREFIX_TEXTS, fitted_prefix
from miaudit.train.model_cache import default_cache_dir

log = logging.getLogger(__name__)

# Public texts drawn (seeded by the audit's seed) and concatenated into ReCaLL's prefix.

_BLACK_BOX = {
    "sklearn": "the target is a scikit-learn estimator (predict_proba only)",
    "function": "the target is a black-box prediction function",
    "outputs": "the target is given as precomputed outputs",
}


@dataclass
class AuditBank:
    bank: SignalBank
    missing_channels: dict[str, str] = field(default_factory=dict)  # channel -> why absent
    population_reason: str | None = None  # why the bank has no population rows
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    fit: dict[str, float] = field(default_factory=dict)  # accuracy/loss on own training rows
    mismatch: str | None = None  # why the model's inputs look unlike its training data
    unavailable: dict[str, str] = field(default_factory=dict)  # "prefix" -> why not computed


def _rows_from(outputs: tuple[np.ndarray | None, np.ndarray], rows: np.ndarray, n_data: int,
               what: str) -> np.ndarray:
    """Logits of data rows `rows` from (index or None, logits) of an outputs file."""
    index, logits = outputs
    if index is None:
        if len(logits) != n_data:
            raise DataError(
                f"the {what} outputs have {plural(len(logits), 'row')} but the {what} data has "
                f"{n_data}; "
                "give one row per data row, or an 'index' naming the data row of each."
            )
        result: np.ndarray = logits[rows]
        return result
    where = np.full(max(n_data, int(index.max()) + 1), -1, dtype=np.int64)
    where[index] = np.arange(len(index))
    found = where[rows]
    if (found < 0).any():
        missing = rows[found < 0]
        raise DataError(
            f"the {what} outputs lack {missing.size} of the {rows.size} rows the audit needs "
            f"(first {missing[:5].tolist()}); export outputs for every audit/public row."
        )
    result = logits[found]
    return result


def _target_logits(target: Target, data: AuditData, n_rows: int) -> np.ndarray:
    parts = [_rows_from(target.outputs["data"], data.audit_rows, len(data.data), "audit")]
    if n_rows > data.n_audit:
        rows = np.concatenate([data.pool_rows, data.population_rows])[: n_rows - data.n_audit]
        if "public" in target.outputs and data.public is not None:  # (rows past the audit's
            # are public rows: a public dataset was given)
            parts.append(_rows_from(target.outputs["public"], rows, len(data.public), "public"))
        else:  # never read: attacks use the target only on audit (and population) rows
            parts.append(np.zeros((rows.size, data.num_classes), dtype=np.float32))
    return np.concatenate(parts)[:, None, :]


def _fit(logits: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Accuracy and mean cross-entropy of logits [n, C] against labels [n]."""
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    loss = np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(labels)), labels]
    return float((z.argmax(axis=1) == labels).mean()), float(loss.mean())


def _preprocessing_words(dataset: Any, mode: str) -> str:
    words = (getattr(dataset, "preprocessing", "") or mode).split(": ", 1)
    return f"{mode!r} ({words[-1]})" if len(words) == 2 else repr(mode)


def check_inputs(
    cfg: AuditConfig, target: Target, refs: References, data: AuditData, bank: SignalBank,
    device: str,
) -> tuple[dict[str, float], str | None, str | None]:
    """How well the target fits its own training rows, a warning when its inputs look unlike
    what it was trained on (another scaling of the same data), and a softer note.

    Suspicious: accuracy near chance (the majority class share plus a tenth of the rest) or
    25 points below the references' on their own training rows (models trained by us on this
    very data, so what it supports), or a mean loss above both twice and 0.5 nats over the
    references'. The target is then queried on its members under the other preprocessing;
    if it fits those clearly better, the warning names it. Low accuracy is warned about in
    any case; a high loss alone is a mismatch only when the other preprocessing explains it
    (else, when none could be tried, a softer note: the recipe may differ instead).
    """
    members = np.flatnonzero(data.members)
    assert bank.logits is not None and bank.labels is not None  # set by SignalBank
    labels = bank.labels[members]
    acc, loss = _fit(bank.logits[0, members, 0], labels)
    fit = {"target_member_accuracy": acc, "target_member_loss": loss}
    ref_acc = ref_loss = None
    n_pool_rows = min(data.n_pool, bank.n_samples - data.n_audit)
    if refs.modules and n_pool_rows == data.n_pool:
        pool = slice(data.n_audit, data.n_audit + data.n_pool)
        assert refs.membership is not None  # the references' membership comes with them
        fits = [_fit(bank.logits[1 + r, pool, 0][refs.membership[r]],
                     bank.labels[pool][refs.membership[r]]) for r in range(len(refs.modules))]
        ref_acc, ref_loss = (float(np.mean(v)) for v in zip(*fits, strict=True))
        fit.update(reference_train_accuracy=ref_acc, reference_train_loss=ref_loss)
    chance = float(np.bincount(labels).max() / len(labels))
    floor = chance + 0.1 * (1 - chance)
    low_acc = acc < max(floor, ref_acc - 0.25 if ref_acc is not None else 0.0)
    high_loss = ref_loss is not None and loss > max(2 * ref_loss, ref_loss + 0.5)
    if not (low_acc or high_loss):
        return fit, None, None
    mode = cfg.data.options.get("preprocessing", "standard")
    here = _preprocessing_words(data.data, mode)
    alt = other_preprocessing(cfg, data) if target.queryable else None
    if alt is not None:
        other, dataset = alt
        rows = data.audit_rows[members]
        alt_logits = query_logits([target.module], dataset.features, rows, ["plain"],
                                  data.kind, device, cfg.signals.batch_size, progress=False)
        alt_acc, alt_loss = _fit(alt_logits[0, :, 0], dataset.labels[rows])
        fit.update({f"target_member_accuracy_{other}": alt_acc,
                    f"target_member_loss_{other}": alt_loss})
        there = _preprocessing_words(dataset, other)
        better_acc = alt_acc >= acc + 0.1
        if better_acc or (alt_acc >= acc - 0.01 and alt_loss <= 0.5 * loss
                          and loss - alt_loss >= 0.5):
            how = (f"but {100 * alt_acc:.1f}% with {there}" if better_acc else
                   f"and {100 * alt_acc:.1f}% with {there}, but far less confident with "
                   f"{mode!r}: mean loss {loss:.3g} against {alt_loss:.3g}")
            trained = "raw data" if other == "raw" else "data preprocessed the standard way"
            return fit, (
                f"inputs look mismatched: the model is {100 * acc:.1f}% accurate on its own "
                f"training rows with preprocessing {here} {how}: it was probably trained on "
                f"{trained}; rerun with --preprocessing {other} (config: data: {{options: "
                f"{{preprocessing: {other}}}}}). Until then the attack figures describe the "
                "model on inputs it never saw and say little about what it leaks."
            ), None
    if not low_acc:
        # a loss gap alone that no other preprocessing explains: more likely another recipe
        # than other inputs, so a note, not a mismatch
        if alt is None and target.queryable:
            return fit, None, (
                f"the model's mean loss on its own training rows ({loss:.3g}) is far above "
                f"the references' on theirs ({ref_loss:.3g}): either it was trained less (or "
                "more regularised) than the references, or its inputs differ from its training "
                "data (scaling, normalisation); check the preprocessing if unsure."
            )
        return fit, None, None
    against = (f"the references (trained by miaudit on this data) reach {100 * ref_acc:.1f}% "
               f"accuracy and mean loss {ref_loss:.3g} on theirs"
               if ref_acc is not None else f"guessing the majority class gets {100 * chance:.1f}%")
    check = ("Check that the data are fed exactly as in training (scaling, normalisation, "
             "feature order, label encoding; `miaudit data list` states each dataset's "
             "preprocessing, --preprocessing raw feeds the values as shipped)")
    if data.kind == "tokens":
        here = "'as given' (the texts, tokenized by the model folder's tokenizer)"
        check = ("Check the label column and its encoding (labels are mapped to 0..K-1 in "
                 "sorted order), the text column, and model.max_length")
    return fit, (
        f"inputs look mismatched: the model is {100 * acc:.1f}% accurate (mean loss "
        f"{loss:.3g}) on its own training rows with preprocessing {here}, where {against}. "
        f"{check}; until then the attack figures say little about what the model leaks."
    ), None


def recall_prefix(data: AuditData, n_rows: int, modules: list[Any], seed: int
                  ) -> tuple[np.ndarray | None, str | None]:  # fmt: skip
    """ReCaLL's prefix (feature ids [P]) drawn from the bank's public rows, cut to the room the
    models' positions leave beside the texts, or None and why there is none."""
    public = np.arange(data.n_audit, n_rows)
    if public.size < RECALL_PREFIX_TEXTS:
        return None, (f"its prefix is drawn from {RECALL_PREFIX_TEXTS} public texts; this audit "
                      "has no public data (give --public or --public-rows)")
    limits = [p for p in map(max_positions, modules) if p is not None]
    return fitted_prefix(data.features, public, int(getattr(modules[0], "pad_id", 0)), seed,
                         min(limits) if limits else None, "model.max_length (--max-length)")


def build_audit_bank(
    cfg: AuditConfig, target: Target, refs: References, data: AuditData, device: str,
    progress: bool = True,
) -> AuditBank:
    """Query the target and the references on every bank row; white-box channels if possible."""
    queries, grad_norm = audit_signals(cfg, data.kind, target.kind)  # auto: as a run's rule
    notes: list[str] = []
    population_reason = None
    n_rows = len(data.labels)
    if target.kind == "outputs":
        if queries != ["plain"]:
            raise ConfigError("precomputed outputs hold one query per sample: use "
                              "signals.queries: [plain] (augmented queries need the model).")
        if "public" not in target.outputs and data.n_population:
            n_rows -= data.n_population  # population rows are the last block
            population_reason = ("needs the target's outputs on population samples (public "
                                 "rows no model trained on): give model.public_outputs")
        if not refs.modules and "public" not in target.outputs:
            n_rows = data.n_audit
    if data.n_population == 0:
        population_reason = ("needs population samples (public rows no model trains on): give "
                             "public data and a public.population fraction > 0")
    rows = np.arange(n_rows)
    target_model = (_target_logits(target, data, n_rows) if target.kind == "outputs"
                    else target.module)
    wanted = [get_attack(a) for a in cfg.attacks] if cfg.attacks else list_attacks()
    spec = SignalSpec(queries=tuple(queries), grad_norm=grad_norm,
                      boundary_distance=cfg.signals.boundary_distance,
                      batch_size=cfg.signals.batch_size, seed=cfg.seed,
                      # token ids (DC-PDD's frequencies) kept when an attack to run reads them
                      token_ids=any(spec.needs.token_ids for spec in wanted))
    base = prefix = None
    unavailable: dict[str, str] = {}
    if target.causal_lm and cfg.model.base_model and any(s.needs.base_model for s in wanted):
        cache = cfg.cache_dir if cfg.cache_dir else default_cache_dir()
        base = load_base_reference(cfg, target, None if data.texts is None else
                                   data.texts[: data.n_audit], cache, device)  # fmt: skip
    if target.causal_lm and any(s.needs.prefix_conditioned for s in wanted):
        prefix, why = recall_prefix(data, n_rows, [target.module, *refs.modules], cfg.seed)
        if why:
            unavailable["prefix"] = why
    signals = query_signals([target_model, *refs.modules], data.features, data.labels, rows,
                            data.kind, spec, device, progress, white_box=target.white_box,
                            black_box_reason=_BLACK_BOX.get(target.kind, ""), base=base,
                            prefix_ids=prefix, precision=[cfg.precision, *(
                                [(refs.recipe or {}).get("precision", "fp32")]
                                * len(refs.modules))])  # fmt: skip
    logits, seconds, missing = signals.logits, signals.seconds, signals.missing
    if target.kind != "outputs" and logits is not None:  # (a causal LM answers no logits)
        probe = logits[0, : data.n_audit, 0].astype(np.float64)
        if target.kind == "torch" and (probe >= 0).all() and np.allclose(probe.sum(1), 1, 1e-3):
            notes.append("the module's outputs look like probabilities, not logits; the bank "
                         "reads them as logits: return logits (or log-probabilities) instead")
    labels = data.labels[:n_rows]
    n_models = 1 + len(refs.modules)
    membership = np.zeros((n_models, n_rows), dtype=bool)
    membership[0, : data.n_audit] = data.members
    if refs.modules:
        membership[1:, data.n_audit: data.n_audit + data.n_pool] = refs.membership
    audit = np.zeros(n_rows, dtype=bool)
    audit[: data.n_audit] = True
    population = np.zeros(n_rows, dtype=bool)
    if population_reason is None:
        population[data.n_audit + data.n_pool:] = True
    texts = None if data.texts is None else data.texts[:n_rows]  # (zlib and blind read them)
    bank = assemble_bank(signals, labels, membership, audit, population, texts)
    if target.causal_lm:  # a loss and perplexity, no accuracy
        fit, mismatch, note = lm_fit(bank, data, len(refs.modules), refs.membership), None, None
    else:
        fit, mismatch, note = check_inputs(cfg, target, refs, data, bank, device)
    notes += [n for n in (mismatch, note) if n]
    return AuditBank(bank, missing, population_reason, notes, seconds, fit, mismatch,
                     unavailable)


def skip_reasons(
    names: list[str], built: AuditBank, refs: References
) -> dict[str, str]:
    """Why each attack in `names` cannot run on this audit (absent: it can), from its Needs."""
    n_refs = len(refs.modules)
    population = built.bank.population
    assert population is not None  # set by SignalBank
    reasons: dict[str, str] = {}
    for name in names:
        needs = get_attack(name).needs
        why: list[str] = []
        if needs.channel and needs.channel not in built.bank.channels:
            why.append(built.missing_channels.get(
                needs.channel, f"needs the channel {needs.channel}, which this audit lacks"))
        if (needs.out_references or needs.shadows) and n_refs == 0:
            # e.g. RMIA given the target's outputs on public rows (its population) but no
            # references: say that the population alone does not let it run
            alone = ("; the population samples it has do not let it run without them"
                     if needs.population and population.any() else "")
            why.append(f"needs reference models: {refs.reason}{alone}")
        elif needs.shadows and n_refs < needs.shadows:
            why.append(f"needs {needs.shadows} reference models as shadows; this audit has "
                       f"{n_refs} (raise references.models)")
        if needs.sequence and not built.bank.has_sequences:
            why.append("needs a causal language model's per-token log-probabilities; the "
                       "target is a classifier")
        if needs.text and not built.bank.has_text:
            why.append("needs the samples' texts (text data audited with model.hf_model)")
        if needs.base_model and built.bank.seq_base_token_logprob is None:
            why.append("needs the pretrained base model's token log-probabilities; this "
                       "audit queried no base model (give the model it was fine-tuned from "
                       "as --base-model, model.base_model)")
        if needs.prefix_conditioned and built.bank.seq_prefix_token_logprob is None:
            why.append("needs the model's log-probabilities conditioned on a non-member "
                       "prefix (ReCaLL); " + built.unavailable.get(
                           "prefix", "this audit did not compute them"))
        if needs.top1_correct and built.bank.seq_top1_correct is None:
            why.append("needs whether the target's top-1 prediction is each actual token "
                       "(seq_top1_correct); this bank does not hold it")
        if needs.token_ids and built.bank.seq_token_ids is None:
            why.append("needs the scored token ids (token frequencies); this audit did not "
                       "keep them")
        if needs.in_references:
            why.append("needs reference models trained on the audit samples (the online "
                       "design); references of a given model train on public data only, so "
                       "its offline variant runs instead")
        if needs.population and not population.any():
            why.append(built.population_reason or "needs population samples")
        if why:
            reasons[name] = "; ".join(why)
    return reasons


def bank_summary(built: AuditBank) -> dict[str, Any]:
    bank = built.bank
    return {"bank_models": bank.n_models, "bank_samples": bank.n_samples,
            "queries_per_sample": bank.n_queries, "channels": sorted(bank.channels),
            **{k: round(v, 1) for k, v in built.seconds.items()},
            **{k: round(v, 4) for k, v in built.fit.items()}}
