"""The signal bank: every model's logits on every sample, plus who trained on what.

`bank.npz` is the interchange format (docs/algorithms.md §1): `logits [M,N,Q,C]`, `labels [N]`,
`membership [M,N]`, optional `population [N]`, `audit [N]` and `canary [N]` (one-run auditing's
canaries: neither audit nor population). White-box channels (one float per model and sample,
e.g. the per-sample gradient norm) travel as `channel_<name> [M,N]`; a channel
`<name>_queries` beside one records the queries each model answered to compute it per sample
(HopSkipJump's label queries), which the result table reports as the attack's cost.
"""

from __future__ import annotations

import dataclasses
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from miaudit.errors import BankError, BankWriteError, describe_os_error
from miaudit.io import atomic_path
from miaudit.signals.mapped import PagedStatistics, model_by_model, read_arrays

CHANNEL_PREFIX = "channel_"
# Channel `<name>_queries` [M, N]: queries each model answered to compute channel <name> for
# each sample (HopSkipJump's label queries), read for the cost column.
QUERIES_SUFFIX = "_queries"
_REQUIRED_KEYS = ("logits", "labels", "membership")
_OPTIONAL_KEYS = ("population", "audit", "canary")
# Sequence arrays (causal LMs): [M, N, T] float32 per model, and per-sample [N] ints.
SEQUENCE_KEYS = ("seq_token_logprob", "seq_mean_logprob", "seq_std_logprob")
TEXT_KEYS = ("text_zlib_bytes", "text_chars")
# Optional sequence arrays for calibrated LM attacks (docs/algorithms.md §15), each computed
# only when asked for: every model's token log-probs conditioned on a fixed non-member prefix
# [M, N, T] (ReCaLL), the pretrained base model's token log-probs [N, T] (lm-base-reference),
# the ids of the scored tokens [N, T] (-1 at padding) and the vocabulary size [] (DC-PDD).
PREFIX_KEY = "seq_prefix_token_logprob"
BASE_KEY = "seq_base_token_logprob"
TOKEN_ID_KEYS = ("seq_token_ids", "seq_vocab_size")
SEQUENCE_EXTRA_KEYS = (PREFIX_KEY, BASE_KEY, *TOKEN_ID_KEYS)
# Optional bool [M, N, T]: whether model m's top-1 (argmax) next-token prediction at position
# t is the actual token t+1 (EZ-MIA's error zone), computed in the same forward pass as
# seq_token_logprob (no [.., V] array kept); False at padding. Per model, like PREFIX_KEY:
# whatever selects models of a bank selects it too.
TOP1_KEY = "seq_top1_correct"
_SEQUENCE_OPTIONAL = (*SEQUENCE_KEYS, "seq_lengths", *TEXT_KEYS, *SEQUENCE_EXTRA_KEYS,
                      TOP1_KEY)
# Largest mean log-probability used in the derived logits: log(1 - p) must stay finite.
_MAX_MEAN_LOGPROB = -1e-6


