"""Batched augmentations (miaudit.train.augment) and their use in recipes and training."""

import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.train import Recipe, train_model
from miaudit.train.augment import build_augmentation, normalize_augmentation
from miaudit.train.stacked import can_stack

ALL = ["crop", "mirror", "cutout", "autoaugment"]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def images(b=16, c=1, size=8, seed=0):
    return torch.rand(b, c, size, size, generator=gen(seed))


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("channels", [1, 3])
def test_shape_range_and_determinism(name, channels):
    aug = build_augmentation([name], (channels, 8, 8))
    x = images(c=channels)
    a, b = aug(x.clone(), gen(1)), aug(x.clone(), gen(1))
    assert a.shape == x.shape and a.dtype == x.dtype
    assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0
    assert torch.equal(a, b)
    assert not torch.equal(aug(x.clone(), gen(2)), a)  # another seed, another draw


def test_mirror_flips_exactly():
    x = images()
    out = build_augmentation([{"name": "mirror", "p": 1.0}])(x, gen())
    assert torch.equal(out, x.flip(-1))
    assert torch.equal(build_augmentation([{"name": "mirror", "p": 0.0}])(x, gen()), x)
    half = build_augmentation(["mirror"])(images(b=200), gen())
    flipped = [torch.equal(o, i.flip(-1)) for o, i in zip(half, images(b=200), strict=True)]
    assert 60 < sum(flipped) < 140


def test_crop_shifts_a_lit_pixel_by_at_most_padding():
    pad = 2
    x = torch.zeros(64, 1, 8, 8)
    x[:, 0, 4, 3] = 1.0
    out = build_augmentation([{"name": "crop", "padding": pad}])(x, gen())
    shifts = set()
    for img in out:
        lit = torch.nonzero(img[0])
        assert len(lit) == 1 and float(img.sum()) == 1.0  # a shift by <= 2 keeps it inside
        dy, dx = int(lit[0, 0]) - 4, int(lit[0, 1]) - 3
        assert abs(dy) <= pad and abs(dx) <= pad
        shifts.add((dy, dx))
    assert len(shifts) > 5
    # Zero padding: a shifted full image has zero rows/columns where the shift came from.
    ones = build_augmentation([{"name": "crop", "padding": 4}])(torch.ones(32, 3, 8, 8), gen())
    assert set(ones.unique().tolist()) <= {0.0, 1.0} and float(ones.sum()) < 32 * 3 * 64


def test_cutout_zeroes_a_square():
    x = torch.ones(200, 2, 10, 10)
    out = build_augmentation([{"name": "cutout", "size": 4}])(x, gen())
    zero = out == 0
    assert torch.equal(zero[:, 0], zero[:, 1])  # all channels
    counts = zero[:, 0].sum(dim=(1, 2))
    assert int(counts.max()) == 16 and int(counts.min()) >= 4  # clipped at the border
    full = 0
    for mask, n in zip(zero[:, 0], counts, strict=True):
        rows, cols = torch.nonzero(mask, as_tuple=True)
        box = (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1)
        assert int(box) == int(n)  # one axis-aligned rectangle
        full += int(n) == 16
    assert full > 50
    # A fraction of the side; p=0 leaves the image alone.
    frac = build_augmentation([{"name": "cutout", "size": 0.5}])(torch.ones(8, 1, 8, 8), gen())
    assert int((frac == 0).sum(dim=(1, 2, 3)).max()) == 16
    assert torch.equal(build_augmentation([{"name": "cutout", "p": 0}])(x, gen()), x)


def test_autoaugment_changes_images_in_range():
    x = images(b=32, c=3)
    out = build_augmentation(["autoaugment"])(x, gen())
    assert float(out.min()) >= 0 and float(out.max()) <= 1
    changed = (out - x).abs().flatten(1).amax(1) > 1e-4
    assert 0 < int(changed.sum())
    gray = build_augmentation(["autoaugment"])(images(b=32, c=1), gen())
    assert gray.shape == (32, 1, 8, 8)


def test_autoaugment_leaves_global_rng_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    build_augmentation(["autoaugment"])(images(c=3), gen())
    assert torch.equal(torch.rand(3), expected)


