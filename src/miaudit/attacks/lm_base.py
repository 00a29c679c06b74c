"""Base-reference attacks on fine-tuned causal language models (docs/algorithms.md §15): the
pretrained base model the target was fine-tuned from is the reference, as in
`lm-base-reference` (attacks/lm_calibrated.py). Each reads the target's token log-probs
`log p_target(x_{t+1})` and the base model's `log p_base(x_{t+1})` (`seq_base_token_logprob`)
at the scored positions `t < L_n` (position t predicts token t+1); two forward passes per text.
Higher score = more likely a member.

- `ez-mia` (Error-Zone MIA; JetBrains Research, arXiv 2601.12104, `mia/ez_score.py`'s
  `error_zone_pos_neg_sum_ratio`): over the positions where the target's top-1 prediction is
  wrong (`seq_top1_correct` False), the deltas `log p_target - log p_base`; the score is the
  sum of the positive deltas over the sum of the absolute negative ones (+1e-12), 0.0 with
  fewer than `min_tokens` such positions or no negative delta. `ignore_first` drops position 0
  (the authors' `ignore_bos`: the first scored position of the shifted mask).
- `wbc` (Window-Based Comparison; USENIX Security 2026, arXiv 2601.02751, `attacks/wbc.py`):
  for each window size w, the fraction of the text's sliding windows of `min(w, L_n)` scored
  tokens whose summed base loss exceeds the target's; the score is the mean over the sizes.
"""

from __future__ import annotations

import numpy as np

from miaudit.attacks.params import Param
from miaudit.attacks.registry import Needs, register_attack
from miaudit.attacks.view import TargetView
from miaudit.errors import AttackError
from miaudit.signals.bank import valid_positions

FAMILY = "language-model"
# The authors' example configuration (configs/example.yaml, context_window_lengths)
WBC_WINDOWS = (2, 3, 4, 6, 9, 13, 18, 25, 32, 40)
# Added to the negative sum as the authors do (a zero negative sum scores 0.0 before it)
_EZ_EPSILON = 1e-12


@register_attack(
    "ez-mia",
    family=FAMILY,
    needs=Needs(sequence=True, base_model=True, top1_correct=True),
    description="EZ-MIA (error zone): over the tokens the target's top-1 gets wrong, the sum "
                "of positive log p_target - log p_base over the sum of |negative| ones",
    params=(
        Param("min_tokens", 2, "int", "the fewest error-zone tokens (target's top-1 wrong) a "
              "text needs; fewer score 0.0 (the authors' min_tokens)", low=1),
        Param("ignore_first", True, "bool", "leave out scored position 0 (the prediction of "
              "the text's second token from its first alone: the authors' ignore_bos)"),
    ),
)
def ez_mia(view: TargetView, min_tokens: int, ignore_first: bool) -> np.ndarray:
    lengths = view.seq_lengths
    target, base = view.target_token_logprob(), view.seq_base_token_logprob
    assert lengths is not None and base is not None  # Needs(sequence=True, base_model=True)
    top1 = view.target_top1_correct()
    width = target.shape[1]
    scores = np.empty(view.n_samples)
    for block in view.sample_blocks(width * 8 * 4):
        error = valid_positions(lengths[block], width) & ~top1[block]
        if ignore_first:
            error[:, 0] = False
        # padding may hold anything (NaN, inf): read only the error zone
        delta = (np.where(error, target[block], 0.0).astype(np.float64)
                 - np.where(error, base[block], 0.0).astype(np.float64))
        positive = np.where(delta > 0, delta, 0.0).sum(axis=1)
        negative = np.where(delta < 0, -delta, 0.0).sum(axis=1)
        ratio = positive / (negative + _EZ_EPSILON)
        scored = (error.sum(axis=1) >= min_tokens) & (negative != 0)
        scored &= np.isfinite(ratio) & (ratio >= 0)
        scores[block] = np.where(scored, ratio, 0.0)
    return scores


def _window_sums(values: np.ndarray, window: int) -> np.ndarray:
    """[B, T - window + 1]: `values[:, s] + ... + values[:, s + window - 1]`, added left to
    right (equal windows of two arrays give equal sums, bit for bit)."""
    count = values.shape[1] - window + 1
    sums: np.ndarray = values[:, :count].copy()
    for k in range(1, window):
        sums += values[:, k : k + count]
    return sums


@register_attack(
    "wbc",
    family=FAMILY,
    needs=Needs(sequence=True, base_model=True),
    description="WBC (window-based comparison): the fraction of sliding windows whose summed "
                "base-model loss exceeds the target's, averaged over window sizes",
    params=(
        Param("window_sizes", list(WBC_WINDOWS), "list[int]", "the sliding windows' sizes "
              "in tokens (a text shorter than a window is one window); the score is the mean "
              "over them (the authors' context_window_lengths)", low=1),
    ),
)
def wbc(view: TargetView, window_sizes: list[int]) -> np.ndarray:
    sizes = [int(w) for w in window_sizes]
    if not sizes:
        raise AttackError("attack 'wbc': window_sizes must list at least one window size.")
    lengths = view.seq_lengths
    target, base = view.target_token_logprob(), view.seq_base_token_logprob
    assert lengths is not None and base is not None  # Needs(sequence=True, base_model=True)
    width = target.shape[1]
    scores = np.empty(view.n_samples)
    for block in view.sample_blocks(width * 8 * 6):
        ell = lengths[block]
        valid = valid_positions(ell, width)
        # per-token losses (-log p), 0 at padding
        target_loss = np.where(valid, -target[block].astype(np.float64), 0.0)
        base_loss = np.where(valid, -base[block].astype(np.float64), 0.0)
        rows = np.arange(len(ell))
        # a text shorter than the window: one window, the whole text (cumsum: left to right)
        whole = (np.cumsum(base_loss, axis=1)[rows, ell - 1]
                 > np.cumsum(target_loss, axis=1)[rows, ell - 1]).astype(np.float64)
        total = np.zeros(len(ell))
        for window in sizes:
            fraction = whole
            if window <= width:
                inside = np.arange(width - window + 1)[None, :] <= (ell - window)[:, None]
                above = (_window_sums(base_loss, window) > _window_sums(target_loss, window))
                windows = np.maximum(ell - window + 1, 1)
                fraction = np.where(ell >= window, (above & inside).sum(axis=1) / windows,
                                    whole)
            total += fraction
        scores[block] = total / len(sizes)
    return scores
