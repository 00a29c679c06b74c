"""Exposure and greedy extraction of language-model canaries (Carlini, Liu, Erlingsson, Kos &
Song 2019, "The Secret Sharer"; docs/algorithms.md §15, "Exposure and extraction").

A canary is ``prefix + secret`` (:mod:`miaudit.privacy.secrets`). Given a causal LM module
(:class:`miaudit.models.hf.HFCausalLM` or any module mapping feature ids ``[B, T]``,
right-padded with ``pad_id``, to next-token logits ``[B, T, V]`` over feature ids):

- :func:`secret_log_likelihoods`: ``log p(secret | prefix)``, nats, summed over the secret's
  tokens, one forward per batch;
- :func:`exposure`: ``log₂|R| − log₂ rank(secret)``, the rank estimated from uniformly sampled
  candidates of R, and the paper's skew-normal extrapolation for secrets beyond the sample;
- :func:`greedy_extractions`: does greedy decoding from the prefix reproduce the secret?

**Tokenization contract.** ``encode(text) -> Sequence[int]`` gives the text's token ids *in
feature space*, as the model was trained on them: the tokenizer's pad id swapped with 0
(:func:`miaudit.models.hf.swap_pad`), a leading special token (BOS) kept, **no** trailing
end-of-text token (the secret is scored, not where the text ends). ``decode`` is its inverse.
:func:`feature_codec` builds both from a ``tokenizers.Tokenizer`` and its pad id, as
:func:`miaudit.models.hf.encode_texts` encodes the training texts.

**The prefix/secret boundary** (:func:`split_secret_tokens`). ``prefix + secret`` is tokenized
as one text, as in training. The *context* is the longest run of leading tokens shared by the
prefix's own encoding and every ``prefix + secret`` encoding; each secret's scored tokens are
the rest. With the secret starting at a word boundary (the formats' templates start with a
space) the context is exactly the prefix's tokens. If a tokenizer merges across the boundary
the context shrinks to the shared tokens and the scored span also covers the prefix's merged
tail: the same text for every candidate, conditioned on the same context, so ranks still
compare like with like.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from miaudit.errors import ConfigError
from miaudit.privacy.secrets import (
    CANDIDATES_STREAM,
    CanarySecret,
    SecretFormat,
    secret_format,
)

Encode = Callable[[str], Sequence[int]]
Decode = Callable[[Sequence[int]], str]
DEFAULT_BATCH = 64
# The skew-normal fit needs enough candidates to say anything about the tail.
MIN_FIT_CANDIDATES = 20


def feature_codec(tokenizer: Any, pad: int) -> tuple[Encode, Decode]:
    """``(encode, decode)`` in feature space for a ``tokenizers.Tokenizer`` whose padding id is
    ``pad``: the tokenizer's post-processor as in training (a leading BOS kept), trailing
    special tokens (an appended end-of-text) dropped, ``pad`` swapped with 0. A text whose
    tokens hold ``pad`` is refused, as :func:`~miaudit.models.hf.encode_texts` refuses it."""
    from miaudit.models.hf import swap_pad

    def encode(text: str) -> list[int]:
        enc = tokenizer.encode(text)
        ids, special = list(enc.ids), list(enc.special_tokens_mask)
        words = [i for i, flag in enumerate(special) if not flag]
        ids = ids[: words[-1] + 1] if words else ids  # specials after the last text token
        if pad in ids:
            raise ValueError(f"the padding id {pad} occurs in the tokens of {text[:40]!r}.")
        return [int(i) for i in swap_pad(np.asarray(ids, dtype=np.int64), pad)]

    def decode(ids: Sequence[int]) -> str:
        tokens = swap_pad(np.asarray(list(ids), dtype=np.int64), pad)
        return str(tokenizer.decode([int(i) for i in tokens], skip_special_tokens=True))

    return encode, decode


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def split_secret_tokens(
    encode: Encode, prefix: str, secrets: Sequence[str], pad_id: int = 0,
) -> tuple[list[int], list[list[int]]]:  # fmt: skip
    """``(context, continuations)``: the tokens shared by ``prefix`` and every ``prefix +
    secret``, and each secret's remaining tokens (see the module docstring). A ValueError when
    the context is empty (the first token has no prediction), a secret adds no token, or a
    text holds ``pad_id``."""
    prefix_ids = [int(i) for i in encode(prefix)]
    fulls = [[int(i) for i in encode(prefix + s)] for s in secrets]
    n = len(prefix_ids)
    for text, ids in zip([prefix, *(prefix + s for s in secrets)], [prefix_ids, *fulls],
                         strict=True):
        if pad_id in ids:
            raise ValueError(f"the feature pad id {pad_id} occurs in the tokens of "
                             f"{text[:40]!r}: encode must swap the tokenizer's pad id with it.")
    for ids in fulls:
        n = min(n, _common(prefix_ids, ids))
    if n == 0:
        raise ValueError(f"the prefix {prefix!r} shares no token with its canary texts: the "
                         "secret's first token would have no context to be predicted from.")
    continuations = [ids[n:] for ids in fulls]
    empty = [s for s, c in zip(secrets, continuations, strict=True) if not c]
    if empty:
        raise ValueError(f"the secret {empty[0]!r} adds no token to the prefix {prefix!r}.")
    return prefix_ids[:n], continuations


@contextlib.contextmanager
def _evaluating(module: nn.Module) -> Iterator[None]:
    """``module`` in eval mode (no dropout) and inference mode, its training flag restored."""
    was = module.training
    module.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        module.train(was)


def _batch(context: Sequence[int], rows: Sequence[Sequence[int]], pad_id: int,
           width: int) -> np.ndarray:  # fmt: skip
    """context + each row, right-padded with ``pad_id`` to ``len(context) + width``, int64."""
    out = np.full((len(rows), len(context) + width), pad_id, dtype=np.int64)
    out[:, : len(context)] = context
    for r, row in enumerate(rows):
        out[r, len(context) : len(context) + len(row)] = row
    return out


def _logits(module: nn.Module, ids: np.ndarray, device: str | torch.device) -> torch.Tensor:
    """The module's logits for int ids, given as exact float32 feature ids (the text models'
    input), in float32."""
    return module(torch.from_numpy(ids).to(device=device, dtype=torch.float32)).float()


def continuation_log_likelihoods(
    module: nn.Module, context: Sequence[int], continuations: Sequence[Sequence[int]],
    pad_id: int = 0, batch_size: int = DEFAULT_BATCH, device: str | torch.device = "cpu",
) -> np.ndarray:  # fmt: skip
    """``log p(continuation | context)``, nats, float64 [n]: the sum over the continuation's
    tokens of their log-probabilities, one forward of context + continuation per batch
    (right-padded; rows sorted by length so that a batch pads little). The module must be on
    ``device``."""
    c, n = len(context), len(continuations)
    out = np.empty(n, dtype=np.float64)
    lengths = np.array([len(x) for x in continuations], dtype=np.int64)
    order = np.argsort(lengths, kind="stable")
    with _evaluating(module):
        for start in range(0, n, int(batch_size)):
            idx = order[start : start + int(batch_size)]
            width = int(lengths[idx].max())
            ids = _batch(context, [continuations[i] for i in idx], pad_id, width)
            logits = _logits(module, ids, device)[:, c - 1 : c - 1 + width]  # predict c..c+w-1
            target = torch.from_numpy(ids[:, c:]).to(logits.device)
            token = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)
            valid = (torch.arange(width, device=logits.device)[None, :]
                     < torch.from_numpy(lengths[idx]).to(logits.device)[:, None])
            total = torch.where(valid, token, torch.zeros((), device=logits.device)).sum(-1)
            out[idx] = total.double().cpu().numpy()
    return out


def secret_log_likelihoods(
    module: nn.Module, tokenizer_encode: Encode, prefix: str, secrets: Sequence[str],
    pad_id: int = 0, batch_size: int = DEFAULT_BATCH, device: str | torch.device = "cpu",
) -> np.ndarray:  # fmt: skip
    """The model's total log-probability (nats, float64 [n]) of each secret's tokens given
    the prefix: ``Σ_t log p(x_t | x_<t)`` over the tokens of ``prefix + secret`` after the
    shared context (:func:`split_secret_tokens`). ``tokenizer_encode`` follows the module
    docstring's contract (feature ids, pad swapped with ``pad_id`` = 0)."""
    context, continuations = split_secret_tokens(tokenizer_encode, prefix, secrets, pad_id)
    return continuation_log_likelihoods(module, context, continuations, pad_id, batch_size,
                                        device)


