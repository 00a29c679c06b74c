"""A run's models on a Ray cluster (miaudit.train.cluster): a real 2-node cluster on this
machine, bound to loopback only, against the local trainer.

The first test lets the trainer start a local instance itself (``address=None``). The
cluster is started once for the module (head + one worker node, 1 CPU each, ~5 s); the first
test on it lets the trainer join it (``compute.address``), the others share one driver
connection (the trainer then reuses it), since every new driver starts its own workers.
Whole file: ~35 s on a loaded 2-core machine. No timing is asserted.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import psutil
import pytest
import torch
from safetensors.torch import save

from miaudit.errors import ConfigError
from miaudit.train import ModelCache, Recipe, key_for
from miaudit.train.cluster import (
    Compute,
    RayTrainingError,
    task_slots,
    training_document,
    write_training_document,
)

ray = pytest.importorskip("ray")  # the dev extra installs it, so CI runs these
from miaudit.runtime.local_ray import loopback_cluster, loopback_only  # noqa: E402

LOOPBACK = "127.0.0.1"
RECIPE = Recipe(architecture="mlp", arch_params={"hidden": 32}, epochs=3, batch_size=32)
JOBS = [(np.arange(k * 25, k * 25 + 150), k) for k in range(6)]  # equal sizes: they stack


def sha(model) -> str:
    """sha256 of the model's weights as safetensors bytes (what the cache stores)."""
    state = {k: v.detach().cpu().contiguous() for k, v in model.module.state_dict().items()}
    return hashlib.sha256(save(state)).hexdigest()


def listeners() -> list[str]:
    """Addresses of the TCP sockets listening in this process and its descendants (the Ray
    node processes and their workers)."""
    me = psutil.Process()
    pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
    return [c.laddr.ip for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.pid in pids]  # fmt: skip


@pytest.fixture(scope="module")
def cluster():
    """Head and one worker node on this machine, 1 CPU each, reachable from it only."""
    assert not ray.is_initialized()
    with loopback_cluster(ray, head_cpus=1, worker_cpus=[1]) as made:
        yield made


@pytest.fixture(scope="module")
def connected(cluster):
    """One driver connection to the cluster for the tests after the first."""
    with loopback_only(ray):
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    yield Compute("ray", address=cluster.address)
    ray.shutdown()


def test_a_local_instance_is_started_on_loopback_and_shut_down(digits, tmp_path, monkeypatch):
    """``address=None``: the trainer starts a Ray instance on this machine for the call."""
    from ray._private import ray_constants

    x, y = digits
    started, init = [], ray.init

    def recorded(*args, **kwargs):
        started.append(kwargs)
        context = init(*args, **kwargs)
        started.append(listeners())
        return context

    monkeypatch.setattr(ray, "init", recorded)
    assert not ray.is_initialized()
    store = ModelCache(tmp_path)
    models = store.get_or_train_many("fp", JOBS[:2], RECIPE, features=x, labels=y,
                                     progress=False, compute=Compute("ray"))  # fmt: skip
    assert not ray.is_initialized() and store.stats.stored == 2
    assert started[0]["_node_ip_address"] == LOOPBACK
    assert started[1] and set(started[1]) <= {LOOPBACK, f"::ffff:{LOOPBACK}"}, started[1]
    assert ray_constants.ENABLE_RAY_CLUSTER  # Ray's cluster switch given back
    assert all(m.node not in (None, "local") and m.device == "cpu" for m in models)


