"""``hf-causal-lm``: a pretrained causal LM (a base model by name, folder or GGUF) fine-tuned
on a run's texts, with LoRA adapters or in full.

The model is built from the base model's float32 weights (:mod:`miaudit.models.pretrained`;
loaded once per process, each build a copy) and wrapped as
:class:`~miaudit.models.hf.HFCausalLM`, so the trainer and the signal assembly treat it as any
causal LM: float feature ids ``[B, T]`` right-padded with 0 (the tokenizer's pad id swapped
with 0) in, next-token logits out. The texts are tokenized with the base model's own tokenizer
(``dataset.tokenizer: auto`` or ``base``; :func:`base_tokenizer`).

**What is cached**: with LoRA only the adapter weights (the parameters that train) are the
module's ``state_dict``, so the model cache, checkpoints and a Ray worker's result hold a few
hundred kB per model instead of the 540 MB base; loading builds the base again and puts the
adapter on it. The base's identity (its file's sha256, or its folder's digest) is in the
recipe's cache key (:func:`base_model_identity`), so another base never reuses an adapter.
"""

from __future__ import annotations

import copy
import functools
import os
import warnings
from collections.abc import Mapping
from typing import Any

from torch import nn

from miaudit.errors import ConfigError
from miaudit.models.hf import HFCausalLM
from miaudit.models.pretrained import (
    BaseModelSpec,
    file_sha256,
    load_base_model,
    resolve_base_model,
)

ARCHITECTURE = "hf-causal-lm"
# LoRA's defaults (Hu et al. 2021: r 8 on the attention's query and value projections); the
# projection names are Llama's (SmolLM2), GPT-2's fused one is c_attn.
DEFAULT_LORA = {"r": 8, "alpha": 16.0, "dropout": 0.0, "targets": ("q_proj", "v_proj")}


def _lora_config(lora: Mapping[str, Any] | bool) -> dict[str, Any] | None:
    """peft's LoraConfig arguments from ``lora`` (True: the defaults; False: none, full
    fine-tuning); a ConfigError naming an unknown key or a bad value."""
    if lora is False:
        return None
    given: Mapping[str, Any] = {} if lora is True else lora
    if not isinstance(given, Mapping):
        raise ConfigError(f"hf-causal-lm lora must be true, false (full fine-tuning) or a "
                          f"mapping {{r, alpha, dropout, targets}}; got {lora!r}.")
    unknown = set(given) - set(DEFAULT_LORA)
    if unknown:
        raise ConfigError(f"hf-causal-lm lora has no key(s) {sorted(unknown)}; use "
                          f"{sorted(DEFAULT_LORA)}.")
    merged = {**DEFAULT_LORA, **given}
    r = merged["r"]
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise ConfigError(f"hf-causal-lm lora r must be a positive integer; got {r!r}.")
    dropout = float(merged["dropout"])
    if not 0.0 <= dropout < 1.0:
        raise ConfigError(f"hf-causal-lm lora dropout must be in [0, 1); got {dropout}.")
    targets = merged["targets"]
    if isinstance(targets, str) or not targets:
        raise ConfigError(f"hf-causal-lm lora targets must be a list of module names "
                          f"(e.g. [q_proj, v_proj]); got {targets!r}.")
    return {"r": r, "lora_alpha": float(merged["alpha"]), "lora_dropout": dropout,
            "target_modules": [str(t) for t in targets], "task_type": "CAUSAL_LM"}


def base_model_identity(base_model: str) -> str:
    """What identifies a base model's weights: the sha256 of its GGUF file, or the digest of
    its folder's files (names, sizes, modification times), prefixed by the kind."""
    from miaudit.models.hf import folder_digest

    spec = resolve_base_model(base_model)
    if spec.kind == "gguf":
        return f"gguf:{file_sha256(spec.path)}"
    return f"folder:{folder_digest(spec.path)}"


@functools.lru_cache(maxsize=2)
def _template(spec: BaseModelSpec, cache_dir: str | None) -> tuple[Any, Any]:
    """The base model and tokenizer, loaded once per process (each model a deep copy)."""
    return load_base_model(spec, cache_dir=cache_dir, device="cpu")


def _cache_dir() -> str | None:
    return os.environ.get("MIAUDIT_CACHE_DIR") or None


def base_tokenizer(base_model: str) -> tuple[Any, int]:
    """The base model's ``tokenizers.Tokenizer`` and its pad id (the tokenizer's pad token,
    else its end-of-text token): what a run tokenizes texts with for ``hf-causal-lm``."""
    _, tokenizer = _template(resolve_base_model(base_model), _cache_dir())
    return tokenizer.backend_tokenizer, _pad(tokenizer)


