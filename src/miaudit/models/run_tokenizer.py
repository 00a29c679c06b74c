"""A run's tokenizer for its text dataset (``dataset.tokenizer``) and the dataset as token ids.

``wordpiece`` is MiniLM's (fixed); ``bpe`` a byte-level BPE trained on the public pool's texts
only; ``base`` the pretrained base model's own (``hf-causal-lm``); ``auto`` picks ``base``
when the run fine-tunes a base model, else ``wordpiece``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from miaudit.errors import ConfigError
from miaudit.models.names import TOKENIZERS
from miaudit.models.text import tokenize, train_bpe


def run_tokenizer(
    name: str, public_texts: Sequence[str] | np.ndarray, bpe_vocab_size: int = 4096,
    base_model: str | None = None,
) -> tuple[Any, str]:  # fmt: skip
    """A run's tokenizer (None: MiniLM's WordPiece) and how the report names it. ``bpe``
    trains a byte-level BPE on ``public_texts``, the attacker's pool: a vocabulary fitted on
    audit rows would carry their words into every model. ``base`` is ``base_model``'s own
    (``hf-causal-lm``): a :class:`BaseTokenizer`. ``auto``: ``base`` when a base model is
    given, else ``wordpiece``."""
    if name == "auto":
        name = "base" if base_model else "wordpiece"
    if name == "wordpiece":
        return None, "MiniLM WordPiece ids"
    if name == "bpe":
        tok = train_bpe(public_texts, bpe_vocab_size)
        return tok, (f"byte-level BPE ids ({tok.get_vocab_size()} tokens, trained on the "
                     f"{len(public_texts)} public-pool texts)")
    if name == "base":
        if not base_model:
            raise ConfigError("dataset.tokenizer base is the base model's tokenizer: it needs "
                              "recipe.architecture hf-causal-lm with arch_params.base_model.")
        from miaudit.models.hf_lm import base_tokenizer

        tok, pad = base_tokenizer(base_model)
        return BaseTokenizer(tok, pad), (f"token ids of {base_model}'s own tokenizer "
                                         f"({tok.get_vocab_size(with_added_tokens=True):,} "
                                         "tokens, its pad id swapped with 0)")
    raise ConfigError(f"unknown tokenizer {name!r}; choose one of {', '.join(TOKENIZERS)}.")


@dataclass(frozen=True)
class BaseTokenizer:
    """A pretrained model's ``tokenizers.Tokenizer`` and pad id: texts become its ids (pad
    swapped with 0, as :class:`miaudit.models.hf.HFModule` takes them), cut at max_length the
    way the tokenizer truncates."""

    tokenizer: Any
    pad: int


def tokenized_dataset(
    dataset: Any, max_length: int, tokenizer: Any = None,
    description: str = "MiniLM WordPiece ids",
) -> tuple[Any, str | None]:
    """A text Dataset as the ``tokens`` Dataset a text model trains on (token ids [N, L] as
    exact float32; see :func:`token_ids`), and a warning when texts were cut (None if none; the
    dataset's notes always say how many). The
    fingerprint is the token ids', so cache keys follow the tokenizer and ``max_length``."""
    from miaudit.data.dataset import Dataset

    if isinstance(tokenizer, BaseTokenizer):
        from miaudit.models.hf import encode_texts

        tokens, _ = encode_texts(dataset.features, tokenizer.tokenizer, max_length,
                                 tokenizer.pad)
    else:
        tokens = tokenize(dataset.features, max_length, tokenizer)
    kept = (f"their first {max_length} tokens" if isinstance(tokenizer, BaseTokenizer) else
            f"their first {max_length - 1} tokens and their end token")
    note = (f"{tokens.n_truncated} of {len(dataset)} texts were longer than {max_length} tokens "
            f"and cut to {kept} (dataset.max_length)")
    return Dataset(
        name=dataset.name, features=tokens.features(), labels=dataset.labels,
        num_classes=dataset.num_classes, kind="tokens", source=dataset.source,
        notes=f"{dataset.notes}; {note}" if dataset.notes else note,
        preprocessing=f"{dataset.preprocessing}; {description}, max_length {max_length}",
    ), (note if tokens.n_truncated else None)
