"""Queries that replay a recipe's training augmentation: cropP-flip-K (P-pixel shifts plus a
random mirror, drawn per row from seed K), `training_queries` and `untrained_queries`."""

import numpy as np
import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.signals.query import (
    augmented_queries,
    crop_flip_padding,
    make_query,
    training_queries,
    untrained_queries,
)

CROP1 = [{"name": "crop", "padding": 1}, "mirror"]


def test_crop_flip_names_and_paddings():
    assert crop_flip_padding("crop-flip-3") == 4  # unchanged: LiRA's and RAPID's 4 pixels
    assert crop_flip_padding("crop1-flip-3") == 1 and crop_flip_padding("crop12-flip-0") == 12
    assert crop_flip_padding("mirror") is None and crop_flip_padding("crop-3") is None
    with pytest.raises(ConfigError, match=">= 1"):
        crop_flip_padding("crop0-flip-1")
    with pytest.raises(ConfigError, match="cropP-flip-K"):
        make_query("crop1-flip", 1, "image")


def test_crop_flip_4_is_unchanged_and_crop4_flip_is_the_same_draw():
    x = torch.rand(5, 1, 10, 10)
    rows = np.arange(5)
    old = make_query("crop-flip-2", 5, "image")(x, rows)
    assert torch.equal(old, make_query("crop4-flip-2", 5, "image")(x, rows))
    # the draw itself (seeded per row by [K, 7], offsets in [0, 2P], flip < 0.5) as before
    rng = np.random.default_rng([2, 7])
    offsets, flips = rng.integers(0, 9, size=(5, 2)), rng.random(5) < 0.5
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
    for i in range(5):
        dy, dx = offsets[i]
        want = padded[i, :, dy:dy + 10, dx:dx + 10]
        assert torch.equal(old[i], want.flip(-1) if flips[i] else want)


def test_small_crops_shift_by_at_most_their_padding_and_cover_every_shift():
    x = torch.zeros(400, 1, 9, 9)
    x[:, 0, 4, 4] = 1.0
    out = make_query("crop1-flip-5", 400, "image")(x, np.arange(400))
    assert torch.equal(out.sum(dim=(1, 2, 3)), torch.ones(400))  # never cropped away
    ys, xs = torch.nonzero(out[:, 0], as_tuple=True)[1:]
    assert set(ys.tolist()) == {3, 4, 5} and set(xs.tolist()) == {3, 4, 5}
    again = make_query("crop1-flip-5", 400, "image")(x, np.arange(400))
    assert torch.equal(out, again)  # deterministic per row


def test_training_queries_replay_the_recipe():
    assert training_queries(["mirror"], 2) == ["plain", "mirror"]
    assert training_queries(["mirror"], 1) == ["plain"]
    assert training_queries(["crop", "mirror"], 8) == augmented_queries(8)
    assert training_queries(CROP1, 4) == ["plain", "mirror", "crop1-flip-1", "crop1-flip-2"]
    assert training_queries([], 1) == ["plain"]
    with pytest.raises(ConfigError, match="2 queries that replay it"):
        training_queries(["mirror"], 4)
    with pytest.raises(ConfigError, match="1 queries that replay it"):
        training_queries([], 2)
    with pytest.raises(ConfigError, match="at least one query"):
        training_queries(["mirror"], 0)


def test_untrained_queries_are_the_transforms_training_never_applied():
    assert untrained_queries(augmented_queries(8), ["mirror"]) == augmented_queries(8)[2:]
    assert untrained_queries(training_queries(CROP1, 8), CROP1) == []
    assert untrained_queries(["plain", "mirror"], []) == ["mirror"]
    assert untrained_queries(["plain", "crop1-flip-1"], [{"name": "crop", "padding": 1}]) == [
        "crop1-flip-1"]  # crops without mirror: no crop-flip query replays them
    assert untrained_queries(["crop-flip-1", "crop1-flip-1"], CROP1) == ["crop-flip-1"]
    assert untrained_queries(["mirror"], [{"name": "mirror", "p": 0.0}]) == ["mirror"]
    assert untrained_queries(["plain", "token-dropout-1"], []) == []
