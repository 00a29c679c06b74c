"""`miaudit audit` checks its split without the model: a random split of digits passes, a
skewed one (the non-members from another slice of the data) makes the verdict inconclusive and
withholds any refutation of a DP claim, and the files say so."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_digits

from miaudit.cli.main import main


@pytest.fixture(scope="module")
def skewed(user, tmp_path_factory) -> dict:
    """The MLP's real members against non-members drawn only from digits 7-9 (a slice)."""
    root = tmp_path_factory.mktemp("skewed")
    labels = load_digits().target
    members = np.loadtxt(user["members"], dtype=np.int64)
    others = np.setdiff1d(np.arange(labels.size), members)
    nonmembers = others[labels[others] >= 7][:300]
    public = np.setdiff1d(others, nonmembers)
    for name, rows in (("nonmembers", nonmembers), ("public", public)):
        np.savetxt(root / f"{name}.txt", rows, fmt="%d")
    return {"nonmembers": root / "nonmembers.txt", "public": root / "public.txt"}


def _audit(user, tmp_path, nonmembers, public, *extra) -> dict:
    out = tmp_path / "run"
    assert main(["audit", "--estimator", str(user["mlp"]), "--data", "digits",
                 "--members", str(user["members"]), "--nonmembers", str(nonmembers),
                 "--public-rows", str(public), "--references", "0", "--attacks",
                 "loss,confidence,entropy", "--out", str(out), "--quiet", *extra]) == 0
    return {"summary": json.loads((out / "summary.json").read_text()),
            "verdict": (out / "verdict.txt").read_text(),
            "html": (out / "report.html").read_text()}


def test_a_random_split_passes_the_check(user, tmp_path, capsys):
    run = _audit(user, tmp_path, user["nonmembers"], user["public"])
    split = run["summary"]["checks"]["split"]
    assert not split["shifted"] and 0.4 < split["metrics"]["auc"] < 0.6
    assert split["rows"] == 600 and split["classifier"] == "gradient-boosted trees"
    assert "shifted-split" not in [r["code"] for r in run["summary"]["verdict"]["reasons"]]
    assert "Split check: members and non-members look exchangeable" in \
        " ".join(run["verdict"].split())
    assert "Split check: members and non-members look exchangeable" in run["html"]


def test_a_skewed_split_is_inconclusive_and_refutes_no_claim(user, skewed, tmp_path, capsys):
    run = _audit(user, tmp_path, skewed["nonmembers"], skewed["public"],
                 "--dp-epsilon", "0.1", "--dp-delta", "1e-5")
    summary = run["summary"]
    split = summary["checks"]["split"]
    assert split["shifted"] and split["metrics"]["auc"] > 0.8  # the label alone tells them
    assert summary["verdict"]["level"] == "inconclusive"
    assert "shifted-split" in [r["code"] for r in summary["verdict"]["reasons"]]
    audit = summary["privacy_audit"]
    assert audit["membership"] == "user" and audit["split_shifted"] is True
    assert audit["exceeds_claim"] and audit["claim_finding"] == "withheld"
    assert not audit["refutes_claim"]
    text = " ".join(run["verdict"].split())
    assert text.startswith("Inconclusive. This audit cannot support a verdict: the split check "
                           "tells members from non-members without the model")
    assert "does not hold" not in text and "no refutation on that basis" in text
    assert 'class="verdict unsure"' in run["html"]
    printed = capsys.readouterr().out
    assert "Verdict: Inconclusive." in printed


def test_the_check_can_be_turned_off(user, skewed, tmp_path, capsys):
    config = tmp_path / "audit.yaml"
    config.write_text("metrics: {split_check: false}\n")
    run = _audit(user, tmp_path, skewed["nonmembers"], skewed["public"], "--config",
                 str(config))
    assert run["summary"]["checks"]["split"] is None
    assert "shifted-split" not in [r["code"] for r in run["summary"]["verdict"]["reasons"]]
