"""One way from models to a signal bank, for every caller (a run, an audit, the studies).

:func:`query_signals` queries the models on the bank's rows (each model a PyTorch module, or
the precomputed outputs of a black box), applies the output defence the attacker sees, and
computes the extra channels the spec asks for; a channel it cannot compute is recorded with
the reason (:attr:`Signals.missing`), never silently dropped. :func:`assemble_bank` lays the
signals out with a membership design (:mod:`miaudit.protocol`'s registry) as a
:class:`~miaudit.signals.SignalBank`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import torch

from miaudit.errors import ConfigError
from miaudit.runtime.malloc import keep_freed_memory
from miaudit.runtime.progress import progress_bar
from miaudit.signals.bank import (
    BASE_KEY,
    PREFIX_KEY,
    SEQUENCE_EXTRA_KEYS,
    SEQUENCE_KEYS,
    TEXT_KEYS,
    TOP1_KEY,
    SignalBank,
)
from miaudit.signals.boundary import boundary_channels
from miaudit.signals.defences import apply_defence
from miaudit.signals.query import model_precisions, per_sample_grad_norms, query_logits
from miaudit.signals.sequence import text_sizes
from miaudit.signals.sequence_reader import SequenceReader

log = logging.getLogger(__name__)

# The config switch of each extra channel, for the messages of a missing one.
CHANNEL_SWITCHES = {"grad_norm": "signals.grad_norm", "boundary_distance":
                    "signals.boundary_distance"}


@dataclass(frozen=True)
class SignalSpec:
    """What to ask the models: the queries (``plain``, ``mirror``, ``crop-flip-K``), the extra
    channels, the output defence the attacker sees, the batch size, and the seed of the
    HopSkipJump search. ``token_ids``: causal LMs only, keep each text's scored token ids and
    the vocabulary size in the bank (DC-PDD's token frequencies)."""

    queries: tuple[str, ...] = ("plain",)
    grad_norm: bool = False
    boundary_distance: bool = False
    defence: str | dict[str, Any] | None = None
    batch_size: int = 1024
    seed: int = 0
    token_ids: bool = False


@dataclass
class Signals:
    """What the models answered: logits float32 [M, N, Q, C] (defended), channels [M, N],
    the channels asked for but absent with why, and seconds per step. Causal LMs answer
    per-token sequence arrays instead (``seq_*`` float32 [M, N, T], ``seq_lengths`` int64 [N]
    scored positions per sample), and ``logits`` is None: the bank derives them."""

    logits: np.ndarray | None
    channels: dict[str, np.ndarray] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    seq_token_logprob: np.ndarray | None = None
    seq_mean_logprob: np.ndarray | None = None
    seq_std_logprob: np.ndarray | None = None
    seq_lengths: np.ndarray | None = None
    # optional (calibrated LM attacks): prefix-conditioned log-probs [M, N, T], the base
    # model's log-probs [N, T], scored token ids [N, T] and the vocabulary size []
    seq_prefix_token_logprob: np.ndarray | None = None
    seq_base_token_logprob: np.ndarray | None = None
    seq_token_ids: np.ndarray | None = None
    seq_vocab_size: np.ndarray | None = None
    seq_top1_correct: np.ndarray | None = None  # bool [M, N, T]: argmax is the next token

    @property
    def has_sequences(self) -> bool:
        return self.seq_token_logprob is not None

    def take(self, models: Sequence[int]) -> Signals:
        """The signals of ``models`` only (bank order as given)."""
        pick = list(models)
        seq = {k: None if getattr(self, k) is None else getattr(self, k)[pick]
               for k in (*SEQUENCE_KEYS, PREFIX_KEY, TOP1_KEY)}  # fmt: skip
        seq.update({k: getattr(self, k) for k in SEQUENCE_EXTRA_KEYS if k != PREFIX_KEY})
        return Signals(None if self.logits is None else self.logits[pick],
                       {k: v[pick] for k, v in self.channels.items()},
                       dict(self.missing), dict(self.seconds), **seq,
                       seq_lengths=self.seq_lengths)


# a module to query, or its logits [N, Q, C] on the rows
Model: TypeAlias = torch.nn.Module | np.ndarray


def query_signals(
    models: Sequence[Model], features: np.ndarray, labels: np.ndarray, rows: np.ndarray,
    kind: str, spec: SignalSpec, device: str = "cpu", progress: bool = True,
    *, white_box: bool = True, black_box_reason: str = "",
    precision: str | Sequence[str] = "fp32", base: torch.nn.Module | None = None,
    prefix_ids: np.ndarray | None = None,
) -> Signals:  # fmt: skip
    """Every model's signals on dataset rows ``rows`` (bank order).

    A model is a module (queried here) or an array of its logits [len(rows), Q, C] (a black
    box's precomputed outputs). ``white_box`` says whether the modules' parameters may be used
    (per-sample gradients); ``black_box_reason`` says why not, for the missing-channel record.
    Channels need every model as a module: otherwise they are missing, with the reason.
    Causal LMs (modules with ``causal_lm = True``) answer sequence signals instead of logits
    (:func:`lm_signals`). ``precision``: the recipe precision each model was trained at (one
    for all, or one per entry of ``models``): a bf16 model is queried under bf16 autocast.
    ``base`` and ``prefix_ids``: causal LMs only (:func:`lm_signals`).
    """
    if any(getattr(m, "causal_lm", False) for m in models):
        return lm_signals(models, features, rows, spec, device, progress, base=base,
                          prefix_ids=prefix_ids, precision=precision)
    if base is not None or prefix_ids is not None:
        raise ConfigError("a base model and a ReCaLL prefix are for causal LMs only.")
    queries = list(spec.queries)
    modules = [m for m in models if isinstance(m, torch.nn.Module)]
    if not isinstance(precision, str):  # one per model: keep the modules' own
        precision = [p for m, p in zip(models, precision, strict=True)
                     if isinstance(m, torch.nn.Module)]  # fmt: skip
    start = time.perf_counter()
    queried = (query_logits(modules, features, rows, queries, kind, device, spec.batch_size,
                            progress, precision) if modules else None)  # fmt: skip
    parts, k = [], 0
    for model in models:
        if isinstance(model, torch.nn.Module):
            assert queried is not None  # queried: the modules among the models
            parts.append(queried[k])
            k += 1
        else:
            given = np.asarray(model, dtype=np.float32)
            if given.shape[:2] != (len(rows), len(queries)):
                raise ConfigError(
                    f"precomputed outputs have shape {given.shape}; expected ({len(rows)}, "
                    f"{len(queries)}, classes): one row per bank row and query."
                )
            parts.append(given)
    # The attacker sees the defended outputs; white-box channels come from the model itself.
    logits = apply_defence(np.stack(parts), spec.defence)
    seconds = {"query_seconds": time.perf_counter() - start}
    channels: dict[str, np.ndarray] = {}
    missing: dict[str, str] = {}
    all_modules = len(modules) == len(models)
    # What cannot be computed is said first (no switch would help), then what is off.
    if not (white_box and all_modules):
        why = f"; {black_box_reason}" if black_box_reason else ""
        missing["grad_norm"] = ("needs per-sample gradients of the loss (white-box access to "
                                f"a PyTorch model){why}")
    elif not spec.grad_norm:
        missing["grad_norm"] = "per-sample gradient norms are off (signals.grad_norm: false)"
    else:
        start = time.perf_counter()
        try:
            channels["grad_norm"] = np.stack(
                [per_sample_grad_norms(m, features, labels, rows, device) for m in modules])
        except Exception as exc:  # a module torch.func cannot vectorise over samples
            log.warning("per-sample gradient norms failed: %s", exc)
            missing["grad_norm"] = f"per-sample gradients failed on this module: {exc}"
        seconds["grad_norm_seconds"] = time.perf_counter() - start
    if not all_modules:
        missing["boundary_distance"] = ("needs label queries at new inputs (HopSkipJump "
                                        "search); precomputed outputs cannot be queried")
    elif not spec.boundary_distance:
        missing["boundary_distance"] = (
            "boundary distances are off by default: the HopSkipJump search costs about 1,100 "
            "model queries per sample and model; set signals.boundary_distance: true")
    else:
        start = time.perf_counter()
        channels.update(boundary_channels(modules, features, labels, rows, seed=spec.seed,
                                          device=device))  # fmt: skip
        seconds["boundary_seconds"] = time.perf_counter() - start
    return Signals(logits, channels, missing, seconds)


def lm_signals(
    models: Sequence[Model], features: np.ndarray, rows: np.ndarray, spec: SignalSpec,
    device: str = "cpu", progress: bool = True, *, base: torch.nn.Module | None = None,
    prefix_ids: np.ndarray | None = None, precision: str | Sequence[str] = "fp32",
) -> Signals:  # fmt: skip
    """Sequence signals of causal LMs on dataset rows ``rows``: token ids ``features`` [n, L]
    (float, right-padded with each model's ``pad_id``). Per model, batched forwards and
    :func:`~miaudit.signals.sequence.sequence_signals` give ``seq_token_logprob``,
    ``seq_mean_logprob`` and ``seq_std_logprob`` [M, N, L - 1] and ``seq_top1_correct`` (bool:
    the argmax prediction is the next token); ``seq_lengths`` [N] is each text's token count
    - 1 (its scored positions: padding is never scored). Each model is read by a
    :class:`~miaudit.signals.sequence_reader.SequenceReader`: through its hidden states and
    output head a chunk of positions at a time where it can be taken apart (no [B, T, V]
    logits held), ReCaLL's prefix run once per model.

    Optional channels, computed only when asked for (docs/algorithms.md §15): ``base``, the
    pretrained base model (a causal LM, not one of the bank's models), gives
    ``seq_base_token_logprob`` [N, L - 1] (lm-base-reference); ``prefix_ids`` [P], ReCaLL's
    fixed non-member prefix (:func:`~miaudit.signals.sequence.draw_prefix`), gives every
    model's ``seq_prefix_token_logprob`` [M, N, L - 1], from forwards of prefix + text (the
    models need P + L positions); ``spec.token_ids`` keeps ``seq_token_ids`` [N, L - 1] (the
    scored tokens, -1 at padding) and ``seq_vocab_size`` (DC-PDD).

    ``precision``: each model's recipe's (one for all, or one per model): a ``bf16`` model's
    forwards run under bf16 autocast (refused where bf16 is not native); the base model is
    read at the first model's (the target's), so that both sides of a ratio round alike. The
    statistics over the vocabulary are float32 either way."""
    if not all(getattr(m, "causal_lm", False) for m in models):
        raise ConfigError(
            "a bank mixes causal LMs with other models (or precomputed outputs); a sequence "
            "bank needs every model as a causal LM module (e.g. recipe.architecture gpt-small)."
        )
    if tuple(spec.queries) != ("plain",):
        raise ConfigError(
            f"causal LMs are queried on the plain texts only; got signals.queries "
            f"{list(spec.queries)} (use [plain] or leave it unset)."
        )
    if spec.defence is not None:
        raise ConfigError(
            "output defences act on a classifier's logits; a causal LM's sequence bank has "
            "none to defend (leave signals.defence unset)."
        )
    if base is not None and not getattr(base, "causal_lm", False):
        raise ConfigError("the base model must be a causal LM module (causal_lm = True).")
    pads = {int(m.pad_id) for m in (*models, *([base] if base is not None else []))}
    if len(pads) != 1:
        raise ConfigError(f"the causal LMs disagree on the pad id: {sorted(pads)}.")
    pad = pads.pop()
    x = np.asarray(features)[np.asarray(rows)]
    if x.ndim != 2:
        raise ConfigError(f"causal LMs take token ids [N, L]; got features of shape {x.shape}.")
    ids = torch.from_numpy(np.ascontiguousarray(x)).round().long()
    real = ids != pad
    lengths = real.sum(1)
    if bool((real != (torch.arange(ids.shape[1])[None, :] < lengths[:, None])).any()):
        raise ConfigError("token ids must be right-padded: a pad id sits inside a text.")
    if bool((lengths < 2).any()):
        raise ConfigError(
            f"{int((lengths < 2).sum())} texts have fewer than 2 tokens: a causal LM scores "
            "none of their tokens (the first has no prediction)."
        )
    start = time.perf_counter()
    n, width = ids.shape
    shape = (len(models), n, width - 1)
    arrays: dict[str, Any] = {k: np.zeros(shape, dtype=np.float32) for k in SEQUENCE_KEYS}
    prefix = None
    if prefix_ids is not None:
        prefix = torch.as_tensor(np.asarray(prefix_ids)).long().reshape(-1)
        if prefix.numel() == 0 or bool((prefix == pad).any()):
            raise ConfigError("the ReCaLL prefix must hold at least one token and no pad id.")
        arrays[PREFIX_KEY] = np.zeros(shape, dtype=np.float32)
    precisions = model_precisions(precision, len(models), device)
    queried: list[tuple[int | None, Any]] = list(enumerate(models))
    if base is not None:
        queried.append((None, base))
        arrays[BASE_KEY] = np.zeros(shape[1:], dtype=np.float32)
    arrays[TOP1_KEY] = np.zeros(shape, dtype=bool)
    # Longest texts first, each batch cut to its longest text: no forward over padding, and
    # shorter texts in larger batches.
    order = torch.argsort(lengths, descending=True, stable=True)
    bar = progress_bar(len(queried), "querying models", "model", enabled=progress)
    for m, module in queried:
        module.eval().to(device)
        # keep_freed_memory: each batch reallocates arrays of the same sizes
        with torch.inference_mode(), keep_freed_memory():
            reader = SequenceReader(module, ids[order[:1], : int(lengths[order[0]])]
                                     .to(device), device, prefix if m is not None else None,
                                    precisions[0 if m is None else m])  # fmt: skip
            lo = 0
            while lo < n:
                width = int(lengths[order[lo]])
                batch = reader.batch_size(width, int(spec.batch_size))
                rows_b = order[lo : lo + batch].numpy()
                lo += len(rows_b)
                xb = ids[rows_b, :width].to(device)
                lb = lengths[rows_b].numpy()
                parts = reader.signals(xb, lb, full=m is not None)
                if m is None:  # the base model: its token log-probs only
                    arrays[BASE_KEY][rows_b, : width - 1] = parts[0].cpu().numpy()
                    continue
                for key, part in zip((*SEQUENCE_KEYS, TOP1_KEY), parts, strict=True):
                    arrays[key][m, rows_b, : width - 1] = part.cpu().numpy()
                if prefix is not None:
                    part = reader.prefixed(xb, lb)
                    arrays[PREFIX_KEY][m, rows_b, : width - 1] = part.cpu().numpy()
        bar.update(1)
    bar.close()
    if spec.token_ids:
        vocabs = {int(getattr(module, "vocab_size", 0)) for module in models}
        if len(vocabs) != 1 or 0 in vocabs:
            raise ConfigError(f"DC-PDD's token ids need one vocabulary size shared by the "
                              f"causal LMs (vocab_size); got {sorted(vocabs)}.")
        arrays["seq_token_ids"] = torch.where(real[:, 1:], ids[:, 1:], -1).numpy()
        arrays["seq_vocab_size"] = np.int64(vocabs.pop())
    missing = {
        "grad_norm": ("per-sample gradient norms are a classifier channel (the loss on a "
                      "label); not computed for causal LMs"),
        "boundary_distance": ("HopSkipJump searches a classifier's decision boundary; a "
                              "causal LM has none"),
    }  # fmt: skip
    return Signals(None, {}, missing, {"query_seconds": time.perf_counter() - start},
                   **arrays, seq_lengths=(lengths - 1).numpy().astype(np.int64))


def assemble_bank(
    signals: Signals, labels: np.ndarray, membership: np.ndarray, audit: np.ndarray,
    population: np.ndarray, texts: Sequence[str] | np.ndarray | None = None,
    canary: np.ndarray | None = None,
) -> SignalBank:  # fmt: skip
    """The bank of ``signals`` under a membership design: ``labels`` [N] of the bank rows,
    ``membership`` bool [M, N], ``audit`` and ``population`` masks [N]; with the bank rows'
    ``texts``, their sizes too (what the model-free ``blind`` baseline reads); ``canary``
    [N] marks one-run auditing's canary rows (None: none)."""
    sizes = dict(zip(TEXT_KEYS, text_sizes(list(texts)), strict=True)) if texts is not None else {}
    seq: dict[str, Any] = {}
    bank_labels: np.ndarray | None = labels
    if signals.has_sequences:  # the bank derives its logits (labels all 0: the true class)
        seq = {k: getattr(signals, k)
               for k in (*SEQUENCE_KEYS, "seq_lengths", *SEQUENCE_EXTRA_KEYS, TOP1_KEY)}
        bank_labels = None
    return SignalBank(logits=signals.logits, labels=bank_labels, membership=membership,
                      population=population, audit=audit, canary=canary,
                      channels=dict(signals.channels), **sizes, **seq)


def require_channels(signals: Signals, spec: SignalSpec) -> None:
    """ConfigError when a channel the spec asks for could not be computed (a run that asked
    for it must not go on without it)."""
    for name, switch in CHANNEL_SWITCHES.items():
        if getattr(spec, name) and name not in signals.channels:
            raise ConfigError(f"{switch} is on but the channel could not be computed: "
                              f"{signals.missing.get(name, 'unknown reason')}.")
