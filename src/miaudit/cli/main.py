"""Command line: `miaudit demo | run | attack | attacks | data list | data fetch`."""

from __future__ import annotations

import argparse
import logging
import pickle
import sys
from importlib import resources
from pathlib import Path

import yaml

from miaudit.cli import audit as audit_cli
from miaudit.cli import study as study_cli
from miaudit.cli.compute import add_compute_flags, compute_flags
from miaudit.errors import (
    SYSTEM_ERRNOS,
    MiauditError,
    WriteError,
    describe_os_error,
    os_error_number,
)

OVERWRITE_HELP = ("replace the run in the output folder even if another command or config "
                  "made it (refused otherwise; rerunning the same config needs no flag)")


def _demo_config_path() -> Path:
    return Path(str(resources.files("miaudit.experiments") / "configs" / "demo.yaml"))


def cmd_demo(args: argparse.Namespace) -> int:
    from miaudit.api import run

    data = yaml.safe_load(_demo_config_path().read_text(encoding="utf-8"))
    run(data, out=args.out, progress=not args.quiet, echo=True, overwrite=args.overwrite)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    compute = compute_flags(args)  # a misplaced --ray-address fails before the config loads
    from miaudit.api import run

    run(args.config, out=args.out, progress=not args.quiet, echo=True,
        overwrite=args.overwrite, compute=compute, device=args.device,
        cache_dir=args.cache_dir, data_dir=args.data_dir)
    return 0


def cmd_attack(args: argparse.Namespace) -> int:
    """:func:`miaudit.attack`, and its result written as a report into --out."""
    # only what scoring needs, and the report's modules (matplotlib) once the bank is gone
    from miaudit.api import attack
    from miaudit.attacks.registry import check_attack_params
    from miaudit.config import MetricsConfig, split_names
    from miaudit.records.run_dir import StagedRunDir

    try:
        params = yaml.safe_load(args.params) if args.params else {}
    except yaml.YAMLError as exc:
        raise MiauditError(f"--params is not valid YAML: {exc}") from exc
    if not isinstance(params, dict):
        raise MiauditError("--params must be a YAML/JSON mapping {attack: {param: value}}.")
    given = split_names(args.attacks) if args.attacks else None
    # in the flags' words, before the output folder is staged (miaudit.attack checks again)
    params = check_attack_params(params, "--params", selected=given, selected_where="--attacks")
    metrics = MetricsConfig()
    # recorded as a run records its config: the report reads the level of its CIs from it
    config = {"bank": str(Path(args.bank).resolve()), "target": args.target,
              "attacks": args.attacks, "params": params, "seed": args.seed,
              "metrics": metrics.to_dict()}
    # staged: a report replaces the previous one in --out whole (its stale files removed, the
    # bank being scored kept), and a failure leaves the previous one as it was; a folder
    # holding another run is refused here, before the bank is even read
    staged = StagedRunDir(args.out, keep=(args.bank,), command="attack",
                          name=f"{args.bank}, target {args.target}", config=config,
                          overwrite=args.overwrite)
    staged.check()
    # the bank is loaded, scored and let go inside: the report reads the scores only
    result = attack(str(args.bank), args.target, given, params, metrics, seed=args.seed)
    result.meta["config"] = config
    from miaudit.report import format_table, write_report

    with staged as stage:
        write_report(result, stage)
    print(format_table(result))
    # a bare bank records no dataset rows: its reports name bank positions (scores.csv `index`)
    print(f"\nwrote {Path(args.out) / 'scores.csv'} (index = bank position), "
          f"{Path(args.out) / 'metrics.json'} and {Path(args.out) / 'report.html'}")
    return 0


