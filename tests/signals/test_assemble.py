"""The one assembly from models to a bank (signals.assemble): what it computes, what it
records when it cannot, and that every caller goes through it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import miaudit
from miaudit.errors import ConfigError
from miaudit.protocol import make_design, make_split
from miaudit.signals.assemble import (
    Signals,
    SignalSpec,
    assemble_bank,
    query_signals,
    require_channels,
)
from miaudit.signals.query import per_sample_grad_norms, query_logits


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5)).astype(np.float32)
    y = rng.integers(0, 3, size=60)
    torch.manual_seed(0)
    models = [torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
              for _ in range(3)]
    return x, y, models


def test_modules_and_given_outputs_are_queried_into_one_logits_array(data):
    x, y, models = data
    rows = np.arange(10, 50)
    spec = SignalSpec(queries=("plain",), grad_norm=True)
    direct = query_logits(models, x, rows, ["plain"], "tabular", progress=False)
    signals = query_signals([direct[0], models[1], models[2]], x, y, rows, "tabular", spec,
                            progress=False, black_box_reason="the target is outputs")
    np.testing.assert_array_equal(signals.logits, direct)
    assert "grad_norm" not in signals.channels  # a black box among the models
    assert "white-box" in signals.missing["grad_norm"]
    assert "the target is outputs" in signals.missing["grad_norm"]
    assert "precomputed outputs cannot be queried" in signals.missing["boundary_distance"]
    with pytest.raises(ConfigError, match="signals.grad_norm is on"):
        require_channels(signals, spec)


def test_channels_and_the_defence(data):
    x, y, models = data
    rows = np.arange(30)
    spec = SignalSpec(queries=("plain",), grad_norm=True, defence="label-only")
    signals = query_signals(models, x, y, rows, "tabular", spec, progress=False)
    expected = np.stack([per_sample_grad_norms(m, x, y, rows) for m in models])
    np.testing.assert_allclose(signals.channels["grad_norm"], expected, rtol=1e-6)
    plain = query_logits(models, x, rows, ["plain"], "tabular", progress=False)
    # label-only keeps the argmax and nothing else of the outputs
    np.testing.assert_array_equal(signals.logits.argmax(-1), plain.argmax(-1))
    assert len(np.unique(signals.logits.max(-1))) == 1
    require_channels(signals, spec)  # everything asked for is there
    assert "off by default" in signals.missing["boundary_distance"]


def test_a_failing_gradient_is_recorded_not_raised(data):
    x, y, _ = data

    class NoVmap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(5, 3)

        def forward(self, inputs):
            # leaving torch for numpy works on a batch but not under torch.func's vmap
            return self.layer(torch.as_tensor(inputs.detach().numpy()))

    signals = query_signals([NoVmap()], x, y, np.arange(8), "tabular",
                            SignalSpec(grad_norm=True), progress=False)
    assert "grad_norm" not in signals.channels
    assert signals.missing["grad_norm"].startswith("per-sample gradients failed")


def test_a_design_lays_the_signals_out_as_its_bank(data):
    x, y, models = data
    split = make_split(len(y), 20, 30, 10, seed=1)
    design = make_design(split, 3, "offline", seed=1)
    signals = query_signals(models, x, y, split.rows, "tabular", SignalSpec(), progress=False)
    bank = design.bank(signals, y)
    np.testing.assert_array_equal(bank.labels, y[split.rows])
    np.testing.assert_array_equal(bank.membership, design.membership)
    assert bank.audit.sum() == 20 and bank.population.sum() == 10
    taken = signals.take([0, 2])
    assert taken.logits.shape[0] == 2
    again = assemble_bank(Signals(signals.logits), bank.labels, design.membership,
                          design.audit_mask(), design.population_mask())
    np.testing.assert_array_equal(again.logits, bank.logits)


def test_no_module_builds_a_bank_another_way():
    """Runs, audits and studies all reach a bank through signals.assemble (the config check's
    nominal bank in attacks/fit.py is no run's: it holds a design's membership only, and the
    config check must not import torch, which the assembly does)."""
    src = Path(miaudit.__file__).parent
    allowed = {src / "signals" / "assemble.py", src / "signals" / "bank.py",
               src / "attacks" / "fit.py"}
    offenders = [str(p.relative_to(src)) for p in src.rglob("*.py")
                 if p not in allowed and re.search(r"\bSignalBank\(", p.read_text())]
    assert offenders == []
