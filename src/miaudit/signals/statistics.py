"""Per-model, per-sample, per-query statistics derived from a bank's logits.

Every attack reads these instead of raw logits where it can, so each is computed once per bank
and shared by all attacks and all targets. All statistics of a chunk of models come out of one
pass over the logits (float64, from the float32 logits), written so that nothing cancels:
with m = max_c z, e_c = exp(z_c − m) and T = Σ_{c ≠ argmax} e_c (so Σ_c e_c = 1 + T),

- log p_c = (z_c − m) − log1p(T), exact even for the dominant class (−log1p(T));
- loss = −log p_y; phi = z_y − logsumexp_{c≠y} z_c = −log T when y is the argmax, else
  (z_y − m) − log1p(U) with U = Σ_{c ∉ {argmax, y}} e_c;
- 1 − p_c = T / (1 + T) for the argmax class; log(1 − p_c) = log1p(−p_c) for the others
  (p_c <= 1/2 there).

Naive `z − logsumexp(z)` loses all digits of the loss of a confidently classified sample, which
is exactly where low-FPR rankings are decided.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from miaudit.malloc import release_freed_memory
from miaudit.progress import progress_bar
from miaudit.threads import cpu_threads

# Bytes of one float64 [samples, Q, C] block of the pass, and of the attacks' [R, samples, Q]
# blocks. Pass over 16 models of 100k samples, one thread, CPU seconds: 2-16 MiB 0.42-0.58,
# 1 MiB 0.61-0.66, 0.25 MiB 0.91 (per-op overhead); larger blocks only cost memory.
_BLOCK_BYTES = 4 * 2**20
_TINY = torch.finfo(torch.float64).tiny

STATISTICS = (
    "loss",  # cross-entropy of the true class, >= 0
    "phi",  # LiRA's logit-scaled confidence z_y − logsumexp_{c≠y} z_c
    "prob_true",  # p_y
    "log_confidence",  # max_c log p_c
    "neg_entropy",  # Σ_c p_c log p_c
    "modified_entropy",  # Song & Mittal's Mentr
)


def compute_statistics(
    logits: torch.Tensor, labels: torch.Tensor, names: tuple[str, ...] | list[str]
) -> dict[str, torch.Tensor]:
    """Statistics `names` of logits [m, N, Q, C] for labels [N] -> each float64 [m, N, Q]."""
    m, n, q, c = logits.shape
    rows = logits.reshape(-1, c).to(torch.float64, memory_format=torch.contiguous_format, copy=True)
    y = labels.view(1, n, 1).expand(m, n, q).reshape(-1)
    return {k: v.view(m, n, q) for k, v in row_statistics(rows, y, names).items()}


def row_statistics(
    z: torch.Tensor,
    y: torch.Tensor,
    names: tuple[str, ...] | list[str],
    out: dict[str, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """Statistics `names` of the contiguous float64 rows z [B, C] (overwritten: it is the
    workspace) for labels y [B] -> each float64 [B], written into `out[name]` where given."""
    if not z.is_contiguous():
        raise ValueError("row_statistics needs contiguous rows; pass z.contiguous().")
    res = dict(out or {})

    def dst(name: str) -> torch.Tensor | None:
        return res.get(name) if name in names else None

    b, c = z.shape
    top_value, top = z.max(dim=1, keepdim=True)  # the first maximum, as argmax
    z.sub_(top_value)  # <= 0, exactly 0 at the argmax
    y1 = y.unsqueeze(1)
    y_is_top = top.squeeze(1) == y
    s_y = z.gather(1, y1).squeeze(1)
    # Flat positions of each row's top and true class: index_fill_ zeroes them 2x faster
    # than scatter_ (same result).
    row_start = torch.arange(0, b * c, c)
    need_p = bool({"neg_entropy", "modified_entropy"} & set(names))
    e = torch.exp(z) if need_p else z.exp_()
    e_rest = e.clone() if need_p else e
    e_rest.view(-1).index_fill_(0, top.squeeze(1) + row_start, 0.0)
    rest = e_rest.sum(dim=1)  # T
    log_norm = torch.log1p(rest)  # log Σ e
    # exp underflows when a logit gap exceeds ~745: keep log T finite (phi saturates near 708).
    log_rest = torch.log(rest.clamp_min(_TINY))
    loss = torch.sub(log_norm, s_y, out=dst("loss"))
    if "loss" in names:
        res["loss"] = loss
    if "prob_true" in names:
        res["prob_true"] = torch.exp(-loss, out=dst("prob_true"))
    if "phi" in names:
        others = e_rest.view(-1).index_fill_(0, y + row_start, 0.0).view(b, c).sum(dim=1)  # U
        phi = torch.where(y_is_top, -log_rest, s_y - torch.log1p(others), out=dst("phi"))
        res["phi"] = phi
    if "log_confidence" in names:
        res["log_confidence"] = torch.neg(log_norm, out=dst("log_confidence"))
    if need_p:
        is_top = torch.zeros_like(e, dtype=torch.bool).scatter_(1, top, True)
        log_p = z - log_norm.unsqueeze(1)
        p = e / (1.0 + rest).unsqueeze(1)
        if "neg_entropy" in names:
            res["neg_entropy"] = torch.sum(p * log_p, dim=1, out=dst("neg_entropy"))
        if "modified_entropy" in names:
            # Non-top classes have p <= 1/2, where log1p(-p) is exact; the top class uses T.
            top_rest = rest.unsqueeze(1)
            one_minus_p = torch.where(is_top, top_rest / (1.0 + top_rest), 1.0 - p)
            log_one_minus_p = torch.where(
                is_top, log_rest.unsqueeze(1) - log_norm.unsqueeze(1), torch.log1p(-p)
            )
            onehot = torch.nn.functional.one_hot(y, c).bool()
            terms = torch.where(onehot, -one_minus_p * log_p, -p * log_one_minus_p)
            res["modified_entropy"] = torch.sum(terms, dim=1, out=dst("modified_entropy"))
    return {k: v for k, v in res.items() if k in names}


def sample_blocks(n: int, bytes_per_sample: int, budget: int | None = None) -> Iterator[slice]:
    """Consecutive slices of range(n), each about `budget` bytes (default `_BLOCK_BYTES`) at
    `bytes_per_sample`."""
    step = max(1, (budget or _BLOCK_BYTES) // max(1, bytes_per_sample))
    for lo in range(0, n, step):
        yield slice(lo, min(n, lo + step))


class StatisticCache:
    """Lazily computes statistics for requested models and keeps the rows.

    The first request for any statistic computes the others of its group (loss, phi and
    log_confidence; the two entropies) for those models in the same pass, since the pass costs
    about the same. The pass runs on `torch.get_num_threads()` worker threads (each on one
    intra-op thread).
    """

    # Computed together: the first request for one computes its group for those models.
    _GROUPS = (("loss", "phi", "log_confidence"), ("neg_entropy", "modified_entropy"))

    def __init__(self, logits: np.ndarray, labels: np.ndarray) -> None:
        self._logits = logits
        q = logits.shape[2]
        self._labels = torch.from_numpy(np.asarray(labels, dtype=np.int64))
        self._row_labels = self._labels.repeat_interleave(q)  # one label per (sample, query)
        self._values: dict[str, np.ndarray] = {}
        self._done: dict[str, np.ndarray] = {}

    @property
    def n_samples(self) -> int:
        return self._logits.shape[1]

    def get(
        self,
        name: str,
        models: np.ndarray | list[int] | None = None,
        samples: slice | None = None,
    ) -> np.ndarray:
        """Statistic `name` as float64 [len(models), N, Q] (all models when None), or only the
        samples in the slice `samples`. A read-only view where the models are consecutive."""
        if name not in STATISTICS:
            raise KeyError(f"unknown statistic '{name}'; known: {sorted(STATISTICS)}")
        if name == "prob_true":  # exp(-loss): derived, not stored (saves a pass and memory)
            return np.exp(-self.get("loss", models, samples))
        rows = self._ensure(name, models)
        values, shared = self._rows(self._values[name], rows, samples)
        if shared:
            values.flags.writeable = False  # shared by every attack: nobody may modify it
        return values

    def query_mean(
        self, name: str, models: np.ndarray | list[int], samples: slice | None = None
    ) -> np.ndarray:
        """Mean over queries of statistic `name`, float64 [len(models), N] (or the samples in
        the slice `samples`), a block of samples at a time: no [models, N, Q] temporary."""
        if name not in STATISTICS:
            raise KeyError(f"unknown statistic '{name}'; known: {sorted(STATISTICS)}")
        base = "loss" if name == "prob_true" else name
        rows = self._ensure(base, models)
        stored = self._values[base]
        lo, hi, _ = (samples or slice(None)).indices(stored.shape[1])
        q = stored.shape[2]
        out = np.empty((rows.size, max(0, hi - lo)))
        for block in sample_blocks(hi - lo, rows.size * q * 8):
            values = self._rows(stored, rows, slice(lo + block.start, lo + block.stop))[0]
            if name == "prob_true":
                values = np.exp(-values)
            part = out[:, block]
            np.copyto(part, values[..., 0])
            for j in range(1, q):  # a running sum beats .mean(-1) on a short innermost axis
                part += values[..., j]
            part /= q
        return out

    def _ensure(self, name: str, models: np.ndarray | list[int] | None) -> np.ndarray:
        """The model indices asked for, after computing those not yet cached."""
        m_total = self._logits.shape[0]
        rows = np.arange(m_total) if models is None else np.asarray(models, dtype=np.int64)
        if name not in self._done:
            self._done[name] = np.zeros(m_total, dtype=bool)
        todo = np.unique(rows[~self._done[name][rows]])
        if todo.size:
            self._compute(next((g for g in self._GROUPS if name in g), (name,)), todo)
        return rows

    @staticmethod
    def _rows(
        stored: np.ndarray, rows: np.ndarray, samples: slice | None
    ) -> tuple[np.ndarray, bool]:
        """(stored[rows, samples], whether that is a view): a view when the rows are
        consecutive, else a copy."""
        cols = samples or slice(None)
        if rows.size and np.array_equal(rows, np.arange(rows[0], rows[0] + rows.size)):
            return stored[rows[0] : rows[0] + rows.size, cols], True
        return stored[rows, cols], False

    def _compute(self, names: tuple[str, ...], rows: np.ndarray) -> None:
        m_total, n, q, c = self._logits.shape
        for name in names:
            if name not in self._values:
                self._values[name] = np.empty((m_total, n, q), dtype=np.float64)
                self._done.setdefault(name, np.zeros(m_total, dtype=bool))
        # One model and a block of samples at a time bounds the float64 temporaries; each
        # worker thread reuses its own block workspace. The entropies (computed for targets
        # only) keep ~12 block-sized temporaries alive: smaller blocks for them.
        small = bool({"neg_entropy", "modified_entropy"} & set(names))
        blocks = list(sample_blocks(n, q * c * 8, max(1, _BLOCK_BYTES // 8) if small else None))
        tasks = [(int(m), block) for m in rows for block in blocks]
        workspace = threading.local()

        def run(task: tuple[int, slice]) -> None:
            m, block = task
            size = (block.stop - block.start) * q
            if getattr(workspace, "z", None) is None or workspace.z.shape[0] < size:
                workspace.z = torch.empty((size, c), dtype=torch.float64)
            z = workspace.z[:size]
            z.copy_(torch.from_numpy(self._logits[m, block]).reshape(size, c))
            out = {k: torch.from_numpy(self._values[k][m, block]).view(-1) for k in names}
            with torch.no_grad():  # grad mode is per thread
                row_statistics(z, self._row_labels[block.start * q : block.stop * q], names, out)

        workers = min(torch.get_num_threads(), len(tasks))
        # One update per block of ~4 MiB (never per sample), from this thread only.
        bar = progress_bar(len(tasks), f"statistics of {rows.size} models", "block", quick=True)
        with cpu_threads(1), bar:  # the pass's own worker threads instead (miaudit.threads)
            if workers > 1:
                with ThreadPoolExecutor(workers, thread_name_prefix="statistics") as pool:
                    for _ in pool.map(run, tasks):
                        bar.update(1)
                release_freed_memory()
            else:
                for task in tasks:
                    run(task)
                    bar.update(1)
        for name in names:
            self._done[name][rows] = True
