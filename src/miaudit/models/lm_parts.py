"""A causal LM taken apart: its decoder's hidden states and its output head, so that the
sequence signals are computed over chunks of positions (no ``[B, T, V]`` logits held: with
SmolLM2's 49,152-token vocabulary they are 200 KB per position), and so that ReCaLL's fixed
prefix is run once, its keys and values reused for every text, instead of once per text.

:func:`lm_parts` answers for the two causal-LM wrappers miaudit builds
(:class:`miaudit.models.hf.HFCausalLM`, LoRA or not, and gpt-small's
:class:`miaudit.models.text.CausalLM`); any other module answers None and is read through its
full logits (:func:`miaudit.models.text.lm_outputs`). A head that is more than a linear map of
the last hidden state (logit soft-capping, scaling) is caught by :func:`parts_agree`, which
the caller runs once per model.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from miaudit.models.text import lm_outputs, token_ids


@dataclass
class LMParts:
    """``decoder(input_ids, attention_mask, past_key_values, use_cache)`` -> last hidden
    state; ``head``: hidden -> logits; ``to_ids``: feature ids -> (token ids, real-token
    mask), the wrapper's own mapping."""

    decoder: nn.Module
    head: nn.Module
    to_ids: Callable[[Tensor], tuple[Tensor, Tensor]]


def _unwrap(lm: nn.Module) -> nn.Module:
    """The transformers model under a peft wrapper (LoRA layers are injected in place, so the
    unwrapped model runs them)."""
    inner = getattr(lm, "get_base_model", None)
    return inner() if callable(inner) else lm


def lm_parts(module: nn.Module) -> LMParts | None:
    """The decoder and output head of one of miaudit's causal-LM wrappers; None for any
    other module (it is read through its full logits)."""
    from miaudit.models.hf import HFCausalLM
    from miaudit.models.text import CausalLM

    if isinstance(module, HFCausalLM):
        lm, to_ids = _unwrap(module.model), module._ids
    elif isinstance(module, CausalLM):
        lm = module.lm
        pad = int(module.pad_id)

        def to_ids(x: Tensor) -> tuple[Tensor, Tensor]:
            ids = token_ids(x)
            return ids, ids != pad
    else:
        return None
    decoder = getattr(lm, "base_model", None)
    head = lm.get_output_embeddings() if hasattr(lm, "get_output_embeddings") else None
    if decoder is None or decoder is lm or not isinstance(head, nn.Linear):
        return None
    return LMParts(decoder=decoder, head=head, to_ids=to_ids)


def hidden_states(parts: LMParts, x: Tensor, past: Any = None) -> tuple[Tensor, Tensor]:
    """(last hidden state [B, T, H], token ids [B, T]) of feature ids ``x`` (right padded);
    ``past``: the keys and values of a prefix every row is conditioned on (from
    :func:`prefix_past`, repeated to the batch), placed before the texts."""
    ids, real = parts.to_ids(x)
    mask = real.long()
    if past is not None:
        mask = torch.cat([mask.new_ones(len(ids), past.get_seq_length()), mask], dim=1)
    out = parts.decoder(input_ids=ids, attention_mask=mask, past_key_values=past,
                        use_cache=past is not None)  # fmt: skip
    return out.last_hidden_state, ids


def prefix_past(parts: LMParts, prefix: Tensor) -> Any:
    """The keys and values of the feature ids ``prefix`` [P] (one row), computed once."""
    ids, _ = parts.to_ids(prefix.reshape(1, -1))
    out = parts.decoder(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
    return out.past_key_values


def repeated_past(past: Any, batch: int) -> Any:
    """A copy of the one-row prefix cache ``past`` for a batch of ``batch`` rows (the decoder
    appends each batch's keys and values to the cache it is given)."""
    fresh = copy.deepcopy(past)
    fresh.batch_repeat_interleave(batch)
    return fresh


@torch.no_grad()
def parts_agree(module: nn.Module, parts: LMParts, x: Tensor, tolerance: float = 1e-3) -> bool:
    """Whether ``head(hidden)`` gives the module's own logits on the feature ids ``x`` (a row
    or two): False for a model whose logits are more than its head's linear map."""
    full, _, _ = lm_outputs(module, x)
    hidden, _ = hidden_states(parts, x)
    mine = parts.head(hidden)
    if mine.shape != full.shape:
        return False
    scale = max(1.0, float(full.abs().max()))
    return bool((mine.float() - full.float()).abs().max() <= tolerance * scale)
