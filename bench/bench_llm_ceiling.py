"""How fast could any loop query or LoRA-fine-tune a causal LM on this device, at this
precision? The plain Hugging Face loop of `bench_llm.py` is run once with every matrix
product and attention kernel it calls recorded (shapes, strides, dtypes), then those same
kernels are replayed back to back on random tensors of the same layouts, with nothing else in
between. No implementation that does the same arithmetic with this torch's kernels can take
less time than the replay, so plain seconds / replay seconds bounds the speed-up any rewrite
(miaudit's included) can show against the plain loop at equal precision.

Not run in CI. Usage (from the repository root; needs the `llm` extra, as bench_llm.py):

    .venv/bin/python bench/bench_llm_ceiling.py --threads 2                  # fp32
    .venv/bin/python bench/bench_llm_ceiling.py --threads 2 --dtype bf16     # bf16 autocast
    .venv/bin/python bench/bench_llm_ceiling.py --n-query 16 --n-train 16 --max-length 32

It also times miaudit (`lm_signals`; `train_model`'s own loop clock) and replays its kernels
the same way (what each side spends outside the kernels), counts the floating-point
operations of both sides (torch's FlopCounterMode: does a rewrite do less arithmetic or the
same faster?) and the device's rate on one large product (4096^3) as the kernels' peak.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_llm  # noqa: E402  (the plain loop, its texts and batches: one definition)

aten = torch.ops.aten
# the matrix products and attention kernels; under inference_mode linear, matmul and sdpa
# reach a dispatch mode whole (no autograd key decomposes them first), so they count too
KERNELS = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
           aten.linear.default, aten.matmul.default,
           aten.scaled_dot_product_attention.default,
           aten._scaled_dot_product_flash_attention_for_cpu.default,
           aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
           aten._scaled_dot_product_efficient_attention.default,
           aten._scaled_dot_product_efficient_attention_backward.default,
           aten._scaled_dot_product_flash_attention.default,
           aten._scaled_dot_product_flash_attention_backward.default}


def _spec(value: Any) -> Any:
    """A hashable stand-in for one argument: a tensor's (shape, stride, dtype), else itself."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), tuple(value.stride()), value.dtype)
    if isinstance(value, (list, tuple)):
        return tuple(_spec(v) for v in value)
    return value


def _build(spec: Any, device: str) -> Any:
    if isinstance(spec, tuple) and spec[:1] == ("tensor",):
        _, shape, stride, dtype = spec
        out = torch.empty_strided(shape, stride, dtype=dtype, device=device)
        if dtype.is_floating_point:
            out.normal_(0.0, 0.05)  # small values: logsumexp inputs stay finite
        else:
            out.zero_()
        return out
    if isinstance(spec, tuple):
        return tuple(_build(s, device) for s in spec)
    return spec


class KernelRecorder(TorchDispatchMode):
    """Counts each (kernel, argument layouts) the code under it dispatches, backward included."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[tuple[Any, Any, Any]] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:  # fmt: skip
        kwargs = kwargs or {}
        if func in KERNELS:
            key = (func, _spec(tuple(args)), _spec(tuple(sorted(kwargs.items()))))
            self.calls[key] += 1
        return func(*args, **kwargs)


def replay_seconds(calls: Counter, device: str) -> tuple[float, dict[str, float]]:
    """Wall seconds of every recorded kernel call run again back to back (inputs built once per
    distinct layout, outside the clock), and the seconds per kernel name."""
    per_kernel: dict[str, float] = {}
    total = 0.0
    for (func, args, kwargs), count in calls.items():
        built_args, built_kwargs = _build(args, device), dict(_build(kwargs, device))
        func(*built_args, **built_kwargs)  # warm: the kernel's first call allocates
        bench_llm.sync(device)
        start = time.perf_counter()
        for _ in range(count):
            func(*built_args, **built_kwargs)
        bench_llm.sync(device)
        seconds = time.perf_counter() - start
        name = func.__name__.split(".")[0]
        per_kernel[name] = per_kernel.get(name, 0.0) + seconds
        total += seconds
    return total, per_kernel


def peak_rate(device: str, dtype: torch.dtype, n: int = 4096) -> float:
    """GFLOP/s of one n x n x n product: the kernels' rate on a shape that feeds them well."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    a @ b
    bench_llm.sync(device)
    start = time.perf_counter()
    for _ in range(3):
        a @ b
    bench_llm.sync(device)
    return 3 * 2 * n**3 / (time.perf_counter() - start) / 1e9


def flops(fn: Any) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def recorded_replay(fn: Any, device: str) -> tuple[int, float, dict[str, float]]:
    """(kernel calls, replay seconds, seconds per kernel) of what ``fn()`` dispatches."""
    recorder = KernelRecorder()
    with recorder:
        fn()
    return (sum(recorder.calls.values()), *replay_seconds(recorder.calls, device))


