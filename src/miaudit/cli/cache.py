"""`miaudit cache info | prune`: what the model cache holds, and removing what this code can
no longer reach (:mod:`miaudit.cli.cache_admin`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

_DIR_HELP = "model cache folder (default $MIAUDIT_CACHE_DIR or ~/.cache/miaudit/models)"
_VERIFY_HELP = "also hash every weights file against its metadata (reads the whole cache)"


def _root(args: argparse.Namespace) -> Path:
    if args.cache_dir:
        return Path(args.cache_dir)
    from miaudit.train.model_cache import default_cache_dir

    return default_cache_dir()


def cmd_cache_info(args: argparse.Namespace) -> int:
    from miaudit.cli.cache_admin import describe, scan

    print("\n".join(describe(scan(_root(args), verify=args.verify))))
    return 0


def cmd_cache_prune(args: argparse.Namespace) -> int:
    from miaudit.cli.cache_admin import describe_prune, prune, scan

    inventory = scan(_root(args), verify=args.verify)
    removed = prune(inventory, dry_run=args.dry_run)
    print("\n".join(describe_prune(inventory, removed, args.dry_run)))
    return 1 if removed.failed else 0


def register(subparsers: Any) -> None:
    """Add the `cache` command to the main parser's subparsers."""
    cache = subparsers.add_parser(
        "cache", help="the model cache: info, prune",
        description="Every cached model is keyed by the code that trained it (a digest of the "
        "training code and miaudit's version): entries of other code are stale, never read "
        "again. `info` shows what the cache holds; `prune` removes the stale entries and the "
        "files killed writes left.",
    )
    sub = cache.add_subparsers(dest="cache_command", required=True)
    info = sub.add_parser("info", help="entries, sizes, reachable and stale, by code version")
    info.add_argument("--cache-dir", help=_DIR_HELP)
    info.add_argument("--verify", action="store_true", help=_VERIFY_HELP)
    info.set_defaults(fn=cmd_cache_info)
    prune = sub.add_parser("prune", help="remove stale entries and orphan files")
    prune.add_argument("--cache-dir", help=_DIR_HELP)
    prune.add_argument("--dry-run", action="store_true",
                       help="remove nothing; list what would be removed")
    prune.add_argument("--verify", action="store_true",
                       help=_VERIFY_HELP + "; entries that fail are corrupt, removed")
    prune.set_defaults(fn=cmd_cache_prune)
