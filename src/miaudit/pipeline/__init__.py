"""The audit pipeline: dataset -> protocol -> training -> signal bank -> attacks -> metrics.

Its stages import one way, each only the ones before it:

- ``models``: recipes resolved from the config; the design's models trained or loaded from the
  content-addressed cache (with checkpoints); calibration-via-forgetting copies;
- ``canaries``: one-run auditing's canaries checked before any work, relabelled, recorded;
- ``bank``: every model queried into a :class:`~miaudit.signals.SignalBank` (``build_bank``);
- ``epsilon``: each attack's ε lower bounds and the best of them (``EpsilonPlan``,
  ``privacy_audit``);
- ``evaluate``: attacks scored on a bank and evaluated (``evaluate_bank``);
- ``checkpoints``: a bank and a report per checkpoint kept along training;
- ``runner``: the whole run (``run``) into a staging folder, committed on success.
"""

from miaudit.devices import resolve_device
from miaudit.pipeline.bank import BuiltBank, build_bank, default_queries, query_bank
from miaudit.pipeline.epsilon import EpsilonPlan, privacy_audit
from miaudit.pipeline.evaluate import evaluate_bank, model_accuracies, public_threshold
from miaudit.pipeline.runner import run, run_dir_for
from miaudit.train.cache import default_cache_dir

__all__ = [
    "BuiltBank",
    "EpsilonPlan",
    "build_bank",
    "default_cache_dir",
    "default_queries",
    "evaluate_bank",
    "model_accuracies",
    "privacy_audit",
    "public_threshold",
    "query_bank",
    "resolve_device",
    "run",
    "run_dir_for",
]
