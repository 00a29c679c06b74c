"""Per-token sequence signals of a causal language model, for the sequence bank.

`sequence_signals(logits [B, T, V], input_ids [B, T], lengths [B])` returns, for position
t = 0..T-2 (position t predicts token t+1):

- `token_logprob[b, t] = log p(x_{t+1} | x_<=t)`, the log-probability of the actual token;
- `mean[b, t] = sum_v p(v) log p(v)` and `std[b, t] = sqrt(sum_v p(v) (log p(v))^2 - mean^2)`,
  the mean and standard deviation of log p(v) under the model's next-token distribution
  (Min-K%++, Zhang et al. 2024).

Each is float32 `[B, T-1]`; sample b has `lengths[b] - 1` scored positions (the first token has
no prediction), the bank's `seq_lengths`. Positions past that are padding, filled with 0.

ReCaLL (Xie et al. 2024) conditions each text on a fixed non-member prefix P:
`prefixed_token_logprob` gives `log p(x_{t+1} | P, x_<=t)` at the same positions, from the
logits of one forward of `P + x`; `draw_prefix` draws P (seeded) from the public pool's texts.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

# ReCaLL's prefix: this many public texts, concatenated (Xie et al. 2024 use a few shots)
RECALL_PREFIX_TEXTS = 2


def sequence_signals(
    logits: torch.Tensor, input_ids: torch.Tensor, lengths: torch.Tensor | np.ndarray
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(token_logprob, mean, std), float32 [B, T-1] each: see the module docstring.

    `lengths[b]` counts the real tokens of row b (right padding); rows need at least 2.
    Batched over all positions at once (no loop over tokens); computed in float32 on the
    logits' device.
    """
    if logits.ndim != 3 or input_ids.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be [B, T, V] and input_ids [B, T]; got {tuple(logits.shape)} and "
            f"{tuple(input_ids.shape)}."
        )
    batch, width, _ = logits.shape
    lengths = torch.as_tensor(np.asarray(lengths), device=logits.device).long()
    if lengths.shape != (batch,) or bool((lengths < 2).any()) or bool((lengths > width).any()):
        raise ValueError(f"lengths must be [B] = [{batch}] with values in 2..{width}.")
    # Two [B, T-1, V] arrays in all (log p, then p turned in place into p log p and p log² p):
    # the vocabulary axis is the large one (49,152 for SmolLM2), so each pass over it counts.
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # [B, T-1, V]
    target = input_ids[:, 1:].long().unsqueeze(-1)
    token = logp.gather(-1, target).squeeze(-1)
    weighted = logp.exp().mul_(logp)  # p log p; NaN (0 * -inf) where p = 0: a masked entry
    mean = weighted.nan_to_num_(nan=0.0).sum(-1)
    second = weighted.mul_(logp).nan_to_num_(nan=0.0).sum(-1)
    std = (second - mean * mean).clamp_min(0.0).sqrt()
    valid = torch.arange(width - 1, device=logits.device)[None, :] < (lengths - 1)[:, None]
    zero = torch.zeros((), dtype=token.dtype, device=token.device)
    return (torch.where(valid, token, zero), torch.where(valid, mean, zero),
            torch.where(valid, std, zero))


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
    lengths = torch.as_tensor(np.asarray(lengths), device=logits.device).long()
    logp = torch.log_softmax(logits[:, prefix_len : prefix_len + width - 1].float(), dim=-1)
    token = logp.gather(-1, input_ids[:, 1:].long().unsqueeze(-1)).squeeze(-1)
    valid = torch.arange(width - 1, device=logits.device)[None, :] < (lengths - 1)[:, None]
    return torch.where(valid, token, torch.zeros((), dtype=token.dtype, device=token.device))


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
