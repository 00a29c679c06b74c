"""A Hugging Face model folder as the audited model (``model.hf_model`` / ``--hf-model``).

The folder (``save_pretrained``: config.json, weights, tokenizer.json) is read with
``local_files_only=True`` by :mod:`miaudit.models.hf`. The audit's texts (a text data file:
``text_column`` + ``label_column``; a causal LM's need no label column, and a .txt holds one
text a line) are tokenized with the folder's own tokenizer, truncated
to ``model.max_length`` tokens (default: the model's positions, at most 512), and the audit
goes on as for a PyTorch module (``Target.kind == "hf"``, white box):

- a sequence classifier answers logits, so the classifier bank and attacks run unchanged;
- a causal LM answers sequence signals (:func:`miaudit.signals.assemble.lm_signals`), read by
  the language-model attacks (the default attack list for it), the blind baseline included.

A PEFT LoRA adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``,
:func:`miaudit.models.hf.inspect_adapter`) is audited as its base model (``model.base_model``,
else adapter_config.json's ``base_model_name_or_path`` when that is a local folder) with the
adapter merged in; that base is also lm-base-reference's reference and the references' starting
point, and the summary records the adapter (rank, targets, sha256).

Reference models are the ``hf`` architecture trained by miaudit's trainer on public rows:
fine-tuned from ``references.base`` (the pretrained checkpoint the target was fine-tuned
from, as the RAPID paper does for BERT) when given, else the target's config trained from
scratch, which the report's reference note says. Never from the target's own weights: those
have seen the members.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from miaudit.attacks import list_attacks
from miaudit.config.sections.spec import required
from miaudit.data import Dataset
from miaudit.data.dataset import require_labels
from miaudit.errors import ConfigError
from miaudit.external.audit_config import AuditConfig
from miaudit.external.data import AuditData, bank_features
from miaudit.external.sources import Target
from miaudit.models.hf import (
    CAUSAL_LM,
    HFFolder,
    HFModule,
    adapter_folder,
    encode_texts,
    folder_digest,
    inspect_adapter,
    inspect_folder,
    is_adapter_folder,
    load_folder_model,
)
from miaudit.signals import SignalBank
from miaudit.train import Recipe

DEFAULT_MAX_LENGTH = 512
RECIPE_HINT = ("{optimizer: adam, lr: 0.00005, epochs: 3, batch_size: 16, schedule: constant} "
               "(the recipe the model was fine-tuned with)")


@dataclass
class HFTarget:
    """What the audit keeps of a model folder besides the module."""

    folder: HFFolder
    tokenizer: Any  # tokenizers.Tokenizer
    pad: int  # the tokenizer's padding id (features hold it as 0)
    max_length: int
    truncated: int = 0  # bank texts longer than max_length, cut

    @property
    def causal_lm(self) -> bool:
        return self.folder.task == CAUSAL_LM

    def meta(self) -> dict[str, Any]:
        adapter = self.folder.adapter
        return {"hf_architecture": self.folder.architecture, "hf_task": self.folder.task,
                "max_length": self.max_length, "texts_truncated": self.truncated,
                **({} if adapter is None else {"hf_model": adapter.describe(),
                                               "hf_adapter": adapter.meta()})}


# --- the folder's tokenizer ------------------------------------------------------------------


def _special(folder: Path, name: str) -> str | None:
    """A special token's text from tokenizer_config.json or special_tokens_map.json."""
    for file in ("tokenizer_config.json", "special_tokens_map.json"):
        try:
            value = json.loads((folder / file).read_text(encoding="utf-8")).get(name)
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            return value
    return None


def load_tokenizer(folder: HFFolder) -> tuple[Any, int]:
    """The folder's ``tokenizers.Tokenizer`` and its padding id: the tokenizer's pad token,
    else config.json's pad_token_id, else [PAD] / <pad>, else the end-of-text token (GPT-2
    pads with it); a ConfigError when there is none."""
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(folder.tokenizer))
    except Exception as exc:  # tokenizers raises its own exception type
        raise ConfigError(f"{folder.tokenizer} is not a readable tokenizer.json: {exc}") from exc
    # its special tokens beside it (an adapter folder may use its base model's tokenizer)
    where = folder.tokenizer.parent if folder.tokenizer is not None else folder.path
    candidates = [
        tok.token_to_id(t) if (t := _special(where, "pad_token")) else None,
        folder.config.get("pad_token_id"),
        tok.token_to_id("[PAD]"), tok.token_to_id("<pad>"),
        tok.token_to_id(t) if (t := _special(where, "eos_token")) else None,
        folder.config.get("eos_token_id"),
    ]  # fmt: skip
    pad = next((int(c) for c in candidates if isinstance(c, int) and c >= 0), None)
    if pad is None:
        raise ConfigError(
            f"the tokenizer in {folder.path} has no padding token (nor an end-of-text token to "
            "pad with): set tokenizer.pad_token (e.g. to its eos token) and save it again."
        )
    return tok, pad


