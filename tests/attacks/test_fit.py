"""The plan of a bank (miaudit.attacks.fit) agrees with the bank: for every registered attack,
`unfit_attacks` on the plan a run config makes before anything trains refuses exactly the
attacks whose `Needs.check` fails on the bank the same config builds. Real tiny runs: digits
under each design structure and signals section, a text classifier, causal LMs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from miaudit.attacks import Needs, TargetView, get_attack, list_attacks
from miaudit.attacks.fit import (
    BankPlan,
    models_for,
    planned_needs,
    reference_sides,
    unfit_attacks,
)
from miaudit.config import config_from_dict
from miaudit.config.run import run_bank_plan
from miaudit.errors import AttackError, ConfigError
from miaudit.pipeline.querying import build_bank

DIGITS = {"name": "digits"}
MLP = {"architecture": "mlp", "epochs": 1, "batch_size": 64}


def _digits(tmp_path, **overrides):
    return {"name": "fit", "seed": 0, "dataset": DIGITS,
            "split": {"audit": 120, "public": 120, "population": 60}, "models": 2,
            "recipe": MLP, "attacks": ["loss"], "metrics": {"bootstrap": 0},
            "cache_dir": str(tmp_path / "cache"), **overrides}


def _texts(tmp_path, docstring_texts, **overrides):
    table = pd.DataFrame(dict(zip(("text", "label"), docstring_texts, strict=True)))
    path = tmp_path / "docstrings.csv"
    table.to_csv(path, index=False)
    n = len(table)
    return {"name": "fit-text", "seed": 0,
            "dataset": {"name": str(path), "options": {"text_column": "text",
                                                       "label_column": "label"},
                        "max_length": 16},
            "split": {"audit": n * 2 // 5, "public": n * 2 // 5, "population": n // 10},
            "models": 2, "attacks": ["loss"], "metrics": {"bootstrap": 0},
            "recipe": {"architecture": "text-cnn", "arch_params": {"embed_dim": 8, "channels": 8},
                       "optimizer": "adam", "lr": 0.01, "epochs": 1, "batch_size": 32},
            "cache_dir": str(tmp_path / "cache"), **overrides}


def _lm(tmp_path, docstring_texts, **overrides):
    config = _texts(tmp_path, docstring_texts, **overrides)
    config["dataset"].update(tokenizer="bpe", bpe_vocab_size=400)
    config["recipe"] = {"architecture": "gpt-small",
                        "arch_params": {"n_layer": 1, "n_embd": 16, "n_head": 2,
                                        "vocab_size": 400, "n_positions": 32},
                        "optimizer": "adam", "lr": 0.01, "epochs": 1, "batch_size": 32}
    return {**config, **overrides}


def _agreement(config):
    """{attack: (refused by the plan, refused by the bank)} where the two disagree."""
    cfg = config_from_dict(config)
    plan = run_bank_plan(cfg)
    built = build_bank(cfg, progress=False)
    view = TargetView.of(built.bank, built.design.target)
    names = [spec.name for spec in list_attacks()]
    refused = unfit_attacks(names, plan)
    disagree = {}
    for name in names:
        try:
            get_attack(name).needs.check(view, name)
            failed = None
        except AttackError as exc:
            failed = str(exc)
        if (name in refused) != (failed is not None):
            disagree[name] = (refused.get(name), failed)
    return plan, refused, disagree


DIGITS_CASES = {
    # offline, 1 reference, a population, plain queries, no channel
    "offline": {},
    # the target alone: no reference, no population
    "target-alone": {"models": 1, "split": {"audit": 120, "public": 120, "population": 0}},
    # online with 3 models: the view sets one aside, leaving 1 OUT and no IN reference
    "online-3": {"design": "online", "models": 3},
    # online with 4: IN and OUT references; gradient norms; augmented queries
    "online-4-channels": {"design": "online", "models": 4, "signals": {
        "grad_norm": True, "queries": ["plain", "mirror"]}},
    # paired halves, with the recipe's augmentation replayed (auto queries)
    "paired-augmented": {"design": "paired-halves", "models": 4,
                         "recipe": {**MLP, "augment": ["mirror"]}},
}


@pytest.mark.parametrize("case", list(DIGITS_CASES))
def test_the_plan_refuses_exactly_what_the_digits_bank_cannot_run(tmp_path, case):
    plan, refused, disagree = _agreement(_digits(tmp_path, **DIGITS_CASES[case]))
    assert not disagree, disagree
    assert plan.data == "image" and "blind" in refused and "loss" not in refused


def test_the_plan_agrees_with_a_text_classifiers_bank(tmp_path, docstring_texts):
    plan, refused, disagree = _agreement(_texts(tmp_path, docstring_texts))
    assert not disagree, disagree
    assert plan.data == "text" and "blind" not in refused and "zlib" in refused  # zlib: an LM's


def test_the_plan_agrees_with_a_causal_lms_sequence_bank(tmp_path, docstring_texts):
    config = _lm(tmp_path, docstring_texts, models=3,
                 attacks=["lm-loss", "dc-pdd", "recall", "zlib", "blind"])
    plan, refused, disagree = _agreement(config)
    assert not disagree, disagree
    assert plan.data == "sequence"
    assert not {"lm-loss", "dc-pdd", "recall", "zlib", "blind", "lm-rapid"} & set(refused)
    assert {"lm-base-reference", "gradient-norm", "augmentation-consistency"} <= set(refused)


def test_every_need_is_planned():
    assert planned_needs() == {f.name for f in dataclasses.fields(Needs)}


# --- the plan on its own ------------------------------------------------------------------

def test_reference_sides_follow_the_views_set_aside_rule():
    assert [reference_sides("offline", m) for m in (1, 2, 5)] == [(0, 0), (0, 1), (0, 4)]
    # online: each sample IN for floor(M/2) models; the view sets one other aside
    assert reference_sides("online", 1) is None  # the design needs 2
    assert [reference_sides("online", m) for m in (2, 3, 4, 5, 6)] == [
        (0, 0), (0, 1), (1, 1), (1, 2), (2, 2)]
    assert reference_sides("paired-halves", 4) == (1, 1)
    assert reference_sides("paired-halves", 5) is None  # odd: the design refuses it
    assert reference_sides("offline", 3, public=False) is None  # references need public rows
    online = get_attack("lira-online").needs
    assert models_for("online", online) == 4 and models_for("offline", online) is None
    assert models_for("offline", get_attack("rapid").needs) == 3  # 2 shadows
    # balanced: a shadow needs members and, for rapid's calibrated features, a reference of
    # its own once the views set theirs aside (Needs.check on the nominal view decides)
    assert models_for("online", get_attack("shokri").needs) == 4
    assert models_for("online", get_attack("rapid").needs) == 5


def test_unknown_parts_of_a_plan_refuse_nothing():
    unknown = BankPlan(data=None, references=None, in_references=None, out_references=None,
                       shadow_scorer=None, shadow_references=None, population=None,
                       channels=None, queries=None, sequence=None, texts=None,
                       base_model=None, prefix=None, token_ids=None)
    assert unfit_attacks([s.name for s in list_attacks()], unknown) == {}
    with pytest.raises(ValueError, match="BankPlan.data"):
        BankPlan(data="video")


def test_a_reason_names_each_need_once_with_its_fix():
    plan = BankPlan(data="image", dataset="digits", references=1, out_references=1,
                    population=True)
    why = unfit_attacks(["min-k-plus-plus", "lira-online"], plan)
    # two needs with one cause: said once
    assert why["min-k-plus-plus"].count("this run's bank will not have it") == 1
    assert "per-token log-probabilities" in why["min-k-plus-plus"]
    assert "next-token distribution" in why["min-k-plus-plus"]
    # an online attack is pointed at its family's offline attacks that the plan supports
    assert "its family's offline attacks: lira-offline, lira-offline-fixed-variance" in (
        why["lira-online"])


def test_a_config_listing_only_what_its_bank_holds_passes(tmp_path):
    config_from_dict(_digits(tmp_path, attacks=[
        "loss", "entropy", "lira-offline", "rmia", "calibrated-loss", "qmia-label"]))
    with pytest.raises(ConfigError, match="attack 'blind' cannot run"):
        config_from_dict(_digits(tmp_path, attacks=["loss", "blind"]))


def test_the_population_count_decides_recall_before_training(tmp_path, docstring_texts):
    config = _lm(tmp_path, docstring_texts, attacks=["recall"])
    config["split"] = {**config["split"], "population": 1}
    with pytest.raises(ConfigError, match=r"drawn from 2 population texts.*split.population is "
                                          r"1: raise it to at least 2"):
        config_from_dict(config)
    assert np.isscalar(config["split"]["audit"])
