import numpy as np
import pytest

from miaudit.errors import ConfigError
from miaudit.protocol import (
    balanced_membership,
    design_names,
    make_design,
    make_split,
    paired_membership,
)


def test_split_is_disjoint_seeded_and_sized():
    split = make_split(1000, audit=0.4, public=300, population=100, seed=3)
    assert (split.audit.size, split.public.size, split.population.size) == (400, 300, 100)
    rows = split.rows
    assert len(np.unique(rows)) == rows.size == 800
    again = make_split(1000, audit=0.4, public=300, population=100, seed=3)
    np.testing.assert_array_equal(again.rows, rows)
    other = make_split(1000, audit=0.4, public=300, population=100, seed=4)
    assert not np.array_equal(other.rows, rows)


def test_split_too_large_is_a_clear_error():
    with pytest.raises(ConfigError, match="add up to"):
        make_split(100, audit=60, public=60, population=0, seed=0)
    with pytest.raises(ConfigError, match="count"):
        make_split(100, audit=-1, public=10, population=0, seed=0)


def test_balanced_membership_has_exactly_half_in():
    m = balanced_membership(8, 500, np.random.default_rng(0))
    assert (m.sum(axis=0) == 4).all()
    assert 200 < m.sum(axis=1).min() and m.sum(axis=1).max() < 300


def test_online_design_balances_audit_and_public_and_never_population():
    split = make_split(600, audit=200, public=200, population=100, seed=0)
    design = make_design(split, 4, "online", seed=0)
    member_counts = design.membership.sum(axis=0)
    assert (member_counts[:400] == 2).all()
    assert (member_counts[400:] == 0).all()
    assert design.population_mask().sum() == 100 and design.audit_mask().sum() == 200


def test_offline_design_references_train_on_public_only():
    split = make_split(600, audit=200, public=200, population=100, seed=0)
    design = make_design(split, 5, "offline", seed=0, target=2)
    audit, public = design.audit_mask(), ~design.audit_mask() & ~design.population_mask()
    assert design.membership[2, audit].sum() == 100 and not design.membership[2, public].any()
    refs = [0, 1, 3, 4]
    assert not design.membership[refs][:, audit].any()
    assert (design.membership[refs][:, public].sum(axis=1) == 100).all()
    rows = design.training_rows(2)
    assert set(rows) <= set(split.audit) and rows.size == 100


def test_design_errors():
    split = make_split(100, audit=50, public=0, population=0, seed=0)
    with pytest.raises(ConfigError, match="public"):
        make_design(split, 3, "offline", seed=0)
    with pytest.raises(ConfigError, match="design"):
        make_design(split, 3, "sideways", seed=0)
    with pytest.raises(ConfigError, match="target"):
        make_design(split, 2, "online", seed=0, target=5)


def test_offline_design_without_members_is_todays_draw():
    """split.members unset: the same rows as before it existed (model cache keys use them)."""
    split = make_split(600, audit=200, public=200, population=100, seed=0)
    design = make_design(split, 4, "offline", seed=7, target=1)
    rng = np.random.default_rng([7, 2])  # the draw as it was: random halves, target first
    expected = np.zeros_like(design.membership)
    expected[1, rng.permutation(200)[:100]] = True
    for m in (0, 2, 3):
        expected[m, 200 + rng.permutation(200)[:100]] = True
    np.testing.assert_array_equal(design.membership, expected)
    assert design.notes == ()


def test_split_members_sets_the_targets_rows_and_references_match_it():
    split = make_split(1797, audit=1250, public=397, population=150, seed=0)
    design = make_design(split, 5, "offline", seed=0, members=250)
    audit, public = design.audit_mask(), ~design.audit_mask() & ~design.population_mask()
    assert design.membership[0, audit].sum() == 250  # 1,000 non-members
    assert not design.membership[0, ~audit].any()
    assert not design.membership[1:, audit].any()
    assert not design.membership[:, design.population_mask()].any()
    assert (design.membership[1:, public].sum(axis=1) == 250).all()
    assert len({tuple(np.flatnonzero(m)) for m in design.membership[1:]}) == 4  # own draws
    fraction = make_design(split, 5, "offline", seed=0, members=0.2)
    np.testing.assert_array_equal(fraction.membership, design.membership)


def test_split_members_errors_say_what_to_change():
    split = make_split(1000, audit=400, public=100, population=0, seed=0)
    with pytest.raises(ConfigError, match="more than 150 rows"):
        make_design(split, 3, "offline", seed=0, members=150)
    with pytest.raises(ConfigError, match="fewer than all"):
        make_design(split, 1, "offline", seed=0, members=400)
    with pytest.raises(ConfigError, match="offline"):
        make_design(split, 2, "online", seed=0, members=50)
    with pytest.raises(ConfigError, match="count or a fraction"):
        make_design(split, 2, "offline", seed=0, members=True)
    # the target alone needs no public pool
    assert make_design(split, 1, "offline", seed=0, members=150).membership.sum() == 150


def test_references_on_less_data_than_the_target_are_a_warning(caplog):
    split = make_split(600, audit=300, public=100, population=0, seed=0)
    with caplog.at_level("WARNING", logger="miaudit.protocol"):
        design = make_design(split, 3, "offline", seed=0)
    assert len(design.notes) == 1 and "50 rows" in design.notes[0] and "150" in design.notes[0]
    assert design.notes[0] in caplog.text


def test_paired_membership_gives_exact_halves_both_ways():
    m = paired_membership(6, 40, seed=3)
    assert m.shape == (6, 40)
    assert (m.sum(axis=0) == 3).all() and (m.sum(axis=1) == 20).all()
    np.testing.assert_array_equal(m, paired_membership(6, 40, seed=3))
    assert not np.array_equal(m, paired_membership(6, 40, seed=4))
    with pytest.raises(Exception, match="even"):
        paired_membership(5, 40, seed=0)
    with pytest.raises(Exception, match="even"):
        paired_membership(4, 41, seed=0)


def test_designs_are_a_registry_and_paired_halves_is_one():
    assert {"online", "offline", "paired-halves"} <= set(design_names())
    split = make_split(100, 40, 40, 20, seed=0)
    design = make_design(split, 4, "paired-halves", seed=0)
    pooled = design.membership[:, :80]
    assert (pooled.sum(axis=0) == 2).all() and (pooled.sum(axis=1) == 40).all()
    assert not design.membership[:, 80:].any()  # the population is never trained on
    np.testing.assert_array_equal(pooled, paired_membership(4, 80, seed=0))
    with pytest.raises(ConfigError, match="paired-halves"):
        make_design(split, 4, "paired-halves", seed=0, members=10)
    with pytest.raises(ConfigError, match="one of online, offline, paired-halves"):
        make_design(split, 4, "halves", seed=0)
