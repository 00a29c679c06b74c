"""Every entry point that gives a verdict, on an audit with nothing to find: `miaudit run`
with a target that learnt nothing (each design), `miaudit audit` of a torch module, a
scikit-learn estimator and precomputed outputs whose "members" are rows the model never saw,
`miaudit attack` on a bank, and a study cell. None may say "Exposed" or "Warning sign", certify
ε > 0, or give an attack an AUC that chance does not allow. (The language-model entry point's
null, a base model audited as its own fine-tune: tests/external/test_audit_hf.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_digits

import miaudit
from miaudit.cli.main import main
from miaudit.null_calibration import classifier_bank
from miaudit.verdict.strength import assess

LEAK_LEVELS = ("exposed", "average-case")
MAX_Z = 4.9
SCORERS = {name: {"epochs": 20, "max_train_samples": 2000}
           for name in ("rapid", "rapid-hybrid", "shokri")}
RUN_ATTACKS = ["loss", "calibrated-loss", "lira-offline", "rmia", "rapid", "rapid-hybrid",
               "shokri"]


def _z(outcome) -> float:
    met = outcome.metrics
    n1, n0 = met.n_members, met.n_nonmembers
    return (met.auc - 0.5) / np.sqrt((n1 + n0 + 1) / (12.0 * n1 * n0))


def _nothing_found(result) -> None:
    found = assess(result)
    assert found.measured not in LEAK_LEVELS, found.to_dict()
    best = result.meta["privacy_audit"].best
    assert best is None or best.bound.epsilon == 0, best
    off = {o.name: round(o.metrics.auc, 3) for o in result.outcomes if abs(_z(o)) > MAX_Z}
    assert off == {}
    assert not result.meta["checks"]["design"]["dependent"]


@pytest.mark.parametrize(("design", "models", "online"), [
    ("online", 3, True), ("online", 4, True), ("online", 8, True), ("paired-halves", 6, True),
    ("offline", 3, False),
])
def test_a_run_whose_target_learnt_nothing_finds_nothing(design, models, online, tmp_path):
    """The issue's online-null.yaml at CI size: lr 1e-9 (the target learns nothing), every
    model of the design, online attacks where the design has IN references. With 3 or 4
    models in a balanced design the scorers with reference features have no shadow to learn
    from once a reference per sample is set aside: they are refused, not run."""
    attacks = [a for a in RUN_ATTACKS if models > 4 or a not in SCORERS
               or (models == 4 and a == "shokri")]
    attacks += ["lira-online", "rmia-online"] if online and models > 3 else []
    config = {
        "name": f"null-{design}", "seed": 0, "dataset": {"name": "digits"},
        "split": {"audit": 600, "public": 600, "population": 300}, "design": design,
        "models": models,
        "recipe": {"architecture": "mlp", "lr": 1.0e-9, "epochs": 1, "batch_size": 64},
        "signals": {"queries": ["plain"]}, "attacks": attacks,
        "attack_params": {k: v for k, v in SCORERS.items() if k in attacks},
        "cache_dir": str(tmp_path / "cache"),
    }
    result = miaudit.run(config, out=tmp_path / "run", progress=False)
    _nothing_found(result)
    # untrained: the verdict says so rather than "no leak"
    assert assess(result).level == "inconclusive"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["verdict"]["level"] == "inconclusive"


def test_calibration_via_forgetting_finds_nothing_in_an_untrained_target(tmp_path):
    """Forgetting copies (the target trained further on public rows) as the calibration
    attacks' references: copies of a target that learnt nothing find nothing either."""
    config = {
        "name": "null-forgetting", "seed": 1, "dataset": {"name": "digits"},
        "split": {"audit": 600, "public": 600, "population": 300}, "design": "offline",
        "models": 3,
        "recipe": {"architecture": "mlp", "lr": 1.0e-9, "epochs": 1, "batch_size": 64},
        "forgetting": {"models": 2, "epochs": 1, "lr": 0.01},
        "signals": {"queries": ["plain"]},
        "attacks": ["loss", "calibrated-loss", "calibrated-confidence", "lira-offline"],
        "cache_dir": str(tmp_path / "cache"),
    }
    result = miaudit.run(config, out=tmp_path / "run", progress=False)
    assert {"calibrated-loss.forgetting", "calibrated-confidence.forgetting"} <= {
        o.name for o in result.outcomes}
    _nothing_found(result)


