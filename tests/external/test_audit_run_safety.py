"""A failing or interrupted `miaudit audit` / `miaudit attack` never touches the previous run in
its folder; references never silently train on fewer rows than the target."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from miaudit.cli.main import main
from miaudit.errors import ConfigError
from miaudit.external.audit_config import audit_config
from miaudit.external.references import reference_rows


def _snapshot(root):
    """Every file and folder under `root`: {relative path: bytes (None for a folder)}."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def _good(user, out):
    """A quick audit (a black-box function, no references) into `out`."""
    return ["audit", "--predict", f"{user['nets']}:predict_proba", "--data", "digits",
            "--members", str(user["members"]), "--nonmembers", str(user["nonmembers"]),
            "--attacks", "loss,confidence", "--out", str(out), "--quiet"]


def _bad_runs(user, tmp_path, out):
    (tmp_path / "bad_rows.txt").write_text("1\n2\n5000\n")
    torch_model = ["audit", "--model", f"{user['nets']}:Net", "--weights",
                   str(user["safetensors"]), "--data", "digits", "--members",
                   str(user["members"]), "--public-rows", str(user["public"]),
                   "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--quiet"]
    good = _good(user, out)

    def swap(flag, value):  # the good run with one flag's value replaced
        at = good.index(flag) + 1
        return [*good[:at], value, *good[at + 1:]]

    return {
        "recipe-key typo": ([*torch_model, "--recipe", "{epohcs: 3}"], "epohcs"),
        "unknown dataset": (swap("--data", "digitz"), "digitz"),
        "bad target": (swap("--predict", f"{user['nets']}:predict_probability"),
                       "predict_probability"),
        "bad member rows": (swap("--members", str(tmp_path / "bad_rows.txt")), "5000"),
    }


@pytest.mark.parametrize("case", ["recipe-key typo", "unknown dataset", "bad target",
                                  "bad member rows"])
def test_a_failing_audit_leaves_the_previous_run_byte_identical(user, tmp_path, capsys, case):
    out = tmp_path / "runs" / "audit"
    assert main(_good(user, out)) == 0
    before = _snapshot(tmp_path / "runs")
    argv, message = _bad_runs(user, tmp_path, out)[case]
    # --overwrite: another config's run may replace this one, yet bad input leaves it intact
    assert main([*argv, "--overwrite"]) == 2
    assert message in capsys.readouterr().err
    assert _snapshot(tmp_path / "runs") == before  # same files, same bytes, no stray folder
    assert not (tmp_path / "cache").exists()  # refused before any model trained


def test_a_failing_first_audit_creates_no_folder(user, tmp_path):
    argv, _ = _bad_runs(user, tmp_path, tmp_path / "runs" / "audit")["bad member rows"]
    assert main(argv) == 2
    assert not (tmp_path / "runs").exists()


def test_an_interrupted_audit_keeps_the_previous_run(user, tmp_path, monkeypatch):
    import miaudit.pipeline.orchestrator as orchestrator

    out = tmp_path / "runs" / "audit"
    assert main(_good(user, out)) == 0
    before = _snapshot(tmp_path / "runs")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    # after bank.npz is staged (the evaluation both commands share)
    monkeypatch.setattr(orchestrator, "evaluate_attacks", interrupted)
    assert main([*_good(user, out), "--seed", "3", "--overwrite"]) == 130
    assert _snapshot(tmp_path / "runs") == before


def test_a_failing_attack_command_keeps_the_previous_report(digits_bank, tmp_path, capsys):
    bank = digits_bank.save(tmp_path / "bank.npz")
    out = tmp_path / "scored"
    assert main(["attack", str(bank), "--target", "1", "--attacks", "loss", "--out",
                 str(out)]) == 0
    before = _snapshot(tmp_path)
    assert main(["attack", str(bank), "--target", "9", "--attacks", "loss", "--out",
                 str(out), "--overwrite"]) == 2
    assert "target 9 is out of range" in capsys.readouterr().err
    assert _snapshot(tmp_path) == before


def test_an_attack_report_in_the_banks_run_folder_keeps_the_bank(user, tmp_path):
    """Re-scoring a run's own bank into its folder replaces the report, never the bank."""
    out = tmp_path / "run"
    assert main(_good(user, out)) == 0
    bank = (out / "bank.npz").read_bytes()
    assert main(["attack", str(out / "bank.npz"), "--target", "0", "--attacks", "confidence",
                 "--out", str(out)]) == 2  # another command's run: refused without --overwrite
    assert main(["attack", str(out / "bank.npz"), "--target", "0", "--attacks", "confidence",
                 "--out", str(out), "--overwrite"]) == 0
    assert (out / "bank.npz").read_bytes() == bank
    assert not (out / "verdict.json").exists()  # the audit's report was replaced whole
    assert set(json.loads((out / "metrics.json").read_text())) == {"confidence"}


def _data(members, pool, population=10):
    return SimpleNamespace(members=np.ones(members, bool), n_pool=pool, n_population=population)


def test_references_train_on_as_many_rows_as_the_target():
    cfg = audit_config({"model": {"outputs": "o.npz"},
                        "data": {"dataset": "digits", "members": "m.txt"}})
    assert reference_rows(cfg, _data(300, 958)) == (300, [])
    assert reference_rows(cfg, _data(300, 301)) == (300, [])  # more than half the pool
    with pytest.raises(ConfigError) as refused:
        reference_rows(cfg, _data(300, 239, 60))
    for words in ("300", "239", "60 population", "allow_fewer_rows: true",
                  "--allow-fewer-reference-rows", "more public data", "fewer members"):
        assert words in str(refused.value)
    cfg.references.allow_fewer_rows = True
    size, notes = reference_rows(cfg, _data(300, 239))
    assert size == 119 and "trained on 119 rows each, the target on 300" in notes[0]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_fewer_reference_rows_are_refused_or_reported_loudly(user, split, tmp_path, capsys,
                                                             caplog):
    np.savetxt(tmp_path / "small.txt", split["public"][:200], fmt="%d")  # pool 160 < 300
    argv = ["audit", "--estimator", str(user["mlp"]), "--data", "digits",
            "--members", str(user["members"]), "--nonmembers", str(user["nonmembers"]),
            "--public-rows", str(tmp_path / "small.txt"), "--references", "2",
            "--attacks", "loss,lira-offline", "--out", str(tmp_path / "run"),
            "--cache-dir", str(tmp_path / "cache"), "--quiet"]
    assert main(argv) == 2
    assert "--allow-fewer-reference-rows" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "run").exists()
    assert main([*argv, "--allow-fewer-reference-rows"]) == 0
    captured = capsys.readouterr()
    warning = "reference models trained on 80 rows each, the target on 300"
    assert warning in captured.out and warning not in caplog.text  # shown, not logged too
    assert "WARNING" not in captured.out + captured.err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert any(warning in w for w in summary["warnings"])
    assert summary["reference_train_rows"] == 80
    verdict = (tmp_path / "run" / "verdict.txt").read_text()
    assert warning in " ".join(verdict.split())
    assert warning in (tmp_path / "run" / "report.html").read_text()
