"""Fine-tuning throughput of the text models (issue #14) on this CPU: samples/s and tokens/s.

Not run in CI. Usage (from the repository root; needs the `text` extra):

    .venv/bin/python bench/bench_text.py [--rows 256] [--max-length 64] [--threads 1]

Data: the first paragraphs of public callables' docstrings in 8 standard-library modules
(real English, labelled by module), repeated to `--rows` rows and tokenized with the MiniLM
WordPiece tokenizer to `--max-length` tokens. Each model trains 1 epoch through
`miaudit.train.train_model` (Adam, batch 32; text-cnn 3 epochs) after one warm-up batch;
samples/s = rows x epochs / training seconds (the trainer's own clock), tokens/s counts the
non-pad tokens. gpt-small has no trainer path yet (next-token loss): it is timed with a plain
loop over the same batches (`next_token_loss`). Prints one line per model and `uptime` before
and after.
"""

from __future__ import annotations

import argparse
import inspect
import subprocess
import time

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
    cases = [
        ("text-cnn", {}, 3),
        ("minilm", {"train_layers": 1}, 1),
        ("minilm", {"lora": {"r": 8}}, 1),
        ("minilm", {}, 1),  # full fine-tuning
    ]
    for arch, params, epochs in cases:
        recipe = Recipe(architecture=arch, arch_params=params, optimizer="adam", lr=1e-3,
                        epochs=epochs, batch_size=32)  # fmt: skip
        build_model(arch, (args.max_length,), 8, **params)  # warm: MiniLM loaded, extracted
        model = train_model(recipe, x, labels, rows, seed=0, progress=False)
        sps, tps = model.samples_per_second, model.samples_per_second * n_tokens / len(rows)
        print(f"{arch:9s} {str(dict(params)):26s} {sps:9.1f} samples/s {tps:11.0f} tokens/s  "
              f"({model.train_seconds:.1f} s)")  # fmt: skip
    torch.manual_seed(0)
    lm = build_model("gpt-small", (args.max_length,), 1)  # 2 layers, 128 wide, 4 heads
    opt = torch.optim.Adam(lm.parameters(), lr=1e-3)
    ids = torch.as_tensor(tok.ids)
    start = time.perf_counter()
    for lo in range(0, len(ids), 32):
        batch = ids[lo : lo + 32]
        loss = T.next_token_loss(lm(batch.float()), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - start
    print(f"{'gpt-small':9s} {'n_layer 2, n_embd 128':26s} {len(ids) / seconds:9.1f} samples/s "
          f"{n_tokens / seconds:11.0f} tokens/s  ({seconds:.1f} s)")  # fmt: skip
    print(f"after: {uptime()}")


if __name__ == "__main__":
    main()
