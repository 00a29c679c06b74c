"""An unreachable or refused Ray address (``--ray-address`` / ``compute.address``) is refused
within ``compute.connect_timeout_s`` (``--ray-timeout``) with the address and the fix, before
anything trains; Ray itself retries such an address for minutes. No Ray cluster is started
here: the refused address is a closed port on 127.0.0.1, the silent one a planted timeout, and
the only socket bound listens on 127.0.0.1."""

from __future__ import annotations

import argparse
import math
import socket
import time

import pytest

from miaudit.cli.compute import compute_flags
from miaudit.cli.main import build_parser, main
from miaudit.config import ComputeConfig, config_from_dict
from miaudit.errors import ClusterConnectionError, ConfigError
from miaudit.train import cluster
from miaudit.train.cluster import Compute, join_cluster


class StubRay:
    """Records ``ray.init`` calls; ``fail``: what init raises."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.calls: list[dict] = []
        self.fail = fail

    def init(self, **kwargs):
        self.calls.append(kwargs)
        if self.fail is not None:
            raise self.fail


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def listening():
    """A port on 127.0.0.1 that accepts connections (the kernel's backlog): not Ray."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        yield s.getsockname()[1]


def test_a_refused_address_fails_at_once_naming_it_and_the_fix():
    port = closed_port()
    ray = StubRay()
    start = time.monotonic()
    with pytest.raises(ClusterConnectionError) as caught:
        join_cluster(ray, Compute("ray", f"127.0.0.1:{port}", connect_timeout_s=5), {})
    assert time.monotonic() - start < 2  # refused: no waiting for the timeout
    message = str(caught.value)
    assert message.startswith(f"cannot reach the Ray cluster at 127.0.0.1:{port}: ")
    assert "refused" in message.lower() and "nothing was trained" in message
    assert "--ray-timeout" in message and "ray status" in message and "--executor local" in message
    assert caught.value.exit_code == 1 and ray.calls == []  # Ray never tried


def test_a_silent_address_gives_up_after_the_timeout(monkeypatch):
    waited = []

    def silent(address, timeout):
        waited.append((address, timeout))
        raise TimeoutError("timed out")
    monkeypatch.setattr(cluster.socket, "create_connection", silent)
    with pytest.raises(ClusterConnectionError, match=r"ray://head\.example:10001 "
                                                     r"\(head\.example:10001\): no answer"):
        join_cluster(StubRay(), Compute("ray", "ray://head.example:10001",
                                        connect_timeout_s=7.5), {})
    assert waited == [(("head.example", 10001), 7.5)]


def test_an_unknown_host_is_a_message(monkeypatch):
    def unknown(address, timeout):
        raise socket.gaierror(-2, "Name or service not known")
    monkeypatch.setattr(cluster.socket, "create_connection", unknown)
    with pytest.raises(ClusterConnectionError, match="Name or service not known"):
        join_cluster(StubRay(), Compute("ray", "no-such-head:6379"), {})


def test_what_ray_raises_on_joining_becomes_a_message(listening):
    address = f"127.0.0.1:{listening}"
    refused = StubRay(ConnectionError("Could not connect to GCS"))
    with pytest.raises(ClusterConnectionError, match=rf"cannot join the Ray cluster at "
                                                     rf"{address}: Could not connect to GCS"):
        join_cluster(refused, Compute("ray", address), {"include_dashboard": False})
    assert refused.calls == [{"address": address, "include_dashboard": False}]
    client = StubRay(ValueError("Ray Client requires pip package `ray[client]`."))
    with pytest.raises(ConfigError, match=r"pip install 'ray\[client\]'") as caught:
        join_cluster(client, Compute("ray", f"ray://{address}"), {})
    assert caught.value.exit_code == 2  # an install to do, not a fault of the network
    joined = StubRay()
    join_cluster(joined, Compute("ray", address), {})  # something answers: Ray's turn
    assert joined.calls == [{"address": address}]


def test_auto_without_a_cluster_says_so(monkeypatch):
    from ray._private import services

    def none_found(address, temp_dir):
        raise ConnectionError("Could not find any running Ray instance.")
    monkeypatch.setattr(services, "get_ray_address_from_environment", none_found)
    with pytest.raises(ClusterConnectionError, match=r"no running Ray cluster found for "
                                                     r"address 'auto'.*ray start --head"):
        join_cluster(StubRay(), Compute("ray", "auto"), {})


# --- the setting ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [0, -1, math.inf, math.nan, "30", True])
def test_the_timeout_is_a_finite_number_of_seconds(value):
    with pytest.raises(ConfigError, match="compute.connect_timeout_s must be a finite number"):
        config_from_dict({"compute": {"executor": "ray", "connect_timeout_s": value}})


def test_the_timeout_is_set_in_the_config_or_by_the_flag():
    assert Compute().connect_timeout_s == ComputeConfig().connect_timeout_s == 30.0
    cfg = config_from_dict({"compute": {"executor": "ray", "address": "auto",
                                        "connect_timeout_s": 5}})
    assert cfg.compute.to_compute().connect_timeout_s == 5
    args = build_parser().parse_args(["run", "c.yaml", "--ray-timeout", "2.5"])
    assert compute_flags(args) == {"connect_timeout_s": 2.5}  # over the config's section
    args = build_parser().parse_args(["run", "c.yaml", "--executor", "ray", "--ray-address",
                                      "auto", "--ray-timeout", "9"])
    assert compute_flags(args) == {"executor": "ray", "address": "auto",
                                   "connect_timeout_s": 9.0}
    with pytest.raises(ConfigError, match="--ray-timeout only applies to --executor ray"):
        compute_flags(argparse.Namespace(executor="local", ray_address=None, ray_timeout=3.0))


@pytest.mark.parametrize("value", ["0", "-2", "inf", "soon"])
def test_a_bad_flag_is_refused_by_the_parser(value, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["run", "c.yaml", "--ray-timeout", value])
    assert caught.value.code == 2
    assert "--ray-timeout: must be a finite number of seconds > 0" in capsys.readouterr().err


def test_the_command_line_refuses_a_closed_port_before_anything_trains(tiny_run_yaml, tmp_path,
                                                                       capsys):
    ray = pytest.importorskip("ray")
    port = closed_port()
    start = time.monotonic()
    code = main(["run", str(tiny_run_yaml()), "--quiet", "--executor", "ray",
                 "--ray-address", f"127.0.0.1:{port}", "--ray-timeout", "3"])
    took = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 1 and took < 30, took  # Ray alone retries for minutes
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in err and "Traceback" not in err
    assert "(compute.connect_timeout_s 3)" in err
    assert "kept: the output folder is replaced only when the command succeeds" in err
    assert not ray.is_initialized()
    assert not (tmp_path / "runs" / "tiny").exists()
    assert not list((tmp_path / "cache").glob("*.json"))  # nothing trained
