"""`miaudit audit` on a plain-query bank (its default, signals.queries [plain]) skips
augmentation-consistency with the reason instead of reporting a copy of correctness."""

import json

from miaudit.cli.main import main


def test_audit_skips_augmentation_consistency_on_one_query(user, tmp_path):
    out = tmp_path / "fn"
    assert main(["audit", "--predict", f"{user['nets']}:predict_proba", "--data", "digits",
                 "--members", str(user["members"]), "--nonmembers", str(user["nonmembers"]),
                 "--out", str(out), "--quiet",
                 "--attacks", "correctness,augmentation-consistency"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert set(metrics) == {"correctness"}
    reason = summary["skipped"]["augmentation-consistency"]
    assert "needs at least 1 augmented query per sample beyond the plain one" in reason
    assert "the bank has 1 query (plain only)" in reason
