"""The papers' studies as resumable sweeps: `miaudit study NAME` (see registry.py, sweep.py).

Names are imported lazily so that `miaudit --help` does not pay for torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Cell": "miaudit.studies.sweep",
    "StudyError": "miaudit.studies.sweep",
    "run_sweep": "miaudit.studies.sweep",
    "get_executor": "miaudit.studies.executors",
    "Study": "miaudit.studies.registry",
    "get_study": "miaudit.studies.registry",
    "list_studies": "miaudit.studies.registry",
    "load_study_config": "miaudit.studies.registry",
    "register_study": "miaudit.studies.registry",
    "run_study": "miaudit.studies.registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'miaudit.studies' has no attribute {name!r}")
