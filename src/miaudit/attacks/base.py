"""The attack registry and what an attack may see.

An attack is a pure function `fn(view: TargetView, **params) -> np.ndarray` returning one
float64 score per bank sample (higher = more likely a member; NaN = cannot score). It never
touches a model. `TargetView` exposes everything in the bank except the target's membership,
so no attack can peek at the answer. An attack that scores public rows of known membership on
its way (a scorer's held-out shadow rows) may return `Scored(scores, ThresholdRows(...))`
instead: the pipeline then picks its public-data threshold on those rows rather than running
the attack again with a reference as target (`run_attack` checks that they are public).
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from miaudit.errors import AttackError
from miaudit.signals.bank import QUERIES_SUFFIX, SignalBank
from miaudit.signals.statistics import sample_blocks


class TargetView:
    """The bank as seen when attacking one target model: all but the target's membership.

    Reference models are every other model, in bank order; `reference_ids[r]` is the bank
    index of reference r. Build one with `TargetView.of(bank, target)`.
    """

    def __init__(
        self,
        bank: SignalBank,
        target: int,
        reference_ids: np.ndarray,
        reference_membership: np.ndarray,
    ) -> None:
        self.target = int(target)
        self.reference_ids = reference_ids
        # A read-only copy: the view holds no reference to the full membership matrix, and
        # what `memo` keeps stays valid.
        self.reference_membership = _frozen(reference_membership.copy())
        self.labels = bank.labels
        self.population = bank.population
        self.audit = bank.audit
        # one-run auditing's canaries (the auditor's rows, not the attacker's public data)
        self.canary = (np.zeros(bank.n_samples, dtype=bool) if bank.canary is None
                       else bank.canary)
        self.n_samples = bank.n_samples
        self.n_queries = bank.n_queries
        self.n_classes = bank.n_classes
        self._logits = bank.logits
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
        self._memo: dict[Hashable, Any] = {}

    @classmethod
    def of(cls, bank: SignalBank, target: int) -> TargetView:
        if not 0 <= target < bank.n_models:
            raise AttackError(
                f"target {target} is out of range: the bank has {bank.n_models} models "
                f"(0..{bank.n_models - 1})."
            )
        ids = np.array([m for m in range(bank.n_models) if m != target], dtype=int)
        return cls(bank, target, ids, bank.membership[ids])

    @property
    def n_references(self) -> int:
        return int(self.reference_ids.size)

    @property
    def public(self) -> np.ndarray:
        """bool [N]: the samples whose rows may choose anything (an epoch, a threshold):
        neither audited, nor population, nor canaries (docs/algorithms.md §12)."""
        return ~self.audit & ~self.population & ~self.canary

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
        return self._statistics.get(name, [self.target])[0]

    def reference_stat(self, name: str, samples: slice | None = None) -> np.ndarray:
        """Statistic `name` for every reference, float64 [R, N, Q] (or [R, len(samples), Q]
        for a slice of samples: blocks of samples bound the temporaries)."""
        return self._statistics.get(name, self.reference_ids, samples)

    def target_query_mean(self, name: str) -> np.ndarray:
        """Statistic `name` of the target averaged over queries, float64 [N]."""
        return self._statistics.query_mean(name, [self.target])[0]

    def reference_query_mean(self, name: str, samples: slice | None = None) -> np.ndarray:
        """Statistic `name` of every reference averaged over queries, float64 [R, N] (or the
        slice `samples` of it)."""
        return self._statistics.query_mean(name, self.reference_ids, samples)

    def sample_blocks(self, bytes_per_sample: int) -> Iterator[slice]:
        """Slices of the samples, each about 8 MiB at `bytes_per_sample`."""
        return sample_blocks(self.n_samples, bytes_per_sample)

    def target_logits(self) -> np.ndarray:
        """Target logits, float32 [N, Q, C]."""
        return self._logits[self.target]

    def reference_logits(self, r: int) -> np.ndarray:
        """Logits of reference r (0..R-1), float32 [N, Q, C]."""
        return self._logits[self.reference_ids[r]]

    def has_channel(self, name: str) -> bool:
        return name in self._channels

    def target_channel(self, name: str) -> np.ndarray:
        """White-box channel `name` for the target, float64 [N]."""
        return self._channels[name][self.target]

    def reference_channel(self, name: str) -> np.ndarray:
        """White-box channel `name` for every reference, float64 [R, N]."""
        return self._channels[name][self.reference_ids]

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
        return self._sequence(self._seq_token)[self.target]

    def reference_token_logprob(self, r: int) -> np.ndarray:
        """Reference r's (0..R-1) token log-probabilities, float32 [N, T]."""
        return self._sequence(self._seq_token)[self.reference_ids[r]]

    def target_next_token_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of log p(v) under the target's next-token distribution, float32
        [N, T] each (Min-K%++)."""
        return self._sequence(self._seq_mean)[self.target], self._seq_std[self.target]

    def target_seq_loglik(self) -> np.ndarray:
        """Target's mean token log-probability over each sample's valid tokens, float64 [N]
        (the negated LM loss)."""
        return self._sequence(self._seq_loglik)[self.target]

    def reference_seq_loglik(self) -> np.ndarray:
        """Every reference's mean token log-probability, float64 [R, N]."""
        return self._sequence(self._seq_loglik)[self.reference_ids]

    @staticmethod
    def _sequence(array: np.ndarray | None) -> np.ndarray:
        if array is None:
            raise AttackError(
                "the bank holds no sequence signals (seq_token_logprob, seq_mean_logprob, "
                "seq_std_logprob); signal a causal language model into a sequence bank."
            )
        return array

    def out_mask(self) -> np.ndarray:
        """bool [R, N], read-only: reference r did not train on sample n."""
        return self.memo("out_mask", lambda: _frozen(~self.reference_membership))

    def side_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(IN, OUT) reference counts per sample, int [N] each, read-only."""

        def count() -> tuple[np.ndarray, np.ndarray]:
            n_in = self.reference_membership.sum(axis=0, dtype=np.int64)
            return _frozen(n_in), _frozen(self.n_references - n_in)

        return self.memo("side_counts", count)

    def as_shadow(self, r: int) -> TargetView:
        """Reference r as a shadow target, the other references as its references.

        For leave-one-out shadow work: the new view excludes the original target entirely.
        The shadow's own membership, which the attacker legitimately knows, is
        `self.reference_membership[r]`.
        """
        keep = np.array([i for i in range(self.n_references) if i != r], dtype=int)
        shadow = TargetView.__new__(TargetView)
        shadow.__dict__.update(self.__dict__)
        shadow.target = int(self.reference_ids[r])
        shadow.reference_ids = self.reference_ids[keep]
        shadow.reference_membership = _frozen(self.reference_membership[keep])
        shadow._memo = {}  # nothing computed for this view holds for the shadow's
        return shadow


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@dataclass(frozen=True)
class Needs:
    """What an attack requires of the bank; checked before it runs."""

    out_references: int = 0  # at least this many references OUT for a typical audit sample
    in_references: int = 0  # at least this many IN references (online attacks)
    population: bool = False  # attacker-owned samples no model trained on
    channel: str | None = None  # a white-box channel such as "grad_norm"
    shadows: int = 0  # references whose membership is used to train a scorer
    sequence: bool = False  # per-token log-probs of causal LMs (seq_token_logprob, seq_lengths)
    next_token_moments: bool = False  # seq_mean_logprob and seq_std_logprob (Min-K%++)
    text: bool = False  # text_zlib_bytes and text_chars (zlib, the blind baseline)

    def check(self, view: TargetView, attack: str) -> None:
        problems = []
        in_counts, out_counts = (counts[view.audit] for counts in view.side_counts())
        if self.out_references and (out_counts.size == 0 or out_counts.max() < self.out_references):
            problems.append(
                f"needs at least {self.out_references} reference model(s) that did not train on "
                f"the audit samples; the bank has {view.n_references} reference(s) and at most "
                f"{int(out_counts.max()) if out_counts.size else 0} are OUT for any audit sample. "
                "Train reference models (offline: on public data; online: the balanced design)."
            )
        if self.in_references and (in_counts.size == 0 or in_counts.max() < self.in_references):
            problems.append(
                f"needs at least {self.in_references} reference model(s) trained ON the audit "
                "samples (the online design: each audit sample IN for half the models); "
                "use the online protocol or an offline attack."
            )
        if self.population and not view.population.any():
            problems.append(
                "needs population samples (attacker data no model trained on): add a "
                "'population' mask to the bank or give the run a public pool."
            )
        if self.channel and not view.has_channel(self.channel):
            problems.append(
                f"needs the channel '{self.channel}', which the bank lacks; compute it "
                f"at signal time (signals.{self.channel}: true in the run config)."
            )
        if self.shadows and view.n_references < self.shadows:
            problems.append(
                f"needs at least {self.shadows} shadow/reference models with known membership; "
                f"the bank has {view.n_references}."
            )
        if self.sequence and not view.has_sequences:
            problems.append(
                "needs the sequence signals of a causal language model (seq_token_logprob "
                "[M,N,T] and seq_lengths [N]), which the bank lacks; build a sequence bank "
                "(signals.sequence.sequence_signals on the model's logits)."
            )
        if self.next_token_moments and not view.has_min_k_plus_plus:
            problems.append(
                "needs seq_mean_logprob and seq_std_logprob [M,N,T] (the mean and std of "
                "log p(v) under each next-token distribution), which the bank lacks; export "
                "them with signals.sequence.sequence_signals."
            )
        if self.text and not view.has_text:
            problems.append(
                "needs the samples' text sizes text_zlib_bytes and text_chars [N], which the "
                "bank lacks; compute them with signals.sequence.text_sizes."
            )
        if problems:
            raise AttackError(f"attack '{attack}' cannot run: " + " ".join(problems))


@dataclass(frozen=True)
class AttackSpec:
    name: str
    fn: Callable[..., np.ndarray]
    needs: Needs
    description: str
    params: dict[str, Any] = field(default_factory=dict)  # defaults, overridable per run
    family: str = ""
    first_query_only: bool = False  # reads query 0 of the logits only (e.g. correctness)
    image_queries: int = 2  # its paper's number of augmented queries on images (RAPID: 8)
    model_free: bool = False  # never reads a model (the blind baseline): costs no query

    def queries_per_sample(self, view: TargetView) -> float:
        """Queries this attack makes to the target per audit sample: every query of the bank
        for an attack on logits, one for a query-0 attack, and for a channel attack the count
        the bank records in channel `<channel>_queries` (HopSkipJump's label queries), else
        one (a white-box channel: one forward and backward pass on the plain query); none for
        a model-free attack."""
        if self.model_free:
            return 0.0
        if self.needs.channel:
            recorded = f"{self.needs.channel}{QUERIES_SUFFIX}"
            if view.has_channel(recorded):
                return float(view.target_channel(recorded)[view.audit].mean())
            return 1.0
        return 1.0 if self.first_query_only else float(view.n_queries)


_REGISTRY: dict[str, AttackSpec] = {}


def register_attack(
    name: str,
    *,
    needs: Needs = Needs(),
    description: str = "",
    family: str = "",
    first_query_only: bool = False,
    image_queries: int = 2,
    model_free: bool = False,
    **params: Any,
) -> Callable[[Callable[..., np.ndarray]], Callable[..., np.ndarray]]:
    """Register `fn` under `name`; keyword `params` are its defaults (variants re-register
    the same function under another name with other defaults). `first_query_only`: the
    attack reads query 0 only, so it costs one query per sample whatever the bank holds.
    `image_queries`: how many augmented queries its paper makes on images; a run on image
    data that does not list its queries uses the largest of its attacks' (default 2: plain
    and mirror). `model_free`: it never reads a model (the blind baseline), so its cost is no
    model and no query."""

    def decorate(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        if name in _REGISTRY:
            raise ValueError(f"attack '{name}' is registered twice")
        _REGISTRY[name] = AttackSpec(
            name, fn, needs, description, dict(params), family, first_query_only, image_queries,
            model_free,
        )
        return fn

    return decorate


def list_attacks() -> list[AttackSpec]:
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def get_attack(name: str) -> AttackSpec:
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise AttackError(
            f"unknown attack '{name}'.{hint} Known attacks: {', '.join(sorted(_REGISTRY))}."
        )
    return _REGISTRY[name]


@dataclass(frozen=True)
class ThresholdRows:
    """Scores of public rows whose membership the attacker knows (e.g. a scorer's held-out
    shadow rows), from which Watson et al.'s accuracy threshold is chosen (docs/algorithms.md
    §12). A sample may appear once per shadow model, labelled by that model's membership."""

    scores: np.ndarray  # float64 [k]; NaN rows are ignored
    members: np.ndarray  # bool [k]: a member of the model that produced the row
    samples: np.ndarray  # int [k]: bank index of each row's sample (must be public)


