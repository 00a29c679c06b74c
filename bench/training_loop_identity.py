"""Do two source trees train byte-identical models? sha256 of every training path's weights.

Trains a few representative models with whichever ``miaudit`` is first on ``sys.path`` and
prints one line per result: a name and the sha256 of its state dict's safetensors bytes (final
weights, each checkpoint snapshot), of its per-epoch losses and, for DP-SGD, of its privacy
record. Run it against two trees and diff the output, e.g. before and after a refactor of the
training loop (``git worktree add /tmp/loop-baseline HEAD`` gives the "before" tree)::

    PYTHONPATH=/tmp/loop-baseline/src OMP_NUM_THREADS=1 .venv/bin/python \
        bench/training_loop_identity.py > /tmp/before.txt
    PYTHONPATH=src OMP_NUM_THREADS=1 .venv/bin/python \
        bench/training_loop_identity.py > /tmp/after.txt
    diff /tmp/before.txt /tmp/after.txt && echo identical

Paths covered: the plain loop (mlp; Adam with label smoothing and checkpoints; dropout, which
draws from torch's global RNG while training), a CNN with augmentation, checkpoints and an epoch
callback, a causal LM (next-token loss), DP-SGD (Opacus: Poisson sampling, noise, accounting,
checkpoints), stacked groups (``train_stacked``, and ``train_models`` with mixed sizes, an
unstackable recipe and two worker processes) and forgetting copies (``forget``, trained by
the same loop). One intra-op thread throughout, so the CPU's summation order is fixed.
About a minute on one core.
"""

from __future__ import annotations

import hashlib
import json
import sys

import numpy as np
import torch
from safetensors.torch import save
from sklearn.datasets import load_digits


def digest_state(state: dict[str, torch.Tensor]) -> str:
    # clone(): safetensors refuses tensors sharing storage (tied weights of the LM)
    return hashlib.sha256(save({k: v.detach().cpu().clone() for k, v in state.items()})).hexdigest()