@dataclass(frozen=True)
class Exposure:
    """One canary's exposure (bits). ``exposure``: from the sampled rank, at most
    ``max_sampled_exposure`` (= min(log₂ n, log₂|R|)): a canary more likely than every
    candidate reads exactly that (``capped``), and only ``exposure_extrapolated`` (the
    skew-normal tail, NaN with fewer than 20 candidates or all equal) tells how far beyond."""

    exposure: float
    exposure_extrapolated: float
    n_candidates: int
    space_size: int  # |R|
    log2_space: float  # log₂|R|, the most any secret can have
    max_sampled_exposure: float
    at_least_as_likely: int  # candidates c with log p(c) >= log p(secret)
    log_likelihood: float  # log p(secret | prefix), nats

    @property
    def capped(self) -> bool:
        return self.at_least_as_likely == 0

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values in field order, for metrics.json."""
        return asdict(self)


def exposure_from_log_likelihoods(
    secret_ll: np.ndarray | Sequence[float], candidate_ll: np.ndarray | Sequence[float],
    space_size: int,
) -> list[Exposure]:  # fmt: skip
    """Exposures of m secrets from their log-likelihoods and those of n candidates drawn
    uniformly from R (with replacement, so one may be the secret itself), vectorised.

    Sampled: with c = #{candidates at least as likely as the secret}, rank ≈ |R|·c/n and
    exposure = log₂|R| − log₂ rank = log₂(n / max(c, 1)), clipped to log₂|R|; with all of R as
    the candidates this is the exact exposure (c is the rank, ties counted against the secret).
    Extrapolated (the paper's §4.3): a skew normal fitted to the candidates' log-perplexities
    −log p, exposure ≈ −log₂ CDF(−log p(secret)), clipped to [0, log₂|R|].
    """
    from scipy import stats

    secret = np.asarray(secret_ll, dtype=np.float64).reshape(-1)
    cands = np.sort(np.asarray(candidate_ll, dtype=np.float64).reshape(-1))
    n, size = cands.size, int(space_size)
    if n < 1 or size < 1:
        raise ConfigError(f"exposure needs candidates and |R| >= 1; got {n} and {size}.")
    if not (np.isfinite(secret).all() and np.isfinite(cands).all()):
        raise ValueError("log-likelihoods must be finite.")
    log2_space = math.log2(size)
    at_least = n - np.searchsorted(cands, secret, side="left")
    sampled = np.minimum(np.log2(n / np.maximum(at_least, 1)), log2_space)
    perplexity = -cands
    if n >= MIN_FIT_CANDIDATES and np.ptp(perplexity) > 0:
        shape, loc, scale = stats.skewnorm.fit(perplexity)
        logcdf = stats.skewnorm.logcdf(-secret, shape, loc, scale)
        with np.errstate(invalid="ignore"):
            extrapolated = np.clip(-logcdf / math.log(2), 0.0, log2_space)
    else:
        extrapolated = np.full(secret.shape, np.nan)
    max_sampled = min(math.log2(n), log2_space)
    return [Exposure(float(e), float(x), n, size, log2_space, max_sampled, int(c), float(ll))
            for e, x, c, ll in zip(sampled, extrapolated, at_least, secret, strict=True)]


def exposure(
    module: nn.Module, encode: Encode, canaries: Sequence[CanarySecret],
    fmt: str | SecretFormat, n_candidates: int = 1000, seed: int = 0, pad_id: int = 0,
    batch_size: int = DEFAULT_BATCH, device: str | torch.device = "cpu",
) -> list[Exposure]:  # fmt: skip
    """Each canary's exposure against ``n_candidates`` secrets drawn uniformly from its
    format's R (seeded: the same candidates for every canary, so one scoring serves all).

    The canaries' secrets and the candidates are scored in one call (one shared context,
    :func:`split_secret_tokens`), each distinct text once: a candidate equal to a secret gets
    the very same log-likelihood, a tie counted against the secret as the rank's definition
    says.
    """
    spec = secret_format(fmt)
    wrong = [c.text for c in canaries if c.prefix != spec.prefix]
    if wrong:
        raise ConfigError(f"{len(wrong)} canaries do not have the prefix {spec.prefix!r} of "
                          f"format {spec.name!r} (e.g. {wrong[0][:40]!r}).")
    if int(n_candidates) < 1:
        raise ConfigError(f"exposure needs at least 1 candidate; got {n_candidates}.")
    candidates = spec.candidates(int(n_candidates),
                                 np.random.default_rng([int(seed), CANDIDATES_STREAM]))
    texts = list(dict.fromkeys([c.secret for c in canaries] + candidates))
    scores = secret_log_likelihoods(module, encode, spec.prefix, texts, pad_id, batch_size,
                                    device)
    by_text = dict(zip(texts, scores.tolist(), strict=True))
    return exposure_from_log_likelihoods([by_text[c.secret] for c in canaries],
                                         [by_text[c] for c in candidates], spec.space_size)


def greedy_continuations(
    module: nn.Module, contexts: Sequence[Sequence[int]], steps: Sequence[int], pad_id: int = 0,
    batch_size: int = DEFAULT_BATCH, device: str | torch.device = "cpu",
) -> list[list[int]]:  # fmt: skip
    """Greedy decoding: ``steps[i]`` tokens after ``contexts[i]``, each the argmax of the
    next-token logits (never ``pad_id``, which would read as padding). Rows of a batch decode
    together, right-padded: one forward of the whole batch per generated token (no KV cache;
    canary secrets are a few tokens)."""
    out: list[list[int]] = [[] for _ in contexts]
    with _evaluating(module):
        for start in range(0, len(contexts), int(batch_size)):
            rows = list(range(start, min(start + int(batch_size), len(contexts))))
            need = np.array([int(steps[i]) for i in rows], dtype=np.int64)
            cur = np.array([len(contexts[i]) for i in rows], dtype=np.int64)
            if (cur < 1).any():
                raise ValueError("greedy decoding needs a context of at least one token.")
            ids = _batch([], [contexts[i] for i in rows], pad_id, int((cur + need).max()))
            for step in range(int(need.max(initial=0))):
                active = np.flatnonzero(step < need)
                logits = _logits(module, ids[active, : int(cur[active].max())], device)
                rows_at = torch.arange(active.size, device=logits.device)
                last = logits[rows_at, torch.from_numpy(cur[active] - 1).to(logits.device)]
                last[:, pad_id] = -torch.inf
                ids[active, cur[active]] = last.argmax(-1).cpu().numpy()
                cur[active] += 1
            for r, i in enumerate(rows):
                begin = len(contexts[i])
                out[i] = ids[r, begin : begin + need[r]].tolist()
    return out


def greedy_extractions(
    module: nn.Module, encode: Encode, decode: Decode | None, prefixes: str | Sequence[str],
    secrets: Sequence[str], pad_id: int = 0, batch_size: int = DEFAULT_BATCH,
    device: str | torch.device = "cpu",
) -> np.ndarray:  # fmt: skip
    """Whether greedy decoding from each prefix, for as many tokens as the secret's, gives the
    secret exactly (bool [n]): the generated tokens equal the secret's, or (``decode`` given)
    decode to the same text. ``prefixes``: one for all secrets or one each.

    Greedy decoding is deterministic, so canaries sharing a prefix share one decoded
    continuation (decoded once, for the longest secret): at most one secret per prefix can be
    extracted, the one the model ranks first.
    """
    prefixes = [prefixes] * len(secrets) if isinstance(prefixes, str) else list(prefixes)
    if len(prefixes) != len(secrets):
        raise ValueError(f"{len(prefixes)} prefixes for {len(secrets)} secrets.")
    targets: list[list[int]] = [[] for _ in secrets]
    context_of: list[tuple[int, ...]] = [() for _ in secrets]
    for prefix in dict.fromkeys(prefixes):
        where = [i for i, p in enumerate(prefixes) if p == prefix]
        context, conts = split_secret_tokens(encode, prefix, [secrets[i] for i in where], pad_id)
        for i, cont in zip(where, conts, strict=True):
            targets[i], context_of[i] = cont, tuple(context)
    unique = list(dict.fromkeys(context_of))
    steps = [max(len(targets[i]) for i, c in enumerate(context_of) if c == u) for u in unique]
    decoded = dict(zip(unique, greedy_continuations(module, unique, steps, pad_id, batch_size,
                                                    device), strict=True))
    found = np.zeros(len(secrets), dtype=bool)
    for i, target in enumerate(targets):
        guess = decoded[context_of[i]][: len(target)]
        found[i] = guess == target or (decode is not None and decode(guess) == decode(target))
    return found


def greedy_extraction(
    module: nn.Module, encode: Encode, decode: Decode | None, prefix: str, secret: str,
    pad_id: int = 0, device: str | torch.device = "cpu",
) -> bool:  # fmt: skip
    """Whether greedy decoding from ``prefix`` reproduces ``secret`` (see
    :func:`greedy_extractions`)."""
    return bool(greedy_extractions(module, encode, decode, prefix, [secret], pad_id,
                                   device=device)[0])
