"""Per-model, per-sample, per-query statistics derived from a bank's logits.

Every attack reads these instead of raw logits where it can, so each is computed once per bank
(float64, from float32 logits, a few models at a time to bound memory) and shared by all attacks
and all targets.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

# Bytes of float64 work memory per chunk of models; bounds the peak while computing.
_CHUNK_BYTES = 64 * 2**20


def _log_softmax(z: torch.Tensor) -> torch.Tensor:
    return z - torch.logsumexp(z, dim=-1, keepdim=True)


def _true_class(values: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """values [m, N, Q, C] -> values at the true class, [m, N, Q]."""
    index = labels.view(1, -1, 1, 1).expand(*values.shape[:-1], 1)
    return values.gather(-1, index).squeeze(-1)


def _loss(z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the true class (>= 0)."""
    return -_true_class(_log_softmax(z), labels)


def _phi(z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """LiRA's logit-scaled confidence: z_y - logsumexp_{c != y} z_c."""
    z_true = _true_class(z, labels)
    onehot = torch.nn.functional.one_hot(labels, z.shape[-1]).bool().view(1, -1, 1, z.shape[-1])
    others = torch.logsumexp(z.masked_fill(onehot, float("-inf")), dim=-1)
    return z_true - others


def _prob_true(z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.exp(_true_class(_log_softmax(z), labels))


def _log_confidence(z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """max_c log p_c (Salem's confidence in log space)."""
    return _log_softmax(z).max(dim=-1).values


def _neg_entropy(z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    log_p = _log_softmax(z)
    return (torch.exp(log_p) * log_p).sum(dim=-1)


def _modified_entropy(z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Song & Mittal's Mentr = -(1-p_y) log p_y - sum_{c != y} p_c log(1 - p_c)."""
    log_p = _log_softmax(z)
    p = torch.exp(log_p)
    # log(1 - p) from log p without cancellation; clamp keeps p == 1 finite.
    log_one_minus_p = torch.log(torch.clamp(-torch.expm1(log_p), min=1e-300))
    onehot = torch.nn.functional.one_hot(labels, z.shape[-1]).bool().view(1, -1, 1, z.shape[-1])
    true_term = -(1 - p) * log_p
    other_term = -p * log_one_minus_p
    return torch.where(onehot, true_term, other_term).sum(dim=-1)


STATISTICS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "loss": _loss,
    "phi": _phi,
    "prob_true": _prob_true,
    "log_confidence": _log_confidence,
    "neg_entropy": _neg_entropy,
    "modified_entropy": _modified_entropy,
}


class StatisticCache:
    """Lazily computes `STATISTICS[name]` for requested models and keeps the rows."""

    def __init__(self, logits: np.ndarray, labels: np.ndarray) -> None:
        self._logits = logits
        self._labels = torch.from_numpy(np.asarray(labels, dtype=np.int64))
        self._values: dict[str, np.ndarray] = {}
        self._done: dict[str, np.ndarray] = {}

    def get(self, name: str, models: np.ndarray | list[int] | None = None) -> np.ndarray:
        """Statistic `name` as float64 [len(models), N, Q] (all models when None)."""
        if name not in STATISTICS:
            raise KeyError(f"unknown statistic '{name}'; known: {sorted(STATISTICS)}")
        m_total, n, q, c = self._logits.shape
        rows = np.arange(m_total) if models is None else np.asarray(models, dtype=np.int64)
        if name not in self._values:
            self._values[name] = np.empty((m_total, n, q), dtype=np.float64)
            self._done[name] = np.zeros(m_total, dtype=bool)
        todo = rows[~self._done[name][rows]]
        if todo.size:
            self._compute(name, np.unique(todo))
        return self._values[name][rows]

    def _compute(self, name: str, rows: np.ndarray) -> None:
        _, n, q, c = self._logits.shape
        per_model = max(1, n * q * c * 8 * 4)  # a few float64 temporaries per model
        chunk = max(1, _CHUNK_BYTES // per_model)
        fn = STATISTICS[name]
        out = self._values[name]
        with torch.no_grad():
            for start in range(0, rows.size, chunk):
                sel = rows[start : start + chunk]
                z = torch.from_numpy(self._logits[sel]).to(torch.float64)
                out[sel] = fn(z, self._labels).numpy()
        self._done[name][rows] = True
