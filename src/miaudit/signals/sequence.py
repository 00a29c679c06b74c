"""Per-token sequence signals of a causal language model, for the sequence bank.

`sequence_signals(logits [B, T, V], input_ids [B, T], lengths [B])` returns, for position
t = 0..T-2 (position t predicts token t+1):

- `token_logprob[b, t] = log p(x_{t+1} | x_<=t)`, the log-probability of the actual token;
- `mean[b, t] = sum_v p(v) log p(v)` and `std[b, t] = sqrt(sum_v p(v) (log p(v))^2 - mean^2)`,
  the mean and standard deviation of log p(v) under the model's next-token distribution
  (Min-K%++, Zhang et al. 2024);
- `top1[b, t]`: whether the model's argmax next-token prediction is x_{t+1} (EZ-MIA's error
  zone, bool).

`hidden_sequence_signals` computes the same from the last hidden states and the output head,
the head run a chunk of scored positions at a time: no [B, T, V] logits are ever held.

Each is float32 `[B, T-1]` (top1 bool); sample b has `lengths[b] - 1` scored positions (the
first token has no prediction), the bank's `seq_lengths`. Positions past that are padding,
filled with 0.

ReCaLL (Xie et al. 2024) conditions each text on a fixed non-member prefix P:
`prefixed_token_logprob` gives `log p(x_{t+1} | P, x_<=t)` at the same positions, from the
logits of one forward of `P + x`; `draw_prefix` draws P (seeded) from the public pool's texts.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from miaudit.signals.recall_texts import (  # torch-free, for config checks; re-exported here
    RECALL_PREFIX_TEXTS as RECALL_PREFIX_TEXTS,
)


class PositionSignals(NamedTuple):
    """Per-position signals, float32 [B, T-1] each (``top1`` bool): see the module docstring.
    Padding positions hold 0 (False)."""

    token: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    top1: torch.Tensor


# Floats of one chunk of [positions, V] log-probabilities: 2**24 (64 MiB), ~340 positions of
# SmolLM2's 49,152-token vocabulary (2**22 measured 8% slower on 2 CPU cores: smaller head
# products; bench/bench_llm.md).
CHUNK_FLOATS = 2**24


def position_statistics(
    logits: torch.Tensor, targets: torch.Tensor, full: bool = True
) -> tuple[torch.Tensor, ...]:
    """(token, mean, std, top1) of flat positions: ``logits`` [n, V], ``targets`` [n] (the
    actual next tokens); ``full=False``: the token log-probs only. Float32 on the logits'
    device; the vocabulary axis is the large one, so each pass over it counts: two [n, V]
    arrays in all (log p, then p turned in place into p log p and p log² p)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    token = logp.gather(-1, targets[:, None]).squeeze(-1)
    if not full:
        return (token,)
    top1 = logp.argmax(-1) == targets
    weighted = logp.exp().mul_(logp)  # p log p; NaN (0 * -inf) where p = 0: a masked entry
    mean = weighted.nan_to_num_(nan=0.0).sum(-1)
    second = weighted.mul_(logp).nan_to_num_(nan=0.0).sum(-1)
    std = (second - mean * mean).clamp_min(0.0).sqrt()
    return token, mean, std, top1


