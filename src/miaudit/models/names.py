"""Names of the models layer that a config check reads, kept free of torch (checking a config
loads neither torch nor transformers). :mod:`miaudit.models.text` re-exports them."""

from __future__ import annotations

# Registered architectures that build a :class:`~miaudit.models.text.CausalLM` (trained on the
# next-token loss).
CAUSAL_LM_ARCHITECTURES = ("gpt-small", "hf-causal-lm")
# A run's dataset.tokenizer (:mod:`miaudit.models.run_tokenizer`).
TOKENIZERS = ("auto", "wordpiece", "bpe", "base")