@dataclass
class SignalBank:
    """Logits of M models on N samples under Q queries, with labels and membership; for
    causal language models, per-token sequence signals (then logits may be derived)."""

    logits: np.ndarray | None  # float32 [M, N, Q, C]; None: derived from the sequences
    labels: np.ndarray | None  # int64 [N]; None with derived logits: all 0 (the true class)
    membership: np.ndarray  # bool [M, N]
    population: np.ndarray | None = None  # bool [N]: attacker-owned, never evaluated
    audit: np.ndarray | None = None  # bool [N]: the samples scored and evaluated
    # bool [N] or None (no canaries): one-run auditing's canaries, neither audit nor population
    canary: np.ndarray | None = None
    channels: dict[str, np.ndarray] = field(default_factory=dict)  # name -> float [M, N]
    # Sequence signals (docs/algorithms.md §15); positions >= seq_lengths[n] are padding.
    seq_token_logprob: np.ndarray | None = None  # float32 [M, N, T]: log p(x_{t+1} | x_<=t)
    seq_mean_logprob: np.ndarray | None = None  # float32 [M, N, T]: sum_v p(v) log p(v)
    seq_std_logprob: np.ndarray | None = None  # float32 [M, N, T]: std of log p(v) under p
    seq_lengths: np.ndarray | None = None  # int64 [N]: scored tokens per sample, in [1, T]
    text_zlib_bytes: np.ndarray | None = None  # int64 [N]: len(zlib.compress(text.utf8))
    text_chars: np.ndarray | None = None  # int64 [N]: characters of the text
    # float32 [M, N, T]: log p(x_{t+1} | P, x_<=t), P the fixed non-member prefix (ReCaLL)
    seq_prefix_token_logprob: np.ndarray | None = None
    # float32 [N, T]: the pretrained base model's log p(x_{t+1} | x_<=t) (lm-base-reference)
    seq_base_token_logprob: np.ndarray | None = None
    seq_token_ids: np.ndarray | None = None  # int64 [N, T]: id of x_{t+1}; -1 at padding
    seq_vocab_size: np.ndarray | None = None  # int64 []: the models' vocabulary size (DC-PDD)
    # bool [M, N, T]: model m's argmax next-token prediction at t is x_{t+1}; False at padding
    seq_top1_correct: np.ndarray | None = None

    def __post_init__(self) -> None:
        self._logits_derived = False
        _prepare_sequences(self)
        if self.logits is None:
            if self.seq_token_logprob is None:
                raise BankError(
                    "a bank needs logits [M,N,Q,C]; only a sequence bank (seq_token_logprob "
                    "[M,N,T] and seq_lengths [N]) may leave them out."
                )
            self.logits = sequence_logits(self.sequence_loglik)
            self._logits_derived = True
            if self.labels is None:
                self.labels = np.zeros(self.logits.shape[1], dtype=np.int64)
        elif self.labels is None:
            raise BankError("labels [N] are required with explicit logits.")
        self.logits = np.asarray(self.logits)
        if self.logits.dtype != np.float32:
            self.logits = self.logits.astype(np.float32)
        self.labels = np.asarray(self.labels)
        self.membership = np.asarray(self.membership)
        n = self.labels.shape[0] if self.labels.ndim == 1 else -1
        if self.population is None and n >= 0:
            self.population = np.zeros(n, dtype=bool)
        if self.audit is None and self.population is not None:
            self.audit = ~np.asarray(self.population, dtype=bool)
            if self.canary is not None and np.shape(self.canary) == self.audit.shape:
                self.audit &= ~np.asarray(self.canary, dtype=bool)
        validate_bank(self)
        self.labels = self.labels.astype(np.int64)
        self.membership = self.membership.astype(bool)
        self.population = np.asarray(self.population, dtype=bool)
        self.audit = np.asarray(self.audit, dtype=bool)
        self.canary = None if self.canary is None else np.asarray(self.canary, dtype=bool)
        self.channels = {k: np.asarray(v, dtype=np.float64) for k, v in self.channels.items()}
        self._statistics = PagedStatistics(self.logits, self.labels)

    @property
    def n_models(self) -> int:
        return int(_present(self.logits).shape[0])

    @property
    def n_samples(self) -> int:
        return int(_present(self.logits).shape[1])

    @property
    def n_queries(self) -> int:
        return int(_present(self.logits).shape[2])

    @property
    def n_classes(self) -> int:
        return int(_present(self.logits).shape[3])

    @property
    def has_sequences(self) -> bool:
        """Whether the bank holds the per-token sequence signals of causal LMs."""
        return self.seq_token_logprob is not None

    @property
    def has_text(self) -> bool:
        """Whether the bank holds the per-sample text sizes (`text_zlib_bytes`, `text_chars`)."""
        return self.text_zlib_bytes is not None

    @property
    def logits_derived(self) -> bool:
        """True when the logits were derived from the sequences (not stored in bank.npz)."""
        return self._logits_derived

    @property
    def sequence_loglik(self) -> np.ndarray:
        """Mean log-probability of the actual tokens over each sample's valid positions,
        float64 [M, N] (the negated LM loss), computed once; padding is never read."""
        if self.seq_token_logprob is None or self.seq_lengths is None:
            raise BankError("the bank holds no sequence signals (seq_token_logprob).")
        cached = self.__dict__.get("_sequence_loglik")
        if cached is None:
            valid = valid_positions(self.seq_lengths, self.seq_token_logprob.shape[2])
            total = np.where(valid[None], self.seq_token_logprob, 0.0).sum(
                axis=2, dtype=np.float64
            )
            cached = total / self.seq_lengths[None, :]
            cached.flags.writeable = False
            self.__dict__["_sequence_loglik"] = cached
        loglik: np.ndarray = cached
        return loglik

    def predicted_classes(self, query: int = 0) -> np.ndarray:
        """Each model's predicted class (argmax logit, the first on ties) under ``query``,
        integer [M, N], read-only: from the statistics pass when it went over every model (it
        records them on the way, in the smallest type that holds C), else computed once a
        model at a time (int64; no copy of the logits)."""
        key = f"_predicted_{query}"
        if key not in self.__dict__:
            known = self._statistics.predicted(query)
            self.__dict__[key] = known if known is not None else model_by_model(
                _present(self.logits), lambda z: z[:, query].argmax(-1))
        predicted: np.ndarray = self.__dict__[key]
        return predicted

    @property
    def statistics(self) -> PagedStatistics:
        """Per-model, per-sample, per-query statistics (loss, LiRA's phi, ...), computed once."""
        return self._statistics

    def replace(self, **changes: Any) -> SignalBank:
        """A validated copy with some arrays replaced (e.g. another membership or mask).
        Derived logits are derived again (from the copy's sequences) unless replaced."""
        if self._logits_derived and "logits" not in changes:
            changes = {"logits": None, **changes}
            if "labels" not in changes:
                changes["labels"] = None
        return dataclasses.replace(self, **changes)

    def save(self, path: str | os.PathLike[str], compressed: bool = False) -> Path:
        """Write the bank atomically (a crash never leaves a truncated bank behind)."""
        path = Path(path)
        arrays: dict[str, Any] = {  # keyword arguments of numpy.savez
            "logits": self.logits,
            "labels": self.labels,
            "membership": self.membership,
            "population": self.population,
            "audit": self.audit,
        }
        if self.canary is not None:  # absent otherwise: a bank without canaries is unchanged
            arrays["canary"] = self.canary
        if self._logits_derived:  # re-derived on load from the sequences
            del arrays["logits"], arrays["labels"]
        arrays.update({CHANNEL_PREFIX + k: v for k, v in self.channels.items()})
        for key in _SEQUENCE_OPTIONAL:
            value = getattr(self, key)
            if value is not None:
                arrays[key] = value
        saver = np.savez_compressed if compressed else np.savez
        try:
            with atomic_path(path) as tmp, open(tmp, "wb") as handle:
                saver(handle, **arrays)
        except OSError as exc:  # a full disk, a read-only or forbidden folder
            what, todo = describe_os_error(exc, path)
            raise BankWriteError(
                f"cannot write the signal bank {path}: {what}. Nothing half-written is kept "
                f"(a bank file already at {path.name}, if any, is as it was). To fix: {todo}",
                exc.errno) from exc
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SignalBank:
        """Read a bank.npz, with a clear error for a missing, corrupt or incomplete file.

        Logits stored uncompressed (``numpy.savez``, what :meth:`save` writes) are mapped
        from the file, not copied: see :mod:`miaudit.signals.mapped`. Compressed banks are
        read into memory as before."""
        path = Path(path)
        if not path.exists():
            raise BankError(f"bank file {path} does not exist; check the path.")
        try:
            arrays = read_arrays(path, mapped=("logits",))
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
            raise BankError(
                f"bank file {path} cannot be read ({exc}); it is not a valid .npz — "
                "re-create it with numpy.savez or `miaudit run`."
            ) from exc
        required: tuple[str, ...] = _REQUIRED_KEYS
        if "seq_token_logprob" in arrays and "logits" not in arrays:
            required = ("membership",)  # a sequence bank: logits and labels are derived
        missing = [k for k in required if k not in arrays]
        if missing:
            raise BankError(
                f"bank file {path} lacks required arrays {missing}; a bank needs "
                "logits [M,N,Q,C], labels [N] and membership [M,N] (a sequence bank: "
                "membership, seq_token_logprob [M,N,T] and seq_lengths [N])."
            )
        known = set(_REQUIRED_KEYS) | set(_OPTIONAL_KEYS) | set(_SEQUENCE_OPTIONAL)
        unknown = [k for k in arrays if k not in known and not k.startswith(CHANNEL_PREFIX)]
        if unknown:
            raise BankError(
                f"bank file {path} has unknown arrays {unknown}; allowed: "
                f"{sorted(known)} and '{CHANNEL_PREFIX}<name>' channels."
            )
        channels = {
            k[len(CHANNEL_PREFIX):]: v for k, v in arrays.items() if k.startswith(CHANNEL_PREFIX)
        }
        sequences: dict[str, Any] = {k: arrays.get(k) for k in _SEQUENCE_OPTIONAL}
        return cls(
            logits=arrays.get("logits"),
            labels=arrays.get("labels"),
            membership=arrays["membership"],
            population=arrays.get("population"),
            audit=arrays.get("audit"),
            canary=arrays.get("canary"),
            channels=channels,
            **sequences,
        )


