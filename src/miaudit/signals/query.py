"""Query trained models into a signal bank.

A query is a deterministic transform of an input batch: `plain` (query 0), `mirror`
(horizontal flip, images), `translate-dr`, `translate-ul` and their `mirror-` forms
(airbench94's test-time views, Jordan 2024: a one-pixel diagonal shift with reflect padding,
see :data:`miaudit.models.airbench.TTA_QUERIES`), and `crop-flip-K` (the augmented queries of
LiRA and RAPID: random crop with 4-pixel zero padding plus a random horizontal flip, drawn
once per dataset row from seed K, so every model sees exactly the same augmented input);
`cropP-flip-K` is the same with P-pixel padding (`crop2-flip-3`: shifts of up to 2 pixels,
seed 3), the draw of a recipe that trains with `{name: crop, padding: P}` and `mirror`.
`training_queries` lists the queries that replay a recipe's training augmentation, and
`untrained_queries` the ones that do not.
Token-id inputs (text, dataset kind ``tokens``) have their own seeded perturbations, RAPID's
text queries:
``token-dropout-K`` (each token but the first and the last real one dropped with probability
0.1, the rest moved up and the row re-padded) and ``adjacent-swap-K`` (one random pair of
neighbouring inner tokens swapped); both drawn once per dataset row from seed K. Padding is
token id 0 (MiniLM's [PAD], the BPE tokenizer's <pad>).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from miaudit.errors import ConfigError
from miaudit.runtime.devices import autocast, check_precision, is_cuda, to_device
from miaudit.runtime.malloc import keep_freed_memory
from miaudit.runtime.progress import progress_bar

# the query names, torch-free for config checks (signals.queries: auto); re-exported here
from miaudit.signals.query_names import _CROP_FLIP, _TOKEN_QUERY, _TRANSLATE
from miaudit.signals.query_names import CROP_FLIP_PADDING as CROP_FLIP_PADDING
from miaudit.signals.query_names import PAD_TOKEN as PAD_TOKEN
from miaudit.signals.query_names import TOKEN_DROPOUT as TOKEN_DROPOUT
from miaudit.signals.query_names import augmented_queries as augmented_queries
from miaudit.signals.query_names import crop_flip_padding as crop_flip_padding
from miaudit.signals.query_names import replay_queries as replay_queries
from miaudit.signals.query_names import text_queries as text_queries
from miaudit.signals.query_names import training_queries as training_queries
from miaudit.signals.query_names import untrained_queries as untrained_queries

# (batch of inputs, their dataset row ids) -> transformed batch
QueryFn = Callable[[torch.Tensor, np.ndarray], torch.Tensor]


def _plain(x: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    return x


def _mirror(x: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    return x.flip(-1)


def _translate(pixels: int, down_right: bool, mirror: bool) -> QueryFn:
    """airbench's TTA translation: reflect-pad by ``pixels`` and take the window that moves the
    image down-right (its ``padded[:, :, 0:32, 0:32]``) or up-left, then mirror if asked."""

    def apply(x: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        h, w = x.shape[-2:]
        padded = torch.nn.functional.pad(x, (pixels,) * 4, mode="reflect")
        lo = 0 if down_right else 2 * pixels
        out = padded[..., lo : lo + h, lo : lo + w]
        return out.flip(-1) if mirror else out

    return apply


def _crop_flip(seed: int, n_rows: int, padding: int = 4) -> QueryFn:
    rng = np.random.default_rng([seed, 7])
    offsets = torch.from_numpy(rng.integers(0, 2 * padding + 1, size=(n_rows, 2)))
    flips = torch.from_numpy(rng.random(n_rows) < 0.5)

    def apply(x: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        n, c, h, w = x.shape
        padded = torch.nn.functional.pad(x, (padding, padding, padding, padding))
        index = torch.from_numpy(rows)
        iy = offsets[index, 0].view(n, 1) + torch.arange(h).view(1, h)
        ix = offsets[index, 1].view(n, 1) + torch.arange(w).view(1, w)
        ix = torch.where(flips[index].view(n, 1), ix.flip(1), ix)
        return padded[
            torch.arange(n).view(n, 1, 1, 1),
            torch.arange(c).view(1, c, 1, 1),
            iy.view(n, 1, h, 1),
            ix.view(n, 1, 1, w),
        ]

    return apply


def _token_dropout(seed: int, n_rows: int, width: int) -> QueryFn:
    rng = np.random.default_rng([seed, 11])
    dropped = torch.from_numpy(rng.random((n_rows, width)) < TOKEN_DROPOUT)

    def apply(x: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        real = x != PAD_TOKEN
        length = real.sum(1, keepdim=True)
        pos = torch.arange(x.shape[1]).view(1, -1)
        keep = real & ((pos == 0) | (pos == length - 1) | ~dropped[torch.from_numpy(rows)])
        # kept tokens first, in order (a stable sort of "dropped?"), then padding
        order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)
        out = x.gather(1, order)
        return out.masked_fill(pos >= keep.sum(1, keepdim=True), PAD_TOKEN)

    return apply


def _adjacent_swap(seed: int, n_rows: int) -> QueryFn:
    draws = torch.from_numpy(np.random.default_rng([seed, 13]).random(n_rows))

    def apply(x: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        length = (x != PAD_TOKEN).sum(1)
        inner = (length - 3).clamp(min=0)  # pairs among tokens 1..length-2
        first = 1 + (draws[torch.from_numpy(rows)] * inner).long()
        out = x.clone()
        ok = torch.nonzero(inner > 0).flatten()
        a, b = first[ok], first[ok] + 1
        out[ok, a], out[ok, b] = x[ok, b], x[ok, a]
        return out

    return apply


def make_query(name: str, n_rows: int, kind: str, width: int = 0) -> QueryFn:
    """The query transform called `name` for a dataset of `n_rows` rows of kind
    image/tabular/tokens (`width`: tokens per row, for the token queries)."""
    if name == "plain":
        return _plain
    match = _TOKEN_QUERY.match(name)
    if match:
        if kind != "tokens":
            raise ConfigError(f"query '{name}' perturbs token ids (text data); dataset kind is "
                              f"'{kind}'.")
        seed = int(match.group(2))
        if match.group(1) == "adjacent-swap":
            return _adjacent_swap(seed, n_rows)
        return _token_dropout(seed, n_rows, width)
    if kind == "tokens":
        raise ConfigError(f"unknown query '{name}' for text; known: plain, token-dropout-K, "
                          "adjacent-swap-K (K an integer seed).")
    if kind != "image":
        raise ConfigError(
            f"query '{name}' transforms images; dataset kind is '{kind}'. Use queries: [plain]."
        )
    if name == "mirror":
        return _mirror
    padding = crop_flip_padding(name)
    if padding is not None:
        crop = _CROP_FLIP.match(name)
        assert crop is not None  # crop_flip_padding matched it
        return _crop_flip(int(crop.group(2)), n_rows, padding)
    shift = _TRANSLATE.match(name)
    if shift and int(shift.group(2) or 1) >= 1:
        return _translate(int(shift.group(2) or 1), shift.group(3) == "dr", bool(shift.group(1)))
    raise ConfigError(
        f"unknown query '{name}'; known: plain, mirror, crop-flip-K (K an integer seed), "
        "cropP-flip-K (P-pixel padding, P >= 1), translate-dr / translate-ul and their "
        "mirror- forms (airbench94's test-time views; translateP-dr shifts P pixels)."
    )


def _pinned_empty(shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialised float32 host tensor in pinned memory (needs CUDA)."""
    return torch.empty(shape, dtype=torch.float32, pin_memory=True)