def digest_json(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def report(name: str, model: object) -> None:
    """Print the digests of one TrainedModel: weights, losses, snapshots, privacy."""
    print(f"{name:38s} weights   {digest_state(model.module.state_dict())}")
    print(f"{name:38s} losses    {digest_json([float(v) for v in model.losses])}")
    for step, state in sorted(model.snapshots.items()):
        print(f"{name:38s} step{step:<5d} {digest_state(state)}")
    if model.privacy is not None:
        print(f"{name:38s} privacy   {digest_json(model.privacy)}")


def lm_ids(n: int = 32, width: int = 10) -> np.ndarray:
    """Right-padded token sequences (pad 0) of a repeating pattern (tests/train/test_lm_trainer)."""
    rng = np.random.default_rng(0)
    ids = np.zeros((n, width), dtype=np.float32)
    for i, length in enumerate(rng.integers(3, width + 1, size=n)):
        start = rng.integers(1, 19)
        ids[i, :length] = 1 + (start + np.arange(length)) % 19
    return ids


def plain_paths(x: np.ndarray, y: np.ndarray) -> object:
    """The one-model loop in its variants; returns the first model (forgetting's target)."""
    from miaudit.train import CheckpointSpec, Recipe, predict_logits, train_model

    rows = np.arange(200)
    mlp = Recipe(architecture="mlp", lr=0.1, epochs=4, batch_size=32)
    base = train_model(mlp, x, y, rows, seed=0, progress=False)
    report("plain mlp", base)
    adam = Recipe(architecture="mlp", arch_params={"hidden": 32, "activation": "tanh"},
                  optimizer="adam", lr=1e-2, label_smoothing=0.1, epochs=3, batch_size=32)
    spec = CheckpointSpec(epochs=[1, 2], steps=[5])
    report("plain mlp adam smoothing ckpt", train_model(adam, x, y, rows, seed=1, progress=False,
                                                        checkpoints=spec))
    dropout = mlp.replace(arch_params={"dropout": 0.3}, epochs=2)
    report("plain mlp dropout ckpt", train_model(dropout, x, y, rows, seed=2, progress=False,
                                                 checkpoints=CheckpointSpec(steps=[3, 9])))
    cnn = Recipe(architecture="mnist-cnn", lr=0.05, epochs=2, batch_size=64,
                 augment=["crop", "mirror", {"name": "cutout", "size": 3}])
    seen: list[float] = []

    def evaluate(info: object) -> None:  # an epoch callback that switches to eval mode
        seen.append(float(predict_logits(info.module, x[200:]).mean()))

    report("cnn augment ckpt callback", train_model(
        cnn, x, y, rows, seed=3, progress=False, on_epoch_end=evaluate,
        checkpoints=CheckpointSpec(epochs=[1])))
    print(f"{'cnn augment ckpt callback':38s} callback  {digest_json(seen)}")
    lm = Recipe(architecture="gpt-small", optimizer="adam", lr=0.03, epochs=4, batch_size=8,
                schedule="constant",
                arch_params={"n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 20})
    ids = lm_ids()
    report("causal lm", train_model(lm, ids, np.zeros(len(ids), dtype=np.int64),
                                    np.arange(len(ids)), seed=4, progress=False))
    return base


def dp_paths(x: np.ndarray, y: np.ndarray) -> None:
    from miaudit.train import CheckpointSpec, Recipe, train_model

    recipe = Recipe(epochs=2, batch_size=64, lr=0.1, label_smoothing=0.1,
                    arch_params={"dropout": 0.2}, dp={"epsilon": 8.0, "accountant": "rdp"})
    report("dp-sgd mlp dropout smoothing ckpt", train_model(
        recipe, x, y, np.arange(256), seed=3, progress=False,
        checkpoints=CheckpointSpec(epochs=[1], steps=[3])))
    cnn = Recipe(architecture="mnist-cnn", epochs=1, batch_size=32, lr=0.05,
                 dp={"epsilon": 50.0, "accountant": "rdp", "max_grad_norm": 0.5})
    report("dp-sgd cnn", train_model(cnn, x, y, np.arange(0, 300, 2), seed=5, progress=False))


def stacked_paths(x: np.ndarray, y: np.ndarray) -> None:
    from miaudit.train import CheckpointSpec, Recipe, train_models
    from miaudit.train.stacked import train_stacked

    sgd = Recipe(architecture="mlp", arch_params={"hidden": 24, "activation": "tanh"},
                 momentum=0.9, nesterov=True, weight_decay=5e-4, lr=0.1, epochs=3, batch_size=32)
    adam = Recipe(architecture="mlp", arch_params={"activation": "relu"}, optimizer="adam",
                  lr=1e-2, weight_decay=1e-4, label_smoothing=0.2, schedule="constant",
                  epochs=3, batch_size=32)
    sets = [np.arange(0, 100), np.arange(100, 200), np.arange(50, 150)]
    spec = CheckpointSpec(epochs=[1], steps=[6])
    for name, recipe in (("sgd", sgd), ("adam smoothing", adam)):
        for k, model in enumerate(train_stacked(recipe, x, y, sets, [0, 1, 7], checkpoints=spec)):
            report(f"stacked {name} [{k}]", model)
    mixed = [sets[0], np.arange(200, 250), sets[1], np.arange(250, 300)]
    for k, model in enumerate(train_models(sgd, x, y, mixed, [4, 3, 2, 1], progress=False,
                                           workers=1, max_stack=10)):
        report(f"train_models mixed sizes [{k}]", model)
    cnn = Recipe(architecture="mnist-cnn", epochs=1, batch_size=64, lr=0.05)  # unstackable
    for k, model in enumerate(train_models(cnn, x, y, sets[:2], [0, 1], progress=False,
                                           workers=1)):
        report(f"train_models cnn one by one [{k}]", model)
    for k, model in enumerate(train_models(sgd.replace(epochs=2), x, y, sets, [0, 1, 7],
                                           progress=False, workers=2, checkpoints=spec)):
        report(f"train_models 2 workers [{k}]", model)


def main() -> None:
    torch.set_num_threads(1)
    import miaudit
    from miaudit.train import Recipe
    from miaudit.train.forgetting import forget

    print(f"# miaudit from {miaudit.__file__}", file=sys.stderr)
    data = load_digits()
    x = (data.images[:300] / 16.0).astype(np.float32)[:, None]  # [N, 1, 8, 8]
    y = data.target[:300].astype(np.int64)
    target = plain_paths(x, y)
    dp_paths(x, y)
    stacked_paths(x, y)
    recipe = Recipe(architecture="mlp", lr=0.05, epochs=2, batch_size=32, schedule="constant")
    report("forgetting copy", forget(target, recipe, x, y, np.arange(200, 300), seed=5))


if __name__ == "__main__":
    main()