@dataclass(frozen=True)
class Scored:
    """What an attack may return instead of its scores alone."""

    scores: np.ndarray  # float64 [N]
    threshold_rows: ThresholdRows | None = None  # None: the pipeline reruns the attack


@dataclass
class AttackRun:
    name: str
    scores: np.ndarray  # float64 [N]; NaN where the attack could not score
    seconds: float
    n_unscorable: int  # among audit samples
    threshold_rows: ThresholdRows | None = None  # the attack's own public rows, if it has any


def run_attack(name: str, view: TargetView, **overrides: Any) -> AttackRun:
    """Check needs, run the attack, validate its output."""
    spec = get_attack(name)
    unknown = set(overrides) - set(spec.params)
    if unknown:
        raise AttackError(
            f"attack '{name}' has no parameter(s) {sorted(unknown)}; "
            f"its parameters are {sorted(spec.params) or 'none'}."
        )
    spec.needs.check(view, name)
    start = time.perf_counter()
    returned = spec.fn(view, **{**spec.params, **overrides})
    seconds = time.perf_counter() - start
    rows = returned.threshold_rows if isinstance(returned, Scored) else None
    scores = np.asarray(scores_of(returned), dtype=np.float64)
    if scores.shape != (view.n_samples,):
        raise AttackError(
            f"attack '{name}' returned shape {scores.shape}; expected [{view.n_samples}]."
        )
    if np.isinf(scores).any():
        raise AttackError(f"attack '{name}' returned infinite scores; this is a bug in it.")
    if rows is not None:
        _check_public(name, view, rows)
    n_unscorable = int(np.isnan(scores[view.audit]).sum())
    return AttackRun(name, scores, seconds, n_unscorable, rows)


