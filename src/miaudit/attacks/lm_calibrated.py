"""Calibrated membership attacks on causal language models (docs/algorithms.md §15).

Each reads, beyond the target's token log-probs `log p(x_{t+1})` at the scored positions
t < L_n, one optional array of the sequence bank (signals/bank.py), declared in its
:class:`~miaudit.attacks.registry.Needs`. Higher score = more likely a member.

- `lm-base-reference` (Carlini et al. 2021's reference-model attack, the "ref" baseline of
  ReCaLL): `mean_t [log p_target(x_t) - log p_base(x_t)]` (or the sum), the base model being
  the pretrained model the target was fine-tuned from (`seq_base_token_logprob`).
- `recall` (Xie et al. 2024, ReCaLL): `LL(x | P) / LL(x)`, the mean log-likelihood of the
  text conditioned on a fixed non-member prefix P over the unconditioned one
  (`seq_prefix_token_logprob`); members' likelihood drops more under P, so the ratio is larger.
- `dc-pdd` (Zhang et al. 2024, DC-PDD): over the first occurrence of each distinct token of
  the text, the mean of `min(p(x_i) * -log f(x_i), a)`, f the Laplace-smoothed frequency of the
  token in the population rows' tokens (`seq_token_ids`, `seq_vocab_size`).
"""

from __future__ import annotations

import numpy as np

from miaudit.attacks.params import Param
from miaudit.attacks.registry import Needs, register_attack
from miaudit.attacks.view import TargetView
from miaudit.signals.bank import valid_positions

FAMILY = "language-model"


REDUCTION = Param("reduction", "mean", "str", "'mean': per token (the mean over the text's "
                  "scored tokens); 'sum': the sum over them (the sequence log-likelihood "
                  "ratio)", choices=("mean", "sum"))
CLIP = Param("a", 0.01, "float", "the clip of each token's p(x_i) * -log f(x_i) (the "
             "paper's a), so that a few tokens cannot dominate", low=0.0, low_open=True)


def _masked_sum(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Sum of `values[n, :L_n]`, float64 [N]; padding is never read."""
    valid = valid_positions(lengths, values.shape[1])
    result: np.ndarray = np.where(valid, values.astype(np.float64), 0.0).sum(axis=1)
    return result


@register_attack(
    "lm-base-reference",
    family=FAMILY,
    needs=Needs(sequence=True, base_model=True),
    description="reference = the pretrained base model: mean log p_target - log p_base",
    params=(REDUCTION,),
)
def lm_base_reference(view: TargetView, reduction: str) -> np.ndarray:
    lengths, base = view.seq_lengths, view.seq_base_token_logprob
    assert lengths is not None and base is not None  # Needs(sequence=True, base_model=True)
    total = _masked_sum(view.target_token_logprob(), lengths) - _masked_sum(
        base, lengths)
    scores: np.ndarray = total / lengths if reduction == "mean" else total
    return scores


@register_attack(
    "recall",
    family=FAMILY,
    needs=Needs(sequence=True, prefix_conditioned=True),
    description="Xie et al. 2024 (ReCaLL): LL(x | non-member prefix) / LL(x)",
)
def recall(view: TargetView) -> np.ndarray:
    lengths, prefixed = view.seq_lengths, view.target_prefix_token_logprob()
    assert lengths is not None and prefixed is not None  # Needs(prefix_conditioned=True)
    conditioned = _masked_sum(prefixed, lengths) / lengths
    plain = view.target_seq_loglik()
    with np.errstate(divide="ignore", invalid="ignore"):
        # LL(x) = 0 (every token certain) leaves the ratio undefined: NaN, ranked lowest
        return np.where(plain < 0, conditioned / np.where(plain < 0, plain, -1.0), np.nan)


def population_token_frequencies(view: TargetView) -> np.ndarray:
    """Laplace-smoothed token frequencies f(v) = (c_v + 1) / (sum c + V), float64 [V], c_v
    the count of token v among the scored tokens of the population rows (attacker-owned
    texts no model trained on; never the audit samples)."""

    def compute() -> np.ndarray:
        rows = view.population & ~view.audit if view.audit is not None else view.population
        assert view.seq_token_ids is not None and view.seq_vocab_size is not None  # token_ids
        ids = view.seq_token_ids[rows]
        ids = ids[ids >= 0]
        counts = np.bincount(ids, minlength=view.seq_vocab_size).astype(np.float64)
        result: np.ndarray = (counts + 1.0) / (counts.sum() + view.seq_vocab_size)
        return result

    result: np.ndarray = view.memo("dc-pdd-frequencies", compute)
    return result


def first_occurrences(ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """bool [N, T]: position t holds the first occurrence of its token among x[n, :L_n]."""
    n, width = ids.shape
    valid = valid_positions(lengths, width)
    rows, cols = np.nonzero(valid)  # row-major: positions in order within each row
    keys = rows.astype(np.int64) * (int(ids.max(initial=0)) + 1) + ids[rows, cols]
    _, first = np.unique(keys, return_index=True)
    mask = np.zeros((n, width), dtype=bool)
    mask[rows[first], cols[first]] = True
    return mask


@register_attack(
    "dc-pdd",
    family=FAMILY,
    needs=Needs(sequence=True, token_ids=True, population=True),
    description="Zhang et al. 2024 (DC-PDD): mean over first occurrences of "
                "min(p(x_i) * -log f(x_i), a), f the population's token frequencies",
    params=(CLIP,),
)
def dc_pdd(view: TargetView, a: float) -> np.ndarray:
    ids, lengths = view.seq_token_ids, view.seq_lengths
    assert ids is not None and lengths is not None  # Needs(sequence=True, token_ids=True)
    freq = population_token_frequencies(view)
    first = first_occurrences(ids, lengths)
    with np.errstate(all="ignore"):  # padding may hold anything; it is masked below
        p = np.exp(view.target_token_logprob().astype(np.float64))
    alpha = np.minimum(p * -np.log(freq[np.where(first, ids, 0)]), a)
    result: np.ndarray = np.where(first, alpha, 0.0).sum(axis=1) / first.sum(axis=1)
    return result
