"""Result types shared by the pipeline, the `attack` command and the report.

The report only reads these; it never recomputes an attack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class AttackOutcome:
    """One attack's scores on the audit samples of one target, with metrics and cost."""

    name: str
    scores: np.ndarray  # float64 [n_audit]; NaN = the attack could not score that sample
    metrics: dict[str, Any]  # as returned by miaudit.metrics.evaluate
    cost: dict[str, Any] = field(default_factory=dict)  # models_trained, queries_per_sample,
    # train_seconds, score_seconds


@dataclass
class AuditResult:
    """Everything a report shows for one target model."""

    indices: np.ndarray  # int64 [n_audit]: positions of the audit samples in the bank
    members: np.ndarray  # bool [n_audit]: membership in the target (ground truth)
    outcomes: list[AttackOutcome]
    meta: dict[str, Any] = field(default_factory=dict)  # dataset, target, model accuracies,
    # config, seed, warnings: free-form, JSON-serialisable
    rows: np.ndarray | None = None  # int64 [n_audit]: the dataset row of each audit sample;
    # None when unknown (a bare bank: `miaudit attack`), then reports show bank positions

    def outcome(self, name: str) -> AttackOutcome:
        for item in self.outcomes:
            if item.name == name:
                return item
        raise KeyError(name)
