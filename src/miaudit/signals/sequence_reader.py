"""How `lm_signals` reads one causal LM: through its decoder's hidden states and its output
head a chunk of positions at a time where the model can be taken apart
(:mod:`miaudit.models.lm_parts`), else through its full logits; and ReCaLL's prefix run once,
its keys and values reused for every batch, where the model takes a cache. A ``bf16`` model's
forwards run under bf16 autocast; the checks and the prefix's cache are made in float32."""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor, nn

from miaudit.models.lm_parts import (
    hidden_states,
    lm_parts,
    parts_agree,
    prefix_past,
    repeated_past,
)
from miaudit.models.text import lm_outputs
from miaudit.runtime.devices import autocast
from miaudit.signals.sequence import (
    hidden_sequence_signals,
    prefixed_token_logprob,
    sequence_signals,
)

# Full logits ([batch, T, vocabulary] floats) one forward may hold, for a model read whole:
# 2**25 floats (128 MiB) on a CPU, 2**28 (1 GiB) on a GPU (large batches keep it busy).
LOGITS_BUDGET = {"cpu": 2**25, "gpu": 2**28}
# Tokens per forward of a model read through its hidden states (no logits held: the budget
# bounds the activations: on a CPU larger batches measured no faster, bench/bench_llm.md)
TOKEN_BUDGET = {"cpu": 1024, "gpu": 8192}


class SequenceReader:
    """One causal LM's per-position signals on batches of feature ids (right padded).

    ``probe``: a short row of feature ids on which the hidden-state route is checked once
    against the model's own logits (a head that is not a plain linear map falls back to the
    full logits); ``prefix``: ReCaLL's prefix feature ids [P] on the device, or None;
    ``precision``: the model's recipe's (``bf16``: its forwards under bf16 autocast)."""

    def __init__(self, module: nn.Module, probe: Tensor, device: str,
                 prefix: Tensor | None = None, precision: str = "fp32") -> None:  # fmt: skip
        self.module = module
        self.autocast = functools.partial(autocast, device, precision)
        self.parts = lm_parts(module)
        if self.parts is not None and not parts_agree(module, self.parts, probe[:, :16]):
            self.parts = None
        self.vocab = int(getattr(module, "vocab_size", 50_000))
        self.kind = "cpu" if torch.device(device).type == "cpu" else "gpu"
        self.prefix = None if prefix is None else prefix.to(device)
        self.past = None
        if self.parts is not None and self.prefix is not None:
            try:
                self.past = prefix_past(self.parts, self.prefix)
            except (TypeError, ValueError, AttributeError):  # a decoder without a cache
                self.past = None
            if self.past is not None and not hasattr(self.past, "batch_repeat_interleave"):
                self.past = None

    def batch_size(self, width: int, wanted: int) -> int:
        """Texts per forward for texts of ``width`` tokens, at most ``wanted``."""
        if self.parts is None:
            extra = 0 if self.prefix is None else len(self.prefix)
            fit = LOGITS_BUDGET[self.kind] // ((width + extra) * self.vocab)
        else:
            fit = TOKEN_BUDGET[self.kind] // width
        return max(1, min(int(wanted), int(fit)))

    def signals(self, xb: Tensor, lengths: np.ndarray, full: bool = True) -> tuple[Tensor, ...]:
        """(token, mean, std, top1) [B, T-1] of the batch; ``full=False``: token only."""
        with self.autocast():
            if self.parts is None:
                logits, tids, _ = lm_outputs(self.module, xb)
                found = sequence_signals(logits, tids, lengths)
                return tuple(found) if full else (found.token,)
            hidden, tids = hidden_states(self.parts, xb)
            return tuple(hidden_sequence_signals(hidden, self.parts.head, tids, lengths, full))

    def prefixed(self, xb: Tensor, lengths: np.ndarray) -> Tensor:
        """log p(x_{t+1} | P, x_<=t) [B, T-1] of the batch under ReCaLL's prefix P."""
        assert self.prefix is not None
        with self.autocast():
            if self.parts is None or self.past is None:
                batch = self.prefix[None, :].expand(len(xb), -1)
                logits, tids, _ = lm_outputs(self.module, torch.cat([batch, xb], dim=1))
                size = len(self.prefix)
                return prefixed_token_logprob(logits, size, tids[:, size:], lengths)
            hidden, tids = hidden_states(self.parts, xb, repeated_past(self.past, len(xb)))
            return hidden_sequence_signals(hidden, self.parts.head, tids, lengths,
                                           full=False)[0]  # fmt: skip