def test_two_nodes_train_what_the_local_path_trains(cluster, digits, tmp_path):
    x, y = digits
    node_ids = {n.node_id for n in cluster.list_all_nodes()}
    assert len(node_ids) == 2
    store = ModelCache(tmp_path / "ray")
    compute = Compute("ray", address=cluster.address)
    with loopback_only(ray):  # the driver joins on loopback too
        models = store.get_or_train_many("fp", JOBS, RECIPE, features=x, labels=y,
                                         progress=False, compute=compute)  # fmt: skip
    assert not ray.is_initialized()  # the trainer joined the cluster, and left it
    # both nodes trained models: 6 equal jobs in 2 stacked groups (one per task slot)
    assert {m.node for m in models} == node_ids
    assert {m.device for m in models} == {"cpu"}
    assert (store.stats.misses, store.stats.stored) == (6, 6)
    local = ModelCache(tmp_path / "local").get_or_train_many(
        "fp", JOBS, RECIPE, features=x, labels=y, progress=False, workers=1
    )
    assert {m.node for m in local} == {"local"}
    ray_hashes, local_hashes = [sha(m) for m in models], [sha(m) for m in local]
    print("nodes:", sorted(node_ids), "hashes:", [h[:12] for h in ray_hashes])
    assert ray_hashes == local_hashes  # byte-identical weights, same cache keys
    assert len(set(ray_hashes)) == 6
    for model, digest in zip(models, ray_hashes, strict=True):
        meta = json.loads(store.meta_path(model.cache_key).read_text())
        assert meta["weights_sha256"] == hashlib.sha256(
            store.weights_path(model.cache_key).read_bytes()).hexdigest()  # fmt: skip
        assert meta["trained_on"]["node"] in node_ids
        assert sha(store._load(model.cache_key, RECIPE, model.seed, (1, 8, 8), 10, "cpu")) \
            == digest  # fmt: skip
    assert [m.cache_key for m in models] == [m.cache_key for m in local]
    # a second call trains nothing: every model is a hit (Ray is not even started)
    again = ModelCache(tmp_path / "ray")
    hits = again.get_or_train_many("fp", JOBS, RECIPE, features=x, labels=y, progress=False,
                                   compute=compute)  # fmt: skip
    assert (again.stats.hits, again.stats.misses) == (6, 0) and not ray.is_initialized()
    assert [sha(m) for m in hits] == ray_hashes
    doc = training_document(models)
    assert doc["trained"] == 6 and sum(doc["nodes"].values()) == 6
    assert set(doc["nodes"]) == node_ids
    path = write_training_document(tmp_path, hits)
    written = json.loads(path.read_text())
    assert written["nodes"] == {"cache": 6} and written["seconds"] == 0.0
    assert [r["cache_key"] for r in written["models"]] == [m.cache_key for m in models]


def test_the_cluster_listens_onloopback_only(connected):
    found = listeners()
    assert found and set(found) <= {LOOPBACK, f"::ffff:{LOOPBACK}"}, found


def test_slots_and_infeasible_resources(connected):
    assert task_slots(ray, Compute("ray", cpus_per_model=1)) == 2
    assert task_slots(ray, Compute("ray", cpus_per_model=0.5)) == 4
    with pytest.raises(ConfigError, match="no node of the Ray cluster has 0 CPU"):
        task_slots(ray, Compute("ray", cpus_per_model=0, gpus_per_model=1))
    with pytest.raises(ConfigError, match="compute.executor"):
        Compute("threads")
    with pytest.raises(ConfigError, match="unknown key"):
        Compute.from_dict({"executor": "ray", "adress": "auto"})


FACTORY = """
import os
from pathlib import Path
from torch import nn

DRIVER = {driver}
TRIES = Path({tries!r})


def make():
    if os.getpid() != DRIVER:  # a Ray worker: count the try, and fail as told
        with TRIES.open("a") as f:
            f.write("x")
        if {fail!r} == "always":
            raise ValueError("this model cannot be built")
        if {fail!r} == "once" and len(TRIES.read_text()) == 1:
            raise OSError("disk full (a system error: worth another try)")
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
"""


def factory_recipe(tmp_path, fail: str) -> tuple[Recipe, object]:
    """A recipe whose model is built by a file that fails in Ray workers as ``fail`` says."""
    tries = tmp_path / f"tries-{fail}"
    source = tmp_path / f"factory_{fail}.py"
    source.write_text(textwrap.dedent(FACTORY.format(driver=os.getpid(), tries=str(tries),
                                                     fail=fail)))  # fmt: skip
    recipe = Recipe(architecture="import", arch_params={"path": f"{source}:make"}, epochs=1,
                    batch_size=64)  # fmt: skip
    return recipe, tries


def test_system_errors_are_retried_and_a_failing_model_is_named(connected, digits, tmp_path):
    x, y = digits
    jobs = JOBS[:1]
    flaky, tries = factory_recipe(tmp_path, "once")
    store = ModelCache(tmp_path / "cache")
    [model] = store.get_or_train_many("fp", jobs, flaky, features=x, labels=y, progress=False,
                                      compute=connected)  # fmt: skip
    assert tries.read_text() == "xx" and store.contains(model.cache_key)  # OSError: retried
    broken, tries = factory_recipe(tmp_path, "always")
    store = ModelCache(tmp_path / "cache")
    with pytest.raises(RayTrainingError) as failed:
        store.get_or_train_many("fp", jobs, broken, features=x, labels=y, progress=False,
                                compute=connected)  # fmt: skip
    key = key_for("fp", jobs[0][0], broken, jobs[0][1])
    message = str(failed.value)
    print(message)
    assert key in message and "ValueError: this model cannot be built" in message, message
    assert tries.read_text() == "x"  # not a system error: tried once
    assert not store.contains(key) and store.stats.stored == 0