def validate_bank(bank: SignalBank) -> None:
    """Raise BankError naming the first problem found, and how to fix it."""
    logits, labels, membership = _present(bank.logits), _present(bank.labels), bank.membership
    if logits.ndim != 4:
        raise BankError(
            f"logits must have shape [M, N, Q, C] (models, samples, queries, classes); got "
            f"{logits.shape}. Add a query axis with logits[:, :, None, :] if you have one query."
        )
    m, n, q, c = logits.shape
    if min(m, n, q) == 0 or c < 2:
        raise BankError(f"logits shape {logits.shape} is empty or has fewer than 2 classes.")
    if labels.shape != (n,):
        raise BankError(f"labels must have shape [N] = [{n}] to match logits; got {labels.shape}.")
    if not np.issubdtype(labels.dtype, np.integer):
        if not (np.issubdtype(labels.dtype, np.floating) and np.all(labels == np.round(labels))):
            raise BankError(f"labels must be integers; got dtype {labels.dtype}.")
    if labels.min() < 0 or labels.max() >= c:
        bad = int(np.sum((labels < 0) | (labels >= c)))
        raise BankError(
            f"{bad} labels are outside 0..{c - 1} (the logits have {c} classes); "
            "check the label encoding or the model's output width."
        )
    if membership.shape != (m, n):
        raise BankError(
            f"membership must have shape [M, N] = [{m}, {n}] to match logits; "
            f"got {membership.shape}."
        )
    if membership.dtype != bool and not np.isin(membership, (0, 1)).all():
        raise BankError("membership must be boolean (or 0/1).")
    # a model at a time: no [M, N, Q, C] temporary, mapped pages given back
    non_finite = model_by_model(logits, lambda z: z.size - np.count_nonzero(np.isfinite(z)))
    if non_finite.any():
        raise BankError(
            f"{int(non_finite.sum())} logits are NaN or infinite (models "
            f"{np.flatnonzero(non_finite)[:10].tolist()}); "
            "the model diverged or the export is broken — retrain or re-export those models."
        )
    for name in ("population", "audit", "canary"):
        mask = getattr(bank, name)
        if mask is not None and np.shape(mask) != (n,):
            raise BankError(f"{name} must be a boolean mask of shape [{n}]; got {np.shape(mask)}.")
    if bank.canary is not None:
        canary = np.asarray(bank.canary, dtype=bool)
        for name in ("population", "audit"):
            both = canary & np.asarray(getattr(bank, name), dtype=bool)
            if both.any():
                raise BankError(f"{int(both.sum())} samples are both canary and {name}; "
                                "canaries are their own rows (one-run auditing).")
    population = np.asarray(bank.population, dtype=bool)
    audit = np.asarray(bank.audit, dtype=bool)
    if (population & audit).any():
        raise BankError(
            f"{int((population & audit).sum())} samples are both population and audit; "
            "population samples are the attacker's and are never evaluated."
        )
    if (membership[:, population]).any():
        raise BankError(
            "some population samples are members of a model; population data must be "
            "outside every model's training set."
        )
    for key, values in bank.channels.items():
        values = np.asarray(values)
        if values.shape != (m, n):
            raise BankError(
                f"channel '{key}' must have shape [M, N] = [{m}, {n}]; got {values.shape}."
            )
        if not np.isfinite(values).all():
            raise BankError(f"channel '{key}' holds NaN or infinite values.")


