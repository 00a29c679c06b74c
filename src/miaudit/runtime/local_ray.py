"""Ray instances and clusters started on this machine, reachable from it only.

On Linux, Ray maps a 127.0.0.1 node address to the machine's routable one and its head listens
on every interface, unless clusters are off (Ray's switch for macOS and Windows): measured with
`ss -ltnp`, ``ray.init(_node_ip_address="127.0.0.1")`` alone listened on ``*:port``. Every
instance miaudit starts itself (a run's or a study's local instance, the tests' clusters, the
benchmarks') goes through :func:`loopback_only`; only a user-given address reaches another
machine. Ray is imported by the caller (it is an optional extra).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

LOCAL_RAY_ADDRESS = "127.0.0.1"  # where an instance started here binds
_RAY_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def loopback_only(ray: Any) -> Iterator[None]:
    """Start Ray processes reachable from this machine only: clusters off for the processes
    started inside (the environment) and for this one (Ray reads the switch once, at import,
    into ``ray._private.ray_constants``), both restored after."""
    from ray._private import ray_constants

    before_env, before = os.environ.get(_RAY_CLUSTER_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[_RAY_CLUSTER_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before
        if before_env is None:
            os.environ.pop(_RAY_CLUSTER_ENV, None)
        else:
            os.environ[_RAY_CLUSTER_ENV] = before_env


@contextlib.contextmanager
def loopback_cluster(ray: Any, head_cpus: int = 1, worker_cpus: Sequence[int] = (1,)
                     ) -> Iterator[Any]:  # fmt: skip
    """A multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head with
    ``head_cpus`` CPUs and one worker node per entry of ``worker_cpus``), every node bound to
    127.0.0.1; shut down (with any driver connection) on exit. For tests and benchmarks."""
    from ray import cluster_utils

    with loopback_only(ray):
        cluster = cluster_utils.Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": head_cpus, "node_ip_address": LOCAL_RAY_ADDRESS,
                            "include_dashboard": False},
        )  # fmt: skip
        for cpus in worker_cpus:
            cluster.add_node(num_cpus=cpus, node_ip_address=LOCAL_RAY_ADDRESS)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
