"""Signals: models queried into a bank (logits [M,N,Q,C] + labels + membership)."""

from miaudit.signals.bank import SignalBank, validate_bank

__all__ = ["SignalBank", "validate_bank"]
