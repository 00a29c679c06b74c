"""The audit pipeline: dataset -> protocol -> training -> signal bank -> attacks -> metrics.

Its stages import one way, each only the ones before it:

- ``models``: recipes resolved from the config; the design's models trained or loaded from the
  content-addressed cache (with checkpoints); calibration-via-forgetting copies;
- ``canaries``: the canaries of one-run auditing, checked before the dataset loads, given
  their labels and recorded;
- ``querying``: every model queried into a :class:`~miaudit.signals.SignalBank`
  (``build_bank``), with the canaries;
- ``evaluate``: attacks scored on a bank and evaluated (``evaluate_attacks`` with its typed
  ``EvaluationOptions``, the entry point studies call; ``evaluate_bank`` spells the options
  as keyword arguments), with the checks
  the verdict reads (the split check's record, :mod:`miaudit.verdict.split_check`: can the
  audit's members be told from its non-members without the model?; the target's fit on its
  own training rows) and each attack's privacy bounds (:mod:`miaudit.privacy.attack_bounds`);
- ``checkpoint_audit``: a bank and a report per checkpoint kept along training;
- ``orchestrator``: the steps `miaudit run` and `miaudit audit` share (``orchestrate``): the
  run folder staged and committed on success, seeding, the split check, the bank, the
  evaluation, the release verdict, the meta and the report; each command supplies only how
  it obtains its target and reference models (a ``ModelSource``);
- ``runner``: `miaudit run`'s source (``run``): the models of the config's design.

The names below load their stage on first use (PEP 562): `miaudit attack` imports
``miaudit.pipeline.evaluate`` without paying for the training and querying stages' imports.
"""

from __future__ import annotations

from miaudit.runtime.lazy import lazy_exports

# name -> the module that defines it
_EXPORTS = {
    "resolve_device": "miaudit.runtime.devices",
    "BuiltBank": "miaudit.pipeline.querying",
    "build_bank": "miaudit.pipeline.querying",
    "default_queries": "miaudit.config",
    "query_bank": "miaudit.pipeline.querying",
    "EpsilonPlan": "miaudit.privacy.attack_bounds",
    "privacy_audit": "miaudit.privacy.attack_bounds",
    "EvaluationOptions": "miaudit.pipeline.evaluate",
    "evaluate_attacks": "miaudit.pipeline.evaluate",
    "evaluate_bank": "miaudit.pipeline.evaluate",
    "model_accuracies": "miaudit.pipeline.evaluate",
    "public_threshold": "miaudit.pipeline.evaluate",
    "ModelSource": "miaudit.pipeline.orchestrator",
    "orchestrate": "miaudit.pipeline.orchestrator",
    "run": "miaudit.pipeline.runner",
    "run_dir_for": "miaudit.pipeline.runner",
    "default_cache_dir": "miaudit.train.model_cache",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, globals(), _EXPORTS)


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
