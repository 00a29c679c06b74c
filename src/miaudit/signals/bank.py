"""The signal bank: every model's logits on every sample, plus who trained on what.

`bank.npz` is the interchange format (docs/algorithms.md §1): `logits [M,N,Q,C]`, `labels [N]`,
`membership [M,N]`, optional `population [N]` and `audit [N]`. White-box channels (one float
per model and sample, e.g. the per-sample gradient norm) travel as `channel_<name> [M,N]`;
a channel `<name>_queries` beside one records the queries each model answered to compute it
per sample (HopSkipJump's label queries), which the result table reports as the attack's cost.
"""

from __future__ import annotations

import dataclasses
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from miaudit.errors import BankError
from miaudit.io import atomic_path
from miaudit.signals.statistics import StatisticCache

CHANNEL_PREFIX = "channel_"
# Channel `<name>_queries` [M, N]: queries each model answered to compute channel <name> for
# each sample (HopSkipJump's label queries), read for the cost column.
QUERIES_SUFFIX = "_queries"
_REQUIRED_KEYS = ("logits", "labels", "membership")
_OPTIONAL_KEYS = ("population", "audit")


@dataclass
class SignalBank:
    """Logits of M models on N samples under Q queries, with labels and membership."""

    logits: np.ndarray  # float32 [M, N, Q, C]
    labels: np.ndarray  # int64 [N]
    membership: np.ndarray  # bool [M, N]
    population: np.ndarray | None = None  # bool [N]: attacker-owned, never evaluated
    audit: np.ndarray | None = None  # bool [N]: the samples scored and evaluated
    channels: dict[str, np.ndarray] = field(default_factory=dict)  # name -> float [M, N]

    def __post_init__(self) -> None:
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
        validate_bank(self)
        self.labels = self.labels.astype(np.int64)
        self.membership = self.membership.astype(bool)
        self.population = np.asarray(self.population, dtype=bool)
        self.audit = np.asarray(self.audit, dtype=bool)
        self.channels = {k: np.asarray(v, dtype=np.float64) for k, v in self.channels.items()}
        self._statistics = StatisticCache(self.logits, self.labels)

    @property
    def n_models(self) -> int:
        return self.logits.shape[0]

    @property
    def n_samples(self) -> int:
        return self.logits.shape[1]

    @property
    def n_queries(self) -> int:
        return self.logits.shape[2]

    @property
    def n_classes(self) -> int:
        return self.logits.shape[3]

    @property
    def statistics(self) -> StatisticCache:
        """Per-model, per-sample, per-query statistics (loss, LiRA's phi, ...), computed once."""
        return self._statistics

    def replace(self, **changes: object) -> SignalBank:
        """A validated copy with some arrays replaced (e.g. another membership or mask)."""
        return dataclasses.replace(self, **changes)

    def save(self, path: str | os.PathLike, compressed: bool = False) -> Path:
        """Write the bank atomically (a crash never leaves a truncated bank behind)."""
        path = Path(path)
        arrays = {
            "logits": self.logits,
            "labels": self.labels,
            "membership": self.membership,
            "population": self.population,
            "audit": self.audit,
        }
        arrays.update({CHANNEL_PREFIX + k: v for k, v in self.channels.items()})
        saver = np.savez_compressed if compressed else np.savez
        with atomic_path(path) as tmp, open(tmp, "wb") as handle:
            saver(handle, **arrays)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> SignalBank:
        """Read a bank.npz, with a clear error for a missing, corrupt or incomplete file."""
        path = Path(path)
        if not path.exists():
            raise BankError(f"bank file {path} does not exist; check the path.")
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
            raise BankError(
                f"bank file {path} cannot be read ({exc}); it is not a valid .npz — "
                "re-create it with numpy.savez or `miaudit run`."
            ) from exc
        missing = [k for k in _REQUIRED_KEYS if k not in arrays]
        if missing:
            raise BankError(
                f"bank file {path} lacks required arrays {missing}; a bank needs "
                "logits [M,N,Q,C], labels [N] and membership [M,N]."
            )
        known = set(_REQUIRED_KEYS) | set(_OPTIONAL_KEYS)
        unknown = [k for k in arrays if k not in known and not k.startswith(CHANNEL_PREFIX)]
        if unknown:
            raise BankError(
                f"bank file {path} has unknown arrays {unknown}; allowed: "
                f"{sorted(known)} and '{CHANNEL_PREFIX}<name>' channels."
            )
        channels = {
            k[len(CHANNEL_PREFIX):]: v for k, v in arrays.items() if k.startswith(CHANNEL_PREFIX)
        }
        return cls(
            logits=arrays["logits"],
            labels=arrays["labels"],
            membership=arrays["membership"],
            population=arrays.get("population"),
            audit=arrays.get("audit"),
            channels=channels,
        )


def validate_bank(bank: SignalBank) -> None:
    """Raise BankError naming the first problem found, and how to fix it."""
    logits, labels, membership = bank.logits, bank.labels, bank.membership
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
    finite = np.isfinite(logits)
    if not finite.all():
        bad_models = np.unique(np.nonzero(~finite)[0]).tolist()
        raise BankError(
            f"{int((~finite).sum())} logits are NaN or infinite (models {bad_models[:10]}); "
            "the model diverged or the export is broken — retrain or re-export those models."
        )
    for name in ("population", "audit"):
        mask = getattr(bank, name)
        if mask is not None and np.shape(mask) != (n,):
            raise BankError(f"{name} must be a boolean mask of shape [{n}]; got {np.shape(mask)}.")
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