def _present(array: np.ndarray | None) -> np.ndarray:
    """An optional field the code already relies on being set (the logits and labels once
    `__post_init__` derived or checked them; the sequences once `_prepare_sequences` did)."""
    assert array is not None
    return array


def valid_positions(lengths: np.ndarray, width: int) -> np.ndarray:
    """bool [N, T]: position t of sample n is a scored token (t < lengths[n])."""
    return np.arange(width)[None, :] < np.asarray(lengths)[:, None]


def sequence_logits(loglik: np.ndarray) -> np.ndarray:
    """Two-class logits [M, N, 1, 2] from mean log-likelihoods `loglik [M, N]`: class 0 (the
    label) gets `l`, class 1 `log(1 - e^l)`, so softmax gives `p = e^l` on the true class and
    the cached statistics read: loss = -l, prob_true = p, phi = log p - log(1 - p). `l` is
    capped at -1e-6 so that log(1 - p) stays finite."""
    ell = np.minimum(np.asarray(loglik, dtype=np.float64), _MAX_MEAN_LOGPROB)
    other = np.log(-np.expm1(ell))
    return np.stack([ell, other], axis=-1)[:, :, None, :].astype(np.float32)


def _prepare_sequences(bank: SignalBank) -> None:
    """Convert and validate the sequence and text arrays (before logits are derived)."""
    present = [k for k in _SEQUENCE_OPTIONAL if getattr(bank, k) is not None]
    if not present:
        return
    membership = np.asarray(bank.membership)
    if membership.ndim != 2:
        raise BankError(
            f"membership must have shape [M, N] (models, samples); got {membership.shape}."
        )
    m, n = membership.shape
    has_text = [k for k in TEXT_KEYS if getattr(bank, k) is not None]
    if has_text and len(has_text) != len(TEXT_KEYS):
        raise BankError(
            f"text arrays come together: the bank has {has_text} but needs all of "
            f"{list(TEXT_KEYS)} (zlib-compressed UTF-8 length and character count per sample)."
        )
    for key in TEXT_KEYS:
        value = getattr(bank, key)
        if value is None:
            continue
        value = _integers(key, value, n)
        least = 1 if key == "text_zlib_bytes" else 0
        if (value < least).any():
            raise BankError(
                f"{key} must be >= {least}; {int((value < least).sum())} samples are not."
            )
        setattr(bank, key, value)
    has_seq = [k for k in (*SEQUENCE_KEYS, "seq_lengths") if getattr(bank, k) is not None]
    extras = [k for k in (*SEQUENCE_EXTRA_KEYS, TOP1_KEY) if getattr(bank, k) is not None]
    if not has_seq:
        if extras:
            raise BankError(f"the bank has {extras} but no sequence signals "
                            "(seq_token_logprob [M,N,T] and seq_lengths [N]).")
        return
    if bank.seq_token_logprob is None or bank.seq_lengths is None:
        raise BankError(
            f"the bank has {has_seq} but a sequence bank needs at least seq_token_logprob "
            "[M,N,T] and seq_lengths [N]."
        )
    lengths = _integers("seq_lengths", bank.seq_lengths, n)
    tokens = np.asarray(bank.seq_token_logprob)
    if tokens.ndim != 3 or tokens.shape[:2] != (m, n) or tokens.shape[2] == 0:
        raise BankError(
            f"seq_token_logprob must have shape [M, N, T] = [{m}, {n}, T>0] (models, samples, "
            f"token positions) to match membership; got {tokens.shape}."
        )
    width = tokens.shape[2]
    if lengths.min() < 1 or lengths.max() > width:
        bad = int(((lengths < 1) | (lengths > width)).sum())
        raise BankError(
            f"{bad} seq_lengths are outside 1..{width} (T, the padded width); each sample "
            "needs at least one scored token and no more than T."
        )
    bank.seq_lengths = lengths
    valid = valid_positions(lengths, width)
    for key in SEQUENCE_KEYS:
        value = getattr(bank, key)
        if value is None:
            continue
        value = np.asarray(value)
        if value.shape != tokens.shape:
            raise BankError(
                f"{key} must have the shape of seq_token_logprob, {tokens.shape}; "
                f"got {value.shape}."
            )
        value = value.astype(np.float32, copy=False)
        inside = value[:, valid]  # [M, valid positions]: padding is never checked
        finite = np.isfinite(inside)
        if not finite.all():
            bad_models = np.unique(np.nonzero(~finite)[0]).tolist()
            raise BankError(
                f"{int((~finite).sum())} valid positions of {key} are NaN or infinite "
                f"(models {bad_models[:10]}); re-export those models' sequence signals."
            )
        if key != "seq_std_logprob" and (inside > 1e-4).any():
            raise BankError(
                f"{key} holds positive log-probabilities at valid positions; it must be "
                "log p (<= 0) — check that log_softmax, not raw logits, was exported."
            )
        if key == "seq_std_logprob" and (inside < 0).any():
            raise BankError("seq_std_logprob holds negative standard deviations.")
        setattr(bank, key, value)
    if (bank.seq_mean_logprob is None) != (bank.seq_std_logprob is None):
        raise BankError(
            "seq_mean_logprob and seq_std_logprob come together (Min-K%++ needs both)."
        )
    _prepare_sequence_extras(bank, valid)


