"""An audit feeds the model exactly what it was trained on, and says so when not.

The scenario a user met: scikit-learn models trained on raw `load_digits` rows (0..16), then
audited on the built-in `digits` with its standard preprocessing (pixels / 16) and with
`preprocessing: raw`.
"""

from __future__ import annotations

import warnings

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression

from miaudit.cli.audit import flags_to_dict
from miaudit.cli.main import build_parser
from miaudit.errors import ConfigError
from miaudit.external.audit_config import audit_config
from miaudit.external.data import build_audit_data
from miaudit.external.run import run_audit

ESTIMATORS = {
    # scale-sensitive splits: on pixels / 16 every threshold falls on one side, near chance
    "forest": lambda: RandomForestClassifier(n_estimators=10, random_state=0),
    # a linear model keeps its argmax on pixels / 16 but loses its confidence
    "logistic": lambda: LogisticRegression(max_iter=2000),
}


@pytest.fixture(scope="module")
def raw_models(tmp_path_factory) -> dict:
    """Each estimator fitted on 300 raw digits rows, saved as the user would."""
    root = tmp_path_factory.mktemp("raw-models")
    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    rows = {"members": np.sort(order[:300]), "nonmembers": np.sort(order[300:600]),
            "public": np.sort(order[600:])}
    paths = {}
    for name, rows_of in rows.items():
        paths[name] = root / f"{name}.txt"
        np.savetxt(paths[name], rows_of, fmt="%d")
    for name, make in ESTIMATORS.items():
        model = make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence: what the user shipped
            model.fit(digits.data[rows["members"]], digits.target[rows["members"]])
        paths[name] = root / f"{name}.joblib"
        joblib.dump(model, paths[name])
        # the accuracy on its own training rows, as its owner measures it
        paths[f"{name}-accuracy"] = model.score(digits.data[rows["members"]],
                                                digits.target[rows["members"]])
    return paths


def _audit(paths: dict, estimator: str, preprocessing: str | None, out, cache) -> dict:
    data = {"dataset": "digits", "members": str(paths["members"]),
            "nonmembers": str(paths["nonmembers"])}
    if preprocessing:
        data["options"] = {"preprocessing": preprocessing}
    cfg = audit_config({
        "model": {"estimator": str(paths[estimator])}, "data": data,
        "public": {"rows": str(paths["public"])}, "references": {"models": 2},
        "attacks": ["loss", "calibrated-loss"], "metrics": {"bootstrap": 50},
        "output": str(out), "cache_dir": str(cache),
    })
    result, _ = run_audit(cfg, progress=False, echo=False)
    return result.meta


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_raw_trained_model_audited_on_standard_data_is_warned(
    raw_models, estimator, tmp_path
):
    standard = _audit(raw_models, estimator, None, tmp_path / "standard", tmp_path / "cache")
    assert standard["dataset_preprocessing"] == "standard: pixels / 16 -> [0, 1]"
    mismatch = [w for w in standard["warnings"] if w.startswith("inputs look mismatched")]
    assert len(mismatch) == 1
    warning = mismatch[0]
    assert "with preprocessing 'standard' (pixels / 16 -> [0, 1])" in warning
    assert "probably trained on raw data; rerun with --preprocessing raw" in warning
    real = raw_models[f"{estimator}-accuracy"]
    assert real > 0.98
    # what it scores on its real inputs, found by querying it on the raw member rows
    assert standard["target_member_accuracy_raw"] == pytest.approx(real, abs=1e-4)
    if estimator == "forest":  # the user's case: near chance on its own training rows
        assert standard["target_member_accuracy"] < 0.3
        assert f"{100 * standard['target_member_accuracy']:.1f}% accurate" in warning
        assert f"but {100 * real:.1f}% with 'raw'" in warning
    else:  # right answers, wrong confidence: the loss says it
        assert standard["target_member_loss"] > 1.0 > 0.05 > standard["target_member_loss_raw"]
        assert "far less confident" in warning
    verdict = standard["verdict"]
    # said in full once: as the inconclusive verdict's reason, else as the first caveat
    if verdict.level == "inconclusive":
        assert not any("mismatched" in c for c in verdict.caveats)
    else:
        assert verdict.caveats[0].startswith("Inputs look mismatched")
    # never a clearance: a leak found stands, no leak found is inconclusive, an average-case
    # signal says the figures may understate it
    assert verdict.level in ("exposed", "inconclusive", "average-case")
    if verdict.level == "inconclusive":
        assert "input-mismatch" in [r.code for r in verdict.reasons]
        assert verdict.headline.startswith("Inconclusive. This audit cannot support a "
                                           "verdict: inputs look mismatched")
    elif verdict.level == "average-case":
        assert "inputs look mismatched" in verdict.headline

    raw = _audit(raw_models, estimator, "raw", tmp_path / "raw", tmp_path / "cache")
    assert raw["dataset_preprocessing"].startswith("raw: integer pixels 0..16")
    assert not [w for w in raw["warnings"] if "mismatched" in w]
    assert raw["target_member_accuracy"] == pytest.approx(real, abs=1e-4)
    assert raw["target_member_loss"] < 0.2
    assert raw["reference_train_accuracy"] > 0.95  # clones fitted on the raw public rows
    assert raw["verdict"].input_mismatch is None
    assert "mismatched" not in " ".join(raw["verdict"].caveats)


def test_preprocessing_flag_reaches_data_and_registry_public():
    parse = build_parser().parse_args
    flags = flags_to_dict(parse(["audit", "--data", "digits", "--public", "mnist",
                                 "--preprocessing", "raw"]))
    assert flags["data"]["options"] == {"preprocessing": "raw"}
    assert flags["public"]["options"] == {"preprocessing": "raw"}
    own = flags_to_dict(parse(["audit", "--data", "a.npz", "--public", "b.csv",
                               "--label-column", "y", "--preprocessing", "standard"]))
    assert own["data"]["options"] == {"preprocessing": "standard"}
    assert own["public"]["options"] == {"label_column": "y"}  # a file: as given, no flag
    assert "options" not in flags_to_dict(parse(["audit", "--data", "digits"]))["data"]
    with pytest.raises(SystemExit):
        parse(["audit", "--preprocessing", "scaled"])


def _image_file(path, seed: int, n: int = 40):
    rng = np.random.default_rng(seed)
    np.savez(path, X=rng.integers(0, 256, (n, 1, 4, 4), dtype=np.uint8),
             y=np.arange(n) % 2)
    return path


def test_public_data_is_scaled_like_the_audit_data(tmp_path):
    audit_file = _image_file(tmp_path / "audit.npz", 0)
    public_file = _image_file(tmp_path / "public.npz", 1)
    np.savetxt(tmp_path / "members.txt", np.arange(20), fmt="%d")
    base = {"model": {"outputs": "unused.npz"},
            "data": {"dataset": str(audit_file), "members": str(tmp_path / "members.txt"),
                     "options": {"preprocessing": "raw"}},
            "public": {"dataset": str(public_file)}}
    data = build_audit_data(audit_config(base))
    assert data.public.preprocessing == data.data.preprocessing == "raw: as given"
    assert data.features.max() > 1  # both blocks as given: 0..255
    clash = {**base, "public": {**base["public"], "options": {"preprocessing": "standard"}}}
    with pytest.raises(ConfigError, match="reference models must see values scaled like"):
        build_audit_data(audit_config(clash))
