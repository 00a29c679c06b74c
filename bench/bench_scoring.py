"""Scoring speed: every registered bank attack on a large synthetic bank, in one process.

Not run in CI. Usage (from the repository root):

    .venv/bin/python bench/bench_scoring.py [--samples 100000] [--models 64] [--no-scorers]
        [--threads T] [--target T] [--json FILE]

Builds a bank of N samples x M models x Q=2 queries x C=10 classes (float32 logits; members get
a higher true-class logit; balanced design: each non-population sample IN for exactly M/2
models; 10% population), then for target 0 fills the statistics cache (one pass over all
models' logits), runs every registered attack whose needs the bank meets (skipping, and
naming, those that need a missing channel), and reports per-attack wall and CPU seconds, the
total, the load average before and after, and the peak RSS against the bank's size. The budget
(every bank attack in <= 5 s, memory <= 2x the bank) is judged on the peak RSS above the
interpreter's after its imports: what scoring
this bank costs, the bank included. `--threads T` sets torch's threads, which is also the
number of worker threads of the statistics pass. Attacks that train a scorer on shadow models
(RAPID, Shokri, ...) are timed and reported separately; `--no-scorers` skips them. `--json`
appends one line with the run's figures to FILE (for runs/ summaries).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
import tracemalloc

import numpy as np
import torch

from miaudit.attacks import TargetView, list_attacks, run_attack
from miaudit.errors import AttackError
from miaudit.signals import SignalBank

MiB = 2**20


def peak_rss() -> int:
    """Peak resident set size of this process so far, in bytes (Linux reports KiB)."""
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def synthetic_bank(
    n: int, m: int, q: int = 2, c: int = 10, population: float = 0.1, seed: int = 0
) -> SignalBank:
    """A balanced-design bank, generated in place a model at a time (no full-size temporary)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, size=n)
    is_pop = np.zeros(n, dtype=bool)
    is_pop[rng.permutation(n)[: int(population * n)]] = True
    membership = np.zeros((m, n), dtype=bool)
    for start in range(0, n, 10_000):  # each design sample IN for exactly m/2 models
        stop = min(n, start + 10_000)
        ranks = rng.random((m, stop - start)).argsort(axis=0).argsort(axis=0)
        membership[:, start:stop] = ranks < m // 2
    membership[:, is_pop] = False
    difficulty = rng.normal(2.0, 1.5, size=n).astype(np.float32)  # per-sample easiness
    logits = np.empty((m, n, q, c), dtype=np.float32)
    rows = np.arange(n)
    for k in range(m):
        rng.standard_normal(out=logits[k], dtype=np.float32)
        bonus = difficulty + np.where(membership[k], 1.0, 0.0).astype(np.float32)
        logits[k, rows, :, labels] += bonus[:, None]
    return SignalBank(logits=logits, labels=labels, membership=membership, population=is_pop)


def is_scorer(spec) -> bool:
    return spec.needs.shadows > 0


