"""Checkpoints along a run ("Generalization and Membership Inference Attack: a Practical
Perspective" §IV-A2), label smoothing and dropout in every trainer."""

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from miaudit.errors import ConfigError
from miaudit.train import (
    CheckpointSpec,
    ModelCache,
    Recipe,
    checkpoint_key,
    key_for,
    stacked,
    train_model,
    train_models,
    trainer,
)

MLP = Recipe(arch_params={"hidden": 16}, lr=0.1, epochs=3, batch_size=32)  # 100 rows: 4 steps
SETS = [np.arange(0, 100), np.arange(100, 200)]
SPEC = CheckpointSpec(epochs=[1, 3], steps=[6])


def flat(state):
    return torch.cat([v.flatten() for v in state.values()])


def test_positions_labels_and_bad_positions():
    assert SPEC.positions(MLP, 100) == {"epoch1": 4, "step6": 6, "epoch3": 12}
    assert CheckpointSpec(epochs=[2, 2, 1]).epochs == (1, 2) and not CheckpointSpec()
    with pytest.raises(ConfigError, match="past the end.*epochs=3"):
        CheckpointSpec(epochs=[4]).positions(MLP, 100)
    with pytest.raises(ConfigError, match="step 13.*12 steps"):
        CheckpointSpec(steps=[13]).positions(MLP, 100)
    for bad in ([0], [1.5], "3", [True]):
        with pytest.raises(ConfigError, match="positive integers"):
            CheckpointSpec(epochs=bad)


def test_snapshots_are_the_weights_at_those_steps(digits):
    x, y = digits
    seen = {}

    def record(info):
        seen[info.epoch] = {k: v.detach().clone() for k, v in info.module.state_dict().items()}

    model = train_model(MLP, x, y, SETS[0], 0, progress=False, on_epoch_end=record,
                        checkpoints=SPEC)  # fmt: skip
    assert sorted(model.snapshots) == [4, 6, 12]
    assert torch.equal(flat(model.snapshots[4]), flat(seen[1]))
    assert torch.equal(flat(model.snapshots[12]), flat(model.module.state_dict()))
    # a checkpoint of a 3-epoch cosine run is not the 1-epoch run
    short = train_model(MLP.replace(epochs=1), x, y, SETS[0], 0, progress=False)
    assert not torch.equal(flat(model.snapshots[4]), flat(short.module.state_dict()))
    # without checkpoints the run is the same run
    plain = train_model(MLP, x, y, SETS[0], 0, progress=False)
    assert torch.equal(flat(plain.module.state_dict()), flat(model.module.state_dict()))
    assert plain.snapshots == {}


@pytest.mark.parametrize("smoothing", [0.0, 0.2], ids=["plain", "label-smoothing"])
def test_stacked_and_worker_snapshots_match_the_loop(digits, smoothing):
    x, y = digits
    recipe = MLP.replace(label_smoothing=smoothing)
    assert stacked.can_stack(recipe)
    loop = [train_model(recipe, x, y, s, k, progress=False, checkpoints=SPEC)
            for k, s in enumerate(SETS)]  # fmt: skip
    stacked_models = stacked.train_stacked(recipe, x, y, SETS, [0, 1], checkpoints=SPEC)
    for a, b in zip(loop, stacked_models, strict=True):
        np.testing.assert_allclose(a.losses, b.losses, rtol=1e-5)
        for step in (4, 6, 12):
            torch.testing.assert_close(flat(a.snapshots[step]), flat(b.snapshots[step]),
                                       rtol=0, atol=1e-6)  # fmt: skip
    if smoothing:  # worker processes (slow to spawn): once, carrying smoothing and snapshots
        workers = train_models(recipe, x, y, SETS, [0, 1], progress=False, workers=2,
                               max_stack=1, checkpoints=SPEC)  # fmt: skip
        for b, c in zip(stacked_models, workers, strict=True):
            for step in (4, 6, 12):
                assert torch.equal(flat(b.snapshots[step]), flat(c.snapshots[step]))


