from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from miaudit.records.columns import tpr_column
from miaudit.signals import SignalBank
from miaudit.studies import generalization as gen
from miaudit.studies.generalization import report as summary
from miaudit.studies.generalization.halves_banks import ROC_FPRS, model_stats
from miaudit.studies.generalization.paper import AUGMENTATION_STEPS, PAPER_AUGMENTATION
from miaudit.studies.registry import get_study, resolve_config, run_study
from miaudit.studies.sweep import StudyError

TINY_KNOBS = {"epochs": [4, 8], "hidden": [16, 32], "lr": [0.1], "batch_size": [32],
              "weight_decay": [0.0, 0.001], "label_smoothing": [0.0, 0.1],
              "dropout": [0.0, 0.2], "augment": [[], ["mirror"]]}
TINY = {  # digits, 4 MLPs per bank on exact halves of 300 samples: seconds per cell
    "dataset": "digits", "pool": 300, "models": 4, "queries": ["plain"],
    "attacks": ["lira-online-fixed-variance", "loss"],
    "base_recipe": {"arch_params": {"hidden": 32}, "epochs": 8, "batch_size": 32, "lr": 0.1},
    "augmentation": {"techniques": ["No Augmentation", "Mirror"]},
    "early_stopping": {"epochs": [2, 8]},
    "knowledge": {"techniques": ["Mirror"]},
    "many_model": {"recipes": 2, "knobs": TINY_KNOBS},
}


