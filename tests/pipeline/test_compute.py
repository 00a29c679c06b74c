"""Where a run's models train (the ``compute`` section, ``--executor``, ``--ray-address``):
checked before anything trains, and without effect on the results: the same config run on
this machine and on a 2-node Ray cluster (both nodes on this machine, bound to loopback only)
writes byte-identical scores.csv, and training.json says which node trained each model.

The cluster (head + one worker node, 1 CPU each) is started once for the module; every run on
it starts its own driver connection (through ``--ray-address`` / ``compute``), as the command
line does. Whole file: ~45 s on a loaded 2-core machine. No timing is asserted.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import psutil
import pytest
import yaml

import miaudit
from miaudit.cli.main import main
from miaudit.config import ComputeConfig, RunConfig, config_from_dict
from miaudit.errors import ConfigError
from miaudit.external.audit_config import AuditConfig, audit_config
from miaudit.runtime.local_ray import loopback_cluster, loopback_only
from miaudit.train.cluster import Compute

LOOPBACK = "127.0.0.1"
AUDIT = {"model": {"predict": "m:f"}, "data": {"dataset": "digits", "members": "m.txt"}}


def training(run_dir) -> dict:
    return json.loads((run_dir / "training.json").read_text())


# --- checked before anything trains (no Ray needed) -----------------------------------------

def test_the_section_has_the_trainers_keys_and_defaults():
    assert ComputeConfig().to_compute() == Compute()
    assert dict(vars(ComputeConfig())) == Compute().to_dict()  # same keys, same defaults
    assert RunConfig().compute == AuditConfig().compute == ComputeConfig()


@pytest.mark.parametrize("section, match", [
    ({"executr": "ray"}, r"unknown key 'compute.executr'.*Did you mean 'executor'"),
    ({"gpus_per_modle": 1}, r"Did you mean 'gpus_per_model'"),
    ({"executor": "threads"}, r"compute.executor must be one of local, ray"),
    ({"address": "auto"}, r"compute.address only applies to compute.executor 'ray'"),
    ({"executor": "ray", "cpus_per_model": -1}, r"compute.cpus_per_model must be a number"),
    ({"executor": "ray", "max_retries": 1.5}, r"compute.max_retries must be a whole number"),
    ({"executor": "ray", "cpus_per_model": 0}, r"cpus_per_model > 0 or gpus_per_model > 0"),
    ("ray", r"'compute' must be a mapping"),
])
def test_bad_compute_sections_are_refused_in_both_configs(section, match):
    with pytest.raises(ConfigError, match=match):
        config_from_dict({"compute": section})
    with pytest.raises(ConfigError, match=match):
        audit_config({**AUDIT, "compute": section})


def test_an_empty_section_is_local_and_a_cluster_section_loads():
    assert config_from_dict({"compute": None}).compute == ComputeConfig()
    cfg = config_from_dict({"compute": {"executor": "ray", "address": "auto",
                                        "gpus_per_model": 1}})
    assert cfg.compute.to_compute() == Compute("ray", "auto", gpus_per_model=1)
    assert audit_config({**AUDIT, "compute": {"executor": "ray"}}).compute.executor == "ray"


def test_a_bad_section_fails_before_anything_trains(tiny_run_yaml, tmp_path, capsys):
    path = tiny_run_yaml("typo", compute={"executor": "ray", "adress": "auto"})
    assert main(["run", str(path), "--quiet"]) == 2
    assert "Did you mean 'address'" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["run", "audit"])
def test_ray_address_needs_executor_ray(tiny_run_yaml, tmp_path, capsys, command):
    first = [str(tiny_run_yaml())] if command == "run" else ["--predict", "m:f"]
    for flags in (["--ray-address", "auto"], ["--executor", "local", "--ray-address", "auto"]):
        assert main([command, *first, *flags, "--quiet"]) == 2
        assert "--ray-address only applies to --executor ray" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "runs").exists()


def test_the_flags_lay_over_the_configs_section(tiny_run_yaml, monkeypatch):
    """--executor / --ray-address replace the config's executor and address and keep its
    other keys; --executor local drops a cluster address. Captured before the pipeline."""
    import miaudit.pipeline.runner as runner

    seen = []
    monkeypatch.setattr(runner, "run", lambda cfg, **_: seen.append(cfg.compute) or 1 / 0)
    path = tiny_run_yaml(compute={"executor": "ray", "address": "auto", "gpus_per_model": 1})
    for flags in ([], ["--executor", "local"], ["--executor", "ray"],
                  ["--executor", "ray", "--ray-address", "ray://head:10001"]):
        with pytest.raises(ZeroDivisionError):
            main(["run", str(path), "--quiet", *flags])
    assert [(c.executor, c.address, c.gpus_per_model) for c in seen] == [
        ("ray", "auto", 1), ("local", None, 1), ("ray", "auto", 1),
        ("ray", "ray://head:10001", 1)]
    with pytest.raises(ConfigError, match="Did you mean 'executor'"):
        miaudit.run(path, compute={"exector": "ray"})
    from miaudit.cli.audit import flags_to_dict
    from miaudit.cli.main import build_parser

    args = build_parser().parse_args(["audit", "--executor", "ray", "--ray-address", "auto"])
    assert flags_to_dict(args)["compute"] == {"executor": "ray", "address": "auto"}
    assert "compute" not in flags_to_dict(build_parser().parse_args(["audit"]))


# --- the same results on a Ray cluster ------------------------------------------------------

ray = pytest.importorskip("ray")  # the dev extra installs it, so CI runs these


@pytest.fixture(scope="module")
def cluster():
    """Head and one worker node on this machine, 1 CPU each, reachable from it only."""
    assert not ray.is_initialized()
    with loopback_cluster(ray, head_cpus=1, worker_cpus=[1]) as made:
        me = psutil.Process()
        pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
        found = {c.laddr.ip for c in psutil.net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN and c.pid in pids}  # fmt: skip
        assert found and found <= {LOOPBACK, f"::ffff:{LOOPBACK}"}, found
        yield made


def test_a_run_on_two_nodes_scores_as_the_local_run(cluster, tiny_run_yaml, tmp_path,
                                                    monkeypatch):
    node_ids = {n.node_id for n in cluster.list_all_nodes()}
    assert len(node_ids) == 2
    # the same config; each run with its own cache, so both train every model
    local = tiny_run_yaml("local", models=4, cache_dir=str(tmp_path / "cache-local"))
    remote = tiny_run_yaml("ray", models=4, cache_dir=str(tmp_path / "cache-ray"))
    assert main(["run", str(local), "--out", str(tmp_path / "local"), "--quiet"]) == 0
    with loopback_only(ray):  # the driver joins on loopback too
        assert main(["run", str(remote), "--out", str(tmp_path / "ray"), "--quiet",
                     "--executor", "ray", "--ray-address", cluster.address]) == 0
    assert not ray.is_initialized()  # the run joined the cluster, and left it
    here, there = training(tmp_path / "local"), training(tmp_path / "ray")
    assert here["nodes"] == {"local": 4} and here["trained"] == 4
    assert set(there["nodes"]) == node_ids and there["trained"] == 4  # both nodes trained
    assert [r["cache_key"] for r in there["models"]] == [r["cache_key"] for r in here["models"]]
    scores = (tmp_path / "local" / "scores.csv").read_bytes()
    assert (tmp_path / "ray" / "scores.csv").read_bytes() == scores  # byte for byte
    assert config_from_dict(yaml.safe_load((tmp_path / "ray" / "config.yaml").read_text())
                            ).compute.executor == "ray"  # fmt: skip
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert "training.json" in summary["files"]
    print("nodes:", sorted(node_ids), "scores.csv sha256:", hashlib.sha256(scores).hexdigest())
    # a rerun into a fresh folder trains nothing: every model from the cache, Ray not started
    with monkeypatch.context() as patched:
        patched.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray started for nothing"))
        again = miaudit.run(remote, out=tmp_path / "again", progress=False,
                            compute=Compute("ray", address=cluster.address))
    assert again.meta["models_trained"] == 0
    doc = training(tmp_path / "again")
    assert doc["nodes"] == {"cache": 4} and all(r["from_cache"] for r in doc["models"])
    assert (tmp_path / "again" / "scores.csv").read_bytes() == scores
    # where the models train is not what the run measures: the Ray rerun of the local run's
    # config replaces that run without --overwrite
    with loopback_only(ray):
        assert main(["run", str(local), "--out", str(tmp_path / "local"), "--quiet",
                     "--executor", "ray", "--ray-address", cluster.address]) == 0
    assert training(tmp_path / "local")["nodes"] == {"cache": 4}


PREDICT = '''
import numpy as np


def predict_proba(x):
    z = x.reshape(len(x), -1) @ np.random.default_rng(0).normal(size=(64, 10))
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
'''


def test_an_audits_references_train_on_the_cluster_alike(cluster, tmp_path):
    node_ids = {n.node_id for n in cluster.list_all_nodes()}
    (tmp_path / "box.py").write_text(PREDICT)
    rows = np.random.default_rng(0).permutation(1797)
    given = {"model": f"{tmp_path / 'box.py'}:predict_proba", "data": "digits",
             "members": rows[:150], "nonmembers": rows[150:300], "public_rows": rows[300:900],
             "references": 2, "attacks": "loss,rmia", "metrics": {"bootstrap": 10},
             "recipe": {"architecture": "mlp", "epochs": 1, "batch_size": 64},
             "progress": False}
    local = miaudit.audit(**given, out=tmp_path / "local", cache_dir=str(tmp_path / "c1"))
    with loopback_only(ray):
        remote = miaudit.audit(**given, out=tmp_path / "ray", cache_dir=str(tmp_path / "c2"),
                               compute={"executor": "ray", "address": cluster.address})
    assert local.meta["references_trained"] == remote.meta["references_trained"] == 2
    assert training(tmp_path / "local")["nodes"] == {"local": 2}
    assert set(training(tmp_path / "ray")["nodes"]) == node_ids
    assert (tmp_path / "ray" / "scores.csv").read_bytes() == \
        (tmp_path / "local" / "scores.csv").read_bytes()  # fmt: skip
    audit_yaml = yaml.safe_load((tmp_path / "ray" / "audit.yaml").read_text())
    assert audit_yaml["compute"]["executor"] == "ray"
