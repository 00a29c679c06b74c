import json

import numpy as np
import pytest

from miaudit.attacks import TargetView, get_attack, run_attack
from miaudit.attacks.registry import Needs
from miaudit.cli.main import main
from miaudit.config import MetricsConfig
from miaudit.errors import AttackError
from miaudit.pipeline.evaluate import evaluate_bank
from miaudit.report import format_table
from miaudit.signals import SignalBank


def test_registered_as_label_only_family():
    for name in ("augmentation-consistency", "boundary-distance", "calibrated-boundary-distance"):
        assert get_attack(name).family == "label-only"


@pytest.mark.parametrize("target", [0, 5])
def test_augmentation_consistency_matches_direct_computation(digits_bank, target):
    z = digits_bank.logits[target]  # [N, Q, C]
    want = np.mean([z[:, q].argmax(-1) == digits_bank.labels for q in range(z.shape[1])], 0)
    got = run_attack("augmentation-consistency", TargetView.of(digits_bank, target)).scores
    np.testing.assert_array_equal(got, want)
    assert set(np.unique(got)) <= {0.0, 0.5, 1.0}


@pytest.fixture(scope="module")
def boundary_bank(digits_bank):
    rng = np.random.default_rng(0)
    distance = rng.gamma(2.0, 1.0, size=digits_bank.membership.shape)
    return SignalBank(
        logits=digits_bank.logits,
        labels=digits_bank.labels,
        membership=digits_bank.membership,
        population=digits_bank.population,
        audit=digits_bank.audit,
        channels={"boundary_distance": distance},
    )


def _conventional(bank, m):
    correct = bank.logits[m, :, 0].argmax(-1) == bank.labels
    return np.where(correct, bank.channels["boundary_distance"][m], 0.0)


@pytest.mark.parametrize("target", [0, 3])
def test_boundary_distance_matches_direct_computation(boundary_bank, target, visible_sides):
    view = TargetView.of(boundary_bank, target)
    want = _conventional(boundary_bank, target)
    np.testing.assert_array_equal(run_attack("boundary-distance", view).scores, want)
    assert (want == 0).any()  # the digits MLPs misclassify some samples

    per_model = np.stack([_conventional(boundary_bank, m) for m in range(8)])
    _, out = visible_sides(boundary_bank, target)  # the target's row all False
    mean_out = np.array(
        [per_model[out[:, n], n].mean() if out[:, n].any() else np.nan
         for n in range(boundary_bank.n_samples)]
    )
    got = run_attack("calibrated-boundary-distance", view).scores
    np.testing.assert_allclose(got, want - mean_out, rtol=1e-12, atol=1e-12)


def test_boundary_attacks_need_the_channel(digits_bank):
    # The hint names the config switch for this channel, not another channel's.
    with pytest.raises(AttackError, match=r"signals\.boundary_distance: true"):
        run_attack("boundary-distance", TargetView.of(digits_bank, 0))


def _plain_only(bank: SignalBank) -> SignalBank:
    """The bank with its plain query alone (what tabular data gets)."""
    return bank.replace(logits=bank.logits[:, :, :1])


def test_augmentation_consistency_declares_an_augmented_query():
    needs = get_attack("augmentation-consistency").needs
    assert needs.augmented_queries == 1
    assert get_attack("correctness").needs.augmented_queries == 0  # plain-query attacks: none


def test_augmentation_consistency_refuses_a_plain_only_bank(digits_bank):
    view = TargetView.of(_plain_only(digits_bank), 0)
    # on one query it is exactly correctness: the duplicate the need keeps out of the table
    fn = get_attack("augmentation-consistency").fn
    np.testing.assert_array_equal(fn(view), run_attack("correctness", view).scores)
    with pytest.raises(AttackError) as err:
        run_attack("augmentation-consistency", view)
    message = str(err.value)
    assert "needs at least 1 augmented query per sample beyond the plain one" in message
    assert "the bank has 1 query (plain only)" in message and "signals.queries" in message
    # two queries (plain + shifted) are enough
    Needs(augmented_queries=1).check(TargetView.of(digits_bank, 0), "augmentation-consistency")
    with pytest.raises(AttackError, match="needs at least 2 augmented queries.*has 2 queries"):
        Needs(augmented_queries=2).check(TargetView.of(digits_bank, 0), "x")


def test_a_plain_only_bank_skips_it_with_the_reason(digits_bank):
    """What `miaudit attack`, `miaudit audit` and miaudit.attack() do with every attack: the
    ones the bank cannot support are listed with the reason, the others run."""
    result = evaluate_bank(_plain_only(digits_bank), 0, ["correctness", "augmentation-consistency"],
                           metric_cfg=MetricsConfig(bootstrap=0), skip_unsupported=True,
                           progress=False)
    assert [o.name for o in result.outcomes] == ["correctness"]
    reason = result.meta["skipped"]["augmentation-consistency"]
    assert "augmented query" in reason and "plain only" in reason
    assert "augmentation-consistency: skipped (attack 'augmentation-consistency' cannot run: " \
           "needs at least 1 augmented query" in format_table(result, width=None)


def test_miaudit_attack_on_a_plain_only_bank(digits_bank, tmp_path, capsys):
    path = _plain_only(digits_bank).save(tmp_path / "bank.npz")
    assert main(["attack", str(path), "--target", "0", "--out", str(tmp_path / "all")]) == 0
    summary = json.loads((tmp_path / "all" / "summary.json").read_text())
    metrics = json.loads((tmp_path / "all" / "metrics.json").read_text())
    assert "correctness" in metrics and "augmentation-consistency" not in metrics
    assert "augmented query" in summary["skipped"]["augmentation-consistency"]
    # named explicitly, it is refused with the same reason (nothing is skipped silently)
    code = main(["attack", str(path), "--target", "0", "--attacks", "augmentation-consistency",
                 "--out", str(tmp_path / "named")])
    assert code == 2
    assert "augmented query" in capsys.readouterr().err
