import csv
import json

import numpy as np
import pytest
from scipy.special import log_softmax
from sklearn.metrics import roc_auc_score

from miaudit.cli import main


def test_attack_command_follows_the_bank_contract(digits_bank, tmp_path):
    path = digits_bank.save(tmp_path / "bank.npz")
    out = tmp_path / "out"
    code = main(["attack", str(path), "--target", "1", "--attacks",
                 "loss,confidence,gradient-norm", "--out", str(out)])
    assert code == 0
    with open(out / "scores.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["index", "member", "loss", "confidence", "gradient-norm"]
    index = np.array([int(r["index"]) for r in rows])
    np.testing.assert_array_equal(index, np.nonzero(digits_bank.audit)[0])
    member = np.array([int(r["member"]) for r in rows])
    np.testing.assert_array_equal(member, digits_bank.membership[1, index])
    # each score equals the definition computed directly from the bank
    z = digits_bank.logits[1, index].astype(np.float64)
    y = digits_bank.labels[index]
    direct_loss = log_softmax(z, -1)[np.arange(len(y)), :, y].mean(1)
    loss = np.array([float(r["loss"]) for r in rows])
    np.testing.assert_allclose(loss, direct_loss, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.array([float(r["gradient-norm"]) for r in rows]),
                               -digits_bank.channels["grad_norm"][1, index], rtol=1e-12)
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"loss", "confidence", "gradient-norm"}
    for name in metrics:
        scores = np.array([float(r[name]) for r in rows])
        assert metrics[name]["auc"] == pytest.approx(roc_auc_score(member, scores), abs=1e-12)
        assert set(metrics[name]["tpr_at_fpr"]) == {"0.001", "0.01"}


def test_attack_command_reports_bad_input_clearly(digits_bank, tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    np.savez(bad, logits=np.full((2, 3, 1, 2), np.nan, np.float32), labels=np.zeros(3, int),
             membership=np.zeros((2, 3), bool))
    assert main(["attack", str(bad), "--target", "0", "--out", str(tmp_path / "o")]) == 2
    assert "NaN" in capsys.readouterr().err
    path = digits_bank.save(tmp_path / "bank.npz")
    assert main(["attack", str(path), "--target", "0", "--attacks", "nope",
                 "--out", str(tmp_path / "o")]) == 2
    assert "unknown attack 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "o" / "metrics.json").exists()


def test_data_list_and_attacks_list(capsys):
    assert main(["data", "list"]) == 0
    assert "digits" in capsys.readouterr().out
    assert main(["attacks"]) == 0
    assert "modified-entropy" in capsys.readouterr().out


def test_attack_command_imports_only_what_scoring_needs_before_scoring():
    """`miaudit attack` loads the evaluation stage without the training and querying stages,
    and the report's modules (matplotlib) only after scoring (issue 16)."""
    import subprocess
    import sys

    code = ("import sys\nimport miaudit.cli\nfrom miaudit.pipeline.evaluate import evaluate_bank\n"
            "print(sorted(m for m in ('miaudit.pipeline.runner', 'miaudit.pipeline.bank', "
            "'miaudit.train', 'miaudit.report', 'matplotlib', 'pandas') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
    from miaudit import pipeline

    assert pipeline.run.__module__ == "miaudit.pipeline.runner"  # still reachable, lazily
    assert "evaluate_bank" in dir(pipeline) and "evaluate_bank" in pipeline.__all__
    with pytest.raises(AttributeError):
        pipeline.no_such_stage  # noqa: B018
