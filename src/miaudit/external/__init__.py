"""Audit a model trained outside miaudit: the work behind ``miaudit audit`` and
:func:`miaudit.audit` (see :mod:`miaudit.external.run`).

sources (the model or its outputs) -> data (members, non-members, public) -> references ->
bank -> attacks -> exposure ranking and release statement -> report.

The package is named for where the model comes from (trained elsewhere, by its owner), not
for the verb: ``miaudit.audit`` is the API function (:mod:`miaudit.api`), and a run whose
models miaudit trains itself is :mod:`miaudit.pipeline`.
"""