def _prepare_sequence_extras(bank: SignalBank, valid: np.ndarray) -> None:
    """Convert and validate the optional arrays of the calibrated LM attacks."""
    m, n, width = _present(bank.seq_token_logprob).shape
    for key, shape in ((PREFIX_KEY, (m, n, width)), (BASE_KEY, (n, width))):
        value = getattr(bank, key)
        if value is None:
            continue
        value = np.asarray(value)
        if value.shape != shape:
            raise BankError(f"{key} must have shape {shape}; got {value.shape}.")
        value = value.astype(np.float32, copy=False)
        inside = value[..., valid]
        if not np.isfinite(inside).all():
            raise BankError(f"{int((~np.isfinite(inside)).sum())} valid positions of {key} "
                            "are NaN or infinite; re-export the sequence signals.")
        if (inside > 1e-4).any():
            raise BankError(f"{key} holds positive log-probabilities at valid positions; it "
                            "must be log p (<= 0).")
        setattr(bank, key, value)
    _prepare_top1(bank, valid)
    ids, vocab = bank.seq_token_ids, bank.seq_vocab_size
    if (ids is None) != (vocab is None):
        raise BankError("seq_token_ids and seq_vocab_size come together (DC-PDD needs both).")
    if ids is None:
        return
    vocab = np.asarray(vocab)
    if vocab.shape != () or not np.issubdtype(vocab.dtype, np.integer) or int(vocab) < 1:
        raise BankError(f"seq_vocab_size must be one positive integer; got {vocab!r}.")
    ids = np.asarray(ids)
    if ids.shape != (n, width) or not np.issubdtype(ids.dtype, np.integer):
        raise BankError(f"seq_token_ids must be integers of shape {(n, width)}; got "
                        f"{ids.dtype} {ids.shape}.")
    inside = ids[valid]
    if inside.size and (inside.min() < 0 or inside.max() >= int(vocab)):
        raise BankError(f"seq_token_ids holds ids outside 0..{int(vocab) - 1} (the "
                        "vocabulary) at valid positions.")
    bank.seq_token_ids = np.where(valid, ids, -1).astype(np.int64)
    bank.seq_vocab_size = vocab.astype(np.int64)


