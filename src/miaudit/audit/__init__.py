"""Audit a model trained outside miaudit: `miaudit audit` (see :mod:`miaudit.audit.run`).

sources (the model or its outputs) -> data (members, non-members, public) -> references ->
bank -> attacks -> exposure ranking and release statement -> report.
"""
