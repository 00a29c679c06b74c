"""What an attack may see: the bank as one target sees it (`TargetView`), and the shared
reference means every calibrated attack starts from (`side_means`).

`TargetView` exposes everything in the bank except the target's membership, so no attack can
peek at the answer; `as_shadow` turns a reference into the target for shadow-trained scorers.
Neither may the references' membership betray the target's: in a balanced design a view sets
one reference aside per sample (:mod:`miaudit.attacks.independence`), so that what an attack
sees of the references is independent of the target's membership, in every view.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from miaudit.attacks.independence import Pools, fingerprints, set_aside
from miaudit.errors import AttackError
from miaudit.signals.bank import SignalBank
from miaudit.signals.statistics import sample_blocks


class TargetView:
    """The bank as seen when attacking one target model: all but the target's membership.

    Reference models are every other model, in bank order; `reference_ids[r]` is the bank
    index of reference r. Build one with `TargetView.of(bank, target)`.

    `reference_available[r, n]` says whether reference r may be used for sample n: False where
    the view set it aside so that the references' membership says nothing about the target's
    (:mod:`miaudit.attacks.independence`); `reference_membership` is False there too, so it
    is the IN mask as it stands and `out_mask()` the OUT one. `set_aside` bool [N]: the
    samples where a reference was set aside.
    """

    def __init__(self, bank: SignalBank, target: int, reference_ids: np.ndarray) -> None:
        logits, labels, audit, population = bank.logits, bank.labels, bank.audit, bank.population
        # SignalBank.__post_init__ sets all four
        assert logits is not None and labels is not None
        assert audit is not None and population is not None
        self.target = int(target)
        self.reference_ids = np.asarray(reference_ids, dtype=int)
        self.canary = (np.zeros(bank.n_samples, dtype=bool) if bank.canary is None
                       else bank.canary)
        membership = np.asarray(bank.membership, dtype=bool)
        self._pools = Pools.of(membership, audit, population, self.canary)
        self._seed: tuple[int, ...] = (self.target,)
        self._sample_keys = fingerprints(logits, labels, self.target)
        available, self.set_aside = set_aside(
            membership, np.ones(membership.shape, dtype=bool), self.target, self._pools,
            self._sample_keys, self._seed)
        available[self.target] = False  # the target is nobody's reference
        # What the view knows of every model's membership, the target's and the set-aside
        # entries hidden: the view holds no reference to the full matrix.
        self._available = _frozen(available)
        self._known = _frozen(membership & available)
        self.reference_membership = _frozen(self._known[self.reference_ids])
        self.reference_available = _frozen(self._available[self.reference_ids])
        self.labels = labels
        self.population = population
        self.audit = audit
        self.n_samples = bank.n_samples
        self.n_queries = bank.n_queries
        self.n_classes = bank.n_classes
        self._logits = logits
        self._statistics = bank.statistics
        self._channels = bank.channels
        # Sequence signals of causal LMs (None in a classifier bank): [M, N, T] per model.
        self._seq_token = bank.seq_token_logprob
        self._seq_mean = bank.seq_mean_logprob
        self._seq_std = bank.seq_std_logprob
        self._seq_loglik = bank.sequence_loglik if bank.has_sequences else None
        self.seq_lengths = bank.seq_lengths  # int [N] or None: scored tokens per sample
        self.text_zlib_bytes = bank.text_zlib_bytes  # int [N] or None
        self.text_chars = bank.text_chars  # int [N] or None
        # Optional arrays of the calibrated LM attacks (lm_calibrated.py); None when absent.
        self._seq_prefix = bank.seq_prefix_token_logprob  # [M, N, T] (ReCaLL)
        self.seq_base_token_logprob = bank.seq_base_token_logprob  # [N, T], the base model
        self.seq_token_ids = bank.seq_token_ids  # int [N, T], -1 at padding (DC-PDD)
        self.seq_vocab_size = (None if bank.seq_vocab_size is None
                               else int(bank.seq_vocab_size))
        self._seq_top1 = bank.seq_top1_correct  # bool [M, N, T] (EZ-MIA); None when absent
        self._memo: dict[Hashable, Any] = {}

    @classmethod
    def of(cls, bank: SignalBank, target: int) -> TargetView:
        if not 0 <= target < bank.n_models:
            raise AttackError(
                f"target {target} is out of range: the bank has {bank.n_models} models "
                f"(0..{bank.n_models - 1})."
            )
        ids = np.array([m for m in range(bank.n_models) if m != target], dtype=int)
        return cls(bank, target, ids)

    @property
    def n_references(self) -> int:
        return int(self.reference_ids.size)

    @property
    def public(self) -> np.ndarray:
        """bool [N]: the samples whose rows may choose anything (an epoch, a threshold):
        neither audited, nor population, nor canaries (docs/algorithms.md §12)."""
        public: np.ndarray = ~self.audit & ~self.population & ~self.canary
        return public

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """`compute()`, once per view and key: what several attacks on this target share
        (LiRA's Gaussian fits, RMIA's mean probabilities). Attacks stay pure functions of the
        view, since the bank and this view's membership are read-only; the key must name
        everything else the value depends on."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def target_stat(self, name: str) -> np.ndarray:
        """Statistic `name` for the target, float64 [N, Q]."""
        stat: np.ndarray = self._statistics.get(name, [self.target])[0]
        return stat

    def reference_stat(self, name: str, samples: slice | None = None) -> np.ndarray:
        """Statistic `name` for every reference, float64 [R, N, Q] (or [R, len(samples), Q]
        for a slice of samples: blocks of samples bound the temporaries)."""
        return self._statistics.get(name, self.reference_ids, samples)

    def target_query_mean(self, name: str) -> np.ndarray:
        """Statistic `name` of the target averaged over queries, float64 [N]."""
        mean: np.ndarray = self._statistics.query_mean(name, [self.target])[0]
        return mean

    def reference_query_mean(self, name: str, samples: slice | None = None) -> np.ndarray:
        """Statistic `name` of every reference averaged over queries, float64 [R, N] (or the
        slice `samples` of it)."""
        return self._statistics.query_mean(name, self.reference_ids, samples)

    def sample_blocks(self, bytes_per_sample: int) -> Iterator[slice]:
        """Slices of the samples, each about 8 MiB at `bytes_per_sample`."""
        return sample_blocks(self.n_samples, bytes_per_sample)

    def target_logits(self) -> np.ndarray:
        """Target logits, float32 [N, Q, C]."""
        logits: np.ndarray = self._logits[self.target]
        return logits

    def reference_logits(self, r: int) -> np.ndarray:
        """Logits of reference r (0..R-1), float32 [N, Q, C]."""
        logits: np.ndarray = self._logits[self.reference_ids[r]]
        return logits

    def has_channel(self, name: str) -> bool:
        return name in self._channels

    def target_channel(self, name: str) -> np.ndarray:
        """White-box channel `name` for the target, float64 [N]."""
        channel: np.ndarray = self._channels[name][self.target]
        return channel

    def reference_channel(self, name: str) -> np.ndarray:
        """White-box channel `name` for every reference, float64 [R, N]."""
        channel: np.ndarray = self._channels[name][self.reference_ids]
        return channel

    @property
    def has_sequences(self) -> bool:
        return self._seq_token is not None

    @property
    def has_min_k_plus_plus(self) -> bool:
        return self._seq_mean is not None

    @property
    def has_text(self) -> bool:
        return self.text_zlib_bytes is not None

    def target_token_logprob(self) -> np.ndarray:
        """log p(x_{t+1} | x_<=t) of the target, float32 [N, T]; positions >= seq_lengths are
        padding (never read them: `valid_positions`)."""
        token: np.ndarray = self._sequence(self._seq_token)[self.target]
        return token

    def reference_token_logprob(self, r: int) -> np.ndarray:
        """Reference r's (0..R-1) token log-probabilities, float32 [N, T]."""
        token: np.ndarray = self._sequence(self._seq_token)[self.reference_ids[r]]
        return token

    def target_prefix_token_logprob(self) -> np.ndarray | None:
        """The target's log p(x_{t+1} | P, x_<=t) under ReCaLL's fixed prefix P, float32
        [N, T]; None when the bank lacks it."""
        return None if self._seq_prefix is None else self._seq_prefix[self.target]

    @property
    def has_top1_correct(self) -> bool:
        """Whether the bank holds `seq_top1_correct` (each model's argmax next-token
        prediction right or wrong, per position)."""
        return self._seq_top1 is not None

    def target_top1_correct(self) -> np.ndarray:
        """bool [N, T]: the target's argmax next-token prediction at position t is the actual
        token t+1 (False at padding)."""
        top1: np.ndarray = self._top1()[self.target]
        return top1

    def reference_top1_correct(self, r: int) -> np.ndarray:
        """Reference r's (0..R-1) `target_top1_correct`, bool [N, T]."""
        top1: np.ndarray = self._top1()[self.reference_ids[r]]
        return top1

    def _top1(self) -> np.ndarray:
        if self._seq_top1 is None:
            raise AttackError(
                "the bank holds no seq_top1_correct [M,N,T] (whether each model's top-1 "
                "next-token prediction is the actual token); signal the causal LMs with a "
                "miaudit whose lm_signals computes it (in the same forward pass as the token "
                "log-probabilities)."
            )
        return self._seq_top1

    def target_next_token_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of log p(v) under the target's next-token distribution, float32
        [N, T] each (Min-K%++)."""
        moments: tuple[np.ndarray, np.ndarray] = (self._sequence(self._seq_mean)[self.target],
                                                  self._sequence(self._seq_std)[self.target])
        return moments

    def target_seq_loglik(self) -> np.ndarray:
        """Target's mean token log-probability over each sample's valid tokens, float64 [N]
        (the negated LM loss)."""
        loglik: np.ndarray = self._sequence(self._seq_loglik)[self.target]
        return loglik

    def reference_seq_loglik(self) -> np.ndarray:
        """Every reference's mean token log-probability, float64 [R, N]."""
        loglik: np.ndarray = self._sequence(self._seq_loglik)[self.reference_ids]
        return loglik

    @staticmethod
    def _sequence(array: np.ndarray | None) -> np.ndarray:
        if array is None:
            raise AttackError(
                "the bank holds no sequence signals (seq_token_logprob, seq_mean_logprob, "
                "seq_std_logprob); signal a causal language model into a sequence bank."
            )
        return array

    def out_mask(self) -> np.ndarray:
        """bool [R, N], read-only: reference r did not train on sample n (and was not set
        aside for it)."""
        out: np.ndarray = self.memo("out_mask", lambda: _frozen(self.reference_available
                                                                & ~self.reference_membership))
        return out

    def side_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(IN, OUT) reference counts per sample, int [N] each, read-only."""

        def count() -> tuple[np.ndarray, np.ndarray]:
            n_in = self.reference_membership.sum(axis=0, dtype=np.int64)
            n_out = self.out_mask().sum(axis=0, dtype=np.int64)
            return _frozen(n_in), _frozen(n_out)

        counts: tuple[np.ndarray, np.ndarray] = self.memo("side_counts", count)
        return counts

    def as_shadow(self, r: int) -> TargetView:
        """Reference r as a shadow target, the other references as its references.

        For leave-one-out shadow work: the new view excludes the original target entirely.
        The shadow's own membership, which the attacker legitimately knows, is
        `self.reference_membership[r]` where `self.reference_available[r]` (elsewhere it was
        set aside: its rows there must not be used). The shadow view sets references aside
        by the same rule as every view, with the shadow as the target.
        """
        keep = np.array([i for i in range(self.n_references) if i != r], dtype=int)
        bank_id = int(self.reference_ids[r])
        shadow = TargetView.__new__(TargetView)
        shadow.__dict__.update(self.__dict__)
        shadow.target = bank_id
        shadow._seed = (*self._seed, bank_id)
        available, shadow.set_aside = set_aside(self._known, self._available, bank_id,
                                                self._pools, self._sample_keys, shadow._seed)
        available[bank_id] = False
        shadow._available = _frozen(available)
        shadow._known = _frozen(self._known & available)
        shadow.reference_ids = self.reference_ids[keep]
        shadow.reference_membership = _frozen(shadow._known[shadow.reference_ids])
        shadow.reference_available = _frozen(available[shadow.reference_ids])
        shadow._memo = {}  # nothing computed for this view holds for the shadow's
        return shadow


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def masked_query_means(
    view: TargetView, name: str, masks: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """For each mask [R, N]: the mean over the selected references of statistic `name`
    averaged over queries, float64 [N] (NaN where a sample has none). One pass over the
    references' statistic, a block of samples at a time: equal to
    `mean_over_out(view.reference_query_mean(name), mask)` without its [R, N] temporaries."""
    means = [np.empty(view.n_samples) for _ in masks]
    for block in view.sample_blocks(view.n_references * view.n_queries * 8):
        values = view.reference_query_mean(name, block)
        for mean, mask in zip(means, masks, strict=True):
            mean[block] = mean_over_out(values, mask[:, block])
    return means


@dataclass(frozen=True)
class SideMeans:
    """Means over references of a statistic averaged over queries, float64 [N] each; NaN
    where a sample has no reference on that side."""

    members: np.ndarray  # over the references that trained on the sample (IN)
    non_members: np.ndarray  # over those that did not (OUT)
    every: np.ndarray  # over all references


def side_means(view: TargetView, name: str) -> SideMeans:
    """IN, OUT and all-reference means of statistic `name` averaged over queries: one pass,
    shared by every attack on this view (calibration, RMIA)."""

    def compute() -> SideMeans:
        masks = (view.reference_membership, view.out_mask(), view.reference_available)
        return SideMeans(*(_frozen(m) for m in masked_query_means(view, name, masks)))

    means: SideMeans = view.memo(("side_means", name), compute)
    return means


def mean_over_out(values: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Mean of values [R, N, ...] over references OUT for each sample (out [R, N]).

    NaN where a sample has no OUT reference (the caller's score becomes unscorable).
    """
    weights = out.astype(np.float64)
    count = weights.sum(axis=0).reshape((-1,) + (1,) * (values.ndim - 2))
    # einsum contracts over references without materialising values * weights ([R, N, ...]).
    total = np.einsum("rn...,rn->n...", values, weights, optimize=False)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean: np.ndarray = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return mean
