"""airbench94 from a run config: a tiny run on synthetic CIFAR-shaped images trains its target
and reference with the airbench94 trainer and queries them on its test-time views."""

from __future__ import annotations

import numpy as np

from miaudit.config import config_from_dict
from miaudit.models.airbench import TTA_QUERIES
from miaudit.pipeline import run
from miaudit.signals import SignalBank
from miaudit.train.airbench import AIRBENCH94_RECIPE


def test_a_run_config_trains_and_queries_airbench94(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "images.npz"
    np.savez(path, X=rng.random((160, 3, 32, 32), dtype=np.float32),
             y=rng.integers(0, 4, 160))  # fmt: skip
    recipe = {**AIRBENCH94_RECIPE, "arch_params": {"widths": [8, 8, 8]}, "batch_size": 16,
              "epochs": 1, "epoch_fraction": 1.0}  # fmt: skip
    cfg = config_from_dict({
        "name": "airbench", "seed": 0, "dataset": {"name": str(path)},
        "split": {"audit": 64, "public": 64, "population": 32}, "design": "offline",
        "models": 2, "recipe": recipe, "signals": {"queries": list(TTA_QUERIES)},
        "attacks": ["loss", "confidence", "gradient-norm"], "metrics": {"bootstrap": 0},
        "output": str(tmp_path / "run"), "cache_dir": str(tmp_path / "cache"),
    })  # fmt: skip
    result, out = run(cfg, progress=False, echo=False)
    assert result.meta["models_trained"] == 2
    bank = SignalBank.load(out / "bank.npz")
    assert bank.logits.shape[:1] == (2,) and bank.logits.shape[2:] == (len(TTA_QUERIES), 4)
    assert np.isfinite(bank.logits).all()
