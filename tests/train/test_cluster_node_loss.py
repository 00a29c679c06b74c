"""A worker node of the Ray cluster dies while it trains models of a run: Ray retries its task
on the node that is left, and the run ends complete, with the weights the local trainer makes.

The cluster (on this machine, loopback only) is a head with no CPU, so it runs no task, and two
worker nodes of 1 CPU each. The run's models form two stacked groups of unequal work (3 models
on 10 rows, 3 on 300 rows; same recipe), one task per node. When the driver stores the first
model (the small group's, finished first), the test kills the other node, which is still
training the large group: its task must be retried on the surviving node. ~20 s; no timing is
asserted.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from safetensors.torch import save

from miaudit.runtime.local_ray import loopback_cluster, loopback_only
from miaudit.train import ModelCache, Recipe
from miaudit.train.cluster import Compute

ray = pytest.importorskip("ray")

RECIPE = Recipe(architecture="mlp", arch_params={"hidden": 32}, epochs=400, batch_size=32)
SMALL = [(np.arange(k, k + 10), k) for k in range(3)]  # 1 step per epoch
LARGE = [(np.arange(300), k) for k in range(3, 6)]  # 10 steps per epoch


def sha(model) -> str:
    state = {k: v.detach().cpu().contiguous() for k, v in model.module.state_dict().items()}
    return hashlib.sha256(save(state)).hexdigest()


@pytest.fixture
def three_nodes():
    assert not ray.is_initialized()
    with loopback_cluster(ray, head_cpus=0, worker_cpus=[1, 1]) as made:
        workers = [n for n in made.list_all_nodes() if n is not made.head_node]
        assert len(workers) == 2
        yield made, workers


def test_a_node_lost_mid_run_is_retried_elsewhere_and_the_run_is_whole(three_nodes, digits,
                                                                        tmp_path):
    cluster, workers = three_nodes
    x, y = digits
    jobs = SMALL + LARGE
    store = ModelCache(tmp_path / "ray")
    killed: list[str] = []
    real_store = store._store

    def store_then_kill(key, model, *args, **kwargs):
        real_store(key, model, *args, **kwargs)
        if not killed:  # the first model stored: kill the node that did not train it
            victim = next(w for w in workers if w.node_id != model.node)
            killed.append(victim.node_id)
            cluster.remove_node(victim, allow_graceful=False)

    store._store = store_then_kill
    with loopback_only(ray):
        models = store.get_or_train_many("fp", jobs, RECIPE, features=x, labels=y,
                                         progress=False, max_stack=3,
                                         compute=Compute("ray", address=cluster.address))
    survivor = next(w.node_id for w in workers if w.node_id not in killed)
    small_node = {m.node for m in models[:3]}
    large_node = {m.node for m in models[3:]}
    # Each node has one CPU and each task asks for one, so the two groups ran at once on the
    # two nodes: the killed node was training the other group, which therefore finished only
    # on the node that is left (had it finished before the kill, it would name the victim).
    assert small_node == {survivor} and large_node == {survivor}, (small_node, large_node)
    assert store.stats.stored == 6
    local = ModelCache(tmp_path / "local").get_or_train_many(
        "fp", jobs, RECIPE, features=x, labels=y, progress=False, workers=1, max_stack=3)
    assert [sha(m) for m in models] == [sha(m) for m in local]
    assert [m.cache_key for m in models] == [m.cache_key for m in local]