# --- the target -------------------------------------------------------------------------------


def hf_task(cfg: AuditConfig) -> str | None:
    """The task of ``model.hf_model`` (None without one); the folder is checked here, before
    any other work, and so is ``model.base_model`` (a causal LM's only; a name, folder or
    .gguf file that exists). An adapter folder is a causal LM whose base must be known here:
    given, or a local folder named in its adapter_config.json."""
    if cfg.model.hf_model and is_adapter_folder(cfg.model.hf_model):
        inspect_adapter(cfg.model.hf_model, cfg.model.base_model)
        return CAUSAL_LM
    task = inspect_folder(cfg.model.hf_model).task if cfg.model.hf_model else None
    if cfg.model.base_model:
        if task != CAUSAL_LM:
            raise ConfigError(
                "model.base_model (--base-model) is the pretrained model a causal LM was "
                f"fine-tuned from; the model in {cfg.model.hf_model} is a {task}: leave it out."
            )
        from miaudit.models.pretrained import resolve_base_model

        resolve_base_model(cfg.model.base_model)
    return task


def default_attacks(task: str | None) -> list[str]:
    """Every attack for a torch/sklearn/black-box target (those that cannot run are listed);
    for a causal LM the language-model attacks (blind included); for a Hugging Face classifier
    every attack but those reading a causal LM's sequence signals."""
    specs = list_attacks()
    if task == CAUSAL_LM:
        return [s.name for s in specs if s.family == "language-model"]
    if task is not None:
        return [s.name for s in specs if not s.needs.sequence]
    return [s.name for s in specs]


def _tokens(ds: Dataset, hf: HFTarget) -> tuple[Dataset, np.ndarray]:
    """A text Dataset as token-id features (the ``tokens`` kind the text models take), and
    which of its texts were cut."""
    tokens, cut = encode_texts(ds.features, hf.tokenizer, hf.max_length, hf.pad)
    return dataclasses.replace(
        ds, features=tokens.features(), kind="tokens",
        preprocessing=f"{ds.preprocessing}; token ids of the model folder's tokenizer, "
                      f"max_length {hf.max_length}",
    ), cut


