"""White-box gradient canaries in one DP-SGD run (miaudit.train.gradient_canaries, scored by
miaudit.privacy.gradient_canary_scores; Steinke, Nasr & Jagielski 2023, "Privacy Auditing
with One (1) Training Run"): the canaries enter the step exactly as an example's clipped
gradient, the one-run bounds stay below a correct claim, find the planted bug (noise × 0.25) in
one run, and nothing changes for runs without them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.privacy.gradient_canary_scores import (
    canary_scores,
    estimated_noise,
    gradient_canary_audit,
)
from miaudit.train import Recipe, dp
from miaudit.train.gradient_canaries import GradientCanaries

N, HIDDEN, M, CLAIM, DELTA = 512, 256, 1000, 4.0, 1e-5
# 4 Poisson-sampled steps per epoch (q = 1/4), 40 steps; the noise is the accountant's for ε = 4.
POISSON = Recipe(epochs=10, batch_size=128, lr=0.1, arch_params={"hidden": HIDDEN},
                 dp={"epsilon": CLAIM, "delta": DELTA, "accountant": "rdp"})
# Full batches (q = 1), 10 steps: the Gaussian mechanism composed, the strongest canaries.
FULL_BATCH = Recipe(epochs=10, batch_size=N, lr=0.1, arch_params={"hidden": HIDDEN},
                    dp={"epsilon": CLAIM, "delta": DELTA, "accountant": "rdp"})
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def data():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data[:N] / 16.0).astype(np.float32), d.target[:N].astype(np.int64)


def _train(data, recipe, seed, canaries=None):
    x, y = data
    return dp.train_model_dp(recipe, x, y, np.arange(N), seed=seed, progress=False,
                             gradient_canaries=canaries)  # fmt: skip


def _scaled_noise(monkeypatch, factor):
    """Plant the bug: Opacus adds ``factor`` × the claimed noise; the accountant's claim (and
    the canaries' idea of σ) is unchanged."""
    real = dp._make_private

    def bugged(*args, **kwargs):
        private = real(*args, **kwargs)
        private.strategy.optimizer.noise_multiplier *= factor
        return private

    monkeypatch.setattr(dp, "_make_private", bugged)


def _audit(data, recipe, seed, guesses=None):
    canaries = GradientCanaries(M, seed=seed)
    model = _train(data, recipe, seed, canaries)
    record = canaries.record
    assert record is not None and record.m == M
    assert model.privacy["gradient_canaries"] == {"count": M, "kind": "dirac", "seed": seed,
                                                  "coordinates": "quiet"}
    return record, gradient_canary_audit(record, guesses=guesses, delta=DELTA)


def test_canaries_enter_the_step_as_clipped_examples(data, monkeypatch):
    # Without noise, a canary's recorded x = B·⟨ĝ, e_j⟩/C is exactly 1 in the steps it joined
    # and 0 otherwise on a coordinate no data gradient reaches (a first-layer weight fed by a
    # pixel blank in every training row): Opacus divided it by the expected batch size B like
    # a real example's clipped gradient, and only included canaries ever join.
    _scaled_noise(monkeypatch, 0.0)
    canaries = GradientCanaries(M, seed=7)
    _train(data, POISSON, 7, canaries)
    r = canaries.record
    assert r.steps == 40 and r.sample_rate == 0.25 and r.expected_batch_size == 128
    assert (r.sampled[~r.included] == 0).all() and r.sampled[r.included].min() > 0
    assert 0.2 < r.sampled[r.included].mean() / r.steps < 0.3  # Poisson at q = 1/4
    blank = np.flatnonzero((data[0] == 0).all(axis=0))
    j = r.coordinates
    dead = (j < HIDDEN * 64) & np.isin(j % 64, blank)  # hidden.weight is [HIDDEN, 64], first
    # The quiet choice: most canaries on the 6 × 256 weights fed by blank pixels, the rest on
    # weights whose gradient was zero on every probed row too (pixels lit in 1 to 12 rows).
    assert dead.sum() > M // 2
    x = r.projections[:, dead]
    assert np.allclose(x, np.round(x), atol=1e-5) and set(np.unique(np.round(x))) <= {0.0, 1.0}
    assert np.array_equal(np.round(x).sum(axis=0), r.sampled[dead])
    assert estimated_noise(r) == 0.0


def test_without_canaries_training_is_unchanged(data, monkeypatch):
    plain = _train(data, POISSON, 3)
    assert "gradient_canaries" not in plain.privacy
    # Canaries that all lose their coin flip add zeros and draw from their own generators: the
    # run is bit for bit the canary-free one (same noise, same batches, same weights).
    monkeypatch.setattr(GradientCanaries, "included_mask",
                        lambda self: np.zeros(self.count, dtype=bool))
    canaries = GradientCanaries(M, seed=3)
    silent = _train(data, POISSON, 3, canaries)
    a, b = plain.module.state_dict(), silent.module.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert {k: v for k, v in silent.privacy.items() if k != "gradient_canaries"} == plain.privacy
    assert canaries.record.sampled.sum() == 0


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_bounds_of_a_correct_run_never_exceed_the_claim(data, seed):
    record, audit = _audit(data, POISSON, seed)
    every, final = audit.every_iterate, audit.final_model
    print(f"seed {seed}: every-iterate ε {every.epsilon:.3f} (f-DP μ {every.fdp_mu:.3f}, "
          f"ε {every.fdp_epsilon:.3f}); final-model ε {final.epsilon:.3f} (f-DP ε "
          f"{final.fdp_epsilon:.3f}); m {M}, steps {record.steps}, q {record.sample_rate}")
    # A lower bound: never above the accountant's ε for a correct implementation ...
    assert every.epsilon <= CLAIM and final.epsilon <= CLAIM
    assert every.fdp_epsilon <= CLAIM and final.fdp_epsilon <= CLAIM
    # ... and clearly above 0 (measured, seeds 0-4: every-iterate 0.8 to 1.4, its f-DP ε 1.3
    # to 2.2; final model 0.5 to 0.9).
    assert every.epsilon > 0.7 and every.fdp_epsilon > 1.2
    assert abs(audit.noise / record.noise_multiplier - 1) < 0.1  # σ̂ ≈ the real σ


