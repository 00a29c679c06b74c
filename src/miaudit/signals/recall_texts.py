"""ReCaLL's prefix size (Xie et al. 2024), kept free of torch: a config check reads it to plan
a causal LM's public pool. :mod:`miaudit.signals.sequence` re-exports it."""

from __future__ import annotations

# ReCaLL's prefix: this many public texts, concatenated (Xie et al. 2024 use a few shots)
RECALL_PREFIX_TEXTS = 2
