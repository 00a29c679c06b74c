"""Hugging Face model folders (``save_pretrained``) as miaudit models: the ``hf`` architecture.

A folder holds ``config.json``, the weights (``model.safetensors`` or ``pytorch_model.bin``,
possibly sharded with an ``*.index.json``) and the tokenizer (``tokenizer.json``). It is read
with ``local_files_only=True`` only: nothing ever comes from a model hub. Two tasks are
supported, read from ``config.json``'s ``architectures``: sequence classification
(``*ForSequenceClassification``, returning logits ``[B, C]``) and causal language modelling
(``*ForCausalLM`` / ``*LMHeadModel``, returning next-token logits ``[B, T, V]``, with
``causal_lm = True`` so the trainer and the signal assembly treat it as
:class:`miaudit.models.text.CausalLM`).

**Token ids in features.** As for the other text models, inputs are token ids ``[B, L]`` as
exact float32 (:func:`miaudit.models.text.token_ids`). miaudit's convention is padding id 0
(the text queries of :mod:`miaudit.signals.query` and the right-padding check of the sequence
bank rely on it), but a folder's tokenizer may pad with another id (RoBERTa 1, GPT-2 its
end-of-text token). So features hold the ids with the tokenizer's pad id and 0 swapped
(:func:`swap_pad`, its own inverse); the wrappers swap them back before the model sees them,
and a causal LM's logits are permuted the same way, so ``logits[..., i]`` scores feature id i.

**PEFT adapter folders.** A folder holding ``adapter_config.json`` and an adapter's weights
but no model weights (``peft_model.save_pretrained(DIR)``) is a LoRA adapter on a base model
(:func:`inspect_adapter`): a base-model name, folder or ``.gguf``
(:mod:`miaudit.models.pretrained`). :func:`load_folder_model` applies it to the base and merges
it (``merge_and_unload``), so the audited model is a plain causal LM like a merged folder's,
and refuses an adapter whose weights do not all land in the base (another base).

``transformers``, ``tokenizers`` and ``peft`` are imported inside the functions that need them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from miaudit.errors import ConfigError, DataError
from miaudit.models.pretrained import quiet_transformers as _quiet
from miaudit.models.text import TokenizedText, _check_texts, token_ids

CLASSIFIER, CAUSAL_LM = "sequence-classification", "causal-lm"
TASKS = (CLASSIFIER, CAUSAL_LM)
INITS = ("pretrained", "scratch")
# Weight files a save_pretrained folder may hold (sharded saves add numbered shards).
_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_SAVE_HINT = "model.save_pretrained(DIR) and tokenizer.save_pretrained(DIR)"
ADAPTER_CONFIG = "adapter_config.json"  # peft_model.save_pretrained(DIR) writes it
_ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
_BASE_FLAG = "--base-model (model.base_model, base_model=)"


def task_of(architecture: str) -> str | None:
    """The task of a transformers class name, or None when miaudit cannot audit it."""
    if architecture.endswith("ForSequenceClassification"):
        return CLASSIFIER
    if architecture.endswith(("ForCausalLM", "LMHeadModel")):
        return CAUSAL_LM
    return None


@dataclass(frozen=True)
class HFFolder:
    """What a save_pretrained folder holds, checked (see :func:`inspect_folder`)."""

    path: Path
    config: dict[str, Any]  # config.json
    architecture: str  # config.architectures[0], e.g. BertForSequenceClassification
    task: str  # CLASSIFIER | CAUSAL_LM
    weights: tuple[Path, ...]  # the weight files (shards and their index included)
    tokenizer: Path | None  # tokenizer.json
    # an adapter folder (``path``): the adapter, and the base's save_pretrained folder (a
    # GGUF's conversion) whose config, weights and tokenizer (unless the adapter has its own)
    # the fields above are
    adapter: Adapter | None = None
    base: Path | None = None

    @property
    def max_positions(self) -> int | None:
        for key in ("max_position_embeddings", "n_positions", "n_ctx"):
            if isinstance(self.config.get(key), int):
                return int(self.config[key])
        return None

    @property
    def num_labels(self) -> int:
        labels = self.config.get("id2label")
        return len(labels) if isinstance(labels, dict) else int(self.config.get("num_labels", 2))


def _weight_files(path: Path) -> tuple[Path, ...]:
    for index in _WEIGHT_INDEXES:
        if (path / index).is_file():
            try:
                shards = sorted(set(json.loads((path / index).read_text())["weight_map"].values()))
            except (OSError, ValueError, KeyError, AttributeError) as exc:
                raise ConfigError(f"{path / index} is not a readable weight index: {exc}") from exc
            return (path / index, *(path / s for s in shards))
    return tuple(path / name for name in _WEIGHT_FILES if (path / name).is_file())


@dataclass(frozen=True)
class Adapter:
    """A PEFT LoRA adapter folder (``adapter_config.json`` + its weights) and the base model it
    is applied to: the audited model is the base with the adapter merged in."""

    path: Path
    config: dict[str, Any]  # adapter_config.json
    weights: Path  # adapter_model.safetensors (or .bin)
    base: str  # the base model: a name, a save_pretrained folder or a .gguf file
    base_from_config: bool  # the base is adapter_config.json's base_model_name_or_path

    @property
    def rank(self) -> int:
        return int(self.config.get("r") or 8)

    @property
    def targets(self) -> list[str]:
        found = self.config.get("target_modules") or []
        return [found] if isinstance(found, str) else sorted(map(str, found))

    def describe(self) -> str:
        """What the report calls the model, e.g. "a LoRA adapter (r=4, targets q_proj, v_proj)
        on smollm2-135m"."""
        return (f"a LoRA adapter (r={self.rank}, targets {', '.join(self.targets) or 'none'}) "
                f"on {self.base}")

    def digest(self) -> str:
        """sha256 over adapter_config.json and the adapter weights (:func:`adapter_digest`)."""
        return adapter_digest(self.path)

    def meta(self) -> dict[str, Any]:
        """The adapter as the audit's summary records it."""
        return {"peft_type": str(self.config.get("peft_type")), "r": self.rank,
                "lora_alpha": self.config.get("lora_alpha"), "targets": self.targets,
                "base_model": self.base,
                "base_from": (ADAPTER_CONFIG if self.base_from_config else "model.base_model"),
                "folder": str(self.path), "adapter_sha256": self.digest()}