def load_hf_target(cfg: AuditConfig, data: AuditData) -> tuple[Target, AuditData]:
    """The folder's model as a Target, and the audit data tokenized with its tokenizer.

    An adapter folder whose base comes from its adapter_config.json sets
    ``cfg.model.base_model`` to that folder: the base is then lm-base-reference's reference,
    as a base given with --base-model is, and the summary's base_model names it."""
    notes: list[str] = []
    hf_model = required(cfg.model.hf_model, "model.hf_model")
    if is_adapter_folder(hf_model):
        from miaudit.train.model_cache import default_cache_dir

        adapter = inspect_adapter(hf_model, cfg.model.base_model)
        folder = adapter_folder(adapter, cfg.cache_dir if cfg.cache_dir else default_cache_dir())
        if adapter.base_from_config:
            cfg.model.base_model = adapter.base
            notes.append(f"the adapter's base model is {adapter.base}, named by its "
                         "adapter_config.json (base_model_name_or_path); give --base-model "
                         "(model.base_model) if it was trained on another")
    else:
        folder = inspect_folder(hf_model)
    if data.kind != "text":
        raise ConfigError(
            f"a Hugging Face model folder is audited on texts, but the audit data "
            f"{data.data.name} is {data.kind} data: give a .csv/.jsonl/.parquet file with a "
            "text column (data.options: {text_column: text, label_column: label})."
        )
    if folder.task != CAUSAL_LM:  # texts without labels are a causal LM's only
        for ds in (data.data, data.public):
            if ds is not None:
                require_labels(ds, f"the Hugging Face classifier in {folder.path}")
    tokenizer, pad = load_tokenizer(folder)
    positions = folder.max_positions
    max_length = cfg.model.max_length or min(positions or DEFAULT_MAX_LENGTH, DEFAULT_MAX_LENGTH)
    if positions is not None and max_length > positions:
        raise ConfigError(f"model.max_length {max_length} exceeds the model's {positions} "
                          "positions (config.json); lower it.")
    module = load_folder_model(folder, pad)
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    table = int(module.model.get_input_embeddings().num_embeddings)
    if vocab > table:
        raise ConfigError(
            f"the tokenizer does not match the model: tokenizer.json has {vocab:,} tokens but "
            f"the model's embedding table only {table:,} (in {folder.path}). Save the tokenizer "
            "the model was trained with (or call model.resize_token_embeddings(len(tokenizer)) "
            "before training)."
        )
    if folder.task != CAUSAL_LM:
        width = folder.num_labels
        if width != data.num_classes:
            mapping = next((n for n in data.data.notes.split("; ") if "labels mapped" in n), "")
            raise ConfigError(
                f"the model has {width} output labels (config.json num_labels / id2label) but "
                f"the audit data has {data.num_classes} classes ({mapping or 'labels 0..K-1'}): "
                "give the label column the model was trained on, in the same encoding."
            )
    hf = HFTarget(folder, tokenizer, pad, int(max_length))
    tokens, cut = _tokens(data.data, hf)
    public, cut_public = (tokens, cut) if data.public is data.data else (
        _tokens(data.public, hf) if data.public is not None else (None, None))
    features, _ = bank_features(tokens, public, data.audit_rows, data.pool_rows,
                                data.population_rows)
    hf.truncated = int(cut[data.audit_rows].sum()) + (0 if cut_public is None else int(
        cut_public[np.concatenate([data.pool_rows, data.population_rows])].sum()))
    if hf.truncated:
        notes.append(f"{hf.truncated} of {len(features)} texts (audit and public rows) were "
                     f"longer than max_length {max_length} tokens and cut, as the tokenizer "
                     "truncates; raise model.max_length if the model saw more of them")
    name = (f"{folder.architecture} from {folder.path}" if folder.adapter is None else
            f"{folder.adapter.describe()} ({folder.architecture}, from {folder.path})")
    target = Target("hf", name, module=module, notes=notes, hf=hf)
    return target, dataclasses.replace(data, features=features, data=tokens, public=public,
                                       texts=data.features)


# Texts of the audit on which the base model's tokenizer must give the model's own ids.
_TOKENIZER_PROBES = 8


def load_base_reference(cfg: AuditConfig, target: Target,
                        texts: Sequence[str] | np.ndarray | None,
                        cache_dir: str | Path | None, device: str) -> HFModule:
    """``model.base_model`` as a causal LM module over the target's feature ids (the target's
    padding swap), on ``device``; a ConfigError when its tokenizer does not match the fine-tuned
    model's: another vocabulary size, or other ids for the first audit texts."""
    from miaudit.models.hf import HFCausalLM
    from miaudit.models.pretrained import load_base_model

    hf = target.hf
    model, tokenizer = load_base_model(required(cfg.model.base_model, "model.base_model"),
                                       cache_dir=cache_dir, device=device)
    ours = hf.tokenizer.get_vocab_size(with_added_tokens=True)
    theirs = len(tokenizer)
    table = int(model.get_output_embeddings().weight.shape[0])
    why = None
    if theirs != ours or table < ours:
        why = (f"its tokenizer has {theirs:,} tokens (output layer {table:,}), the fine-tuned "
               f"model's {ours:,}")
    else:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        for text in list(texts if texts is not None else [])[:_TOKENIZER_PROBES]:
            mine = hf.tokenizer.encode(str(text)).ids
            other = (backend.encode(str(text)).ids if backend is not None else
                     tokenizer(str(text))["input_ids"])
            if list(other) != list(mine):
                why = f"its tokenizer gives other token ids for the audit text {str(text)[:40]!r}"
                break
    if why is not None:
        raise ConfigError(
            f"the base model {cfg.model.base_model} does not match the fine-tuned model: {why}. "
            "Give the pretrained model the fine-tuned one was trained from (same tokenizer)."
        )
    result: HFModule = HFCausalLM(model, hf.pad).eval()
    return result


