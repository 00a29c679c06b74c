"""`--executor`, `--ray-address` and `--ray-timeout` of `miaudit run` and `miaudit audit`:
where the run's models train, over the config's ``compute`` section (argparse only: imports
nothing heavy)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from miaudit.errors import ConfigError

EXECUTOR_HELP = ("where the models train: local (this machine) or ray (a Ray cluster: the one "
                 "--ray-address or the config's compute.address names, else a local instance "
                 "on loopback); default: the config's compute.executor (local). On CPU the "
                 "weights and scores are the same either way")
ADDRESS_HELP = ("with --executor ray: the Ray cluster to join (auto on one of its machines, or "
                "ray://HOST:10001); default: start a local Ray instance on loopback")


TIMEOUT_HELP = ("with --executor ray and an address: seconds to wait for the cluster to answer "
                "before giving up with a message naming it (default: the config's "
                "compute.connect_timeout_s, 30)")


def _seconds(text: str) -> float:
    """``--ray-timeout``: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return value


def add_compute_flags(parser: argparse.ArgumentParser | Any) -> None:
    """Add ``--executor``, ``--ray-address`` and ``--ray-timeout`` to a subcommand's parser
    (or group)."""
    parser.add_argument("--executor", choices=("local", "ray"), help=EXECUTOR_HELP)
    parser.add_argument("--ray-address", metavar="ADDR", help=ADDRESS_HELP)
    parser.add_argument("--ray-timeout", metavar="SECONDS", type=_seconds, help=TIMEOUT_HELP)


def compute_flags(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``compute`` keys the flags set, laid over the config's section (its other keys,
    e.g. ``gpus_per_model``, stay): None when neither is given. ``--executor local`` clears
    the config's address, ``--executor ray`` alone keeps it (none: a local instance);
    ``--ray-address`` needs ``--executor ray``."""
    if args.ray_address and args.executor != "ray":
        raise ConfigError("--ray-address only applies to --executor ray.")
    timeout = getattr(args, "ray_timeout", None)
    if timeout is not None and args.executor == "local":
        raise ConfigError("--ray-timeout only applies to --executor ray.")
    extra = {"connect_timeout_s": timeout} if timeout is not None else {}
    if args.executor is None:
        return extra or None  # the config's executor and address, waited for that long
    if args.executor == "local":
        return {"executor": "local", "address": None}
    return {"executor": "ray", **({"address": args.ray_address} if args.ray_address else {}),
            **extra}
