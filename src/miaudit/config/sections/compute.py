"""The ``compute`` section of either config: where the models train (this machine, or a Ray
cluster), :class:`miaudit.train.cluster.Compute`'s keys, checked without importing torch where
they are the defaults."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from miaudit.config.sections.spec import (
    Float,
    Int,
    OptStr,
    Spec,
    Typed,
)
from miaudit.errors import ConfigError


class ComputeConfig(Spec):
    """Where the models train: :class:`miaudit.train.cluster.Compute`'s keys and defaults (a
    test holds them alike), checked by it when the config loads, before anything trains.
    Where a model trains is not in its cache key, and on CPU it changes neither the weights
    nor the scores: it is not part of the run's identity either (rerunning with ``--executor
    ray`` replaces the same run)."""

    key = "compute"

    executor: Typed[Literal["local", "ray"]] = Field("local", description=(
        "local (this machine) or ray (a Ray cluster; --executor ray)."))
    address: OptStr = Field(None, description=(
        "null starts a local Ray instance bound to loopback; auto or ray://host:port joins a "
        "running cluster (--ray-address)."))
    cpus_per_model: Float = Field(1.0, ge=0, description="CPUs each Ray task asks for.",
                                  json_schema_extra={"must": "be a number >= 0"})
    gpus_per_model: Float = Field(0.0, ge=0, description="GPUs each Ray task asks for.",
                                  json_schema_extra={"must": "be a number >= 0"})
    max_retries: Int = Field(3, ge=0, description=(
        "How many times a Ray task is retried when its worker dies."),
        json_schema_extra={"must": "be a whole number >= 0"})
    connect_timeout_s: Float = Field(30.0, gt=0, json_schema_extra={"must": (
        "be a finite number of seconds > 0 (how long to wait for the Ray cluster at "
        "compute.address to answer)")}, description=(
        "How long to wait for the cluster at address to answer (--ray-timeout); a refused, "
        "unreachable or silent address is refused with its name and the fix, before "
        "anything trains."))

    def to_compute(self) -> Any:
        """The checked :class:`~miaudit.train.cluster.Compute` (ConfigError naming the key)."""
        from miaudit.train.cluster import Compute

        return Compute.from_dict(self.to_dict())


def compute_section(value: Any) -> ComputeConfig:
    """``compute`` of either config, checked (ConfigError naming the bad key or value): a
    ComputeConfig, left empty in the YAML (None: local), or a Compute from the Python API."""
    if value is None:
        value = ComputeConfig()
    section: ComputeConfig
    if isinstance(value, ComputeConfig):
        section = value
    else:  # a miaudit.train.cluster.Compute
        to_dict = getattr(value, "to_dict", None)
        if not callable(to_dict):
            raise ConfigError(f"compute must be a mapping (executor, address, ...); "
                              f"got {type(value).__name__}.")
        section = ComputeConfig(**to_dict())
    if section != ComputeConfig():  # the defaults are Compute's (a test holds them alike):
        section.to_compute()  # only other values need its check, which imports torch
    return section
