import csv
import json
import logging

import numpy as np
import pytest
from scipy.special import log_softmax
from sklearn.metrics import roc_auc_score

from miaudit.cli.main import main


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
    and the report's modules (matplotlib) only after scoring (its wall time)."""
    import subprocess
    import sys

    code = ("import sys\nimport miaudit.cli.main\n"
            "from miaudit.pipeline.evaluate import evaluate_bank\n"
            "print(sorted(m for m in ('miaudit.pipeline.runner', 'miaudit.pipeline.querying', "
            "'miaudit.train', 'miaudit.report', 'matplotlib', 'pandas') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
    from miaudit import pipeline

    assert pipeline.run.__module__ == "miaudit.pipeline.runner"  # still reachable, lazily
    assert "evaluate_bank" in dir(pipeline) and "evaluate_bank" in pipeline.__all__
    with pytest.raises(AttributeError):
        pipeline.no_such_stage  # noqa: B018


def test_attacks_list_aligns_columns_for_long_names_and_families(monkeypatch, capsys):
    """Every 'needs:' starts in one column, however long a name (> 28) or family (> 12)."""
    import dataclasses

    import miaudit.attacks as attacks

    real = attacks.list_attacks()
    long = dataclasses.replace(real[0], name="an-attack-with-a-very-long-name-indeed",
                               family="a-long-family-name")
    monkeypatch.setattr(attacks, "list_attacks", lambda: [*real, long])
    assert main(["attacks"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if " needs: " in ln]
    assert len(lines) == len(real) + 1
    assert len({ln.index(" needs: ") for ln in lines}) == 1
    families = {ln[len(long.name) + 1:].split()[0] for ln in lines}
    assert {s.family for s in real} | {long.family} == families  # names never run into them


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_run_folder_is_not_clobbered_by_another_command(tmp_path, capsys, caplog,
                                                           tiny_run_yaml):
    """`miaudit attack runs/x/bank.npz --out runs/x` into a finished run's folder used to delete
    its config.yaml and calibration.png without a word."""
    config = tiny_run_yaml()
    out = tmp_path / "runs" / "tiny"
    assert main(["run", str(config), "--quiet"]) == 0
    assert main(["run", str(config), "--quiet"]) == 0  # the same config reruns, no flag needed
    before = _files(out)
    assert {"config.yaml", "calibration.png"} <= set(before)
    capsys.readouterr()
    attack = ["attack", str(out / "bank.npz"), "--target", "0", "--attacks", "loss",
              "--out", str(out)]
    assert main(attack) == 2
    err = capsys.readouterr().err
    assert (f"miaudit: error: {out} already holds another run: 'tiny', made by `miaudit run`. "
            "This `miaudit attack` would replace its files (config.yaml, bank.npz,") in err
    assert "Give --overwrite (overwrite=True in Python) to replace it, or --out another " \
           "folder." in err
    assert _files(out) == before  # refused before any work: nothing written, nothing removed
    # a different config of the same command is another run too
    assert main(["run", str(tiny_run_yaml("seed-1", seed=1)), "--quiet"]) == 2
    assert "'tiny', made by `miaudit run` with a different config" in capsys.readouterr().err
    assert _files(out) == before
    with caplog.at_level(logging.WARNING, logger="miaudit.io"):
        assert main([*attack, "--overwrite"]) == 0
    assert (f"replacing the run in {out} ('tiny', made by `miaudit run`; --overwrite): removed "
            "config.yaml, training.json, verdict.txt, verdict.json, calibration.png;"
            ) in caplog.text
    assert not (out / "config.yaml").exists() and (out / "bank.npz").read_bytes() == before[
        "bank.npz"]  # the bank being scored is kept
    # the run can come back the same way
    assert main(["run", str(config), "--quiet"]) == 2
    assert main(["run", str(config), "--quiet", "--overwrite"]) == 0
    assert (out / "config.yaml").exists()


def test_attack_reports_say_the_confidence_level_of_their_intervals(digits_bank, tmp_path,
                                                                     capsys):
    path = digits_bank.save(tmp_path / "bank.npz")
    out = tmp_path / "out"
    assert main(["attack", str(path), "--target", "1", "--attacks", "loss", "--out",
                 str(out)]) == 0
    verdict = capsys.readouterr().out.splitlines()[0]
    assert "(95% CI " in verdict and "(CI " not in verdict
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["metrics"]["confidence"] == 0.95
    assert "(95% CI " in summary["verdict"]["line"]
    assert summary["run_identity"]["command"] == "attack"
    # the same scoring again into its folder is its own run: no flag needed
    assert main(["attack", str(path), "--target", "1", "--attacks", "loss", "--out",
                 str(out)]) == 0


def test_run_flags_set_where_a_run_computes_and_reads(tiny_run_yaml, tmp_path):
    """--cache-dir and --data-dir replace the config's folders (the models land in the flag's
    cache) and, being locations, leave the run's identity alone: the same config rerun with
    other folders replaces its own run without --overwrite."""
    config = tiny_run_yaml()
    cache = tmp_path / "flag-cache"
    assert main(["run", str(config), "--quiet", "--cache-dir", str(cache),
                 "--data-dir", str(tmp_path / "flag-data"), "--device", "cpu"]) == 0
    assert sorted(p.suffix for p in cache.iterdir()) == [".json", ".json", ".safetensors",
                                                          ".safetensors"]  # 2 models
    summary = json.loads((tmp_path / "runs" / "tiny" / "summary.json").read_text())
    assert summary["config"]["cache_dir"] == str(cache)
    assert main(["run", str(config), "--quiet"]) == 0  # the config's own folders: same run