def test_model_stats_by_hand():
    # 2 models, 4 samples, 1 query, 2 classes; model 0 trains on samples 0 and 1
    logits = np.zeros((2, 4, 1, 2), dtype=np.float32)
    logits[0, :, 0, 1] = [2.0, -1.0, 0.5, -3.0]  # class-1 logit, class 0 at 0
    labels = np.array([1, 0, 0, 1])
    membership = np.array([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool)
    bank = SignalBank(logits=logits, labels=labels, membership=membership)
    s = model_stats(bank)[0]

    def ce(z1, y):  # cross-entropy of logits (0, z1) at label y
        return np.log1p(np.exp(z1)) - (z1 if y == 1 else 0.0)

    assert s["train_acc"] == 1.0 and s["test_acc"] == 0.0  # 0.5 -> class 1 (wrong), -3 wrong
    assert s["train_loss"] == pytest.approx((ce(2.0, 1) + ce(-1.0, 0)) / 2, rel=1e-6)
    assert s["test_loss"] == pytest.approx((ce(0.5, 0) + ce(-3.0, 1)) / 2, rel=1e-6)
    assert s["acc_gap"] == 1.0
    assert s["loss_gap"] == pytest.approx(s["test_loss"] - s["train_loss"])


def test_recipes_and_cells_are_seeded_distinct_and_checked():
    config = resolve_config(get_study("generalization"), "cpu", TINY)
    recipes = gen.sample_recipes(config)
    assert len(recipes) == 2 and recipes[0] != recipes[1]
    assert recipes == gen.sample_recipes(config)
    cells = gen.make_cells(config)
    parts = [c.params["part"] for c in cells]
    assert sorted(parts) == sorted(["augmentation"] * 2 + ["early-stopping"]
                                   + ["many-model"] * 2)
    assert parts[0] == "augmentation"  # Mirror: the slowest (unstacked) cell starts first
    mirror = next(c for c in cells if c.params.get("technique") == "Mirror")
    assert mirror.params["recipe"]["augment"] == ["mirror"]
    assert mirror.params["plain_references"]  # knowledge rides in the augmentation cell
    only_knowledge = gen.make_cells({**config, "parts": ["knowledge"]})
    assert [c.params["technique"] for c in only_knowledge] == ["Mirror"]
    assert set(AUGMENTATION_STEPS) == set(PAPER_AUGMENTATION)
    with pytest.raises(StudyError, match="unknown knob"):
        gen.sample_recipes({**config, "many_model": {**config["many_model"],
                                                     "knobs": {"epoch": [1]}}})
    with pytest.raises(StudyError, match="distinct recipes"):
        gen.sample_recipes({**config, "many_model": {**config["many_model"], "recipes": 999}})
    with pytest.raises(StudyError, match="unknown part"):
        gen.make_cells({**config, "parts": ["augmentations"]})
    with pytest.raises(StudyError, match="technique"):
        gen.technique_recipe(config, "Crop+Mirror")


def test_study_runs_end_to_end_on_digits(tmp_path):
    table, out = run_study("generalization", "cpu", TINY, executor="serial", out=tmp_path / "g",
                           progress=False)
    assert set(table["part"]) == {"augmentation", "early-stopping", "many-model"}
    attacks = TINY["attacks"]
    aug = table[(table["part"] == "augmentation") & (table["references"] == "target recipe")]
    assert len(aug) == 2 * 4 * len(attacks)  # techniques x attacked models x attacks
    for col in ("train_acc", "test_acc"):
        assert table[col].between(0, 1).all()
    np.testing.assert_allclose(table["acc_gap"], table["train_acc"] - table["test_acc"])
    tprs = table[[tpr_column(f) for f in ROC_FPRS]].to_numpy()
    assert (np.diff(tprs, axis=1) >= 0).all() and (tprs[:, -1] == 1).all()
    assert (table["n_nonmembers"] == 150).all() and (table["n_members"] == 150).all()
    metrics = ["train_acc", "test_acc", "auc", tpr_column(0.001)]

    def by_model(frame):
        return frame.sort_values(["model", "attack"])[metrics].reset_index(drop=True)

    # The last checkpoint is the base recipe's final model: the No-Augmentation bank.
    early = table[table["part"] == "early-stopping"]
    assert sorted(early["epoch"].unique()) == [2, 8]
    pd.testing.assert_frame_equal(by_model(early[early["epoch"] == 8]),
                                  by_model(aug[aug["technique"] == "No Augmentation"]))
    assert early[early["epoch"] == 2]["train_acc"].mean() < early[early["epoch"] == 8][
        "train_acc"].mean()
    # Knowledge: references like the target = the augmentation bank of that technique; plain
    # references attack the same targets (same accuracies) with other scores.
    know = table[(table["part"] == "augmentation") & table["plain_references"].eq(True)]
    assert set(know["technique"]) == {"Mirror"}
    known, plain = (know[know["references"] == r] for r in ("target recipe", "plain"))
    pd.testing.assert_frame_equal(by_model(known), by_model(aug[aug["technique"] == "Mirror"]))
    np.testing.assert_array_equal(by_model(plain)["test_acc"], by_model(known)["test_acc"])
    lira = "lira-online-fixed-variance"
    assert not np.allclose(plain[plain["attack"] == lira]["auc"],
                           known[known["attack"] == lira]["auc"])
    # Many models: each model index trains on the same rows under every recipe.
    many = table[table["part"] == "many-model"]
    assert many["cell"].nunique() == 2 and sorted(many["model"].unique()) == [0, 1, 2, 3]
    assert (out / "summary.md").exists() and (out / "many_model_tpr0.1.png").exists()
    assert (out / "knowledge_roc.png").exists() and (out / "early_stopping.png").exists()


def _hand_table() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []

    def row(**kw):
        base = {"attack": "lira", "model": 0, "cell": "c", "train_acc": 1.0,
                "test_acc": 0.8, "acc_gap": 0.2, "loss_gap": 1.0, "auc": 0.6,
                "n_nonmembers": 2000}
        base.update({tpr_column(f): min(1.0, f * 5) for f in ROC_FPRS})
        base.update(kw)
        rows.append(base)

    for m, tpr in enumerate([0.1, 0.3]):
        row(part="augmentation", technique="Crop", model=m, references="target recipe",
            plain_references=False, **{tpr_column(0.001): tpr})
    for epoch, acc in [(1, 0.7), (2, 0.8), (3, 0.9), (4, 0.95), (5, 0.99), (6, 1.0)]:
        row(part="early-stopping", epoch=epoch, train_acc=acc)
    for refs, tpr in [("target recipe", 0.04), ("plain", 0.01)]:
        row(part="augmentation", technique="CIFAR-Policy", references=refs,
            plain_references=True, **{tpr_column(0.001): tpr})
    for cell in range(10):
        for m in range(3):
            gap = rng.uniform(0, 0.3)
            row(part="many-model", cell=f"r{cell}", model=m, acc_gap=gap,
                test_acc=rng.uniform(0.6, 0.9), loss_gap=3 * gap + rng.normal(0, 0.1),
                **{tpr_column(0.001): gap ** 2 + rng.uniform(0, 0.01),
                   tpr_column(0.01): gap + rng.uniform(0, 0.05)})
    row(part="many-model", attack="loss", cell="r0", acc_gap=0.9)  # another attack: left out
    return pd.DataFrame(rows)


def test_summary_of_a_hand_made_table(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(
        {"study": "generalization", "size": "cpu", "models": 3, "headline_attack": "lira"}))
    table = _hand_table()
    summary.write_summary(table, tmp_path)
    aug = pd.read_csv(tmp_path / "augmentation.csv")
    assert aug.loc[0, "technique"] == "Crop" and aug.loc[0, "TPR@0.1% %"] == "20.00 ± 14.14"
    assert aug.loc[0, "paper TPR@0.1% %"] == 0.73
    early = pd.read_csv(tmp_path / "early_stopping.csv")
    assert list(early["step"]) == [6, 5, 4, 3, 2, 1]
    assert early.loc[0, "paper TPR@0.1% %"] == 18.28 and early.loc[5, "train acc %"] == 70.0
    know = pd.read_csv(tmp_path / "knowledge.csv")
    assert know.loc[0, "ratio"] == 4.0
    corr = pd.read_csv(tmp_path / "many_model_correlations.csv")
    points = table[(table["part"] == "many-model") & (table["attack"] == "lira")]
    assert len(points) == 30
    for y in (tpr_column(0.001), tpr_column(0.01)):
        for x in summary.GAPS:
            got = corr[(corr["metric"] == y) & (corr["against"] == x)].iloc[0]
            assert got["pearson r"] == pytest.approx(stats.pearsonr(points[x], points[y])[0])
            assert got["spearman rho"] == pytest.approx(
                stats.spearmanr(points[x], points[y])[0])
            within = np.mean([stats.spearmanr(g[x], g[y])[0]
                              for _, g in points.groupby("model")])
            assert got["spearman rho within a training set (mean)"] == pytest.approx(within)
    tpr_gap = corr[(corr["metric"] == tpr_column(0.001)) & (corr["against"] == "acc_gap")]
    assert tpr_gap["spearman rho"].iloc[0] > 0.9  # TPR grows with the gap by construction
    text = (tmp_path / "summary.md").read_text()
    assert "2000 non-members" in text and "19.56" not in text  # only the rows we have
    for name in ("many_model_tpr0.1.png", "knowledge_roc.png", "early_stopping.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_correlation_of_a_constant_is_nan_not_an_error():
    points = pd.DataFrame({"model": [0, 0, 0, 0], "acc_gap": [0.1, 0.2, 0.3, 0.4],
                           "loss_gap": [1, 2, 3, 4], "test_acc": [0.5, 0.6, 0.7, 0.8],
                           tpr_column(0.001): [0.0] * 4, tpr_column(0.01): [0.1, 0.2, 0.3, 0.5],
                           "auc": [0.5, 0.6, 0.6, 0.7]})
    corr = summary.correlations(points)
    flat = corr[corr["metric"] == tpr_column(0.001)]
    assert flat["pearson r"].isna().all()
    np.testing.assert_allclose(corr[corr["metric"] == tpr_column(0.01)]["spearman rho"], 1.0)
