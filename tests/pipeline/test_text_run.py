"""A text run end to end through the ordinary pipeline: a text file -> MiniLM WordPiece token
ids -> text-cnn target and references -> the one bank (with the texts' sizes) -> classifier
attacks and the model-free blind baseline."""

from __future__ import annotations

import numpy as np
import pandas as pd

from miaudit.config import config_from_dict
from miaudit.pipeline import run
from miaudit.signals import SignalBank


def test_a_text_classifier_is_audited_like_any_other(tmp_path, docstring_texts):
    table = pd.DataFrame(dict(zip(("text", "label"), docstring_texts, strict=True)))
    path = tmp_path / "docstrings.csv"
    table.to_csv(path, index=False)
    n = len(table)
    cfg = config_from_dict({
        "name": "text", "seed": 0, "output": str(tmp_path / "run"),
        "dataset": {"name": str(path), "options": {"text_column": "text",
                                                   "label_column": "label"},
                    "max_length": 24},
        "split": {"audit": n * 2 // 5, "public": n * 2 // 5, "population": n // 10},
        "models": 3,
        "recipe": {"architecture": "text-cnn", "arch_params": {"embed_dim": 16, "channels": 16},
                   "optimizer": "adam", "lr": 0.01, "epochs": 15, "batch_size": 16},
        "signals": {"grad_norm": True},
        "attacks": ["loss", "calibrated-loss", "lira-offline-fixed-variance", "rmia",
                    "gradient-norm", "blind"],
        "metrics": {"bootstrap": 20},
    })
    result, out = run(cfg, progress=False, echo=False)
    assert {o.name for o in result.outcomes} == set(cfg.attacks)
    bank = SignalBank.load(out / "bank.npz")
    assert bank.n_queries == 1 and bank.has_text
    lengths = {len(t) for t in table["text"]}
    assert len(bank.text_chars) == bank.n_samples and set(bank.text_chars) <= lengths
    assert "grad_norm" in bank.channels
    # the target fits its training texts: a real model, not noise
    target = result.meta["models"][0]
    assert target["train_acc"] > 0.8 > target["test_acc"] - 0.2
    # long docstrings were cut to max_length, and the run says how many
    assert any("longer than 24 tokens" in w for w in result.meta.get("warnings", []))
    for outcome in result.outcomes:
        assert 0.0 <= outcome.metrics.auc <= 1.0
    blind = result.outcome("blind").cost
    assert (blind.models, blind.queries_per_sample, blind.train_seconds) == (0, 0.0, 0.0)


def test_the_pretrained_encoder_runs_through_the_same_pipeline(tmp_path, docstring_texts):
    """MiniLM (from the package wheel, offline) fine-tuned as target and references: the run
    trains, caches and queries it like any model (one epoch, top layer only: seconds)."""
    table = pd.DataFrame(dict(zip(("text", "label"), docstring_texts, strict=True)))
    table = table.iloc[::2].reset_index(drop=True)
    path = tmp_path / "docstrings.csv"
    table.to_csv(path, index=False)
    n = len(table)
    cfg = config_from_dict({
        "name": "minilm", "seed": 0, "output": str(tmp_path / "run"),
        "dataset": {"name": str(path), "options": {"text_column": "text",
                                                   "label_column": "label"},
                    "max_length": 16},
        "split": {"audit": n * 2 // 5, "public": n * 2 // 5, "population": 0},
        "models": 2,
        "recipe": {"architecture": "minilm", "arch_params": {"train_layers": 1},
                   "optimizer": "adam", "lr": 0.001, "epochs": 1, "batch_size": 16},
        "attacks": ["loss", "calibrated-loss", "blind"],
        "metrics": {"bootstrap": 0},
    })
    result, out = run(cfg, progress=False, echo=False)
    assert [o.name for o in result.outcomes] == cfg.attacks
    bank = SignalBank.load(out / "bank.npz")
    assert bank.logits.shape[-1] == 4 and np.isfinite(bank.logits).all()
    assert result.meta["models_trained"] == 2