@pytest.fixture(scope="module")
def unseen(split) -> dict[str, np.ndarray]:
    """Rows the user's models never trained on (their non-members), split at random into
    "members" and non-members: a trained model with nothing of its "members" to leak."""
    rows = np.random.default_rng(5).permutation(split["nonmembers"])
    return {"members": np.sort(rows[:150]), "nonmembers": np.sort(rows[150:])}


def _rows(tmp_path, unseen) -> dict[str, str]:
    files = {}
    for name in ("members", "nonmembers"):
        files[name] = str(tmp_path / f"{name}.txt")
        np.savetxt(files[name], unseen[name], fmt="%d")
    return files


def test_audit_of_a_torch_module_on_rows_it_never_saw(user, unseen, tmp_path):
    rows = _rows(tmp_path, unseen)
    result = miaudit.audit(
        f"{user['nets']}:Net", "digits", members=rows["members"],
        nonmembers=rows["nonmembers"], public_rows=str(user["public"]), references=3,
        weights=str(user["safetensors"]),
        recipe={"optimizer": "adam", "lr": 0.01, "epochs": 20, "batch_size": 64},
        attacks=["loss", "confidence", "calibrated-loss", "lira-offline", "rmia",
                 "gradient-norm"],
        out=tmp_path / "torch", progress=False, cache_dir=str(tmp_path / "cache"))
    _nothing_found(result)
    assert result.meta["verdict"].level not in LEAK_LEVELS


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_audit_of_an_estimator_and_of_its_outputs_on_rows_it_never_saw(user, unseen,
                                                                       tmp_path):
    import joblib

    digits = load_digits()
    x, y = digits.data / 16.0, digits.target
    rows = np.union1d(unseen["members"], unseen["nonmembers"])
    member = np.isin(rows, unseen["members"])
    np.savez(tmp_path / "audit.npz", X=x[rows], y=y[rows], member=member)
    estimator = miaudit.audit(
        str(user["mlp"]), str(tmp_path / "audit.npz"), public=None, references=0,
        membership_column="member", attacks=["loss", "confidence", "modified-entropy"],
        out=tmp_path / "sklearn", progress=False)
    _nothing_found(estimator)
    # the same model's outputs, as a user who can only share predictions would
    probabilities = joblib.load(user["mlp"]).predict_proba(x[rows])
    np.savez(tmp_path / "outputs.npz", probabilities=probabilities, index=rows)
    files = _rows(tmp_path, unseen)
    outputs = miaudit.audit(
        str(tmp_path / "outputs.npz"), "digits", members=files["members"],
        nonmembers=files["nonmembers"], references=0,
        attacks=["loss", "confidence", "modified-entropy"], out=tmp_path / "outputs",
        progress=False)
    _nothing_found(outputs)


def test_attack_on_a_bank_from_elsewhere(tmp_path, capsys):
    """`miaudit attack` on a LiRA-style balanced bank (the target the last model) whose
    target learnt nothing of its members."""
    null = classifier_bank("lira-keep", "unseen-members", n_models=8, seed=4, audit=600,
                           public=600, population=200)
    path = tmp_path / "bank.npz"
    null.bank.save(path)
    attacks = "loss,calibrated-loss,lira-online,lira-offline,rmia,rmia-online,attack-r,qmia"
    assert main(["attack", str(path), "--target", str(null.target), "--attacks", attacks,
                 "--out", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["verdict"]["level"] not in LEAK_LEVELS
    result = miaudit.attack(path, target=null.target, attacks=attacks, progress=False)
    _nothing_found(result)
    assert result.meta["checks"]["design"]["structure"] == "balanced"


def test_a_study_cell_under_the_null(tmp_path):
    """The generalization study's many-model bank, every model in turn the target (each with
    the other seven as references): an untrained bank finds nothing for any of them."""
    from miaudit.pipeline.evaluate import evaluate_bank

    null = classifier_bank("paired-halves", "untrained", n_models=8, seed=6, audit=600,
                           public=400, population=100)
    for target in range(8):
        result = evaluate_bank(null.bank, target, ["lira-online-fixed-variance",
                                                   "lira-offline-fixed-variance", "loss"],
                               progress=False)
        _nothing_found(result)