def time_scorer_training() -> list[float]:
    """Wrap the shared scorer trainer so each call's wall seconds land in the returned list."""
    from miaudit.attacks import shadow, shokri

    seconds: list[float] = []
    train = shadow.train_scorer

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return train(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - t0)

    shadow.train_scorer = shokri.train_scorer = timed  # both modules bind the name
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--models", type=int, default=64)
    parser.add_argument("--target", type=int, default=0)
    parser.add_argument("--no-scorers", action="store_true", help="skip scorer-based attacks")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--json", default=None, help="append the figures to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    rss_start = peak_rss()
    t0 = time.perf_counter()
    bank = synthetic_bank(args.samples, args.models)
    build = time.perf_counter() - t0
    bank_bytes = bank.logits.nbytes + bank.membership.nbytes + bank.labels.nbytes
    rss_built = peak_rss()
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), {platform.machine()}"
    )
    print(
        f"bank: N={bank.n_samples} M={bank.n_models} Q={bank.n_queries} C={bank.n_classes}, "
        f"{bank_bytes / MiB:.0f} MiB (logits {bank.logits.nbytes / MiB:.0f} MiB); "
        f"built in {build:.1f}s; peak RSS before scoring {rss_built / MiB:.0f} MiB "
        f"(at start {rss_start / MiB:.0f} MiB)"
    )

    view = TargetView.of(bank, args.target)
    load_before = os.getloadavg()
    timings: dict[str, float] = {}
    cpu: dict[str, float] = {}  # process CPU seconds (all threads): less sensitive to load
    extra: dict[str, float] = {}  # peak bytes allocated (numpy, via tracemalloc) beyond the start
    tracemalloc.start()
    # One pass gives loss, phi and log_confidence for every model (what the reference attacks
    # share); target-only statistics are computed by the attacks that need them.
    c0, t0 = time.process_time(), time.perf_counter()
    bank.statistics.get("loss")
    pass_name = "(statistics: loss, phi, log_confidence)"
    timings[pass_name], cpu[pass_name] = time.perf_counter() - t0, time.process_time() - c0
    cache_bytes = tracemalloc.get_traced_memory()[0]

    skipped, scorers = [], []
    for spec in list_attacks():
        if is_scorer(spec):
            scorers.append(spec)
            continue
        try:
            spec.needs.check(view, spec.name)
        except AttackError as exc:
            skipped.append((spec.name, str(exc)))
            continue
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        c0, t0 = time.process_time(), time.perf_counter()
        run = run_attack(spec.name, view)
        timings[spec.name], cpu[spec.name] = time.perf_counter() - t0, time.process_time() - c0
        extra[spec.name] = tracemalloc.get_traced_memory()[1] - base
        assert run.scores.shape == (bank.n_samples,)
    tracemalloc.stop()
    load_after = os.getloadavg()
    fill = timings[pass_name]
    total = sum(timings.values())
    rss_bank_attacks = peak_rss()
    above = (rss_bank_attacks - rss_start) / bank_bytes

    print(f"\n{'attack':32s} seconds  CPU s  peak extra MiB")
    for name, sec in timings.items():
        more = f"{extra[name] / MiB:14.0f}" if name in extra else ""
        print(f"{name:32s} {sec:7.3f} {cpu[name]:6.3f}{more}")
    print(
        f"{'statistics cache fill':32s} {fill:7.3f} {cpu[pass_name]:6.3f}  (cache holds "
        f"{cache_bytes / MiB:.0f} MiB; {torch.get_num_threads()} worker thread(s))"
    )
    print(f"{'attacks':32s} {total - fill:7.3f} {sum(cpu.values()) - cpu[pass_name]:6.3f}")
    print(f"{'TOTAL (bank attacks + cache)':32s} {total:7.3f} {sum(cpu.values()):6.3f}")
    print(
        f"peak RSS {rss_bank_attacks / MiB:.0f} MiB = "
        f"{rss_bank_attacks / bank_bytes:.2f} x bank ({bank_bytes / MiB:.0f} MiB); "
        f"{above:.2f} x bank above the interpreter's "
        f"{rss_start / MiB:.0f} MiB after imports"
    )
    print(
        "load average (1, 5, 15 min): before "
        + " ".join(f"{v:.2f}" for v in load_before)
        + ", after "
        + " ".join(f"{v:.2f}" for v in load_after)
    )
    for name, why in skipped:
        print(f"skipped {name}: {why}")
    if args.json:
        record = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "threads": torch.get_num_threads(),
            "pass_s": fill,
            "attacks_s": total - fill,
            "total_s": total,
            "cpu_s": sum(cpu.values()),
            "peak_rss_mib": rss_bank_attacks / MiB,
            "start_rss_mib": rss_start / MiB,
            "bank_mib": bank_bytes / MiB,
            "ratio_above_interpreter": above,
            "ratio_whole_process": rss_bank_attacks / bank_bytes,
            "load_before": load_before,
            "load_after": load_after,
            "attacks": timings,
            "attacks_cpu": cpu,
        }
        with open(args.json, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    if scorers and not args.no_scorers:
        fit_seconds = time_scorer_training()
        print(
            f"\n{'scorer-based attack':32s} {'total s':>8s} {'fit s':>8s} {'rest s':>8s}"
            "   (fit: training the scorer on capped shadow rows, a fixed cost independent of N;"
            " rest: shadow features, scoring the target)"
        )
        for spec in scorers:
            try:
                fit_seconds.clear()
                t0 = time.perf_counter()
                run_attack(spec.name, view)
                total = time.perf_counter() - t0
                fit = sum(fit_seconds)
                print(f"{spec.name:32s} {total:8.3f} {fit:8.3f} {total - fit:8.3f}")
            except AttackError as exc:
                print(f"{spec.name:32s} skipped: {exc}")
        print(f"peak RSS after scorers {peak_rss() / MiB:.0f} MiB")
    elif scorers:
        print("\nscorer-based attacks not run: " + ", ".join(s.name for s in scorers))


if __name__ == "__main__":
    main()
