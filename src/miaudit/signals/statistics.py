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

import os
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numpy.typing import ArrayLike

from miaudit.runtime.malloc import release_freed_memory
from miaudit.runtime.progress import progress_bar

# Bytes of one float64 [samples, Q, C] block of the pass, and of the attacks' [R, samples, Q]
# blocks. Pass over 32 models of 100k samples, one thread (numpy): 0.5-4 MiB 0.80-0.96 s
# (within noise), 0.25 MiB 0.90 s (per-op overhead); larger blocks only cost memory.
_BLOCK_BYTES = 4 * 2**20
_TINY = np.finfo(np.float64).tiny

STATISTICS = (
    "loss",  # cross-entropy of the true class, >= 0
    "phi",  # LiRA's logit-scaled confidence z_y − logsumexp_{c≠y} z_c
    "prob_true",  # p_y
    "log_confidence",  # max_c log p_c
    "neg_entropy",  # Σ_c p_c log p_c
    "modified_entropy",  # Song & Mittal's Mentr
)


def compute_statistics(
    logits: ArrayLike, labels: ArrayLike, names: tuple[str, ...] | list[str]
) -> dict[str, np.ndarray]:
    """Statistics `names` of logits [m, N, Q, C] for labels [N] -> each float64 [m, N, Q]
    (any array-like: numpy, a CPU torch tensor; never modified)."""
    logits = np.asarray(logits)
    if logits.dtype.kind != "f":
        logits = logits.astype(np.float64)
    m, n, q, c = logits.shape
    columns = np.ascontiguousarray(logits.reshape(-1, c).T)  # [C, rows]
    y = np.broadcast_to(np.asarray(labels, dtype=np.int64).reshape(1, n, 1), (m, n, q))
    out = column_statistics(columns, y.reshape(-1), names)
    return {k: v.reshape(m, n, q) for k, v in out.items()}


