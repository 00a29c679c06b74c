import dataclasses
import hashlib

import pytest

from miaudit.errors import ConfigError
from miaudit.train import Recipe, lr_at

# If you add a Recipe field this changes (and old cache entries become misses): update it.
DEFAULT_CANONICAL = (
    '{"arch_params":{},"architecture":"mlp","batch_size":128,"epochs":20,"lr":0.1,'
    '"momentum":0.9,"nesterov":true,"optimizer":"sgd","schedule":"cosine","weight_decay":0.0}'
)


def test_key_is_sha256_of_canonical_json():
    recipe = Recipe()
    assert recipe.canonical_json() == DEFAULT_CANONICAL
    assert recipe.key() == hashlib.sha256(DEFAULT_CANONICAL.encode()).hexdigest()


def test_key_ignores_spelling_of_equal_values():
    a = Recipe(arch_params={"hidden": 8, "activation": "tanh"}, lr=1, epochs=3.0)
    b = Recipe(arch_params={"activation": "tanh", "hidden": 8}, lr=1.0, epochs=3)
    assert a.key() == b.key() and a == b and hash(a) == hash(b)
    c = Recipe(architecture="cifar-cnn", arch_params={"channels": [4, 8]})
    d = Recipe(architecture="cifar-cnn", arch_params={"channels": (4, 8)})
    assert c.key() == d.key()


@pytest.mark.parametrize(
    "change",
    [
        {"architecture": "cifar-cnn"},
        {"arch_params": {"hidden": 7}},
        {"optimizer": "adam"},
        {"lr": 0.01},
        {"momentum": 0.5},
        {"nesterov": False},
        {"weight_decay": 1e-4},
        {"schedule": "constant"},
        {"epochs": 21},
        {"batch_size": 64},
        {"augment": ["mirror"]},
        {"dp": {"epsilon": 8.0}},
        {"label_smoothing": 0.1},
        {"precision": "bf16"},
    ],
)
def test_key_changes_with_every_field(change):
    assert Recipe(**change).key() != Recipe().key()


def test_key_changes_with_epoch_fraction():
    # below 1 only for airbench94 (its trainer cuts the last epoch), so against its recipe
    airbench = Recipe(architecture="airbench94")
    assert airbench.replace(epoch_fraction=0.9).key() != airbench.key()


def test_every_field_is_covered_by_the_sensitivity_test():
    names = {f.name for f in dataclasses.fields(Recipe)}
    assert len(names) == 15, "new field: add it to test_key_changes_with_every_field"


def test_round_trip_and_frozen():
    recipe = Recipe(arch_params={"hidden": 5}, optimizer="adam", lr=1e-3, epochs=2)
    assert Recipe.from_dict(recipe.to_dict()) == recipe
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.lr = 1.0
    with pytest.raises(TypeError):
        recipe.arch_params["hidden"] = 6
    assert recipe.replace(lr=0.5).lr == 0.5 and recipe.lr == 1e-3


