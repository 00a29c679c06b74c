"""What the Hugging Face audit tests build as a user would outside miaudit: the row files of a
32-member / 32-non-member split, and a peft LoRA adapter on the session's tiny Llama."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch


def write_split(root: Path, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Members (32), non-members (32) and public rows (the rest) of ``n`` rows, drawn with
    ``seed``, each written sorted as ``root/NAME.txt``."""
    order = np.random.default_rng(seed).permutation(n)
    rows = {"members": np.sort(order[:32]), "nonmembers": np.sort(order[32:64]),
            "public": np.sort(order[64:])}
    for name, values in rows.items():
        np.savetxt(root / f"{name}.txt", values, fmt="%d")
    return rows


def lora_model(base_folder: Path) -> tuple[Any, Any]:
    """(peft model with LoRA r 4 on q_proj/v_proj over the base, the base's tokenizer); the
    adapter initialised from torch's seed 0."""
    import peft
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(base_folder)
    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_pretrained(base_folder, dtype=torch.float32)
    model = peft.get_peft_model(base, peft.LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
        task_type="CAUSAL_LM"))  # fmt: skip
    return model, tokenizer
