"""`--executor` and `--ray-address` of `miaudit run` and `miaudit audit`: where the run's
models train, over the config's ``compute`` section (argparse only: imports nothing heavy)."""

from __future__ import annotations

import argparse
from typing import Any

from miaudit.errors import ConfigError

EXECUTOR_HELP = ("where the models train: local (this machine) or ray (a Ray cluster: the one "
                 "--ray-address or the config's compute.address names, else a local instance "
                 "on loopback); default: the config's compute.executor (local). On CPU the "
                 "weights and scores are the same either way")
ADDRESS_HELP = ("with --executor ray: the Ray cluster to join (auto on one of its machines, or "
                "ray://HOST:10001); default: start a local Ray instance on loopback")


def add_compute_flags(parser: argparse.ArgumentParser | Any) -> None:
    """Add ``--executor`` and ``--ray-address`` to a subcommand's parser (or group)."""
    parser.add_argument("--executor", choices=("local", "ray"), help=EXECUTOR_HELP)
    parser.add_argument("--ray-address", metavar="ADDR", help=ADDRESS_HELP)


def compute_flags(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``compute`` keys the flags set, laid over the config's section (its other keys,
    e.g. ``gpus_per_model``, stay): None when neither is given. ``--executor local`` clears
    the config's address, ``--executor ray`` alone keeps it (none: a local instance);
    ``--ray-address`` needs ``--executor ray``."""
    if args.ray_address and args.executor != "ray":
        raise ConfigError("--ray-address only applies to --executor ray.")
    if args.executor is None:
        return None
    if args.executor == "local":
        return {"executor": "local", "address": None}
    return {"executor": "ray", **({"address": args.ray_address} if args.ray_address else {})}