def _adapter_weights(path: Path) -> Path | None:
    return next((path / n for n in _ADAPTER_WEIGHTS if (path / n).is_file()), None)


def is_adapter_folder(path: str | Path) -> bool:
    """Whether ``path`` is a PEFT adapter folder: ``adapter_config.json`` and no model weights
    of its own (a folder with both holds a merged model, audited as such)."""
    folder = Path(path).expanduser()
    return (folder / ADAPTER_CONFIG).is_file() and not _weight_files(folder)


def inspect_adapter(
    path: str | Path, base_model: str | os.PathLike[str] | None, what: str = "model.hf_model"
) -> Adapter:
    """The adapter folder at ``path`` checked, on ``base_model`` (a name, folder or .gguf;
    None: adapter_config.json's ``base_model_name_or_path`` when that is a local folder, since
    nothing is ever downloaded). A ConfigError naming the fix for another PEFT method than
    LoRA, an adapter of another task than a causal LM, missing weights or no base."""
    from miaudit.models.pretrained import list_base_models, resolve_base_model

    folder = Path(path).expanduser().resolve()
    try:
        config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{folder / ADAPTER_CONFIG} is not readable JSON: {exc}") from exc
    merge_hint = ("merge it into its base (PeftModel.from_pretrained(base, DIR)"
                  ".merge_and_unload().save_pretrained(OUT), with the tokenizer) and audit OUT")
    kind = str(config.get("peft_type") or "")
    if kind.upper() != "LORA":
        raise ConfigError(f"{what} {folder} is a PEFT {kind or 'adapter of no stated type'} "
                          f"adapter; miaudit applies LoRA adapters only: {merge_hint}.")
    task = config.get("task_type")
    if task not in (None, "CAUSAL_LM"):
        raise ConfigError(
            f"{what} {folder} is a LoRA adapter for task_type {task} (adapter_config.json); "
            "miaudit applies adapters of causal LMs (task_type CAUSAL_LM) only: for a "
            f"classifier, {merge_hint.replace('base', 'base classifier', 1)}."
        )
    weights = _adapter_weights(folder)
    if weights is None:
        raise ConfigError(
            f"{what} {folder} has adapter_config.json but no adapter weights "
            f"({' or '.join(_ADAPTER_WEIGHTS)}): save them with peft_model.save_pretrained(DIR)."
        )
    named = config.get("base_model_name_or_path")
    if base_model:
        base, from_config = str(base_model), False
    elif isinstance(named, str) and named and Path(named).expanduser().is_dir():
        base, from_config = str(Path(named).expanduser().resolve()), True
    else:
        said = (f"names the base model {named!r}, not a local folder" if named else
                "names no base model (base_model_name_or_path)")
        raise ConfigError(
            f"{what} {folder} is a LoRA adapter whose adapter_config.json {said}; miaudit never "
            f"downloads a model: give the base model it was trained on with {_BASE_FLAG}: a "
            f"name ({', '.join(list_base_models())}), a save_pretrained folder or a .gguf file."
        )
    resolve_base_model(base)  # a name installed, a folder with config.json, a .gguf that exists
    return Adapter(folder, config, weights, base, from_config)


