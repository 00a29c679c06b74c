"""`rmia-paper`: RMIA at its paper's offline configuration (the authors' Purchase-100 configs:
T = 2, a = 0.2, gamma = 2, the paper's count) is `rmia` with those parameters, nothing else."""

import dataclasses

import numpy as np
import pytest

from miaudit.attacks import TargetView, get_attack, run_attack
from miaudit.attacks.rmia import PAPER_OFFLINE


def test_the_paper_configuration_is_the_authors_purchase100_offline_one():
    assert PAPER_OFFLINE == {"a": 0.2, "gamma": 2.0, "tie_break": "none", "temperature": 2.0}
    paper, rmia = get_attack("rmia-paper"), get_attack("rmia")
    # rmia's needs, and a classifier's own logits: its temperature 2 has no faithful meaning
    # on a causal LM's derived two-class logits
    assert paper.fn is rmia.fn and paper.family == "rmia"
    assert paper.needs == dataclasses.replace(rmia.needs, classifier=True)
    assert {p.name: p.default for p in paper.params} == PAPER_OFFLINE
    # only the defaults differ: same names, types and bounds
    assert [(p.name, p.type, p.bounds()) for p in paper.params] == [
        (p.name, p.type, p.bounds()) for p in rmia.params]


@pytest.mark.parametrize("target", [0, 3])
def test_rmia_paper_equals_rmia_with_the_papers_parameters(digits_bank, target):
    view = TargetView.of(digits_bank, target)
    paper = run_attack("rmia-paper", view).scores
    np.testing.assert_array_equal(paper, run_attack("rmia", view, **PAPER_OFFLINE).scores)
    assert not np.array_equal(paper, run_attack("rmia", view).scores)  # not today's default
    # its parameters stay parameters: overriding them gives rmia at those values
    np.testing.assert_array_equal(
        run_attack("rmia-paper", view, temperature=1.0, a=0.3, tie_break="ratio").scores,
        run_attack("rmia", view).scores)
