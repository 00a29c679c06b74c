"""Fine-tuning throughput of the text models on this CPU: samples/s and tokens/s.

Not run in CI. Usage (from the repository root; needs the `text` extra):

    .venv/bin/python bench/bench_text.py [--rows 256] [--max-length 64] [--threads 1]

Data: the first paragraphs of public callables' docstrings in 8 standard-library modules
(real English, labelled by module), repeated to `--rows` rows and tokenized with the MiniLM
WordPiece tokenizer to `--max-length` tokens. Each model trains 1 epoch through
`miaudit.train.train_model` (Adam, batch 32; text-cnn 3 epochs) after one warm-up batch;
samples/s = rows x epochs / training seconds (the trainer's own clock), tokens/s counts the
non-pad tokens. gpt-small trains on the next-token loss, once on the WordPiece ids and once on
a 4,096-token byte-level BPE (fitted on these same texts: a speed figure only, where a run fits
it on the public pool). Prints one line per model and `uptime` before and after.
"""

from __future__ import annotations

import argparse
import inspect
import subprocess

import numpy as np
import torch

from miaudit.models import build_model
from miaudit.models import text as T
from miaudit.train.recipe import Recipe
from miaudit.train.trainer import train_model

MODULES = ["math", "os.path", "random", "itertools", "re", "json", "textwrap", "string"]


def corpus(rows: int) -> tuple[list[str], np.ndarray]:
    import importlib

    texts, labels = [], []
    for label, name in enumerate(MODULES):
        module = importlib.import_module(name)
        for attr in sorted(dir(module)):
            obj = getattr(module, attr)
            doc = inspect.getdoc(obj) if not attr.startswith("_") and callable(obj) else None
            if doc:
                texts.append(" ".join(doc.split()))  # the whole docstring: longer texts
                labels.append(label)
    reps = -(-rows // len(texts))
    return (texts * reps)[:rows], np.asarray(labels * reps, dtype=np.int64)[:rows]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    texts, labels = corpus(args.rows)
    tok = T.tokenize(texts, max_length=args.max_length)
    x, rows = tok.features(), np.arange(len(texts))
    n_tokens = int(tok.lengths.sum())
    print(f"before: {uptime()}")
    print(f"{len(texts)} rows, max_length {args.max_length}, {n_tokens} tokens "
          f"({tok.n_truncated} truncated), {args.threads} thread(s)")  # fmt: skip
    bpe = T.tokenize(texts, max_length=args.max_length, tokenizer=T.train_bpe(texts, 4096))
    tokenized = {"wordpiece": (x, n_tokens), "bpe": (bpe.features(), int(bpe.lengths.sum()))}
    cases = [  # (architecture, arch_params, epochs, tokenizer)
        ("text-cnn", {}, 3, "wordpiece"),
        ("minilm", {"train_layers": 1}, 1, "wordpiece"),
        ("minilm", {"lora": {"r": 8}}, 1, "wordpiece"),
        ("minilm", {}, 1, "wordpiece"),  # full fine-tuning
        ("gpt-small", {}, 1, "wordpiece"),  # 2 layers, 128 wide, 4 heads, 30,522-way output
        ("gpt-small", {"vocab_size": 4096}, 1, "bpe"),
    ]
    for arch, params, epochs, tokenizer in cases:
        features, tokens = tokenized[tokenizer]
        recipe = Recipe(architecture=arch, arch_params=params, optimizer="adam", lr=1e-3,
                        epochs=epochs, batch_size=32)  # fmt: skip
        build_model(arch, (args.max_length,), 8, **params)  # warm: MiniLM loaded, extracted
        model = train_model(recipe, features, labels, rows, seed=0, progress=False)
        sps, tps = model.samples_per_second, model.samples_per_second * tokens / len(rows)
        print(f"{arch:9s} {str(dict(params)):26s} {tokenizer:9s} {sps:9.1f} samples/s "
              f"{tps:11.0f} tokens/s  ({model.train_seconds:.1f} s)")  # fmt: skip
    print(f"after: {uptime()}")


if __name__ == "__main__":
    main()