def column_statistics(
    logits: np.ndarray,
    y: np.ndarray,
    names: tuple[str, ...] | list[str],
    out: dict[str, np.ndarray] | None = None,
    predicted: np.ndarray | None = None,
    work: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Statistics `names` of the C-contiguous logits [C, B] (one column per row of logits, any
    float type, e.g. the bank's float32; not modified) for labels y [B] -> each float64 [B],
    written into `out[name]` where given; each column's predicted class (the first maximum,
    as argmax) into `predicted` [B] where given. `work`: a float64 [C, B] C-contiguous
    workspace (else one is allocated).

    Columns, not rows: every operation runs over B contiguous values (C = 10 classes per row
    would leave numpy's reductions a loop of 10 per row: 3x slower). The maximum and the
    predicted class are found in the logits' own type (exact), then z − max is formed in
    float64 in one step."""
    if logits.ndim != 2 or not logits.flags.c_contiguous or logits.dtype.kind != "f":
        raise ValueError("column_statistics needs C-contiguous float [C, B] logits; pass "
                         "np.ascontiguousarray(logits.T).")
    res = dict(out or {})

    def dst(name: str) -> np.ndarray | None:
        return res.get(name) if name in names else None

    c, b = logits.shape
    top_value = logits.max(axis=0)
    # the first maximum, as argmax: C − max_c (C − c)·[z_c = max] (numpy's argmax along the
    # short axis 0 takes 10x longer)
    countdown = c - _class_index(c)
    top = c - np.multiply(logits == top_value, countdown, dtype=countdown.dtype).max(axis=0)
    top = top.astype(np.int64)
    if predicted is not None:
        np.copyto(predicted, top, casting="unsafe")
    # z = logits − max in float64 (exact for float32 logits); <= 0, exactly 0 at the argmax
    z = np.subtract(logits, top_value, out=work, dtype=np.float64)
    col = np.arange(b)
    top_at, y_at = top * b + col, y * b + col  # flat positions of each column's top, true class
    y_is_top = top == y
    s_y = z.reshape(-1)[y_at]
    need_p = bool({"neg_entropy", "modified_entropy"} & set(names))
    e = np.exp(z) if need_p else np.exp(z, out=z)
    e_rest = e.copy() if need_p else e
    e_rest.reshape(-1)[top_at] = 0.0
    rest = e_rest.sum(axis=0)  # T
    log_norm = _log1p(rest)  # log Σ e
    # exp underflows when a logit gap exceeds ~745: keep log T finite (phi saturates near 708).
    log_rest = np.log(np.maximum(rest, _TINY))
    loss = np.subtract(log_norm, s_y, out=dst("loss"))
    if "loss" in names:
        res["loss"] = loss
    if "prob_true" in names:
        res["prob_true"] = np.exp(-loss, out=dst("prob_true"))
    if "phi" in names:
        e_rest.reshape(-1)[y_at] = 0.0
        others = e_rest.sum(axis=0)  # U
        phi = np.subtract(s_y, _log1p(others), out=dst("phi"))
        res["phi"] = np.negative(log_rest, out=phi, where=y_is_top)
    if "log_confidence" in names:
        res["log_confidence"] = np.negative(log_norm, out=dst("log_confidence"))
    if need_p:
        classes = _class_index(c)
        is_top = classes == top
        log_p = z - log_norm
        p = e / (1.0 + rest)
        if "neg_entropy" in names:
            res["neg_entropy"] = np.sum(p * log_p, axis=0, out=dst("neg_entropy"))
        if "modified_entropy" in names:
            # Non-top classes have p <= 1/2, where log1p(-p) is exact; the top class uses T.
            one_minus_p = np.where(is_top, rest / (1.0 + rest), 1.0 - p)
            with np.errstate(divide="ignore"):  # log1p(-1) at a top class, not taken
                log_one_minus_p = np.where(is_top, log_rest - log_norm, np.log1p(-p))
            terms = np.where(classes == y, -one_minus_p * log_p, -p * log_one_minus_p)
            res["modified_entropy"] = np.sum(terms, axis=0, out=dst("modified_entropy"))
    return {k: v for k, v in res.items() if k in names}


def _class_index(c: int) -> np.ndarray:
    """[C, 1] class numbers in the smallest integer type that holds C."""
    return np.arange(c, dtype=np.min_scalar_type(c))[:, None]


def _log1p(x: np.ndarray) -> np.ndarray:
    """log1p of x >= 0 (a new array) from numpy's log: log(u) − ((u − 1) − x) / u with
    u = 1 + x, the rounding of u corrected to first order (Goldberg, "What every computer
    scientist should know about floating-point arithmetic", 1991): within 2.3e-16 relative of
    np.log1p on 10^5 values over 1e-300..1e3, at half its cost (np.log1p is scalar code)."""
    u = 1.0 + x
    out = np.log(u)
    u_minus_1 = u - 1.0
    u_minus_1 -= x
    u_minus_1 /= u
    out -= u_minus_1
    return out


def pass_threads() -> int:
    """Worker threads of the statistics pass: torch's CPU threads when torch is loaded (a
    caller's ``torch.set_num_threads`` applies), else the CPUs this process may run on."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return max(1, int(torch.get_num_threads()))
    affinity = getattr(os, "sched_getaffinity", None)
    return max(1, len(affinity(0)) if affinity else (os.cpu_count() or 1))


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
    about the same. The pass runs on `pass_threads()` worker threads (numpy releases the GIL
    in its array operations) and records each model's predicted classes on the way
    (:meth:`predicted`).
    """

    # Computed together: the first request for one computes its group for those models.
    _GROUPS = (("loss", "phi", "log_confidence"), ("neg_entropy", "modified_entropy"))

    def __init__(self, logits: np.ndarray, labels: np.ndarray) -> None:
        self._logits = logits
        q = logits.shape[2]
        self._labels = np.asarray(labels, dtype=np.int64)
        self._row_labels = np.repeat(self._labels, q)  # one label per (sample, query)
        self._values: dict[str, np.ndarray] = {}
        self._done: dict[str, np.ndarray] = {}
        # predicted class of every (model, sample, query) a pass went over, and which models
        self._predicted = np.empty(logits.shape[:3], dtype=np.min_scalar_type(logits.shape[3]))
        self._predicted_done = np.zeros(logits.shape[0], dtype=bool)

    @property
    def n_samples(self) -> int:
        return int(self._logits.shape[1])

    def predicted(self, query: int = 0) -> np.ndarray | None:
        """Every model's predicted class (argmax logit, the first on ties) under `query`,
        [M, N] in the smallest unsigned type that holds C (a read-only view), when a pass went
        over every model (a by-product: no second pass over the logits); else None."""
        if not self._predicted_done.all():
            return None
        out = self._predicted[:, :, query]
        out.flags.writeable = False
        return out

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
            prob_true: np.ndarray = np.exp(-self.get("loss", models, samples))
            return prob_true
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
            if getattr(workspace, "z", None) is None or workspace.z.size < size * c:
                workspace.z = np.empty(size * c, dtype=np.float64)
                workspace.columns = np.empty(size * c, dtype=self._logits.dtype)
            columns = workspace.columns[: size * c].reshape(c, size)  # one per (sample, query)
            np.copyto(columns, self._logits[m, block].reshape(size, c).T)
            out = {k: self._values[k][m, block].reshape(-1) for k in names}
            labels = self._row_labels[block.start * q : block.stop * q]
            column_statistics(columns, labels, names, out, self._predicted[m, block].reshape(-1),
                              workspace.z[: size * c].reshape(c, size))

        workers = min(pass_threads(), len(tasks))
        # One update per block of ~4 MiB (never per sample), from this thread only.
        bar = progress_bar(len(tasks), f"statistics of {rows.size} models", "block", quick=True)
        with bar:
            if workers > 1:
                with ThreadPoolExecutor(workers, thread_name_prefix="statistics") as pool:
                    for _ in pool.map(run, tasks):
                        bar.update(1)
                release_freed_memory()
            else:
                for task in tasks:
                    run(task)
                    bar.update(1)
        self._predicted_done[rows] = True
        for name in names:
            self._done[name][rows] = True