def test_combination_applies_in_order():
    x = images()
    spec = [{"name": "mirror", "p": 1.0}, {"name": "cutout", "size": 3}]
    cutout = build_augmentation([spec[1]])
    expected = cutout(x.flip(-1), gen(3))
    # mirror with p=1 draws one number per image before cutout draws its own.
    g = gen(3)
    torch.rand(len(x), generator=g)
    assert torch.equal(build_augmentation(spec)(x, gen(3)), cutout(x.flip(-1), g))
    assert not torch.equal(build_augmentation(spec[::-1])(x, gen(3)), expected)
    everything = build_augmentation(ALL)(images(c=3), gen())
    assert everything.shape == (16, 3, 8, 8)


@pytest.mark.parametrize(
    "spec, words",
    [
        (["flip"], ["'flip'", "crop", "autoaugment"]),
        ([{"name": "crop", "pad": 2}], ["'pad'", "padding"]),
        ([{"name": "cutout", "size": 0}], ["cutout.size"]),
        ([{"name": "cutout", "size": 1.5}], ["cutout.size"]),
        ([{"name": "mirror", "p": 2}], ["mirror.p"]),
        ([{"name": "crop", "padding": -1}], ["crop.padding"]),
        ("crop", ["list"]),
        ([{"padding": 2}], ["'name'"]),
    ],
)
def test_config_errors(spec, words):
    with pytest.raises(ConfigError) as err:
        build_augmentation(spec)
    for word in words:
        assert word in str(err.value)
    with pytest.raises(ConfigError):
        Recipe(augment=spec)


def test_tabular_data_is_rejected():
    with pytest.raises(ConfigError, match="image"):
        build_augmentation(["mirror"], (40,))
    assert build_augmentation([], (40,)) is None
    with pytest.raises(ConfigError, match="channels"):
        build_augmentation(["autoaugment"], (2, 8, 8))
    x = torch.rand(32, 5).numpy()
    y = torch.arange(32).remainder(2).numpy()
    with pytest.raises(ConfigError, match="image"):
        train_model(Recipe(augment=["crop"], epochs=1), x, y, range(32), 0, progress=False)


def test_recipe_field_key_and_round_trip():
    plain = Recipe(architecture="cifar-cnn")
    assert "augment" not in plain.canonical_json()
    assert plain.key() == Recipe(architecture="cifar-cnn", augment=[]).key()
    a = Recipe(augment=["crop", {"name": "cutout", "size": 4}])
    b = Recipe(augment=[{"name": "crop", "padding": 4}, {"name": "cutout", "size": 4, "p": 1}])
    assert a.key() == b.key() and a == b and hash(a) == hash(b)
    assert a.key() != Recipe(augment=["cutout", "crop"]).key() != plain.key()
    assert Recipe.from_dict(a.to_dict()) == a
    assert a.to_dict()["augment"] == normalize_augmentation(["crop", {"name": "cutout", "size": 4}])
    assert can_stack(Recipe()) and not can_stack(Recipe(augment=["mirror"]))


def test_recipe_with_augmentation_trains_reproducibly(digits):
    x, y = digits[0][:64], digits[1][:64]
    recipe = Recipe(
        architecture="cifar-cnn",
        arch_params={"channels": [4, 8]},
        augment=["crop", "mirror", "cutout", "autoaugment"],
        epochs=2,
        batch_size=32,
        lr=0.05,
    )
    a = train_model(recipe, x, y, range(64), seed=3, progress=False)
    b = train_model(recipe, x, y, range(64), seed=3, progress=False)
    plain = train_model(recipe.replace(augment=()), x, y, range(64), seed=3, progress=False)
    assert len(a.losses) == 2 and all(map(torch.isfinite, map(torch.tensor, a.losses)))
    for pa, pb in zip(a.module.parameters(), b.module.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert a.losses == b.losses and a.losses != plain.losses


def test_dp_with_augment_is_rejected():
    with pytest.raises(ConfigError, match="dp"):
        Recipe(augment=["mirror"], dp={"epsilon": 8.0})