def hf_recipe(cfg: AuditConfig, target: Target) -> tuple[Recipe | None, str | None]:
    """The reference recipe of a model folder: ``references.recipe`` with the ``hf``
    architecture (``references.base`` fine-tuned, else the target's config from scratch), or
    None and why there is none."""
    stated, hf = cfg.references.recipe, target.hf
    if stated is None:
        return None, ("no training recipe was stated for reference models of the Hugging Face "
                      f"model: give references.recipe, e.g. {RECIPE_HINT}")
    fields = dict(stated)
    if "architecture" in fields:  # a stand-in the user names
        return Recipe.from_dict(fields), None
    if fields.get("dp") is not None:
        raise ConfigError("references.recipe.dp (DP-SGD) is not supported for Hugging Face "
                          "models; train the references without it.")
    if cfg.references.base:
        base = inspect_folder(cfg.references.base, "references.base", tokenizer=False,
                              task=hf.folder.task)  # fmt: skip
        vocab = base.config.get("vocab_size")
        if isinstance(vocab, int) and vocab < hf.tokenizer.get_vocab_size(with_added_tokens=True):
            raise ConfigError(
                f"references.base {base.path} has a vocabulary of {vocab:,} tokens, fewer than "
                "the model's tokenizer: the tokenizer does not match it, so it is not the "
                "checkpoint the model was fine-tuned from."
            )
        params = {"folder": str(base.path), "folder_sha256": folder_digest(base.path),
                  "init": "pretrained"}
    elif hf.folder.base is not None:  # an adapter's base: the checkpoint it was trained from
        params = {"folder": str(hf.folder.base), "init": "pretrained",
                  "folder_sha256": folder_digest(hf.folder.base)}
    else:
        params = {"folder": str(hf.folder.path), "init": "scratch",
                  "folder_sha256": folder_digest(hf.folder.path, weights=False)}
    fields["architecture"] = "hf"
    fields["arch_params"] = {**params, "pad_id": hf.pad, "task": hf.folder.task}
    return Recipe.from_dict(fields), None


def reference_note(target: Target, n: int, recipe: dict[str, Any] | None) -> str:
    """The report's words on how the references of a model folder were made."""
    params = (recipe or {}).get("arch_params") or {}
    if (recipe or {}).get("architecture") != "hf":
        return (f"The {n} reference models use a stand-in architecture, not the model's own; "
                "reference-based attacks may understate the leak.")
    adapter = getattr(target.hf.folder, "adapter", None) if target.hf is not None else None
    if params.get("init") == "pretrained" and adapter is not None and (
            params.get("folder") == str(target.hf.folder.base)):
        return (f"The {n} reference models were fine-tuned (all weights, not a LoRA adapter) "
                f"from the adapter's base model {adapter.base} on public data with the recipe "
                "stated in the audit config; if the adapter was trained otherwise, "
                "reference-based attacks are weaker than an informed attacker's.")
    if params.get("init") == "pretrained":
        return (f"The {n} reference models were fine-tuned from {params.get('folder')} "
                "(references.base) on public data with the recipe stated in the audit config; "
                "if the model was fine-tuned otherwise, reference-based attacks are weaker "
                "than an informed attacker's.")
    return (f"The {n} reference models share the model's config but were trained from scratch "
            "(randomly initialised) on public data with the stated recipe, since no pretrained "
            "base was given (references.base). If the model was fine-tuned from a pretrained "
            "checkpoint, such references behave unlike it and reference-based attacks "
            "understate the leak: give that checkpoint as references.base.")


def lm_fit(bank: SignalBank, data: AuditData, n_refs: int,
           membership: np.ndarray | None) -> dict[str, float]:
    """Mean next-token loss (nats per token) and perplexity of the target on its members and
    non-members, and the references' on their own training rows: how well an LM fits."""
    loss = -bank.sequence_loglik
    audit = loss[0, : data.n_audit]
    fit = {}
    for name, rows in (("member", data.members), ("nonmember", ~data.members)):
        value = float(audit[rows].mean())
        fit[f"target_{name}_loss"] = value
        fit[f"target_{name}_perplexity"] = float(np.exp(value))
    if n_refs and membership is not None and bank.n_samples >= data.n_audit + data.n_pool:
        pool = loss[1:, data.n_audit: data.n_audit + data.n_pool]
        fit["reference_train_loss"] = float(np.mean([pool[r][membership[r]].mean()
                                                     for r in range(n_refs)]))
    return fit
