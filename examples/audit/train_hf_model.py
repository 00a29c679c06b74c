"""A Hugging Face model trained outside miaudit: a small BERT spam classifier (or a small GPT-2
language model) on SpamAssassin mails, plain transformers + PyTorch, saved with save_pretrained.

The texts come from miaudit's `spam-assassin` dataset (`miaudit data fetch spam-assassin`; the
only miaudit import, so that the row files below index the rows the audit reads). The script
trains a byte-level BPE tokenizer on the public mails, a model from scratch on the member
mails, and writes what an engineer would have after training:

    OUT/model/              config.json, model.safetensors, tokenizer.json (save_pretrained)
    OUT/members.txt         the training rows (0-based rows of the dataset)
    OUT/nonmembers.txt      rows never trained on
    OUT/public.txt          other rows an attacker may hold

Run:  python examples/audit/train_hf_model.py --out runs/audit-example/hf
      miaudit audit --config examples/audit/hf-text-audit.yaml
(`--task lm` trains a causal LM instead: then audit it with `--attacks` left out, which runs
the language-model attacks.)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
)

from miaudit.data import load_dataset


def bpe_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE with <pad> 0, <s> 1 (prepended), </s> 2 (appended)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>")


def build(task: str, vocab: int, length: int) -> torch.nn.Module:
    if task == "lm":
        return GPT2LMHeadModel(GPT2Config(
            vocab_size=vocab, n_positions=length, n_embd=128, n_layer=2, n_head=4,
            bos_token_id=1, eos_token_id=2, pad_token_id=0))
    return BertForSequenceClassification(BertConfig(
        vocab_size=vocab, max_position_embeddings=length, hidden_size=128, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=256, num_labels=2, pad_token_id=0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/audit-example/hf"))
    parser.add_argument("--task", choices=("classifier", "lm"), default="classifier")
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    mails = load_dataset("spam-assassin")  # 5,916 texts, ham 0 / spam 1
    texts, labels = [str(t) for t in mails.features], mails.labels
    order = np.random.default_rng(0).permutation(len(texts))
    n = args.members
    members, nonmembers = np.sort(order[:n]), np.sort(order[n: 2 * n])
    public = np.sort(order[2 * n: 4 * n])
    tokenizer = bpe_tokenizer([texts[i] for i in public], vocab_size=4096)  # public mails only
    model = build(args.task, len(tokenizer), args.max_length)
    batch = tokenizer([texts[i] for i in members], truncation=True, max_length=args.max_length,
                      padding="max_length", return_tensors="pt")
    targets = (torch.from_numpy(labels[members]) if args.task == "classifier"
               else batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        total = 0.0
        for rows in torch.randperm(n).split(32):
            optimizer.zero_grad()
            loss = model(input_ids=batch["input_ids"][rows],
                         attention_mask=batch["attention_mask"][rows], labels=targets[rows]).loss
            loss.backward()
            optimizer.step()
            total += float(loss) * len(rows)
        print(f"epoch {epoch + 1:2d}  loss {total / n:.4f}", flush=True)
    print(f"trained in {time.perf_counter() - start:.0f} s")
    model.eval()
    model.save_pretrained(args.out / "model")
    tokenizer.save_pretrained(args.out / "model")
    for name, rows in (("members", members), ("nonmembers", nonmembers), ("public", public)):
        np.savetxt(args.out / f"{name}.txt", rows, fmt="%d")
    print(f"wrote {args.out}/model/ (save_pretrained), members.txt, nonmembers.txt, public.txt")


if __name__ == "__main__":
    main()