def scores_of(returned: np.ndarray | Scored) -> np.ndarray:
    """An attack function's scores, whether it returned them alone or as `Scored`."""
    return returned.scores if isinstance(returned, Scored) else returned


def _check_public(name: str, view: TargetView, rows: ThresholdRows) -> None:
    samples = np.asarray(rows.samples)
    if not (len(rows.scores) == len(rows.members) == samples.size):
        raise AttackError(f"attack '{name}' returned threshold rows of unequal lengths.")
    if samples.size and not view.public[samples].all():
        raise AttackError(
            f"attack '{name}' returned threshold rows on audited, population or canary "
            "samples; a threshold is chosen on public data only. This is a bug in it."
        )


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
        members = view.reference_membership
        masks = (members, view.out_mask(), np.ones_like(members))
        return SideMeans(*(_frozen(m) for m in masked_query_means(view, name, masks)))

    return view.memo(("side_means", name), compute)


def mean_over_out(values: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Mean of values [R, N, ...] over references OUT for each sample (out [R, N]).

    NaN where a sample has no OUT reference (the caller's score becomes unscorable).
    """
    weights = out.astype(np.float64)
    count = weights.sum(axis=0).reshape((-1,) + (1,) * (values.ndim - 2))
    # einsum contracts over references without materialising values * weights ([R, N, ...]).
    total = np.einsum("rn...,rn->n...", values, weights, optimize=False)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)
