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
import weakref
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
    mask), the wrapper's own mapping; ``pad``: the pad id among the token ids."""

    decoder: nn.Module
    head: nn.Module
    to_ids: Callable[[Tensor], tuple[Tensor, Tensor]]
    pad: int


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
        lm, to_ids, pad = _unwrap(module.model), module._ids, int(module.token_pad)
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
    return LMParts(decoder=decoder, head=head, to_ids=to_ids, pad=pad)


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


# Floats of one chunk of [positions, V] logits in the training loss: 2**25 (128 MiB; 682
# positions of a 49,152-token vocabulary, a third of the [16, 128, V] logits), twice that when
# the head itself trains (full fine-tuning: fewer [V, H] weight-gradient sums). On 2 CPU cores
# the head's two products over 2,016 positions took 2.27 s a batch in chunks of 2**22 floats
# and 1.46 s in 2**25 (their rate falls with fewer rows; 2**26 and 2**27: no faster).
LOSS_CHUNK_FLOATS = 2**25
# training_parts' answer per module (checked once; gone with the module)
_TRAINING_PARTS: weakref.WeakKeyDictionary[torch.nn.Module, LMParts | None] = (
    weakref.WeakKeyDictionary())


class _LinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of ``hidden @ weight.T`` against ``targets``, a chunk of rows at a
    time, each chunk's gradients (softmax - one-hot, times the weight or the hidden rows)
    taken at once in the forward: no [n, V] logits outlive their chunk. Compute as autograd
    would (the same products), only the order of the weight gradient's sums over chunks
    differs. Under bf16 autocast the products run in bf16 as autocast runs the logits'
    route's (the head's product, and its gradient's), the softmax and sums in float32."""

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
        # a weight gradient is a [V, H] sum over chunks: fewer, larger chunks to add up
        floats = LOSS_CHUNK_FLOATS * (2 if ctx.needs_input_grad[1] else 1)
        step = max(1, floats // max(1, weight.shape[0]))
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = (torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
                       if ctx.needs_input_grad[1] else None)  # fmt: skip
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        device = hidden.device.type
        # the products' precision: autocast's where it is on. The weight is cast once here,
        # not by autocast in every chunk's two products (a [V, H] copy each time)
        product = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
                   else weight.dtype)  # fmt: skip
        head = weight.to(product)
        with torch.autocast(device, enabled=False):
            for lo in range(0, hidden.shape[0], step):
                rows, wanted = hidden[lo : lo + step], targets[lo : lo + step]
                logits = (rows.to(product) @ head.T).float()
                # log-sum-exp and softmax in place, one exp: no [rows, V] temporaries
                peak = logits.amax(-1, keepdim=True)
                picked = logits.gather(-1, wanted[:, None])
                probs = logits.sub_(peak).exp_()
                mass = probs.sum(-1, keepdim=True)
                total += (peak + mass.log() - picked).sum()
                if grad_hidden is None and grad_weight is None:
                    continue
                probs.div_(mass)
                probs[torch.arange(len(wanted), device=probs.device), wanted] -= 1.0
                if grad_hidden is not None:
                    grad_hidden[lo : lo + step] = probs.to(product) @ head
                if grad_weight is not None:
                    grad_weight.addmm_(probs.T, rows.float())
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.dtype = weight.dtype
        return total

    @staticmethod
    def backward(ctx: Any, grad_total: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        grad_hidden, grad_weight = ctx.saved_tensors
        return (None if grad_hidden is None else grad_hidden * grad_total,
                None if grad_weight is None else (grad_weight * grad_total).to(ctx.dtype),
                None)  # fmt: skip


def chunked_next_token_loss(parts: LMParts, x: Tensor) -> Tensor:
    """Mean cross-entropy of token t + 1 given tokens <= t over the targets that are not
    padding (:func:`miaudit.models.text.next_token_loss`'s value and gradients), from the
    decoder's hidden states and the head's weight a chunk of positions at a time: no
    [B, T, V] logits, and no head product for padding or a text's last position."""
    hidden, ids = hidden_states(parts, x)
    keep = ids[:, 1:] != parts.pad
    rows, targets = hidden[:, :-1][keep], ids[:, 1:][keep]
    if len(targets) == 0:  # as cross_entropy's mean over no target
        return hidden.sum() * float("nan")
    return _LinearCrossEntropy.apply(rows, parts.head.weight, targets) / len(targets)


def training_parts(module: nn.Module) -> LMParts | None:
    """The parts the training loss reads, checked once per module (in eval mode, so that
    dropout cannot tell the two routes apart): None for a head with a bias or one that is
    not a plain linear map (its loss comes from the full logits)."""
    if module in _TRAINING_PARTS:
        result: LMParts | None = _TRAINING_PARTS[module]
        return result
    parts = lm_parts(module)
    if parts is not None and parts.head.bias is not None:
        parts = None
    if parts is not None:
        was_training = module.training
        module.eval()
        device = parts.head.weight.device
        try:  # the check compares routes, not precisions: float32 under any autocast
            with torch.autocast(device.type, enabled=False):
                probe = torch.arange(1, 9, device=device)[None, :].float()
                probe = probe.clamp_max(parts.head.weight.shape[0] - 1)
                if not parts_agree(module, parts, probe):
                    parts = None
        finally:
            module.train(was_training)
    _TRAINING_PARTS[module] = parts
    return parts