def test_power_of_full_batch_canaries(data):
    # q = 1: each step the Gaussian mechanism at σ, composed 10 times (μ = √10/σ ≈ 0.86 at
    # ε = 4); the every-iterate score (the sum, weighing every step alike) reaches what the
    # ideal Gaussian scores b·μ + N(0, 1) give with m = 1000 (≈ 1.1 to 1.6). Measured: 1.5,
    # f-DP ε 2.4; final model 0.95.
    record, audit = _audit(data, FULL_BATCH, 0)
    every, final = audit.every_iterate, audit.final_model
    print(f"full batch: every-iterate ε {every.epsilon:.3f} (f-DP ε {every.fdp_epsilon:.3f}); "
          f"final-model ε {final.epsilon:.3f} (f-DP ε {final.fdp_epsilon:.3f}); "
          f"m {M}, steps {record.steps}")
    assert record.steps == 10 and record.sample_rate == 1.0
    assert 1.0 < every.epsilon <= CLAIM and 1.8 < every.fdp_epsilon <= CLAIM
    assert every.epsilon > final.epsilon  # the final model weighs steps by the cosine lr


def test_planted_bug_is_refuted_in_one_run(data, monkeypatch):
    _scaled_noise(monkeypatch, 0.25)
    record, audit = _audit(data, POISSON, 1, guesses={"k_plus": 250, "k_minus": 250})
    every = audit.every_iterate
    print(f"bug (noise × 0.25): every-iterate ε {every.epsilon:.3f} (f-DP ε "
          f"{every.fdp_epsilon:.3f}, {every.one_run['correct']}/{every.one_run['guesses']} "
          f"right); final-model ε {audit.final_model.epsilon:.3f}")
    assert every.epsilon > CLAIM  # refuted: the claim (ε = 4, δ = 1e-5) does not hold
    assert audit.noise < 0.5 * record.noise_multiplier  # the run's own noise gives it away


def test_random_directions_and_bad_settings(data):
    canaries = GradientCanaries(64, kind="random", seed=5)
    _train(data, Recipe(epochs=2, batch_size=128, dp={"epsilon": CLAIM, "accountant": "rdp"}),
           5, canaries)  # fmt: skip
    r = canaries.record
    assert r.coordinates is None and r.projections.shape == (8, 64)
    assert (r.sampled[~r.included] == 0).all()
    assert canary_scores(r, "final-model").shape == (64,)
    with pytest.raises(ConfigError, match="kind"):
        GradientCanaries(10, kind="pixel")
    with pytest.raises(ConfigError, match="count"):
        GradientCanaries(0)
    with pytest.raises(ConfigError, match="parameters"):
        _train(data, POISSON, 0, GradientCanaries(10**7))
    with pytest.raises(ConfigError, match="threat_model"):
        canary_scores(r, "black-box")


def test_rows_part_per_step_noise_and_raw_norm(data):
    """The record keeps the rows' part d of each projection (x − d: canary and noise alone),
    the per-step noise estimate reads each step's σ, and a canary whose raw gradient exceeds
    C is clipped to C like an example: the same run as a canary of norm C."""
    plain = GradientCanaries(M, seed=2)
    _train(data, POISSON, 2, plain)
    loud = GradientCanaries(M, seed=2, norm=4.0)
    model = _train(data, POISSON, 2, loud)
    r = plain.record
    assert np.array_equal(r.projections, loud.record.projections)
    assert model.privacy["gradient_canaries"]["norm"] == 4.0
    assert r.data.shape == r.projections.shape and np.abs(r.data).max() > 0
    assert abs(estimated_noise(r, known_data=True) / r.noise_multiplier - 1) < 0.1
    from miaudit.privacy.gradient_canary_scores import _per_step_noise

    per_step = _per_step_noise(r.projections - r.data, r.noise_multiplier)
    assert per_step.shape == (r.steps,) and np.all(abs(per_step / r.noise_multiplier - 1) < 0.2)
    scores = canary_scores(r, noise="per-step", known_data=True)
    assert scores.shape == (M,) and np.isfinite(scores).all()
    with pytest.raises(ConfigError, match="norm"):
        GradientCanaries(10, norm=0)
    with pytest.raises(ConfigError, match="known_data"):
        canary_scores(dataclasses.replace(r, data=None), known_data=True)


def test_scores_and_bounds_are_outside_the_trainer_digest():
    """The canaries and their step are training code (in the digest); their scores and bounds
    read a finished record, so editing them must retrain nothing: no digested module imports
    them."""
    import ast

    from miaudit.cache import code_version

    scores = "miaudit.privacy.gradient_canary_scores"
    assert scores in code_version.NOT_TRAINER_CODE and scores not in code_version.TRAINER_CODE
    for name in ("miaudit.train.gradient_canaries", "miaudit.train.dp_optimizers"):
        assert name in code_version.TRAINER_CODE
    for name in code_version.TRAINER_CODE:
        tree = ast.parse(code_version.read_source(name))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert scores not in imported, name
