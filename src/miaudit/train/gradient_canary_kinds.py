"""The choices of white-box gradient canaries (:mod:`miaudit.train.gradient_canaries`), kept
apart from that module's torch so that checking a config (``canaries.direction``,
``canaries.coordinates``) loads no torch."""

from __future__ import annotations

__all__ = ["KINDS", "COORDINATES"]

# a canary's direction in parameter space: one coordinate (Dirac) or a seeded unit vector
KINDS = ("dirac", "random")
# a Dirac canary's coordinates: those the data's clipped gradients touch least, or random ones
COORDINATES = ("quiet", "random")
