"""`miaudit study NAME | list`: run a seed study's sweep (resumable) and write its summary."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_study(args: argparse.Namespace) -> int:
    from miaudit.studies.executors import get_executor
    from miaudit.studies.registry import get_study, list_studies, run_study
    from miaudit.studies.sweep import StudyError

    if args.name == "list":
        for study in list_studies():
            print(f"{study.name:16s} {study.description}")
        return 0
    get_study(args.name)  # unknown names fail before anything starts
    if args.ray_address and args.executor != "ray":
        raise StudyError("--ray-address only applies to --executor ray.")
    executor = get_executor(args.executor, args.workers, address=args.ray_address)
    if not args.quiet:  # before any cell: how long the cells still to run should take here
        from miaudit.studies.estimate import estimate_study

        estimate = estimate_study(args.name, args.size, args.config, args.out)
        if estimate is not None:
            if args.executor == "ray":
                estimate.notes.append("measured on this machine; with --executor ray the "
                                      "cells run on the cluster's devices.")
            print(estimate.describe(), flush=True)
    table, study_dir = run_study(args.name, args.size, args.config, executor, args.out,
                                 progress=not args.quiet)
    print(f"{len(table)} result rows: {study_dir / 'results.csv'}; summary in {study_dir}")
    return 0


def register(subparsers: Any) -> None:
    """Add the `study` command to the main parser's subparsers."""
    study = subparsers.add_parser(
        "study", help="run a seed study's sweep (resumable); `miaudit study list`",
        description="Run a study: every cell's results are saved as it finishes, so a rerun "
        "of the same command resumes where a killed one stopped.",
    )
    study.add_argument("name", help="study name, or `list` to list the studies")
    study.add_argument("--size", choices=("cpu", "paper"), default="cpu",
                       help="cpu (default: finishes on a laptop-class CPU) or paper (GPU-sized)")
    study.add_argument("--config", help="YAML file overriding keys of the size's config")
    study.add_argument("--executor", choices=("local", "serial", "ray"), default="local",
                       help="where the study's cells run: local worker processes (default), "
                       "serial (in-process) or ray (the cells fan out as Ray tasks, and each "
                       "cell's models train in its worker, as in a local worker process)")
    study.add_argument("--ray-address", metavar="ADDR",
                       help="with --executor ray: the Ray cluster to join (e.g. auto, "
                       "ray://host:10001); default: start a local Ray instance on loopback")
    study.add_argument("--workers", type=int,
                       help="worker processes (local) or CPUs of a local Ray instance "
                       "(default: the usable cores)")
    study.add_argument("--out", help="study folder (default runs/studies/NAME-SIZE)")
    study.add_argument("--quiet", action="store_true",
                       help="no progress output and no time estimate (a study that declares "
                       "its cells' runs, e.g. rapid, otherwise times a few training steps on "
                       "this device and prints the expected time before the first cell)")
    study.set_defaults(fn=cmd_study)