def test_from_dict_rejects_typo_with_suggestion():
    with pytest.raises(ConfigError) as err:
        Recipe.from_dict({"epoch": 3})
    msg = str(err.value)
    assert "'epoch'" in msg and "'epochs'" in msg and "batch_size" in msg


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"optimizer": "rmsprop"}, "optimizer"),
        ({"schedule": "step"}, "schedule"),
        ({"epochs": "3"}, "epochs"),
        ({"epochs": 2.5}, "epochs"),
        ({"nesterov": 1}, "nesterov"),
        ({"batch_size": 0}, "batch_size"),
        ({"lr": float("nan")}, "finite"),
        ({"architecture": "resnet19"}, "resnet18"),
        ({"arch_params": {"widht": 3}, "architecture": "resnet18"}, "width"),
    ],
)
def test_invalid_values_raise_config_error(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Recipe(**kwargs)


def test_cosine_schedule_reaches_zero():
    recipe = Recipe(lr=0.1)
    total = 100
    assert lr_at(recipe, 0, total) == pytest.approx(0.1)
    assert lr_at(recipe, 50, total) == pytest.approx(0.05)
    assert lr_at(recipe, total - 1, total) < 1e-4
    assert lr_at(recipe, total, total) == pytest.approx(0.0, abs=1e-12)
    assert lr_at(recipe.replace(schedule="constant"), total - 1, total) == 0.1


def test_new_fields_at_their_defaults_keep_old_keys():
    # label_smoothing 0 and dropout 0 (mlp, cifar-cnn) mean "not used": same recipe, same key.
    assert Recipe(label_smoothing=0).key() == Recipe().key() == Recipe(label_smoothing=0.0).key()
    # precision fp32 (the default) is left out of the key: every recipe keeps its key
    assert Recipe(precision="fp32").canonical_json() == DEFAULT_CANONICAL
    assert Recipe(arch_params={"dropout": 0}) == Recipe()
    assert Recipe(arch_params={"dropout": 0.0}).key() == Recipe().key()
    cifar = Recipe(architecture="cifar-cnn", arch_params={"channels": [4, 8]})
    assert cifar.replace(arch_params={"channels": [4, 8], "dropout": 0}).key() == cifar.key()
    assert Recipe(arch_params={"dropout": 0.5}).key() != Recipe().key()
    # mnist-cnn's dropout rates are not new: spelled out they stay in the key as before.
    cnn = Recipe(architecture="mnist-cnn", arch_params={"fc_dropout": 0.5})
    assert cnn.arch_params == {"fc_dropout": 0.5}


@pytest.mark.parametrize("bad", [1.0, -0.1, 2])
def test_label_smoothing_range(bad):
    with pytest.raises(ConfigError, match="label_smoothing"):
        Recipe(label_smoothing=bad)


def test_plain_drops_augmentation_regularisation_and_dp():
    fancy = Recipe(
        arch_params={"hidden": 32, "dropout": 0.3}, weight_decay=5e-4, label_smoothing=0.1,
        augment=["mirror"], lr=0.05, epochs=7,
    )  # fmt: skip
    plain = fancy.plain()
    assert plain == Recipe(arch_params={"hidden": 32}, lr=0.05, epochs=7)
    dp = Recipe(architecture="mnist-cnn", arch_params={"conv_dropout": 0.1}, dp={"epsilon": 8})
    assert dp.plain() == Recipe(architecture="mnist-cnn")


@pytest.mark.parametrize(
    ("fields", "named"),
    [({"epochs": 0}, "recipe.epochs is 0"), ({"batch_size": 0}, "recipe.batch_size is 0"),
     ({"lr": 0.0}, "recipe.lr is 0.0"), ({"lr": -1e-3}, "recipe.lr is -0.001"),
     ({"lr": float("nan")}, "recipe.lr is nan"), ({"epochs": 0, "dp": {"epsilon": 8.0}},
                                                  "recipe.epochs is 0")],
    ids=str,
)
def test_a_recipe_that_cannot_train_is_refused_with_the_fix(fields, named):
    with pytest.raises(ConfigError) as err:
        Recipe(**fields)
    assert str(err.value).startswith(f"{named}, which cannot train a model: it must be ")
    assert ". Set recipe." in str(err.value)


def test_from_dict_names_the_recipes_place_in_its_config():
    with pytest.raises(ConfigError, match=r"^reference_recipe\.epochs is 0.*Set "
                                          r"reference_recipe\.epochs to 1 or more"):
        Recipe.from_dict({"epochs": 0}, "reference_recipe")
    with pytest.raises(ConfigError, match=r"^recipes\.strong\.lr is nan"):
        Recipe.from_dict({"lr": float("nan")}, "recipes.strong")
    # a recipe changed in Python goes through the same rule
    with pytest.raises(ConfigError, match=r"^recipe\.epochs is 0"):
        Recipe().replace(epochs=0)


def test_the_smallest_trainable_values_pass():
    recipe = Recipe.from_dict({"epochs": 1, "batch_size": 1, "lr": 1e-9}, "recipe")
    assert (recipe.epochs, recipe.batch_size, recipe.lr) == (1, 1, 1e-9)
    assert Recipe(epochs=2.0).epochs == 2  # a whole float is still an epoch count
