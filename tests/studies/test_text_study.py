"""The text study: the whole study on tiny text models end to end (a from-scratch
text classifier and a causal LM on standard-library docstrings, two seeds), resumed without
retraining, its configs, and the ratio's interval and the claim table on hand-made tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from miaudit.studies.registry import get_study, resolve_config, run_study
from miaudit.studies.sweep import StudyError
from miaudit.studies.text import ENCODER_ATTACKS, LM_ATTACKS, cells
from miaudit.studies.text.report import PAPER_RATIO, claim_table, ratio_interval


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
        "repetitions": 2,
        "references": 2,
        "bootstrap": 20,
        "attack_params": {"rapid": {"epochs": 5}, "lm-rapid": {"epochs": 5}},
        "extra_setups": {
            "tiny-cnn": {"table": "encoder", "dataset": dataset, "split": split,
                         "recipe": {"architecture": "text-cnn",
                                    "arch_params": {"embed_dim": 16, "channels": 16},
                                    "optimizer": "adam", "lr": 0.01, "epochs": 8,
                                    "batch_size": 32},
                         "queries": ["plain"]},
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
    assert list(encoder["attack"]) == ENCODER_ATTACKS * 2 and list(lm["attack"]) == LM_ATTACKS * 2
    assert sorted(table["seed"].unique()) == [0, 1]
    for row in table.to_dict("records"):
        assert 0 <= row["auc"] <= 1 and 0 <= row["tpr@0.001"] <= row["tpr@0.01"] <= 1
        assert row["auc_lo"] <= row["auc"] <= row["auc_hi"]  # bootstrap intervals
        assert row["n_members"] + row["n_nonmembers"] == tiny_overrides["extra_setups"][
            row["model"]]["split"]["audit"]
    # fit: accuracy for the classifier, perplexity for the LM (members fit better)
    cnn, tiny_lm = encoder.iloc[0], lm.iloc[0]
    assert cnn["fit"] == "acc" and cnn["target_train"] > cnn["target_test"]
    assert tiny_lm["fit"] == "ppl" and tiny_lm["target_train"] < tiny_lm["target_test"]
    assert tiny_lm["tokenizer"] == "bpe" and (encoder["queries"] == "plain").all()
    # the blind baseline never used a model
    blind = table[table["attack"] == "blind"]
    assert (blind["cost_models"] == 0).all()

    summary = (out / "summary.md").read_text()
    for heading in ("## Models", "## Fine-tuned text classifiers", "## Causal language models",
                    "## RAPID over difficulty calibration", "## Blind baseline"):
        assert heading in summary
    assert f"about {PAPER_RATIO:g}x" in summary
    for name in ("models.csv", "encoder.csv", "lm.csv", "claim.csv", "repetitions.csv",
                 "results.csv"):
        assert (out / name).is_file()
    claim = pd.read_csv(out / "claim.csv")
    assert set(claim["model"]) == {"tiny-cnn", "tiny-lm"} and len(claim) == 4
    assert (claim["reps"] == 2).all()
    assert len(pd.read_csv(out / "repetitions.csv")) == 4  # 2 setups x 2 seeds

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
    # both classifier cells, three seeds each, plain queries only
    assert [(c.params["model"], c.params["seed"]) for c in cpu] == [
        (m, s) for s in (0, 1, 2) for m in ("minilm", "text-cnn")]
    minilm, cnn = cpu[0].params, cpu[1].params
    assert minilm["setup"]["recipe"]["architecture"] == "minilm"
    assert cnn["setup"]["recipe"]["architecture"] == "text-cnn"
    for p in (minilm, cnn):  # same data, same protocol, same attacks
        assert p["references"] == 4 and p["attacks"] == ENCODER_ATTACKS
        assert p["setup"]["table"] == "encoder" and p["setup"]["queries"] == ["plain"]
        assert p["attack_params"]["lira-offline"] == {"equal_counts": False}
    assert minilm["setup"]["dataset"] == cnn["setup"]["dataset"]
    assert minilm["setup"]["dataset"]["max_length"] == 64
    assert minilm["setup"]["split"] == cnn["setup"]["split"]
    split = minilm["setup"]["split"]
    assert split["audit"] - split["members"] >= 1000  # 1,000 non-members under every TPR
    assert len({c.key() for c in cpu}) == len(cpu)
    # the causal LM stays available; perturbed views are an option for the classifiers
    more = cells(resolve_config(study, "cpu", {"models": ["minilm", "gpt-small"],
                                               "perturbations": 1, "repetitions": 1,
                                               "first_seed": 100}))
    assert [(c.params["model"], c.params["seed"]) for c in more] == [
        ("minilm", 100), ("gpt-small", 100)]
    assert more[0].params["setup"]["queries"] == ["plain", "token-dropout-1"]
    lm = more[1].params
    assert lm["setup"]["queries"] == ["plain"] and lm["attacks"] == LM_ATTACKS
    assert lm["setup"]["dataset"]["tokenizer"] == "bpe"
    paper = cells(resolve_config(study, "paper"))
    assert len(paper) == 3 * 5
    assert paper[0].params["setup"]["dataset"]["max_length"] == 128


def test_bad_study_configs_are_named():
    study = get_study("text")
    with pytest.raises(StudyError, match="no entry under setups"):
        cells(resolve_config(study, "cpu", {"models": ["bert-large"]}))
    with pytest.raises(StudyError, match="lacks"):
        cells(resolve_config(study, "cpu", {"models": ["x"], "extra_setups": {"x": {}}}))
    with pytest.raises(StudyError, match="at least 2 references"):
        cells(resolve_config(study, "cpu", {"references": 1}))
    with pytest.raises(StudyError, match="repetitions must be >= 1"):
        cells(resolve_config(study, "cpu", {"repetitions": 0}))
    with pytest.raises(StudyError, match="perturbations must be >= 0"):
        cells(resolve_config(study, "cpu", {"perturbations": -1}))


def test_the_ratio_interval_is_a_t_interval_of_per_repetition_ratios():
    # by hand: ratios 3, 2, 3 -> mean 8/3, sd sqrt(1/3), se 1/3, t(0.975, 2) = 4.302653
    r = ratio_interval([0.12, 0.10, 0.09], [0.04, 0.05, 0.03])
    assert r["ratios"] == pytest.approx([3.0, 2.0, 3.0])
    assert r["mean"] == pytest.approx(8 / 3)
    half = 4.302653 / 3
    assert (r["lo"], r["hi"]) == (pytest.approx(8 / 3 - half, abs=1e-5),
                                  pytest.approx(8 / 3 + half, abs=1e-5))
    assert r["of_means"] == pytest.approx(0.31 / 0.12) and r["n"] == 3
    # a repetition where calibration finds nobody: no finite ratio, no interval
    r = ratio_interval([0.02, 0.01], [0.01, 0.0])
    assert r["ratios"][1] == np.inf and np.isnan(r["mean"]) and np.isnan(r["lo"])
    assert r["of_means"] == pytest.approx(0.015 / 0.005)
    one = ratio_interval([0.06], [0.02])  # one repetition: the ratio, no interval
    assert one["mean"] == pytest.approx(3.0) and np.isnan(one["lo"])


def test_the_claim_ratio_is_rapid_over_calibration_across_seeds():
    rows = []
    for seed, (r1, c1) in enumerate([(0.12, 0.04), (0.10, 0.05), (0.09, 0.03)]):
        for attack, tpr1, tpr01 in [("rapid", r1, 0.03), ("calibrated-loss", c1, 0.0),
                                    ("loss", 0.02, 0.0)]:
            rows.append({"table": "encoder", "model": "minilm", "seed": seed,
                         "attack": attack, "tpr@0.01": tpr1, "tpr@0.001": tpr01,
                         "n_nonmembers": 1000})
    claim = claim_table(pd.DataFrame(rows)).set_index("FPR")
    one = claim.loc["1%"]
    assert one["reps"] == 3 and one["ratio (mean)"] == pytest.approx(8 / 3)
    assert one["ratio lo"] == pytest.approx(8 / 3 - 4.302653 / 3, abs=1e-5)
    assert one["ratio of means"] == pytest.approx(0.31 / 0.12)
    assert one["ratio per rep"] == "3.00x, 2.00x, 3.00x"
    assert one["expected false positives per rep"] == pytest.approx(10.0)
    assert one["ratio (paper, BERT)"] == PAPER_RATIO == 3.0
    tenth = claim.loc["0.1%"]  # calibration found none: infinite ratios, no interval
    assert np.isnan(tenth["ratio (mean)"]) and np.isinf(tenth["ratio of means"])