def test_a_killed_driver_resumes_from_the_cache(connected, digits, tmp_path, monkeypatch):
    x, y = digits
    real, calls = ModelCache._store, []

    def dies_on_third_store(self, *args, **kwargs):  # the driver killed mid-run
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ModelCache, "_store", dies_on_third_store)
    store = ModelCache(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        store.get_or_train_many("fp", JOBS[:4], RECIPE, features=x, labels=y, progress=False,
                                compute=connected, max_stack=2)  # fmt: skip
    assert store.stats.stored == 2  # the first group of 2 is cached
    monkeypatch.setattr(ModelCache, "_store", real)
    rerun = ModelCache(tmp_path)
    models = rerun.get_or_train_many("fp", JOBS[:4], RECIPE, features=x, labels=y,
                                     progress=False, compute=connected, max_stack=2)  # fmt: skip
    trained = [m for m in models if not m.from_cache]
    assert (rerun.stats.hits, rerun.stats.misses) == (2, 2) and len(trained) == 2
    assert {m.node for m in models if m.from_cache} == {"cache"}
    local = ModelCache(tmp_path / "local").get_or_train_many(
        "fp", JOBS[:4], RECIPE, features=x, labels=y, progress=False, workers=1
    )
    assert [sha(m) for m in models] == [sha(m) for m in local]


def test_the_local_path_never_imports_ray_and_a_missing_ray_says_how_to_install():
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import miaudit
        from miaudit.train import ModelCache, Recipe, train_models
        from miaudit.train.cluster import Compute
        x = np.random.default_rng(0).normal(size=(40, 4)).astype("float32")
        y = np.arange(40) % 2
        recipe = Recipe(architecture="mlp", arch_params={"hidden": 4}, epochs=1)
        [m] = train_models(recipe, x, y, [np.arange(20)], [0], progress=False,
                           compute=Compute())
        assert m.node == "local" and m.device == "cpu", (m.node, m.device)
        print("ray loaded:", "ray" in sys.modules)
        sys.modules["ray"] = None  # as if it were not installed
        try:
            train_models(recipe, x, y, [np.arange(20)], [0], progress=False,
                         compute=Compute("ray"))
        except Exception as exc:
            print(type(exc).__name__, exc)
    """)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, check=True)  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "ray loaded: False", done.stdout + done.stderr
    assert lines[1].startswith("ConfigError") and "pip install 'miaudit[ray]'" in lines[1]
    assert "Traceback" not in done.stderr


def test_training_document_of_local_models():
    from miaudit.train.common import TrainedModel

    model = TrainedModel(torch.nn.Linear(1, 1), RECIPE, 3, 1.5, 10.0, node="local",
                         device="cpu", cache_key="k", stack=4)  # fmt: skip
    doc = training_document([model])
    assert doc["models"] == [{"model": 0, "cache_key": "k", "seed": 3, "node": "local",
                              "device": "cpu", "seconds": 1.5, "from_cache": False,
                              "stack": 4}]
    assert doc["nodes"] == {"local": 1} and doc["trained"] == 1


def test_worker_results_keep_the_dp_accounting():
    """Both transports (the local pool's numpy state, Ray's safetensors bytes) give back the
    same weights, and a DP-SGD model's accounting (the pool dropped it before)."""
    from miaudit.models import build_model
    from miaudit.train import parallel
    from miaudit.train.common import TrainedModel

    module = build_model("mlp", (1, 8, 8), 10, hidden=32)
    privacy = {"epsilon_spent": 2.5, "delta": 1e-5}
    model = TrainedModel(module, RECIPE, 3, 1.0, 9.0, n_train=150, num_classes=10,
                         input_shape=(1, 8, 8), losses=[0.5], privacy=privacy)  # fmt: skip
    back = parallel._from_plain(parallel._to_plain(model), RECIPE, torch.device("cpu"))
    assert back.privacy == privacy and sha(back) == sha(model)
    assert (back.node, back.device, back.losses) == ("local", "cpu", [0.5])