def _pad(tokenizer: Any) -> int:
    """The tokenizer's pad id, else its end-of-text id (what GPT-style models pad with)."""
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = tokenizer.eos_token_id
    if pad is None:
        raise ConfigError(f"the base model's tokenizer ({tokenizer.name_or_path}) has neither a "
                          "pad nor an end-of-text token to pad with.")
    return int(pad)


class FineTunedCausalLM(HFCausalLM):
    """A base causal LM being fine-tuned. With LoRA (``adapter_only``) its state dict is the
    trainable parameters only (the adapter), and loading one puts an adapter on the base the
    module was built with: every key of the adapter must be given, and no other."""

    def __init__(self, model: nn.Module, token_pad: int, adapter_only: bool) -> None:
        super().__init__(model, token_pad)
        self.adapter_only = bool(adapter_only)

    def _trainable(self, prefix: str = "") -> set[str]:
        return {prefix + name for name, p in self.named_parameters() if p.requires_grad}

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        state = super().state_dict(*args, **kwargs)
        if not self.adapter_only:
            return state
        prefix = str(kwargs.get("prefix", args[1] if len(args) > 1 else ""))
        keep = self._trainable(prefix)
        return {k: v for k, v in state.items() if k in keep}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> Any:  # fmt: skip
        if not self.adapter_only:
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        wanted = self._trainable()
        missing, unexpected = wanted - set(state_dict), set(state_dict) - wanted
        if strict and (missing or unexpected):
            raise RuntimeError(
                f"Error(s) in loading the adapter of hf-causal-lm: missing keys "
                f"{sorted(missing)[:3]} ({len(missing)}), unexpected keys "
                f"{sorted(unexpected)[:3]} ({len(unexpected)})")
        return super().load_state_dict(state_dict, strict=False, assign=assign)


# architecture 'hf-causal-lm': declared in miaudit.models.architectures
def hf_causal_lm(
    input_shape: tuple[int, ...],
    num_classes: int,
    base_model: str | None = None,
    lora: Mapping[str, Any] | bool = True,
) -> nn.Module:
    """A pretrained causal LM fine-tuned on the run's texts (``num_classes`` is ignored: the
    outputs are next-token logits over the base's vocabulary).

    ``base_model``: a registered name (``smollm2-135m``), a Hugging Face folder or a ``.gguf``
    file (:func:`miaudit.models.pretrained.resolve_base_model`). ``lora``: ``true`` for LoRA
    with r 8, alpha 16 on ``q_proj``/``v_proj`` (peft; the base frozen), a mapping
    ``{r, alpha, dropout, targets}`` to change them, or ``false`` for full fine-tuning (every
    weight trains, and the cache holds them all: 540 MB for SmolLM2-135M)."""
    if not base_model:
        raise ConfigError("hf-causal-lm needs arch_params.base_model: a base-model name "
                          "(smollm2-135m), a Hugging Face folder or a .gguf file.")
    config = _lora_config(lora)
    if len(input_shape) != 1:
        raise ConfigError(f"hf-causal-lm takes token ids [N, L]; got input shape {input_shape}.")
    spec = resolve_base_model(base_model)
    template, tokenizer = _template(spec, _cache_dir())
    positions = getattr(template.config, "max_position_embeddings", None)
    if isinstance(positions, int) and input_shape[0] > positions:
        raise ConfigError(f"the texts' {input_shape[0]} tokens exceed the base model's "
                          f"{positions} positions; lower dataset.max_length.")
    model = copy.deepcopy(template)
    model.train()
    if config is not None:
        from peft import LoraConfig, get_peft_model

        try:
            with warnings.catch_warnings():  # peft calls a transformers method deprecated in 5.x
                warnings.filterwarnings("ignore", ".*is_gradient_checkpointing", FutureWarning)
                model = get_peft_model(model, LoraConfig(**config))
        except ValueError as exc:  # e.g. target modules the base does not have
            raise ConfigError(f"hf-causal-lm lora: {exc}") from exc
    return FineTunedCausalLM(model, _pad(tokenizer), adapter_only=config is not None)


def base_module(base_model: str) -> HFCausalLM:
    """The base model itself as a causal LM over the run's feature ids (never trained):
    ``lm-base-reference``'s reference."""
    template, tokenizer = _template(resolve_base_model(base_model), _cache_dir())
    result: HFCausalLM = HFCausalLM(template.eval(), _pad(tokenizer)).eval()
    return result