def cmd_attacks(args: argparse.Namespace) -> int:
    import textwrap

    from miaudit.attacks import AttackSpec, get_attack, list_attacks
    from miaudit.attacks.params import show

    def needs_text(spec: AttackSpec) -> str:
        needs = {k: v for k, v in vars(spec.needs).items() if v}
        return ", ".join(f"{k}={v}" for k, v in needs.items()) or "target only"

    def describe(spec: AttackSpec) -> str:
        """One attack in full: family, description, needs, and each parameter's type,
        valid values, default and meaning."""
        lines = [spec.name, f"  family:      {spec.family}",
                 f"  description: {spec.description}", f"  needs:       {needs_text(spec)}"]
        if not spec.params:
            return "\n".join([*lines, "  parameters:  none"])
        lines.append(f"  parameters:  set as attack_params: {{{spec.name}: {{NAME: VALUE}}}} "
                     "(miaudit attack: --params)")
        rows = [(p.name, p.type, p.bounds(), f"default {show(p.default)}") for p in spec.params]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        for param, row in zip(spec.params, rows, strict=True):
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            lines.append(f"    {'  '.join([*cells, row[3]])}")
            lines += textwrap.wrap(param.meaning, 96, initial_indent=" " * 8,
                                   subsequent_indent=" " * 8)
        return "\n".join(lines)

    if args.names:  # an unknown name is refused with the closest registered ones
        print("\n\n".join(describe(get_attack(name)) for name in args.names))
        return 0
    specs = list_attacks()
    # columns as wide as their longest entry, so every "needs:" lines up
    name_width = max((len(s.name) for s in specs), default=0)
    family_width = max((len(s.family) for s in specs), default=0)
    for spec in specs:
        print(f"{spec.name:{name_width}s} {spec.family:{family_width}s} "
              f"needs: {needs_text(spec)}\n    {spec.description}")
        if spec.params:  # compactly: their defaults (NAME in full)
            defaults = ", ".join(f"{p.name}={show(p.default)}" for p in spec.params)
            print("\n".join(textwrap.wrap(f"params: {defaults}", 96, initial_indent=" " * 4,
                                           subsequent_indent=" " * 12)))
    print("\nmiaudit attacks NAME: one attack in full, with each parameter's type, bounds, "
          "default and meaning.")
    return 0


def cmd_data_list(args: argparse.Namespace) -> int:
    from miaudit.data import list_datasets

    for info in list_datasets(args.data_dir):
        state = "present" if info.present else "absent: miaudit data fetch " + info.name
        print(f"{info.name:16s} {info.kind:8s} {state}\n    {info.description}")
        # what the loader does to the values: a model trained on other values audits wrongly
        for mode, words in info.preprocessing.items():
            default = " (default)" if mode == info.options.get("preprocessing") else ""
            print(f"    preprocessing {mode}{default}: {words}")
        for mode, why in info.refused.items():
            print(f"    preprocessing {mode}: not offered ({why})")
        accepted = ", ".join(f"{k}={v!r}" for k, v in info.options.items())
        print(f"    options: {accepted}")
    print("\nYour own .npz/.csv/.parquet files are fed as given (integer image pixels / 255 "
          "unless preprocessing: raw). Choose with --preprocessing standard|raw or "
          "data: {options: {preprocessing: raw}}.")
    return 0


