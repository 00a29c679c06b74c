"""`miaudit attack` end to end: wall and peak RSS of the whole command, and a profile.

Not run in CI. Usage (from the repository root):

    .venv/bin/python bench/bench_attack_cli.py [--samples 100000] [--models 64]
        [--bank /tmp/miaudit-bench/bank.npz] [--repeat 3] [--profile]
        [--phases] [--src /tmp/wt-head/src] [--json FILE]

Builds (once; kept at `--bank`) the scoring benchmark's bank, N samples x M models x Q=2
queries x C=10 classes, with `bench_scoring.synthetic_bank` (same seed, same design), saved
uncompressed with `SignalBank.save`. Then runs, `--repeat` times, each in a fresh process,

    /usr/bin/time -v python .venv/bin/miaudit attack BANK --target 0 --attacks <the 16> --out DIR

with the 16 bank attacks that `bench_scoring.py --no-scorers` scores (every registered attack
that trains no scorer and whose needs the bank meets, as of commit ccca671), and prints the
wall time and the peak RSS of the whole process (`/usr/bin/time`'s "Maximum resident set size")
with `uptime` before and after each run. `--src DIR` runs another checkout's code
(PYTHONPATH=DIR, e.g. the untouched HEAD) with this interpreter. `--profile` adds one run under
cProfile and prints the phases: imports (cumulative time of the outermost `import` calls), bank
load, statistics pass and attacks, metrics with their CIs, model accuracies, ε bounds, scores.csv,
figures, HTML, writing. Profiled times are inflated by cProfile (most in Python-heavy code:
matplotlib); a phase's time includes the imports first triggered inside it. `--phases` adds one
run timed by wall clock instead (no profiler): the imports first, then each phase's functions
wrapped with a timer (scores.csv runs on its own thread beside the figures: its time overlaps).
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20

# phase -> (module path suffix, function name) of the functions whose cumulative time it is
PHASES = {
    "imports": [("<frozen importlib._bootstrap>", "_find_and_load")],
    "bank load": [("signals/bank.py", "load")],
    "statistics + attacks": [("attacks/registry.py", "run_attack")],
    "metrics + CIs": [("miaudit/metrics.py", "evaluate")],
    "  of which CIs": [("miaudit/metrics.py", "_bootstrap"),
                       ("miaudit/metrics.py", "_auc_interval"),
                       ("miaudit/metrics.py", "_bootstrap_tpr")],
    "model accuracies": [("pipeline/evaluate.py", "model_accuracies")],
    "ε bounds": [("privacy/attack_bounds.py", "bounds")],
    "figures": [("report/plots.py", "roc_png"), ("report/plots.py", "histograms_png")],
    "scores.csv": [("report/write.py", "scores_csv")],
    "HTML": [("report/html.py", "render_html")],
    "table": [("report/table.py", "format_table")],
    "write_report": [("report/write.py", "write_report")],
    "whole command": [("miaudit/cli/main.py", "cmd_attack")],
}


# The bank attacks `bench_scoring.py --no-scorers` scores (every registered attack that trains
# no scorer and whose needs this bank meets) as of commit ccca671: fixed, so that the before
# and after figures run the same attacks whatever is registered later (`--attacks` to change).
BANK_ATTACKS = (
    "attack-r,augmentation-consistency,calibrated-confidence,calibrated-loss,confidence,"
    "correctness,entropy,lira-offline,lira-offline-fixed-variance,lira-offline-two-sided,"
    "lira-online,lira-online-fixed-variance,loss,modified-entropy,rmia,rmia-online"
)


def build_bank(path: Path, n: int, m: int) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_scoring import synthetic_bank

    t0 = time.perf_counter()
    bank = synthetic_bank(n, m)
    path.parent.mkdir(parents=True, exist_ok=True)
    bank.save(path)
    print(f"built {path} ({path.stat().st_size / MiB:.0f} MiB) in "
          f"{time.perf_counter() - t0:.1f} s")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def command(args: argparse.Namespace, names: list[str], out: str) -> list[str]:
    entry = str(Path(sys.executable).parent / "miaudit")  # the console script of this venv
    return [sys.executable, entry, "attack", str(args.bank), "--target", "0",
            "--attacks", ",".join(names), "--out", out]


def environment(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    if args.src:
        env["PYTHONPATH"] = str(Path(args.src).resolve())
    return env


def timed_run(args: argparse.Namespace, names: list[str]) -> dict[str, object]:
    """One fresh process under /usr/bin/time -v: wall seconds, peak RSS, load around it."""
    with tempfile.TemporaryDirectory() as tmp:
        before = uptime()
        proc = subprocess.run(["/usr/bin/time", "-v", *command(args, names, tmp + "/out")],
                              capture_output=True, text=True, env=environment(args))
        after = uptime()
    if proc.returncode != 0:
        sys.exit(f"miaudit attack failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", proc.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    cpu = [re.search(rf"{k} time \(seconds\): ([\d.]+)", proc.stderr) for k in ("User", "System")]
    h, mnt, sec = wall.groups()
    return {
        "wall_s": int(h or 0) * 3600 + int(mnt) * 60 + float(sec),
        "peak_rss_mib": int(rss.group(1)) * 1024 / MiB,
        "cpu_s": sum(float(c.group(1)) for c in cpu),
        "load_before": before.split("load average:")[-1].strip(),
        "load_after": after.split("load average:")[-1].strip(),
    }


def profile_run(args: argparse.Namespace, names: list[str]) -> dict[str, float]:
    """One run under cProfile; cumulative seconds of each phase's functions."""
    with tempfile.TemporaryDirectory() as tmp:
        prof = tmp + "/attack.prof"
        cmd = command(args, names, tmp + "/out")
        cmd[1:1] = ["-m", "cProfile", "-o", prof]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=environment(args))
        if proc.returncode != 0:
            sys.exit(f"profiled run failed:\n{proc.stderr[-3000:]}")
        stats = pstats.Stats(prof).stats  # {(file, line, func): (cc, nc, tt, ct, callers)}
    phases = {}
    for phase, funcs in PHASES.items():
        total = 0.0
        for suffix, func in funcs:
            for (file, _, name), (_, _, _, ct, _) in stats.items():
                if name == func and file.replace("\\", "/").endswith(suffix):
                    total += ct
        phases[phase] = total
    return phases