def _prepare_top1(bank: SignalBank, valid: np.ndarray) -> None:
    """Validate `seq_top1_correct` (bool, or 0/1 at the valid positions) and clear its
    padding to False."""
    value = bank.seq_top1_correct
    if value is None:
        return
    value = np.asarray(value)
    shape = _present(bank.seq_token_logprob).shape
    if value.shape != shape:
        raise BankError(f"{TOP1_KEY} must have the shape of seq_token_logprob, {shape} "
                        f"[M, N, T]; got {value.shape}.")
    if value.dtype != bool:
        numeric = np.issubdtype(value.dtype, np.integer) or np.issubdtype(value.dtype,
                                                                          np.floating)
        if not numeric or not np.isin(value[:, valid], (0, 1)).all():
            raise BankError(f"{TOP1_KEY} must be boolean (or 0/1 at the valid positions): "
                            "whether each model's argmax next-token prediction is the "
                            f"actual token; got dtype {value.dtype} with other values.")
    bank.seq_top1_correct = np.logical_and(value != 0, valid[None])


def _integers(key: str, value: object, n: int) -> np.ndarray:
    array = np.asarray(value)
    if array.shape != (n,):
        raise BankError(f"{key} must have shape [N] = [{n}]; got {array.shape}.")
    if not np.issubdtype(array.dtype, np.integer):
        if not (np.issubdtype(array.dtype, np.floating) and np.all(array == np.round(array))):
            raise BankError(f"{key} must be integers; got dtype {array.dtype}.")
    return array.astype(np.int64)