def adapter_folder(adapter: Adapter, cache_dir: str | os.PathLike[str] | None) -> HFFolder:
    """The audited model of an adapter folder as an :class:`HFFolder`: the base's config and
    weights (a GGUF base converted once into ``cache_dir``, as
    :func:`miaudit.models.pretrained.load_base_model` does), the adapter's tokenizer.json if
    it saved one, else the base's."""
    from miaudit.models.pretrained import converted_folder, resolve_base_model

    spec = resolve_base_model(adapter.base)
    root = spec.path if spec.kind == "folder" else converted_folder(spec, cache_dir)
    base = inspect_folder(root, "the adapter's base model", tokenizer=False, task=CAUSAL_LM)
    tok = next((p for p in (adapter.path / "tokenizer.json", base.path / "tokenizer.json")
                if p.is_file()), None)  # fmt: skip
    if tok is None:
        raise ConfigError(
            f"neither the adapter folder {adapter.path} nor its base model {adapter.base} has a "
            "tokenizer.json: save the tokenizer the adapter was trained with beside it "
            "(tokenizer.save_pretrained(DIR))."
        )
    return dataclasses.replace(base, path=adapter.path, tokenizer=tok, adapter=adapter,
                               base=base.path)


def inspect_folder(
    path: str | Path, what: str = "model.hf_model", weights: bool = True, tokenizer: bool = True,
    task: str | None = None,
) -> HFFolder:
    """The folder at ``path`` checked: a ConfigError naming the fix when it is not a folder,
    lacks config.json, (``weights``) its weights or (``tokenizer``) tokenizer.json, or holds
    an architecture that is neither a sequence classifier nor a causal LM. With ``task``
    given, any architecture is accepted (a pretrained base, e.g. BertForMaskedLM, that a
    classifier is fine-tuned from) and built for that task."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"{what} {path} is not a folder: give the folder written by {_SAVE_HINT}."
        )
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        if (path / ADAPTER_CONFIG).is_file():  # an adapter where only a full model is read
            raise ConfigError(
                f"{what} {path} is a PEFT adapter folder (adapter_config.json, no config.json); "
                f"give the base model's save_pretrained folder here, or merge the adapter "
                f"(merge_and_unload) and save the merged model with {_SAVE_HINT}."
            ) from None
        raise ConfigError(
            f"{what} {path} has no config.json: it is not a save_pretrained folder; save the "
            f"model with {_SAVE_HINT}."
        ) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path / 'config.json'} is not readable JSON: {exc}") from exc
    names = config.get("architectures") or []
    architecture = str(names[0]) if names else ""
    task = task or task_of(architecture)
    if task not in TASKS:
        raise ConfigError(
            f"{what} {path} holds a {architecture or 'model of no stated architecture'} "
            "(config.json 'architectures'); miaudit audits sequence classifiers "
            "(*ForSequenceClassification) and causal language models (*ForCausalLM, "
            "*LMHeadModel). Save the model class you trained, e.g. "
            "AutoModelForSequenceClassification, with save_pretrained."
        )
    if config.get("auto_map"):
        raise ConfigError(
            f"{what} {path} needs custom code (config.json 'auto_map'); miaudit never runs "
            "code from a model folder: audit it as a PyTorch module (model.module) instead."
        )
    files = _weight_files(path) if weights else ()
    if weights and not files:
        raise ConfigError(
            f"{what} {path} has no weights (model.safetensors or pytorch_model.bin): save "
            "them with model.save_pretrained(DIR)."
        )
    tok = path / "tokenizer.json"
    if tokenizer and not tok.is_file():
        raise ConfigError(
            f"{what} {path} has no tokenizer.json: the audit tokenizes the texts with the "
            "model's own tokenizer; save it beside the model with tokenizer.save_pretrained(DIR) "
            "(a fast tokenizer, e.g. AutoTokenizer.from_pretrained(BASE))."
        )
    return HFFolder(path.resolve(), config, architecture, task, files,
                    tok if tok.is_file() else None)


@functools.lru_cache(maxsize=32)
def _digest(files: tuple[tuple[str, str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, path, _, _ in files:
        digest.update(name.encode() + b"\0")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def folder_digest(path: str | Path, weights: bool = True) -> str:
    """sha256 over config.json and (``weights``) the weight files: what an ``hf`` model built
    from the folder depends on. Memoised by file size and modification time."""
    folder = Path(path).expanduser().resolve()
    files = [folder / "config.json", *(_weight_files(folder) if weights else ())]
    return _digest(tuple((f.name, str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))


def adapter_digest(path: str | Path) -> str:
    """sha256 over adapter_config.json and the adapter weights: what the audited model of an
    adapter folder depends on besides its base. Memoised as :func:`folder_digest` is."""
    folder = Path(path).expanduser().resolve()
    files = [folder / ADAPTER_CONFIG, *filter(None, [_adapter_weights(folder)])]
    return _digest(tuple((f.name, str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))


# --- token ids --------------------------------------------------------------------------------


def swap_pad(ids: Tensor | np.ndarray, pad: int) -> Tensor | np.ndarray:
    """``ids`` with ``pad`` and 0 exchanged (its own inverse): tokenizer ids <-> features."""
    if pad == 0:
        return ids
    where = torch.where if isinstance(ids, Tensor) else np.where
    return where(ids == pad, 0, where(ids == 0, pad, ids))


def encode_texts(
    texts: Sequence[str] | np.ndarray, tokenizer: Any, max_length: int, pad: int
) -> tuple[TokenizedText, np.ndarray]:
    """Token ids of ``texts`` as features (``pad`` swapped with 0, right-padded with 0), and
    which texts were cut (bool [N]).

    The tokenizer truncates to ``max_length`` itself, as transformers does (its special
    tokens, e.g. [CLS] ... [SEP], kept); texts cut are counted. A ``pad`` id inside a text
    (a tokenizer padding with its end-of-text token that also ends texts) would read as
    padding: a DataError.
    """
    items = _check_texts(texts)
    tok = tokenizer.__class__.from_str(tokenizer.to_str())  # our truncation, the caller's intact
    tok.no_padding()
    tok.enable_truncation(int(max_length))
    ids = np.full((len(items), int(max_length)), pad, dtype=np.int64)
    lengths = np.zeros(len(items), dtype=np.int64)
    cut = np.zeros(len(items), dtype=bool)
    inner = 0
    for i, enc in enumerate(tok.encode_batch(items) if items else []):
        row = enc.ids
        cut[i] = bool(enc.overflowing)
        inner += pad in row
        ids[i, : len(row)] = row
        lengths[i] = len(row)
    if inner:
        raise DataError(
            f"the padding token id {pad} occurs inside {inner} of {len(items)} texts once "
            "tokenized, so padding could not be told from text: give the tokenizer a padding "
            "token of its own (tokenizer.add_special_tokens({'pad_token': '<pad>'}) and "
            "model.resize_token_embeddings) or save it with the pad token it was trained with."
        )
    return TokenizedText(swap_pad(ids, pad), lengths, int(cut.sum()), int(max_length), 0,
                         tok.get_vocab_size(with_added_tokens=True)), cut


def max_positions(module: Any) -> int | None:
    """The positions a causal LM module takes (its transformers config: ``module.model`` or,
    for gpt-small, ``module.lm``), None if unstated."""
    inner = getattr(module, "model", None) or getattr(module, "lm", None)
    config = getattr(inner, "config", None)
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


# --- the wrappers -----------------------------------------------------------------------------


class HFModule(nn.Module):
    """A transformers model taking feature ids ``[B, L]`` (pad 0, see the module docstring)."""

    pad_id = 0  # in feature space; ``token_pad`` is the tokenizer's

    def __init__(self, model: nn.Module, token_pad: int) -> None:
        super().__init__()
        self.model = model
        self.token_pad = int(token_pad)

    def _ids(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(tokenizer ids, mask of real tokens) of feature ids ``x``."""
        ids = token_ids(x)
        return swap_pad(ids, self.token_pad), ids != 0

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The state dict with tied tensors (e.g. an LM head tied to the input embedding) as
        copies of their own: safetensors (the model cache) refuses shared memory. Loading
        writes every key into the one shared parameter."""
        state = super().state_dict(*args, **kwargs)
        seen: set[tuple[int, int]] = set()
        for key, value in state.items():
            if isinstance(value, Tensor) and value.numel():
                where = (value.untyped_storage().data_ptr(), value.storage_offset())
                if where in seen:
                    state[key] = value.clone()
                seen.add(where)
        result: dict[str, Any] = state
        return result


class HFClassifier(HFModule):
    """A ``*ForSequenceClassification`` model: feature ids ``[B, L]`` -> logits ``[B, C]``.

    Encoders get the attention mask as the additive 4-D mask (transformers uses it as is,
    where from a 2-D one it branches on the data, which torch.func cannot trace: per-sample
    gradient norms need it); decoders, whose causal mask a 4-D one would replace, the 2-D one.
    """

    def __init__(self, model: nn.Module, token_pad: int) -> None:
        super().__init__(model, token_pad)
        self.additive_mask = _additive_mask_ok(self)

    def forward(self, x: Tensor, additive: bool | None = None) -> Tensor:
        ids, real = self._ids(x)
        if self.additive_mask if additive is None else additive:
            mask = (~real[:, None, None, :]).float() * torch.finfo(torch.float32).min
        else:
            mask = real.long()
        return self.model(input_ids=ids, attention_mask=mask).logits


def _additive_mask_ok(module: HFClassifier) -> bool:
    """Whether the model computes the same logits with the additive 4-D mask (an encoder)."""
    vocab = int(module.model.get_input_embeddings().num_embeddings)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(1, max(2, vocab), (2, 8), generator=gen)
    x[0, 5:] = 0
    was = module.training
    module.eval()
    try:
        with torch.no_grad():
            return bool(torch.allclose(module(x, True), module(x, False), atol=1e-4))
    except Exception:  # a model refusing 4-D masks
        return False
    finally:
        module.train(was)


class HFCausalLM(HFModule):
    """A causal LM: feature ids ``[B, T]`` -> next-token logits ``[B, T, V]`` over feature ids
    (the pad swap applied to the vocabulary axis too)."""

    causal_lm = True

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    def lm_outputs(self, x: Tensor) -> tuple[Tensor, Tensor, int]:
        """``(logits [B, T, V], ids [B, T], pad)`` in the tokenizer's own id space: what the
        next-token loss and the sequence signals read (the tokenizer ids index the logits;
        ``pad`` marks padding). Saves :meth:`forward`'s copy of the logits into feature
        space, the size of the logits themselves."""
        ids, real = self._ids(x)
        logits = self.model(input_ids=ids, attention_mask=real.long(), use_cache=False).logits
        return logits, ids, self.token_pad

    def forward(self, x: Tensor) -> Tensor:
        logits = self.lm_outputs(x)[0]
        if self.token_pad == 0:
            return logits
        order = swap_pad(torch.arange(logits.shape[-1], device=logits.device), self.token_pad)
        return logits.index_select(-1, order)


def load_folder_model(
    folder: HFFolder, token_pad: int, num_labels: int | None = None, init: str = "pretrained",
    strict: bool = True,
) -> HFModule:
    """The folder's model (``init="pretrained"``: its weights; ``"scratch"``: its config,
    randomly initialised from torch's RNG) wrapped for feature ids. ``num_labels`` (a
    classifier) replaces the head's width; ``strict``: every weight must come from the folder
    (the audited model), else a ConfigError naming what is missing."""
    if folder.adapter is not None and init == "pretrained":
        return _load_adapter_model(folder, token_pad)
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    auto = AutoModelForCausalLM if folder.task == CAUSAL_LM else AutoModelForSequenceClassification
    extra: dict[str, Any] = {}
    if num_labels and folder.task == CLASSIFIER:
        extra["num_labels"] = num_labels
    # eager attention: the same math, and torch.func can trace it (per-sample gradients)
    options = {"attn_implementation": "eager", "dtype": torch.float32}
    try:
        with _quiet():
            if init == "scratch":
                config = AutoConfig.from_pretrained(folder.path, local_files_only=True, **extra)
                model, info = auto.from_config(config, **options), {}
            else:
                model, info = auto.from_pretrained(
                    folder.path, local_files_only=True, output_loading_info=True,
                    ignore_mismatched_sizes=not strict, **extra, **options,
                )  # fmt: skip
    except (OSError, ValueError, KeyError, RuntimeError, ImportError) as exc:
        raise ConfigError(
            f"transformers cannot load the {folder.architecture} in {folder.path}: "
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        ) from exc
    missing = list(info.get("missing_keys") or []) + list(info.get("mismatched_keys") or [])
    if strict and missing:
        raise ConfigError(
            f"the weights in {folder.path} lack {len(missing)} of the {folder.architecture}'s "
            f"tensors (e.g. {', '.join(map(str, missing[:4]))}): the folder is not the trained "
            f"model (a base checkpoint without its head?); save the model you trained with "
            "model.save_pretrained(DIR)."
        )
    if folder.task == CLASSIFIER and getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = int(token_pad)  # decoders find the last token by it
    wrapper = HFCausalLM if folder.task == CAUSAL_LM else HFClassifier
    result: HFModule = wrapper(model, token_pad).eval()
    return result


def _load_adapter_model(folder: HFFolder, token_pad: int) -> HFCausalLM:
    """The base (float32, :func:`miaudit.models.pretrained.load_base_model`) with the adapter
    applied by ``peft`` and merged: a plain causal LM. Every tensor of the adapter file must be
    the adapter's weight in the model after loading and the model must have no LoRA weight the
    file lacks, else a ConfigError naming both: a base of other module names or shapes would
    otherwise leave an adapter partly at its random (or zero) initialisation, silently."""
    from miaudit.models.pretrained import load_base_model

    adapter, base_path = folder.adapter, folder.base
    assert adapter is not None and base_path is not None
    try:
        from peft import PeftModel, get_peft_model_state_dict
        from peft.utils import load_peft_weights
    except ImportError:
        raise ConfigError(f"{folder.path} is a PEFT adapter: applying it needs the peft "
                          "package; install it with: pip install 'miaudit[llm]'") from None
    base, _ = load_base_model(base_path, device="cpu")  # the folder (a GGUF: its conversion)
    fix = (f"the adapter in {adapter.path} does not fit the base model {adapter.base} "
           f"({folder.architecture})")
    hint = f"give the base model the adapter was trained on with {_BASE_FLAG}"
    try:
        with _quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # peft's missing-key warning: checked below
            model = PeftModel.from_pretrained(base, str(adapter.path), is_trainable=False,
                                              local_files_only=True)
            saved = load_peft_weights(str(adapter.path), device="cpu")
    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as exc:
        first = str(exc).strip().splitlines()
        detail = " ".join(line.strip() for line in first[:2])
        raise ConfigError(f"{fix}: {type(exc).__name__}: {detail[:400]}; {hint}.") from exc
    # save_embedding_layers explicit: peft's "auto" would ask the hub about the base's name
    loaded = get_peft_model_state_dict(model, save_embedding_layers=False)
    if set(saved) - set(loaded):  # a resized vocabulary: the embeddings were saved too
        loaded.update(get_peft_model_state_dict(model, save_embedding_layers=True))
    unused, untrained = sorted(set(saved) - set(loaded)), sorted(set(loaded) - set(saved))
    differ = sorted(k for k in set(saved) & set(loaded)
                    if saved[k].shape != loaded[k].shape
                    or not torch.equal(saved[k].to(loaded[k].dtype), loaded[k].cpu()))
    for keys, why in ((unused, "of the adapter's tensors have no place in the base"),
                      (untrained, "of the base's adapted modules have no weights in the file"),
                      (differ, "of the adapter's tensors were not loaded as saved")):
        if keys:
            raise ConfigError(f"{fix}: {len(keys)} {why} (e.g. {', '.join(keys[:3])}); {hint}.")
    merged = model.merge_and_unload()
    if hasattr(merged, "set_attn_implementation"):
        with contextlib.suppress(Exception):  # eager: as load_folder_model, torch.func traces it
            merged.set_attn_implementation("eager")
    result: HFCausalLM = HFCausalLM(merged, token_pad).eval()
    return result


# architecture 'hf': declared in miaudit.models.architectures
def hf(
    input_shape: tuple[int, ...],
    num_classes: int,
    folder: str = "",
    folder_sha256: str = "",
    init: str = "pretrained",
    pad_id: int = 0,
    task: str = CLASSIFIER,
) -> nn.Module:
    """A Hugging Face model from a save_pretrained ``folder``: its weights (``init:
    pretrained``, e.g. the checkpoint a target was fine-tuned from; a classifier gets a new
    head of ``num_classes`` when its width differs) or its config alone, freshly initialised
    (``init: scratch``). ``pad_id`` is the tokenizer's padding id (inputs are feature ids, see
    the module docstring). ``folder_sha256`` (:func:`folder_digest`; of config.json alone
    for ``scratch``) pins the folder's content: part of the cache key, checked here."""
    if init not in INITS or task not in TASKS:
        raise ConfigError(f"hf init must be one of {', '.join(INITS)} and task one of "
                          f"{', '.join(TASKS)}; got {init!r} and {task!r}.")
    if not folder:
        raise ConfigError("architecture 'hf' needs arch_params.folder (a save_pretrained folder).")
    info = inspect_folder(folder, "arch_params.folder", weights=init == "pretrained",
                          tokenizer=False, task=task)  # fmt: skip
    if len(input_shape) != 1:
        raise ConfigError(f"hf takes token ids (max_length,), got input_shape {input_shape}.")
    if info.max_positions is not None and input_shape[0] > info.max_positions:
        raise ConfigError(f"{info.path} takes at most {info.max_positions} tokens; the inputs "
                          f"have {input_shape[0]} (lower max_length).")
    if folder_sha256:
        found = folder_digest(folder, weights=init == "pretrained")
        if found != folder_sha256:
            raise ConfigError(
                f"the folder {info.path} changed since this recipe was made (sha256 {found[:12]}"
                f" vs {folder_sha256[:12]}): models trained from it are not the ones recorded."
            )
    return load_folder_model(info, int(pad_id), int(num_classes), init, strict=False)
