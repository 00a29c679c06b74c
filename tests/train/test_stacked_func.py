"""Every image/tabular architecture stacks (torch.func): the models equal one-by-one training.

Tolerance: each state tensor (weights, BatchNorm running mean/var) within
``1e-5 * max(1, max |reference|)`` of ``train_model``'s, losses within ``rtol=1e-5``. Why not
bit-equal: ``vmap`` runs a convolution as one grouped convolution and a batch norm over
``K * C`` channels, which sum in another order than the per-model kernels (float32 rounding,
~1e-7 a step). Measured here (max abs difference / max(1, tensor scale), over 3 models):
mnist-cnn 1.5e-8, mlp with dropout 3e-8, cifar-cnn 5e-8, resnet18 2.4e-7 (a running_var), so
the bound has a 40x margin. ResNet-18 on tiny data with small batches is
chaotic: a 1e-7 relative change of its *input* moves one-by-one training's weights by up to
1e-2 within 8 steps (BatchNorm over a 1x1 map, a tail batch of 4), so its recipe here uses
full batches and a small learning rate, where rounding stays rounding.
"""

import numpy as np
import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.train import CheckpointSpec, Recipe, stacked, train_model, train_models, trainer
from miaudit.train.stacked_func import FUNCTIONAL, can_stack_functional, train_stacked_functional

SETS = [np.arange(0, 100), np.arange(100, 200), np.arange(50, 150)]
SEEDS = [0, 1, 7]
TOL = 1e-5

RECIPES = {
    # dropout (conv 0.25, fc 0.5) and every batch augmentation but AutoAugment
    "mnist-cnn": Recipe(architecture="mnist-cnn", lr=0.05, momentum=0.9, nesterov=True,
                        weight_decay=5e-4, schedule="cosine", epochs=2, batch_size=32,
                        augment=["crop", "mirror", {"name": "cutout", "size": 3}]),
    "cifar-cnn": Recipe(architecture="cifar-cnn", arch_params={"channels": [8, 16],
                                                               "dropout": 0.3},
                        optimizer="adam", lr=1e-2, label_smoothing=0.1, epochs=2,
                        batch_size=32, augment=["crop", "mirror"]),
    "resnet18": Recipe(architecture="resnet18", arch_params={"width": 4}, lr=0.01,
                       momentum=0.9, epochs=3, batch_size=50),
    "mlp-dropout": Recipe(architecture="mlp", arch_params={"hidden": 24, "dropout": 0.5},
                          optimizer="adam", lr=1e-2, epochs=2, batch_size=32),
}  # fmt: skip


def assert_close_states(a: dict, b: dict) -> None:
    """``a`` within TOL of the reference ``b``, tensor by tensor (integers exactly)."""
    assert a.keys() == b.keys()
    for key, ref in b.items():
        if not ref.is_floating_point():  # num_batches_tracked
            assert torch.equal(a[key], ref), key
            continue
        scale = max(1.0, float(ref.abs().max()))
        diff = float((a[key].double() - ref.double()).abs().max())
        assert diff <= TOL * scale, f"{key}: {diff:.3g} > {TOL} x {scale:.3g}"


def assert_same_model(model, ref) -> None:
    assert type(model.module) is type(ref.module)
    assert_close_states(model.module.state_dict(), ref.module.state_dict())
    np.testing.assert_allclose(model.losses, ref.losses, rtol=1e-5)
    for name in ("seed", "n_train", "num_classes", "input_shape"):
        assert getattr(model, name) == getattr(ref, name)


def test_the_registered_image_and_tabular_architectures_stack():
    from miaudit.models import list_models
    from miaudit.models.text import CAUSAL_LM_ARCHITECTURES

    text = {"text-cnn", "minilm", "gpt-small", "hf", "import", *CAUSAL_LM_ARCHITECTURES}
    assert set(list_models()) - text <= set(FUNCTIONAL) | {"airbench94"}  # its own trainer
    for name in FUNCTIONAL:
        recipe = Recipe(architecture=name)
        assert can_stack_functional(recipe) and stacked.stacks(recipe)
        assert not can_stack_functional(recipe.replace(dp={"epsilon": 8.0}))
    assert not stacked.stacks(Recipe(architecture="text-cnn"))


@pytest.mark.parametrize("name", list(RECIPES))
def test_stacked_trains_the_one_by_one_models(digits, name):
    x, y = digits
    recipe = RECIPES[name]
    models = train_stacked_functional(recipe, x, y, SETS, SEEDS)
    for rows, seed, model in zip(SETS, SEEDS, models, strict=True):
        assert_same_model(model, train_model(recipe, x, y, rows, seed, progress=False))
        assert not model.module.training and model.train_seconds > 0
    a, b = (m.module.state_dict() for m in models[:2])
    assert any(not torch.equal(a[k], b[k]) for k in a if a[k].is_floating_point())


