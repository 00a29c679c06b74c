"""The llm study end to end on a tiny random Llama (the session's ``base_folder``) and
standard-library docstrings: one training run per repetition, every epochs checkpoint of the
sweep scored, the secret canaries' exposure and the summary."""

from __future__ import annotations

import pandas as pd
import pytest

from miaudit.studies.llm import ATTACKS, cells
from miaudit.studies.registry import run_study
from miaudit.studies.sweep import StudyError

pytest.importorskip("peft")


@pytest.fixture
def overrides(tmp_path, docstring_texts, base_folder) -> dict:
    texts, _ = docstring_texts
    path = tmp_path / "docstrings.csv"
    pd.DataFrame({"text": texts, "label": 0}).to_csv(path, index=False)
    n = len(texts)
    return {
        "epochs": [1, 3],
        "fine_tuning": ["lora", "full"],
        "repetitions": 1,
        "bootstrap": 10,
        "setup": {
            "dataset": {"name": str(path), "options": {"text_column": "text",
                                                       "label_column": "label"},
                        "max_length": 20},
            "split": {"audit": n // 2, "public": 0, "population": n // 8},
            "recipe": {"architecture": "hf-causal-lm",
                       "arch_params": {"base_model": str(base_folder), "lora": {"r": 4}},
                       "optimizer": "adam", "lr": 0.01, "batch_size": 16,
                       "schedule": "constant"},
            "canaries": {"count": 12, "kind": "secret", "exposure_candidates": 40,
                         "guesses": {"k_plus": 3, "k_minus": 3}},
        },
    }


def test_the_study_scores_each_epochs_checkpoint_and_resumes(tmp_path, overrides):
    out = tmp_path / "study"
    table, _ = run_study("llm", "cpu", overrides, executor="serial", out=out, progress=False)
    assert sorted(table["epochs"].unique()) == [1, 3]
    assert sorted(table["fine_tuning"].unique()) == ["full", "lora"]
    for _, part in table.groupby(["fine_tuning", "epochs"]):
        assert list(part["attack"]) == ATTACKS
        assert (part["n_nonmembers"] + part["n_members"] == overrides["setup"]["split"]["audit"]
                ).all()
    # EZ-MIA and WBC score from the target's and the base's token log-probs: finite AUCs
    assert table[table["attack"].isin(["ez-mia", "wbc"])]["auc"].notna().all()
    lora = table[table["fine_tuning"] == "lora"]
    first, last = (lora[lora["epochs"] == e].iloc[0] for e in (1, 3))
    assert first["models_trained"] == 1  # one training run for the whole sweep
    full = table[table["fine_tuning"] == "full"]
    assert (full["models_trained"] == 1).all()
    assert full.iloc[0]["target_train_s"] > 0
    # the base model, queried once, scores every checkpoint alike
    base = table[table["attack"] == "lm-base-reference"]
    assert base["auc"].notna().all()
    assert last["target_train_ppl"] < first["target_train_ppl"]  # 3 epochs fit the members more
    assert first["canaries_in"] + first["canaries_out"] == 12
    assert 0 <= first["exposure_in_median"] <= first["exposure_cap"]
    summary = (out / "summary.md").read_text()
    assert "indicative only (1 seed(s)" in summary  # 32 non-members, one seed: no finding
    for heading in ("## Attacks per epochs", "## Secret canaries per epochs",
                    "## Blind baseline", "## The published ordering"):
        assert heading in summary
    for name in ("attacks.csv", "canaries.csv", "results.csv"):
        assert (out / name).is_file()
    again, _ = run_study("llm", "cpu", overrides, executor="serial", out=out, progress=False)
    assert len(again) == len(table)  # every cell was saved: nothing runs again


def test_bad_sweeps_are_refused():
    base = {"epochs": [1, 2], "references": 0, "repetitions": 1, "attacks": ATTACKS,
            "bootstrap": 10, "device": "cpu"}
    assert [c.params["epochs_sweep"] for c in cells(base)] == [[1, 2]]
    both = cells({**base, "fine_tuning": ["lora", "full"], "repetitions": 2})
    assert [(c.params["fine_tuning"], c.params["rep"]) for c in both] == [
        ("lora", 0), ("lora", 1), ("full", 0), ("full", 1)]
    for bad in ([], ["lora", "lora"], ["qlora"], "lora"):
        with pytest.raises(StudyError, match="fine_tuning"):
            cells({**base, "fine_tuning": bad})
    for bad in ([], [0], [2, 2], "3"):
        with pytest.raises(StudyError, match="epochs"):
            cells({**base, "epochs": bad})
    with pytest.raises(StudyError, match="references"):
        cells({**base, "references": -1})
