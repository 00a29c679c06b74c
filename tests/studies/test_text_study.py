"""The text study: the whole study on tiny text models end to end (a from-scratch
text classifier and a causal LM on standard-library docstrings), resumed without retraining,
its configs, and the claim table on a hand-made study table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from miaudit.studies.registry import get_study, resolve_config, run_study
from miaudit.studies.sweep import StudyError
from miaudit.studies.text import ENCODER_ATTACKS, LM_ATTACKS, cells
from miaudit.studies.text.report import PAPER_RATIO, claim_table


@pytest.fixture(scope="module")
def tiny_overrides(tmp_path_factory, docstring_texts) -> dict:
    texts, labels = docstring_texts
    path = tmp_path_factory.mktemp("text-study") / "docstrings.csv"
    pd.DataFrame({"text": texts, "label": labels}).to_csv(path, index=False)
    n = len(texts)
    dataset = {"name": str(path), "options": {"text_column": "text", "label_column": "label"},
               "max_length": 24}
    split = {"audit": n * 2 // 5, "public": n * 2 // 5, "population": n // 10}
    return {
        "models": ["tiny-cnn", "tiny-lm"],
        "references": 2,
        "bootstrap": 20,
        "attack_params": {"rapid": {"epochs": 5}, "lm-rapid": {"epochs": 5}},
        "extra_setups": {
            "tiny-cnn": {"table": "encoder", "dataset": dataset, "split": split,
                         "recipe": {"architecture": "text-cnn",
                                    "arch_params": {"embed_dim": 16, "channels": 16},
                                    "optimizer": "adam", "lr": 0.01, "epochs": 8,
                                    "batch_size": 32},
                         "queries": ["plain", "token-dropout-1"]},
            "tiny-lm": {"table": "lm",
                        "dataset": {**dataset, "tokenizer": "bpe", "bpe_vocab_size": 400},
                        "split": split,
                        "recipe": {"architecture": "gpt-small",
                                   "arch_params": {"n_layer": 1, "n_embd": 32, "n_head": 2,
                                                   "vocab_size": 400},
                                   "optimizer": "adam", "lr": 0.01, "epochs": 8,
                                   "batch_size": 16},
                        "queries": ["plain"]},
        },
    }


def test_the_study_runs_both_tables_and_resumes(tmp_path, tiny_overrides, monkeypatch):
    out = tmp_path / "study"
    table, study_dir = run_study("text", "cpu", tiny_overrides, executor="serial", out=out,
                                 progress=False)
    assert study_dir == out
    encoder, lm = table[table["table"] == "encoder"], table[table["table"] == "lm"]
    assert list(encoder["attack"]) == ENCODER_ATTACKS and list(lm["attack"]) == LM_ATTACKS
    for row in table.to_dict("records"):
        assert 0 <= row["auc"] <= 1 and 0 <= row["tpr@0.001"] <= row["tpr@0.01"] <= 1
        assert row["auc_lo"] <= row["auc"] <= row["auc_hi"]  # bootstrap intervals
        assert row["n_members"] + row["n_nonmembers"] == tiny_overrides["extra_setups"][
            row["model"]]["split"]["audit"]
    # fit: accuracy for the classifier, perplexity for the LM (members fit better)
    cnn, tiny_lm = encoder.iloc[0], lm.iloc[0]
    assert cnn["fit"] == "acc" and cnn["target_train"] > cnn["target_test"]
    assert tiny_lm["fit"] == "ppl" and tiny_lm["target_train"] < tiny_lm["target_test"]
    assert tiny_lm["tokenizer"] == "bpe" and encoder["n_queries"].iloc[0] == 2
    # the blind baseline never used a model
    blind = table[table["attack"] == "blind"]
    assert (blind["cost_models"] == 0).all()

    summary = (out / "summary.md").read_text()
    for heading in ("## Models", "## Fine-tuned text classifiers", "## Causal language models",
                    "## RAPID over difficulty calibration", "## Blind baseline"):
        assert heading in summary
    assert f"about {PAPER_RATIO:g}x" in summary
    for name in ("models.csv", "encoder.csv", "lm.csv", "claim.csv", "results.csv"):
        assert (out / name).is_file()
    claim = pd.read_csv(out / "claim.csv")
    assert set(claim["model"]) == {"tiny-cnn", "tiny-lm"} and len(claim) == 4

    # resumable: a rerun finds every cell done and trains nothing (the sweep calls the work
    # function the registry holds, so that is the one replaced)
    import dataclasses

    from miaudit.studies import registry

    def no_work(cell):
        raise AssertionError("a finished cell ran again")

    monkeypatch.setitem(registry._STUDIES, "text",
                        dataclasses.replace(get_study("text"), work=no_work))
    again, _ = run_study("text", "cpu", tiny_overrides, executor="serial", out=out,
                         progress=False)
    pd.testing.assert_frame_equal(again, table)


def test_cells_follow_the_configs():
    study = get_study("text")
    cpu = cells(resolve_config(study, "cpu"))
    assert [c.params["model"] for c in cpu] == ["minilm", "gpt-small"]
    minilm = cpu[0].params
    assert minilm["references"] == 4 and minilm["setup"]["recipe"]["architecture"] == "minilm"
    assert minilm["setup"]["dataset"]["max_length"] == 64
    assert minilm["attack_params"]["lira-offline"] == {"equal_counts": False}
    lm = cpu[1].params
    assert lm["setup"]["dataset"]["tokenizer"] == "bpe" and lm["attacks"] == LM_ATTACKS
    paper = cells(resolve_config(study, "paper"))
    assert len(paper) == 2 * 3
    assert paper[0].params["setup"]["dataset"]["max_length"] == 128


def test_bad_study_configs_are_named():
    study = get_study("text")
    with pytest.raises(StudyError, match="no entry under setups"):
        cells(resolve_config(study, "cpu", {"models": ["bert-large"]}))
    with pytest.raises(StudyError, match="lacks"):
        cells(resolve_config(study, "cpu", {"models": ["x"], "extra_setups": {"x": {}}}))
    with pytest.raises(StudyError, match="at least 2 references"):
        cells(resolve_config(study, "cpu", {"references": 1}))


def test_the_claim_ratio_is_rapid_over_calibration():
    rows = []
    for attack, tpr1, tpr01 in [("rapid", 0.12, 0.03), ("calibrated-loss", 0.04, 0.0),
                                ("loss", 0.02, 0.0)]:
        rows.append({"table": "encoder", "model": "minilm", "rep": 0, "attack": attack,
                     "tpr@0.01": tpr1, "tpr@0.001": tpr01, "n_nonmembers": 1000})
    claim = claim_table(pd.DataFrame(rows)).set_index("FPR")
    assert claim.loc["1%", "ratio (ours)"] == pytest.approx(3.0)
    assert np.isinf(claim.loc["0.1%", "ratio (ours)"])  # calibration found none
    assert claim.loc["1%", "expected false positives"] == pytest.approx(10.0)
    assert claim.loc["1%", "ratio (paper, BERT)"] == PAPER_RATIO == 3.0
