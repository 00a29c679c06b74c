"""Every registered attack, on every design, under the null: a target with nothing to find
scores at chance (docs/algorithms.md §11, "What the designs guarantee").

The banks are synthetic (:mod:`miaudit.null_calibration`: a real design's membership, outputs
independent of the target's membership) and tiny; the thorough version over many real
audits is `bench/null_calibration.py`. Each figure must stay within what chance allows, and
the harness must find the leak the balanced design had before the views set a reference aside
(the last tests: it has teeth).
"""

from __future__ import annotations

import numpy as np
import pytest

import miaudit.attacks.view as view_module
from miaudit.attacks import list_attacks
from miaudit.null_calibration import (
    DESIGNS,
    SEQUENCE_VARIANTS,
    VARIANTS,
    classifier_bank,
    null_figures,
    runnable,
    sequence_bank,
)

# Scorers strong enough to learn a shortcut the design offers (the leak the teeth tests
# plant is found at these settings), small enough for the suite.
SCORERS = {"*": {"epochs": 20, "max_train_samples": 2000}}
SEEDS = (0, 1)
# |z| of an AUC, and -log10 of a TPR's null p-value, that chance does not reach in this
# suite's ~2,000 figures (one-sided 1e-6 per figure: 0.2% for the suite)
MAX_Z = 4.9
MIN_P = 1e-6
SEQUENCE_DESIGNS = ("offline", "online", "independent")


def _z(figure) -> float:
    sd = np.sqrt((figure.n_members + figure.n_nonmembers + 1)
                 / (12.0 * figure.n_members * figure.n_nonmembers))
    return (figure.auc - 0.5) / sd


def _problems(figures) -> list[str]:
    found = []
    for f in figures:
        if abs(_z(f)) > MAX_Z:
            found.append(f"{f.attack} on {f.design}/{f.variant} seed {f.seed}: AUC {f.auc:.3f} "
                         f"(z {_z(f):+.1f})")
        for fpr, p in f.tpr_p.items():
            if p < MIN_P:
                found.append(f"{f.attack} on {f.design}/{f.variant} seed {f.seed}: TPR@{fpr:g} "
                             f"{f.tpr[fpr]:.3f} (null p {p:.1e})")
    return found


@pytest.fixture(scope="module")
def classifier_figures() -> list:
    figures = []
    for design in DESIGNS:
        for variant in VARIANTS:
            for seed in SEEDS:
                null = classifier_bank(design, variant, n_models=6 + 2 * seed, seed=seed)
                figures += null_figures(null, params=SCORERS)
    return figures


@pytest.fixture(scope="module")
def sequence_figures() -> list:
    return [figure for design in SEQUENCE_DESIGNS for variant in SEQUENCE_VARIANTS
            for seed in SEEDS
            for figure in null_figures(sequence_bank(design, variant, n_models=6, seed=seed),
                                       params=SCORERS)]


def test_every_attack_is_at_chance_on_every_classifier_design(classifier_figures):
    assert _problems(classifier_figures) == []


def test_every_attack_is_at_chance_on_every_sequence_design(sequence_figures):
    assert _problems(sequence_figures) == []


def test_no_attack_is_off_chance_on_average_over_seeds(classifier_figures, sequence_figures):
    """The mean z of each attack on each design over the seeds: a bias too small for one
    bank to show shows here (one-sided 1e-6 each)."""
    groups: dict[tuple, list[float]] = {}
    for f in classifier_figures + sequence_figures:
        groups.setdefault((f.attack, f.design, f.variant), []).append(_z(f))
    off = {k: round(float(np.mean(z) * np.sqrt(len(z))), 2) for k, z in groups.items()
           if abs(np.mean(z) * np.sqrt(len(z))) > MAX_Z}
    assert off == {}


def test_every_attack_is_checked_on_every_design_it_can_run_on(classifier_figures,
                                                               sequence_figures):
    """The harness covers the registry: every attack runs on some null bank, and on each
    design where its needs are met it was scored (an attack that fails at run time there is
    a defect, not a skip)."""
    checked = {(f.attack, f.design) for f in classifier_figures + sequence_figures}
    names = {spec.name for spec in list_attacks()}
    assert {attack for attack, _ in checked} == names
    for design in DESIGNS:
        for name in runnable(classifier_bank(design, "untrained", n_models=8, seed=1)):
            assert (name, design) in checked, f"{name} cannot run on {design}"


@pytest.mark.parametrize("n_models", [3, 4, 16])
def test_few_and_many_models_in_the_online_design(n_models):
    """The design's extremes: 3 models (one reference per sample left after the set-aside,
    no shadow with references), 4 and 16."""
    null = classifier_bank("online", "untrained", n_models=n_models, seed=3, audit=500,
                           public=400, population=200)
    assert _problems(null_figures(null, params=SCORERS)) == []


def _leaky_views(monkeypatch) -> None:
    """The views as they were before the set-aside: every reference for every sample."""
    monkeypatch.setattr(view_module, "set_aside",
                        lambda membership, available, *args: (available.copy(),
                                                              np.zeros(membership.shape[1],
                                                                       dtype=bool)))


def test_the_harness_finds_the_balanced_design_leak(monkeypatch):
    """Without the set-aside, a target member has one IN reference fewer than a non-member:
    with 3 models online LiRA cannot score a member at all, and RAPID's hybrid scorer learns
    the count from its shadows (AUC 0.8 on an untrained target). The harness must say so."""
    _leaky_views(monkeypatch)
    null = classifier_bank("online", "untrained", n_models=3, seed=0, audit=800, public=600,
                           population=400)
    problems = _problems(null_figures(null, ["lira-online", "rapid-hybrid"], params=SCORERS))
    assert any(p.startswith("lira-online") for p in problems)
    assert any(p.startswith("rapid-hybrid") for p in problems)


def test_the_same_bank_is_clean_with_the_set_aside():
    null = classifier_bank("online", "untrained", n_models=3, seed=0, audit=800, public=600,
                           population=400)
    figures = null_figures(null, ["lira-online", "rapid-hybrid"], params=SCORERS)
    assert _problems(figures) == []