def test_batch_norm_running_stats_are_each_models_own(digits):
    x, y = digits
    recipe = RECIPES["resnet18"].replace(epochs=1)
    models = train_stacked_functional(recipe, x, y, SETS[:2], SEEDS[:2])
    states = [m.module.state_dict() for m in models]
    for state in states:  # updated from the init's zeros and ones, 2 steps counted
        assert float(state["bn1.running_mean"].abs().max()) > 0
        assert not torch.equal(state["bn1.running_var"], torch.ones_like(state["bn1.running_var"]))
        assert int(state["bn1.num_batches_tracked"]) == 2
    assert not torch.equal(states[0]["bn1.running_mean"], states[1]["bn1.running_mean"])
    # eval uses them: the stacked model predicts as the one-by-one model does
    ref = train_model(recipe, x, y, SETS[1], SEEDS[1], progress=False)
    with torch.no_grad():
        xb = torch.from_numpy(x[200:])
        torch.testing.assert_close(models[1].module(xb), ref.module(xb), rtol=0, atol=1e-4)


def test_snapshots_match_and_the_rng_is_left_alone(digits):
    x, y = digits
    recipe = RECIPES["mnist-cnn"]
    spec = CheckpointSpec(epochs=[1], steps=[2, 6])
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    models = train_stacked_functional(recipe, x, y, SETS[:2], SEEDS[:2], checkpoints=spec)
    assert torch.equal(torch.rand(2), expected)
    for rows, seed, model in zip(SETS, SEEDS, models, strict=False):
        ref = train_model(recipe, x, y, rows, seed, progress=False, checkpoints=spec)
        assert model.snapshots.keys() == ref.snapshots.keys() == {2, 4, 6}
        for step, state in ref.snapshots.items():
            assert_close_states(model.snapshots[step], state)


def test_stacking_refuses_what_it_cannot_stack(digits):
    x, y = digits
    cnn = RECIPES["mnist-cnn"]
    with pytest.raises(ConfigError, match="stacked"):
        train_stacked_functional(Recipe(architecture="text-cnn"), x, y, SETS, SEEDS)
    with pytest.raises(ConfigError, match="stacked"):
        train_stacked_functional(cnn.replace(precision="bf16"), x, y, SETS, SEEDS)
    with pytest.raises(ConfigError, match="equal training-set sizes"):
        train_stacked_functional(cnn, x, y, [np.arange(100), np.arange(50)], [0, 1])
    with pytest.raises(ConfigError, match="pair them"):
        train_stacked_functional(cnn, x, y, SETS, [0])


def test_a_stacked_batch_draws_each_models_augmentation():
    from miaudit.train.augment import StackedGenerators, build_augmentation

    augment = build_augmentation(["crop", "mirror", {"name": "cutout", "size": 3}])
    x = torch.rand(3 * 5, 1, 8, 8)

    def gens():
        return [torch.Generator().manual_seed(s) for s in (3, 4, 5)]

    alone = torch.cat([augment(part, g) for part, g in zip(x.chunk(3), gens(), strict=True)])
    assert torch.equal(augment(x, StackedGenerators(gens())), alone)


def test_autoaugment_stacks_model_by_model(digits):
    pytest.importorskip("kornia")
    x, y = digits
    recipe = RECIPES["cifar-cnn"].replace(epochs=1, augment=["autoaugment"], batch_size=50)
    models = train_stacked_functional(recipe, x, y, SETS[:2], SEEDS[:2])
    for rows, seed, model in zip(SETS, SEEDS, models, strict=False):
        assert_same_model(model, train_model(recipe, x, y, rows, seed, progress=False))


# --- the stack size per device --------------------------------------------------------------