def cmd_data_fetch(args: argparse.Namespace) -> int:
    from miaudit.data import fetch_dataset

    for name in args.names:
        path = fetch_dataset(name, args.data_dir, force=args.force)
        print(f"{name}: {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="miaudit", description="Membership inference audits of trained models."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="quick audit on built-in data (sklearn digits)")
    demo.add_argument("--out", help="run directory (default runs/demo)")
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    demo.set_defaults(fn=cmd_demo)

    run = sub.add_parser("run", help="run the audit described by a YAML config")
    run.add_argument("config", help="path to the run config (YAML)")
    run.add_argument("--out", help="run directory (default: the config's output or runs/NAME)")
    run.add_argument("--device", help="auto, cpu or cuda[:N] (default: the config's)")
    run.add_argument("--cache-dir", help="model cache (default: the config's, else "
                     "$MIAUDIT_CACHE_DIR or ~/.cache/miaudit/models)")
    run.add_argument("--data-dir", help="datasets folder (default: the config's, else "
                     "$MIAUDIT_DATA_DIR or ~/.cache/miaudit/data)")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    add_compute_flags(run)
    run.set_defaults(fn=cmd_run)

    attack = sub.add_parser("attack", help="score attacks on a bank.npz (no model needed)")
    attack.add_argument("bank", help="bank .npz: logits [M,N,Q,C], labels [N], membership [M,N]")
    attack.add_argument("--target", type=int, required=True, help="index of the target model")
    attack.add_argument("--attacks", help="comma-separated attack names (default: all that fit)")
    attack.add_argument(
        "--params", help="YAML mapping of attack parameters, e.g. '{rmia: {a: 0.5}}'"
    )
    attack.add_argument("--out", required=True, help="output folder")
    attack.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    attack.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    attack.set_defaults(fn=cmd_attack)

    attacks = sub.add_parser("attacks", help="list the attacks, what each needs and its "
                             "parameters (NAME: one attack in full)")
    attacks.add_argument("names", nargs="*", metavar="NAME",
                         help="attacks to describe in full: family, needs, and each "
                         "parameter's type, default, valid values and meaning")
    attacks.set_defaults(fn=cmd_attacks)

    data = sub.add_parser("data", help="datasets: list, fetch")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    dlist = data_sub.add_parser("list", help="registered datasets and whether present")
    dlist.add_argument("--data-dir", help="data folder (default $MIAUDIT_DATA_DIR or ~/.cache)")
    dlist.set_defaults(fn=cmd_data_list)
    fetch = data_sub.add_parser("fetch", help="obtain datasets into the data folder")
    fetch.add_argument("names", nargs="+", help="dataset names")
    fetch.add_argument("--data-dir", help="data folder (default $MIAUDIT_DATA_DIR or ~/.cache)")
    fetch.add_argument("--force", action="store_true", help="fetch again even if present")
    fetch.set_defaults(fn=cmd_data_fetch)
    audit_cli.register(sub)
    study_cli.register(sub)
    from miaudit.cli import cache as cache_cli  # argparse only: imports nothing heavy

    cache_cli.register(sub)
    return parser


def _carries_os_error(exc: BaseException) -> bool:
    """An error of a library that wraps an OS error in its own type (safetensors'
    ``SafetensorError``: "I/O error: No space left on device (os error 28)")."""
    return type(exc).__name__ == "SafetensorError" and os_error_number(exc) is not None


def _failing_path(exc: BaseException) -> str | None:
    """The file an OSError met, when the error does not name it (a ``write`` on a full disk
    names none): the target of the innermost atomic write (:mod:`miaudit.io`) or open file
    of the frames it came through, else None (the error's own filename, if any, is used)."""
    import io

    if getattr(exc, "filename", None) is not None:
        return None
    found, tb = None, exc.__traceback__
    while tb is not None:
        names = tb.tb_frame.f_locals
        if tb.tb_frame.f_globals.get("__name__") == "miaudit.io" and "path" in names:
            found = str(names["path"])
        else:
            files = [name for v in names.values()
                     if isinstance(v, io.IOBase) and isinstance(name := getattr(v, "name", None),
                                                                str)]
            found = files[-1] if files else found
        tb = tb.tb_next
    return found


def _cache_kept() -> str | None:
    """What the model cache holds of this command's training, from the process's ledger
    (None if this command trained nothing)."""
    loaded = sys.modules.get("miaudit.train.ledger")
    if loaded is None:
        return None
    ledger = loaded.training_ledger()
    if ledger.planned == 0:
        return None
    if ledger.stored == 0:
        return "no model of this command finished training and was stored in the model cache"
    if ledger.stored == ledger.planned:
        what = "the model" if ledger.planned == 1 else f"all {ledger.planned} models"
        return f"{what} this command trained {'is' if ledger.planned == 1 else 'are'} in the " \
               "model cache (a rerun reuses them)"
    one = ledger.stored == 1
    return (f"{ledger.stored} of the {ledger.planned} models this command set out to train "
            f"{'is' if one else 'are'} in the model cache (a rerun reuses "
            f"{'it' if one else 'them'} and trains the other {ledger.lost})")


def _kept(args: argparse.Namespace) -> str | None:
    """What a command that failed on a fault of the system left in place, in words."""
    if args.command == "study":
        return ("finished cells are saved and every model that finished training is cached; "
                "rerun the same command to resume")
    if args.command not in ("run", "demo", "audit", "attack"):
        return None
    parts = ["the output folder is replaced only when the command succeeds: its previous run, "
             "if any, is as it was (the failed run's staging folder is discarded)"]
    cache = _cache_kept() if args.command != "attack" else None
    return "; ".join([*parts, cache] if cache else parts)


def _system_error(args: argparse.Namespace, exc: BaseException) -> int:
    """A fault met on the way (a full disk, a read-only folder, an unreachable host, no
    memory left) in words: what happened, what to do, what was kept. Exit 1 for a fault of the
    system (:data:`~miaudit.errors.SYSTEM_ERRNOS`, memory), 2 for a path that cannot be used
    (read-only, forbidden, missing: choose another)."""
    if isinstance(exc, MemoryError):
        what = f"out of memory{(': ' + str(exc)) if str(exc) else ''}"
        todo = ("lower what the command holds at once (dataset.max_length, signals.batch_size, "
                "recipe.batch_size, fewer models or queries) or run it on a machine with more "
                "memory")
        code = 1
    else:
        what, todo = describe_os_error(exc, _failing_path(exc))
        number = os_error_number(exc)
        code = 1 if number is None or number in SYSTEM_ERRNOS else 2
    print(f"miaudit: error: {what}.\n  to fix: {todo}.", file=sys.stderr)
    kept = _kept(args)
    if kept:
        print(f"  kept: {kept}.", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    from miaudit.runtime.progress import progress_switch

    # count only this command's models (main may run twice in one process); the ledger lives
    # in the train package, loaded only by the commands that train (or on Ctrl-C, below)
    loaded = sys.modules.get("miaudit.train.ledger")
    if loaded is not None:
        loaded.training_ledger().reset()
    # --quiet turns bars off process-wide: the statistics pass, scorers and bootstrap have no
    # progress argument of their own.
    try:
        with progress_switch(not getattr(args, "quiet", False)):
            result: int = args.fn(args)
            return result
    except MiauditError as exc:
        print(f"miaudit: error: {exc}", file=sys.stderr)
        code = int(getattr(exc, "exit_code", 2))
        if isinstance(exc, WriteError) or code != 2:  # a fault: say what the command kept
            kept = _kept(args)
            if kept:
                print(f"  kept: {kept}.", file=sys.stderr)
        return code
    except (OSError, MemoryError) as exc:
        return _system_error(args, exc)
    except pickle.UnpicklingError as exc:  # a weights-only load refused a pickle: nothing ran
        print(f"miaudit: error: a file given as weights holds more than tensors, and its "
              f"weights-only load refused it (nothing in it ran): {exc}".rstrip() + "\n"
              "  to fix: give weights saved as safetensors (save_pretrained's default, or "
              "safetensors.torch.save_file) or a plain torch state dict.", file=sys.stderr)
        return 2
    except Exception as exc:
        if _carries_os_error(exc):  # safetensors' own error type, naming the OS error
            return _system_error(args, exc)
        raise
    except KeyboardInterrupt:
        if args.command == "study":  # cells (and their models) finish in worker processes
            message = ("interrupted: finished cells are saved and every model that finished "
                       "training is cached; rerun the same command to resume")
        else:
            from miaudit.train.ledger import training_ledger

            message = training_ledger().interrupted_message()
        print(f"miaudit: {message}.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