def _queued_event(device: str | torch.device) -> torch.cuda.Event:
    """A CUDA event recorded on ``device``'s current stream: done once all work queued there
    so far is."""
    done = torch.cuda.Event()
    done.record(torch.cuda.current_stream(torch.device(device)))
    return done


def model_precisions(precision: str | Sequence[str], n_models: int,
                     device: str | torch.device) -> list[str]:
    """One precision per model (``precision``: one for all, or one each), every one checked
    on ``device`` (:func:`~miaudit.runtime.devices.check_precision`)."""
    precisions = [precision] * n_models if isinstance(precision, str) else list(precision)
    if len(precisions) != n_models:
        raise ConfigError(f"got {len(precisions)} precisions for {n_models} models.")
    for name in sorted(set(precisions)):
        check_precision(name, device)
    return precisions


def query_logits(
    modules: Sequence[torch.nn.Module],
    features: np.ndarray,
    rows: np.ndarray,
    queries: Sequence[str],
    kind: str,
    device: str = "cpu",
    batch_size: int = 1024,
    progress: bool = True,
    precision: str | Sequence[str] = "fp32",
) -> np.ndarray:
    """Logits float32 [M, len(rows), Q, C] of every model on every row under every query.

    ``precision``: each model's recipe's (one for all, or one per model): a ``bf16`` model is
    queried under bf16 autocast, as it trained (refused where bf16 is not native); its logits come
    back float32 all the same.

    Each chunk of ``batch_size`` rows is transformed by each query once, on the CPU (the
    queries draw per dataset row, not per model), and copied to ``device`` once for all
    models: pinned and without blocking on CUDA (:func:`~miaudit.runtime.devices.to_device`).
    On CUDA a chunk's logits go back to pinned host memory without blocking too, and are
    waited for only after the next chunk's work is queued: one wait per chunk, not one per
    model and query. Every model sees the same inputs in the same batches as when queried
    alone, so the logits do not depend on which models are queried together.
    """
    width = features.shape[1] if features.ndim == 2 else 0
    fns = [make_query(q, len(features), kind, width) for q in queries]
    precisions = model_precisions(precision, len(modules), device)
    for module in modules:
        module.eval().to(device)
    cuda = is_cuda(device)
    out: np.ndarray | None = None
    pending: tuple[slice, torch.Tensor, torch.cuda.Event] | None = None  # a chunk in flight

    def land(chunk: tuple[slice, torch.Tensor, torch.cuda.Event]) -> None:
        """A chunk's host logits [M, Q, B, C] into ``out``, once their copy is done."""
        where, host, done = chunk
        done.synchronize()
        torch.from_numpy(out)[:, where] = host.permute(0, 2, 1, 3)

    bar = progress_bar(len(rows), f"querying {len(modules)} model{'s' * (len(modules) != 1)}",
                       "row", enabled=progress)  # fmt: skip
    with bar, torch.no_grad():
        for start in range(0, len(rows), batch_size):
            batch_rows = rows[start : start + batch_size]
            where = slice(start, start + len(batch_rows))
            x = torch.from_numpy(features[batch_rows])
            host: torch.Tensor | None = None  # this chunk's logits [M, Q, B, C] (CUDA)
            for q, fn in enumerate(fns):
                xq = to_device(fn(x, batch_rows), device)
                for m, (module, name) in enumerate(zip(modules, precisions, strict=True)):
                    with autocast(device, name):
                        logits = module(xq)
                    logits = logits.float()
                    if out is None:
                        out = np.empty((len(modules), len(rows), len(fns), logits.shape[1]),
                                       dtype=np.float32)  # fmt: skip
                    if not cuda:
                        out[m, where, q] = logits.cpu().numpy()
                        continue
                    if host is None:  # pinned: the copies below do not block
                        host = _pinned_empty((len(modules), len(fns), *logits.shape))
                    host[m, q].copy_(logits, non_blocking=True)  # contiguous [B, C]: async
            if host is not None:
                done = _queued_event(device)  # passed when this chunk's copies are done
                if pending is not None:
                    land(pending)  # the previous chunk, while this one runs on the device
                pending = (where, host, done)
            bar.update(len(batch_rows))
        if pending is not None:
            land(pending)
    assert out is not None
    return out