def test_stack_size_rule(monkeypatch):
    monkeypatch.delenv(trainer.STACK_ENV, raising=False)
    cpu, shape = torch.device("cpu"), (1, 8, 8)
    mlp, cnn = Recipe(architecture="mlp"), Recipe(architecture="mnist-cnn")
    assert trainer.stack_size(mlp, cpu, shape, 10) == trainer.CPU_STACK  # measured: pays
    assert trainer.stack_size(cnn, cpu, shape, 10) == 1  # not measured to pay: as before
    assert trainer.stack_size(cnn, cpu, shape, 10, max_stack=4) == 4  # the caller's number
    assert trainer.stack_size(Recipe(architecture="text-cnn"), cpu, shape, 10) == 1
    assert trainer.stack_size(cnn, cpu, shape, 10, gpu=True) == trainer.GPU_MAX_STACK  # on Ray
    resnet = Recipe(architecture="resnet18", batch_size=256)
    assert 1 <= trainer.stack_size(resnet, cpu, (3, 32, 32), 10, gpu=True) < 8  # a 16 GiB GPU
    monkeypatch.setenv(trainer.STACK_ENV, "3")
    assert trainer.stack_size(cnn, cpu, shape, 10) == 3
    assert trainer.stack_size(cnn, cpu, shape, 10, max_stack=2) == 2
    monkeypatch.setenv(trainer.STACK_ENV, "many")
    with pytest.raises(ConfigError, match=trainer.STACK_ENV):
        trainer.stack_size(cnn, cpu, shape, 10)
    with pytest.raises(ConfigError, match="max_stack"):
        trainer.stack_size(cnn, cpu, shape, 10, max_stack=-1)


def test_stack_size_on_a_gpu_follows_its_free_memory(monkeypatch):
    monkeypatch.delenv(trainer.STACK_ENV, raising=False)
    cuda, shape = torch.device("cuda"), (3, 32, 32)
    recipe = Recipe(architecture="resnet18", batch_size=256, momentum=0.9)
    per_model = trainer.stacked_func.bytes_per_model(recipe, shape, 10)
    free = {"bytes": 10 * per_model}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 0))
    assert trainer.stack_size(recipe, cuda, shape, 10) == 5  # half the free memory
    free["bytes"] = 10**15
    assert trainer.stack_size(recipe, cuda, shape, 10) == trainer.GPU_MAX_STACK
    free["bytes"] = 0
    assert trainer.stack_size(recipe, cuda, shape, 10) == 1


def test_train_models_stacks_cnns_when_told_and_keeps_job_order(digits, monkeypatch):
    x, y = digits
    recipe = RECIPES["cifar-cnn"].replace(epochs=1)
    sizes = []
    real = stacked.train_stacked_functional

    def spy(recipe, features, labels, index_sets, seeds, *args, **kwargs):
        sizes.append(len(seeds))
        return real(recipe, features, labels, index_sets, seeds, *args, **kwargs)

    monkeypatch.setattr(stacked, "train_stacked_functional", spy)
    monkeypatch.setenv(trainer.STACK_ENV, "2")
    sets = [SETS[0], np.arange(200, 250), SETS[1], SETS[2]]
    seeds = [4, 3, 2, 1]
    models = train_models(recipe, x, y, sets, seeds, progress=False, workers=1)
    assert sorted(sizes) == [2]  # the two of 100 rows; the third and the 50 alone: one by one
    assert [m.seed for m in models] == seeds
    # training.json says which trained together
    from miaudit.train.cluster import training_document

    assert [row["stack"] for row in training_document(models)["models"]] == [2, 1, 2, 1]
    for rows, seed, model in zip(sets, seeds, models, strict=True):
        assert_same_model(model, train_model(recipe, x, y, rows, seed, progress=False))


def test_worker_processes_stack_the_same_models(digits):
    x, y = digits
    recipe = RECIPES["mnist-cnn"].replace(epochs=1)
    here = train_models(recipe, x, y, SETS[:2] * 2, [0, 1, 2, 3], progress=False, workers=1,
                        max_stack=2)  # fmt: skip
    fanned = train_models(recipe, x, y, SETS[:2] * 2, [0, 1, 2, 3], progress=False, workers=2,
                          max_stack=2)  # fmt: skip
    for a, b in zip(here, fanned, strict=True):
        assert a.seed == b.seed and not b.module.training
        assert_close_states(b.module.state_dict(), a.module.state_dict())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", list(RECIPES))
def test_stacked_on_cuda_trains_the_one_by_one_models(digits, name, monkeypatch):
    """On CUDA the dropout masks come from each model's own CUDA RNG state (native_dropout, as
    F.dropout); cuDNN's kernels differ more than the CPU's, hence the looser bound. TF32 (on by
    default for cuDNN convolutions) is turned off: its 1e-3 rounding would hide a wrong mask."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    x, y = digits
    recipe = RECIPES[name]
    models = train_stacked_functional(recipe, x, y, SETS, SEEDS, "cuda")
    for rows, seed, model in zip(SETS, SEEDS, models, strict=True):
        ref = train_model(recipe, x, y, rows, seed, "cuda", progress=False)
        for key, value in ref.module.state_dict().items():
            scale = max(1.0, float(value.abs().max()))
            diff = float((model.module.state_dict()[key].double() - value.double()).abs().max())
            assert diff <= 1e-3 * scale, key
