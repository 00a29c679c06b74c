"""Verdicts: which attack is strongest, whether it shows a leak, and what that means for a
release."""
