"""The ordinary trainer on a causal LM: the next-token loss over non-pad targets,
labels unused; DP-SGD refused with a clear error."""

import numpy as np
import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.models.text import next_token_loss
from miaudit.train import Recipe, train_model
from miaudit.train.common import derive_seeds, isolated_rng

LM = {"n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 20}
RECIPE = Recipe(architecture="gpt-small", arch_params=LM, optimizer="adam", lr=0.03, epochs=20,
                batch_size=32, schedule="constant")  # fmt: skip


def _ids(n: int = 32, width: int = 10) -> np.ndarray:
    """Right-padded (pad 0) sequences of a repeating pattern: learnable, of varied length."""
    rng = np.random.default_rng(0)
    ids = np.zeros((n, width), dtype=np.float32)
    for i, length in enumerate(rng.integers(3, width + 1, size=n)):
        start = rng.integers(1, 19)
        ids[i, :length] = 1 + (start + np.arange(length)) % 19
    return ids


def test_a_causal_lm_trains_on_the_next_token_loss_and_ignores_labels():
    x = _ids()
    rows = np.arange(len(x))
    a = train_model(RECIPE, x, np.zeros(len(x), dtype=np.int64), rows, seed=1, progress=False)
    b = train_model(RECIPE, x, np.arange(len(x)) % 3, rows, seed=1, progress=False)
    for (ka, va), (kb, vb) in zip(a.module.state_dict().items(), b.module.state_dict().items(),
                                  strict=True):  # fmt: skip
        assert ka == kb and torch.equal(va, vb)  # labels are unused
    assert a.losses[-1] < 0.5 * a.losses[0]
    # epoch 1 is one batch: its loss is next_token_loss of the freshly built model
    init_seed, _ = derive_seeds(1)
    with isolated_rng(torch.device("cpu"), init_seed):
        fresh = build_model("gpt-small", (x.shape[1],), 1, **LM)
    with torch.no_grad():
        expected = float(next_token_loss(fresh.train()(torch.from_numpy(x)),
                                         torch.from_numpy(x), 0))  # fmt: skip
    assert a.losses[0] == pytest.approx(expected, rel=1e-5)


def test_dp_sgd_on_a_causal_lm_is_refused_clearly():
    recipe = Recipe(architecture="gpt-small", arch_params=LM, epochs=1, batch_size=8,
                    dp={"epsilon": 8.0})  # fmt: skip
    x = _ids(8)
    with pytest.raises(ConfigError, match="not supported for the causal LM"):
        train_model(recipe, x, np.zeros(8, dtype=np.int64), np.arange(8), seed=0,
                    progress=False)  # fmt: skip