def test_label_smoothing_is_cross_entropys(digits):
    x, y = digits
    recipe = MLP.replace(epochs=1, label_smoothing=0.3, batch_size=100, schedule="constant")
    model = train_model(recipe, x, y, SETS[0], 0, progress=False)
    plain = train_model(recipe.replace(label_smoothing=0.0), x, y, SETS[0], 0, progress=False)
    assert not torch.equal(flat(model.module.state_dict()), flat(plain.module.state_dict()))
    # one full-batch step: the recorded loss is F.cross_entropy's smoothed loss at the init
    with trainer.isolated_rng(torch.device("cpu"), trainer.derive_seeds(0)[0]):
        from miaudit.models import build_model

        init = build_model("mlp", (1, 8, 8), 10, hidden=16)
    xb, yb = torch.from_numpy(x[SETS[0]]), torch.from_numpy(y[SETS[0]])
    expected = F.cross_entropy(init(xb), yb, label_smoothing=0.3).item()
    assert model.losses[0] == pytest.approx(expected, rel=1e-5)


def test_dropout_trains_one_by_one_and_differs(digits, monkeypatch):
    x, y = digits
    recipe = MLP.replace(arch_params={"hidden": 16, "dropout": 0.5})
    assert not stacked.can_stack(recipe)
    monkeypatch.setattr(stacked, "train_stacked", lambda *a, **k: pytest.fail("stacked"))
    models = train_models(recipe, x, y, SETS, [0, 1], progress=False, workers=1)
    again = train_model(recipe, x, y, SETS[0], 0, progress=False)
    assert torch.equal(flat(models[0].module.state_dict()), flat(again.module.state_dict()))
    plain = train_model(MLP, x, y, SETS[0], 0, progress=False)
    assert not torch.equal(flat(plain.module.state_dict()), flat(again.module.state_dict()))


def test_cache_stores_each_checkpoint_under_run_key_plus_step(tmp_path, digits, monkeypatch):
    x, y = digits
    store = ModelCache(tmp_path)
    kw = {"features": x, "labels": y, "progress": False, "workers": 1, "checkpoints": SPEC}
    jobs = [(SETS[0], 0), (SETS[1], 1)]
    first = store.get_or_train_many("fp", jobs, MLP, **kw)
    assert store.stats.misses == 2
    run_key = key_for("fp", SETS[0], MLP, 0)
    ck = first[0].checkpoints
    assert list(ck) == ["epoch1", "step6", "epoch3"]
    assert ck["epoch3"] is first[0] and ck["epoch1"].step == 4 and first[0].step is None
    assert store.contains(checkpoint_key(run_key, 4)) and store.contains(checkpoint_key(run_key, 6))
    assert not store.contains(key_for("fp", SETS[0], MLP.replace(epochs=1), 0))
    assert ck["epoch1"].losses == first[0].losses[:1]

    monkeypatch.setattr(trainer, "train_models", lambda *a, **k: pytest.fail("retrained"))
    again = ModelCache(tmp_path).get_or_train_many("fp", jobs, MLP, **kw)
    for a, b in zip(first, again, strict=True):
        for label in ("epoch1", "step6", "epoch3"):
            assert b.checkpoints[label].from_cache
            assert torch.equal(flat(a.checkpoints[label].module.state_dict()),
                               flat(b.checkpoints[label].module.state_dict()))  # fmt: skip
        assert b.checkpoints["epoch1"].step == 4
    # the plain call (no checkpoints) finds the same final models
    plain = ModelCache(tmp_path).get_or_train_many("fp", jobs, MLP, features=x, labels=y,
                                                   progress=False)  # fmt: skip
    assert all(m.from_cache and not m.checkpoints for m in plain)


def test_a_missing_checkpoint_retrains_the_run_once(tmp_path, digits):
    x, y = digits
    store = ModelCache(tmp_path)
    kw = {"features": x, "labels": y, "progress": False, "workers": 1}
    store.get_or_train_many("fp", [(SETS[0], 0)], MLP, **kw)  # final model only
    more = store.get_or_train_many("fp", [(SETS[0], 0)], MLP, checkpoints=SPEC, **kw)
    assert store.stats.misses == 2 and not more[0].from_cache
    assert set(more[0].checkpoints) == {"epoch1", "step6", "epoch3"}
    with pytest.raises(ConfigError, match="past the end"):
        store.get_or_train_many("fp", [(SETS[0], 0)], MLP,
                                checkpoints=CheckpointSpec(epochs=[9]), **kw)  # fmt: skip