def _scored_positions(
    input_ids: torch.Tensor, lengths: torch.Tensor | np.ndarray, width: int, device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask of the scored positions [B, T-1], their targets, flat [n])."""
    batch = input_ids.shape[0]
    lengths = torch.as_tensor(np.asarray(lengths), device=device).long()
    if lengths.shape != (batch,) or bool((lengths < 2).any()) or bool((lengths > width).any()):
        raise ValueError(f"lengths must be [B] = [{batch}] with values in 2..{width}.")
    valid = torch.arange(width - 1, device=device)[None, :] < (lengths - 1)[:, None]
    return valid, input_ids[:, 1:].to(device).long()[valid]


def _chunked(
    rows: Callable[[int, int], torch.Tensor], count: int, vocab: int, targets: torch.Tensor,
    valid: torch.Tensor, full: bool,
) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """The statistics of ``count`` flat positions, ``rows(lo, hi)`` giving their logits a
    chunk at a time, laid back out on ``valid`` [B, T-1] with 0 (False) at padding."""
    step = max(1, CHUNK_FLOATS // max(1, vocab))
    parts = [position_statistics(rows(lo, min(lo + step, count)),
                                 targets[lo : lo + step], full)
             for lo in range(0, count, step)]  # fmt: skip
    out = []
    for k in range(4 if full else 1):
        flat = torch.cat([p[k] for p in parts]) if parts else torch.zeros(0, device=valid.device)
        dtype = torch.bool if k == 3 else torch.float32
        grid = torch.zeros(valid.shape, dtype=dtype, device=valid.device)
        grid[valid] = flat.to(dtype)
        out.append(grid)
    return tuple(out)


def sequence_signals(
    logits: torch.Tensor, input_ids: torch.Tensor, lengths: torch.Tensor | np.ndarray
) -> PositionSignals:
    """(token_logprob, mean, std, top1) [B, T-1] from full ``logits`` [B, T, V] of
    ``input_ids`` [B, T]: see the module docstring.

    `lengths[b]` counts the real tokens of row b (right padding); rows need at least 2.
    Vectorised over positions, a chunk of positions at a time (no loop over tokens);
    float32 on the logits' device.
    """
    if logits.ndim != 3 or input_ids.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be [B, T, V] and input_ids [B, T]; got {tuple(logits.shape)} and "
            f"{tuple(input_ids.shape)}."
        )
    valid, targets = _scored_positions(input_ids, lengths, logits.shape[1], logits.device)
    where = valid.nonzero(as_tuple=True)

    def rows(lo: int, hi: int) -> torch.Tensor:
        return logits[where[0][lo:hi], where[1][lo:hi]]

    return PositionSignals(*_chunked(rows, len(targets), logits.shape[-1], targets, valid, True))


def hidden_sequence_signals(
    hidden: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor],
    input_ids: torch.Tensor, lengths: torch.Tensor | np.ndarray, full: bool = True,
) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """:func:`sequence_signals` from a causal LM's last hidden states ``hidden`` [B, T, H] and
    its output ``head`` (hidden -> logits): the head runs on the scored positions only, a
    chunk at a time, so no [B, T, V] logits exist and neither padding nor a text's last
    position (it predicts nothing scored) costs a head product. ``full=False``: the token
    log-probs only (a 1-tuple)."""
    if hidden.ndim != 3 or input_ids.shape != hidden.shape[:2]:
        raise ValueError(f"hidden must be [B, T, H] and input_ids [B, T]; got "
                         f"{tuple(hidden.shape)} and {tuple(input_ids.shape)}.")
    valid, targets = _scored_positions(input_ids, lengths, hidden.shape[1], hidden.device)
    scored = hidden[:, :-1][valid]  # [n, H]
    vocab = int(getattr(head, "out_features", 0)) or int(head(scored[:1]).shape[-1])

    def rows(lo: int, hi: int) -> torch.Tensor:
        return head(scored[lo:hi])

    found = _chunked(rows, len(targets), vocab, targets, valid, full)
    return PositionSignals(*found) if full else found


def prefixed_token_logprob(
    logits: torch.Tensor, prefix_len: int, input_ids: torch.Tensor,
    lengths: torch.Tensor | np.ndarray,
) -> torch.Tensor:  # fmt: skip
    """`log p(x_{t+1} | P, x_<=t)`, float32 [B, T-1], from `logits` [B, P+T, V] of one forward
    of the prefix P (`prefix_len` tokens) followed by the texts `input_ids` [B, T] (right
    padded, `lengths[b]` real tokens): the positions of `sequence_signals`, padding 0."""
    batch, width = input_ids.shape
    if logits.ndim != 3 or tuple(logits.shape[:2]) != (batch, prefix_len + width):
        raise ValueError(f"logits must be [B, P+T, V] = [{batch}, {prefix_len + width}, V]; "
                         f"got {tuple(logits.shape)}.")
    text = logits[:, prefix_len:]
    valid, targets = _scored_positions(input_ids, lengths, width, logits.device)
    where = valid.nonzero(as_tuple=True)

    def rows(lo: int, hi: int) -> torch.Tensor:
        return text[where[0][lo:hi], where[1][lo:hi]]

    return _chunked(rows, len(targets), logits.shape[-1], targets, valid, False)[0]


def draw_prefix(
    features: np.ndarray, public_rows: np.ndarray, count: int, seed: int, pad_id: int,
) -> np.ndarray:  # fmt: skip
    """ReCaLL's fixed non-member prefix: `count` texts drawn without replacement (seeded) from
    the dataset rows `public_rows` (the public pool: no model trained on them, never an audit
    sample), their real tokens (`features` [n, L] right-padded with `pad_id`) concatenated in
    the order drawn; int64 [P]."""
    public_rows = np.asarray(public_rows)
    if not 0 < count <= public_rows.size:
        raise ValueError(f"the prefix needs 1..{public_rows.size} public texts; got {count}.")
    picked = np.random.default_rng(seed).choice(public_rows, size=count, replace=False)
    texts = np.asarray(features)[picked].round().astype(np.int64)
    return np.concatenate([row[row != pad_id] for row in texts])


def fitted_prefix(
    features: np.ndarray, public_rows: np.ndarray, pad_id: int, seed: int,
    positions: int | None, length_setting: str, count: int = RECALL_PREFIX_TEXTS,
) -> tuple[np.ndarray | None, str | None]:  # fmt: skip
    """ReCaLL's prefix (:func:`draw_prefix` of ``count`` public texts), its first tokens cut
    so that prefix + text fit the models' ``positions`` (None: no limit); or None and why not
    (``length_setting`` names the setting that would make room)."""
    prefix = draw_prefix(features, public_rows, count, seed, pad_id)
    if positions is not None:
        width = int(np.asarray(features).shape[1])
        room = int(positions) - width
        if room < 1:
            return None, (f"the texts ({width} tokens) take all {positions} positions of the "
                          f"model, leaving none for the prefix: lower {length_setting}")
        prefix = prefix[-room:]
    return prefix, None


def text_sizes(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(`text_zlib_bytes`, `text_chars`), int64 [N]: the zlib-compressed length (default
    level) of each text's UTF-8 bytes, and its number of characters."""
    zbytes = np.array([len(zlib.compress(t.encode("utf-8"))) for t in texts], dtype=np.int64)
    chars = np.array([len(t) for t in texts], dtype=np.int64)
    return zbytes, chars