# Run in a fresh process by `--phases`: imports timed first, then each phase's functions wrapped
# with a wall-clock timer (those missing from older code are skipped), then the command.
PHASES_SCRIPT = r"""
import contextlib, importlib, io, sys, time
t0 = time.perf_counter()
for name in ("miaudit.cli.main", "miaudit.attacks", "miaudit.io", "miaudit.pipeline.evaluate",
             "miaudit.signals", "miaudit.report", "miaudit.report.write", "miaudit.metrics",
             "miaudit.privacy.attack_bounds"):
    importlib.import_module(name)
seconds = {"imports": time.perf_counter() - t0}
mod = sys.modules

def wrap(owner, name, phase):
    raw = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    if raw is None:
        return
    cls_method = isinstance(raw, classmethod)
    func = raw.__func__ if cls_method else raw
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            seconds[phase] = seconds.get(phase, 0.0) + time.perf_counter() - start
    setattr(owner, name, classmethod(timed) if cls_method else timed)

ev, wr = mod["miaudit.pipeline.evaluate"], mod["miaudit.report.write"]
ep = mod["miaudit.privacy.attack_bounds"]
wrap(mod["miaudit.signals"].SignalBank, "load", "bank load")
wrap(ev, "run_attack", "statistics + attacks")
wrap(ev, "attack_threshold", "thresholds")
wrap(ev.metrics, "evaluate", "metrics + CIs")
wrap(ev, "model_accuracies", "model accuracies")
wrap(ep.EpsilonPlan, "of", "ε plan")
wrap(ep.EpsilonPlan, "bounds", "ε bounds")
wrap(wr, "scores_csv", "scores.csv")
wrap(wr, "roc_png", "roc.png")
wrap(wr, "histograms_png", "histograms.png")
wrap(wr, "render_html", "HTML")
wrap(mod["miaudit.report"], "format_table", "table")
start = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    mod["miaudit.cli.main"].main(sys.argv[1:])
seconds["command (after imports)"] = time.perf_counter() - start
seconds["whole"] = time.perf_counter() - t0
for phase, value in seconds.items():
    print(f"{phase}\t{value}")
"""


def phases_run(args: argparse.Namespace, names: list[str]) -> dict[str, float]:
    """One run timed by wall clock, phase by phase (`PHASES_SCRIPT`): seconds per phase."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = command(args, names, tmp + "/out")
        cmd[1:2] = ["-c", PHASES_SCRIPT]  # the script instead of the console entry point
        proc = subprocess.run(cmd, capture_output=True, text=True, env=environment(args))
    if proc.returncode != 0:
        sys.exit(f"phases run failed:\n{proc.stderr[-3000:]}")
    return {k: float(v) for k, v in (line.split("\t") for line in proc.stdout.splitlines())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--models", type=int, default=64)
    parser.add_argument("--bank", type=Path, default=Path("/tmp/miaudit-bench/bank.npz"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="one more run under cProfile")
    parser.add_argument("--phases", action="store_true",
                        help="one more run, each phase timed by wall clock (no profiler)")
    parser.add_argument("--src", help="run this source tree's miaudit (PYTHONPATH)")
    parser.add_argument("--json", help="append the figures to this file")
    parser.add_argument("--attacks", default=BANK_ATTACKS, help="comma-separated attack names")
    args = parser.parse_args(argv)

    if not args.bank.exists():
        build_bank(args.bank, args.samples, args.models)
    names = args.attacks.split(",")
    print("command:", " ".join(command(args, names, "OUT")),
          f"(PYTHONPATH={args.src})" if args.src else "")
    runs = []
    for i in range(args.repeat):
        run = timed_run(args, names)
        runs.append(run)
        print(f"run {i + 1}: wall {run['wall_s']:.2f} s, peak RSS {run['peak_rss_mib']:.0f} MiB,"
              f" CPU {run['cpu_s']:.2f} s; load before {run['load_before']}, "
              f"after {run['load_after']}")
    phases = profile_run(args, names) if args.profile else {}
    for phase, seconds in phases.items():
        print(f"  {phase:24s} {seconds:6.2f} s (cProfile)")
    wall = {}
    if args.phases:
        before = uptime()
        wall = phases_run(args, names)
        print(f"phases (wall clock; load before {before.split('load average:')[-1].strip()}):")
    for phase, seconds in wall.items():
        print(f"  {phase:24s} {seconds:6.2f} s")
    if args.json:
        record = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "src": args.src,
                  "attacks": names, "runs": runs, "profile": phases, "phases": wall}
        with open(args.json, "a") as handle:
            handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