# Per-sample gradients held at once by `per_sample_grad_norms`. 3,000 rows, idle 2-core CPU,
# seconds with the heap kept (`keep_freed_memory`): mnist-cnn (431k parameters) batch 19 /
# 38 / 77: 4.6-6.7 / 3.8-3.9 / 3.9-4.2; mlp (1.25M) batch 6 / 13 / 26: 11.1 / 8.4 / 7.4;
# cifar-cnn (135k) batch 62 / 124 / 256: 5.6 / 3.9 / 4.0. Before (batch 256, fresh pages for
# every batch): mnist-cnn 13.1-15.3, mlp 61-69 (half or more in page faults). With the
# chunked squares (`_squared_norms`) on top: mnist-cnn batch 38 2.4-3.9, mlp batch 13 5.4.
_GRAD_BATCH_BYTES = 64 * 2**20


def _squared_norms(rows: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """Σ rows² per row as float64 [b]: float32 norms of 256-value chunks, squared and summed
    in float64. One float32 sum over a million values drifts by ~1e-4 relative (the ranking of
    the calibrated score moves with it); casting all to float64 first took 20x longer (60 vs
    3 ms for 38 x 431k values) for an error of 1e-13 against this one's 4e-9."""
    b, n = rows.shape
    whole = n // chunk * chunk
    squared = torch.linalg.vector_norm(rows[:, :whole].reshape(b, -1, chunk), dim=2)
    total = squared.double().square().sum(1)
    return total + rows[:, whole:].double().square().sum(1)


def per_sample_grad_norms(
    module: torch.nn.Module,
    features: np.ndarray,
    labels: np.ndarray,
    rows: np.ndarray,
    device: str = "cpu",
    batch_size: int | None = None,
) -> np.ndarray:
    """‖∇_θ ℓ(f(x_n), y_n)‖₂ per row on the plain input (Watson eq. 2), float64 [len(rows)].

    Uses torch.func (vmap over per-sample gradients), with the model in eval mode, in float32
    whatever the model's recipe's precision (the norms' precision is the point of
    `_squared_norms`; a bf16 forward would move them by ~1e-3 relative). vmap holds
    every sample's whole gradient at once, so the default batch holds about
    `_GRAD_BATCH_BYTES` of them (rows are independent: the batch moves a norm by float32
    rounding at most, ~1e-7 relative).
    """
    module = module.eval().to(device)
    if batch_size is None:
        n_params = sum(p.numel() for p in module.parameters())
        batch_size = int(min(256, max(1, _GRAD_BATCH_BYTES // (4 * max(1, n_params)))))
    params = {k: v.detach() for k, v in module.named_parameters()}
    buffers = {k: v.detach() for k, v in module.named_buffers()}

    def sample_loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = torch.func.functional_call(module, (p, buffers), (xi.unsqueeze(0),))
        return torch.nn.functional.cross_entropy(out, yi.unsqueeze(0))

    grad_fn = torch.func.vmap(torch.func.grad(sample_loss), in_dims=(None, 0, 0))
    norms = np.empty(len(rows), dtype=np.float64)
    # One bar update per batch; shown only when the pass is slow (large models: minutes).
    bar = progress_bar(len(rows), "per-sample gradient norms", "sample", quick=True)
    with keep_freed_memory(), bar:  # each batch reallocates the same large gradient tensors
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            x = to_device(torch.from_numpy(features[batch]), device)
            y = to_device(torch.from_numpy(labels[batch].astype(np.int64)), device)
            grads = grad_fn(params, x, y)
            squared = sum(_squared_norms(g.reshape(len(batch), -1)) for g in grads.values())
            norms[start : start + len(batch)] = squared.sqrt().double().cpu().numpy()
            bar.update(len(batch))
    return norms