def measure(name: str, make_plain: Any, ours: Any, device: str, peak: float
            ) -> dict[str, Any]:  # fmt: skip
    """Time both sides; record and replay each one's kernels; count both sides' FLOPs.
    ``make_plain()`` gives a fresh run of the plain loop (made outside the clock); ``ours()``
    returns its own clock's seconds (a training loop's) or anything else (then its wall)."""
    _, plain_s, _ = bench_llm.timed(make_plain(), device)
    own, ours_s, _ = bench_llm.timed(ours, device)
    ours_s = own if isinstance(own, float) else ours_s
    calls, replay_s, per_kernel = recorded_replay(make_plain(), device)
    our_calls, our_replay_s, _ = recorded_replay(ours, device)
    plain_flops, ours_flops = flops(make_plain()), flops(ours)
    ceiling = plain_s / replay_s
    # looser still: the least arithmetic either side does, all of it at the 4096^3 product's
    # rate (no kernel of these shapes reaches it; attention is not counted by torch's counter)
    at_peak = plain_s / (min(plain_flops, ours_flops) / (peak * 1e9))
    kernels = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(per_kernel.items(),
                                                             key=lambda kv: -kv[1]))
    print(f"{name}: plain loop {plain_s:.1f} s; its {calls:,} matrix products and attention "
          f"calls replayed alone {replay_s:.1f} s ({kernels}); ceiling on any rewrite's "
          f"speed-up: {ceiling:.2f}x")
    print(f"  miaudit {ours_s:.1f} s ({plain_s / ours_s:.2f}x); its {our_calls:,} kernel calls "
          f"replayed alone {our_replay_s:.1f} s. Outside the kernels: plain "
          f"{plain_s - replay_s:.1f} s, miaudit {ours_s - our_replay_s:.1f} s")
    print(f"  arithmetic: plain {plain_flops / 1e12:.2f} TFLOP at "
          f"{plain_flops / plain_s / 1e9:.0f} GFLOP/s; replayed at "
          f"{plain_flops / replay_s / 1e9:.0f} GFLOP/s; miaudit's own code "
          f"{ours_flops / 1e12:.2f} TFLOP ({ours_flops / plain_flops:.3f} of the plain loop's)")
    print(f"  the fewer of those FLOPs all at the 4096^3 product's rate: ceiling {at_peak:.2f}x "
          "(matrix products only)")
    return {"plain_seconds": plain_s, "replay_seconds": replay_s, "ceiling": ceiling,
            "miaudit_seconds": ours_s, "miaudit_replay_seconds": our_replay_s,
            "miaudit_kernel_calls": our_calls,
            "ceiling_at_peak_rate": at_peak,
            "replay_per_kernel": per_kernel, "kernel_calls": calls,
            "plain_flops": plain_flops, "miaudit_flops": ours_flops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--texts", choices=["spam", "synthetic"], default="spam")
    parser.add_argument("--n-query", type=int, default=256)
    parser.add_argument("--n-train", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-query", action="store_true")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--json", default=None, help="append one JSON line to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from miaudit.models.hf import HFCausalLM, encode_texts
    from miaudit.models.hf_lm import _cache_dir, _template, base_tokenizer
    from miaudit.models.pretrained import resolve_base_model
    from miaudit.signals.assemble import SignalSpec, lm_signals
    from miaudit.train import train_model
    from miaudit.train.recipe import Recipe

    print(f"load average before: {bench_llm.load()}; device {args.device}, {args.dtype}, "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    n = max(args.n_query, args.n_train)
    texts = (bench_llm.spam_texts(n) if args.texts == "spam"
             else bench_llm.synthetic_texts(n, args.seed))
    tokenizer, pad = base_tokenizer(args.base)
    template, _ = _template(resolve_base_model(args.base), _cache_dir())
    template.to(args.device)
    tokens, _ = encode_texts(texts, tokenizer, args.max_length, pad)
    keep = np.flatnonzero(tokens.lengths >= 2)
    texts, features = [texts[i] for i in keep], tokens.features()[keep]
    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
    rate = peak_rate(args.device, dtype)
    print(f"one 4096^3 product in {args.dtype}: {rate:.0f} GFLOP/s")
    record: dict[str, Any] = {"args": vars(args), "peak_gflops": rate,
                              "torch": torch.__version__, "load_before": os.getloadavg()}

    q_texts, q_features = texts[: args.n_query], features[: args.n_query]
    q_batches = bench_llm.plain_batches(q_texts, tokenizer, pad, args.max_length)
    module = HFCausalLM(template, pad).eval()
    precision = {} if args.dtype == "fp32" else {"precision": args.dtype}
    bench_llm.plain_query(template, q_batches[:1], args.device, args.dtype)  # warm
    lm_signals([module], q_features, np.arange(min(8, len(q_texts))), SignalSpec(),
               args.device, progress=False, **precision)  # fmt: skip
    record["query"] = None if args.skip_query else measure(
        "query", lambda: lambda: bench_llm.plain_query(template, q_batches, args.device,
                                                       args.dtype),
        lambda: lm_signals([module], q_features, np.arange(len(q_texts)), SignalSpec(),
                           args.device, progress=False, **precision),
        args.device, rate)

    t_texts, t_features = texts[: args.n_train], features[: args.n_train]
    t_batches = bench_llm.plain_batches(t_texts, tokenizer, pad, args.max_length)
    recipe = Recipe(architecture="hf-causal-lm",
                    arch_params={"base_model": args.base, "lora": {"r": bench_llm.LORA["r"]}},
                    optimizer="adam", lr=1e-3, epochs=1, batch_size=bench_llm.PLAIN_BATCH,
                    schedule="constant", precision=args.dtype)  # fmt: skip
    labels = np.zeros(len(t_features), dtype=np.int64)

    def plain_epoch() -> Any:  # a fresh adapter each time (made outside the clock)
        model, opt = bench_llm.plain_lora(template, args.device, args.seed)
        return lambda: bench_llm.plain_epoch(model, opt, t_batches, args.device, args.dtype)

    record["lora"] = None if args.skip_train else measure(
        "LoRA epoch", plain_epoch,
        lambda: train_model(recipe, t_features, labels, np.arange(len(t_texts)), args.seed,
                            args.device, progress=False).train_seconds,
        args.device, rate)
    bench_llm.finish(record, args.json)


if __name__ == "__main__":
    main()
