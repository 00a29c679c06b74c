"""`miaudit audit` end to end on real data (sklearn digits) with models trained outside miaudit."""

import csv
import json

import numpy as np
import pytest
import yaml
from sklearn.datasets import load_digits

from miaudit.cli.main import main

ATTACKS = "loss,modified-entropy,gradient-norm,calibrated-loss,lira-offline,rmia"


def test_audit_a_torch_module(user, split, tmp_path, capsys):
    out = tmp_path / "run"
    code = main([
        "audit", "--model", f"{user['nets']}:Net", "--weights", str(user["safetensors"]),
        "--data", "digits", "--members", str(user["members"]),
        "--nonmembers", str(user["nonmembers"]), "--public-rows", str(user["public"]),
        "--references", "3", "--recipe", "{optimizer: adam, lr: 0.01, epochs: 20, batch_size: 64}",
        "--attacks", ATTACKS, "--out", str(out),
        "--cache-dir", str(tmp_path / "cache"), "--quiet", "--exposed", "8",
    ])
    assert code == 0
    printed = capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == set(ATTACKS.split(","))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skipped"] == {}
    assert set(summary["files"]) == {p.name for p in out.iterdir()}
    assert summary["members"] == 300 and summary["nonmembers"] == 300
    assert summary["references"] == 3 and summary["reference_recipe"]["architecture"] == "import"
    # the model overfits its 300 members: the audit measures it
    target = summary["models"][0]
    assert target["train_acc"] > target["test_acc"]
    assert max(m["auc"] for m in metrics.values()) > 0.55
    verdict = json.loads((out / "verdict.json").read_text())
    best = metrics[verdict["attack"]]
    assert verdict["figures"][-1]["tpr"] == best["tpr_at_fpr"]["0.01"]
    assert verdict["headline"].split(".")[0] in " ".join(printed.split())
    with open(out / "exposed.csv") as handle:
        ranked = list(csv.DictReader(handle))
    assert len(ranked) == 300 and {int(r["row"]) for r in ranked} == set(split["members"])
    digits = load_digits()
    assert all(int(r["label"]) == digits.target[int(r["row"])] for r in ranked)
    page = (out / "report.html").read_text()
    assert "For a release decision" in page and "most exposed training samples" in page
    assert (out / "exposed.png").exists() and (out / "bank.npz").exists()
    saved = yaml.safe_load((out / "audit.yaml").read_text())
    assert saved["seed"] == 0 and saved["references"]["models"] == 3
    # rerun from the saved config: every reference model comes from the cache
    assert main(["audit", "--config", str(out / "audit.yaml"), "--out", str(tmp_path / "again"),
                 "--quiet"]) == 0
    again = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert again["references_trained"] == 0 and again["references_from_cache"] == 3
    rerun = json.loads((tmp_path / "again" / "metrics.json").read_text())
    for name, met in metrics.items():  # same models, same scores (timings aside)
        assert rerun[name]["auc"] == met["auc"] and rerun[name]["tpr_at_fpr"] == met["tpr_at_fpr"]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_audit_an_sklearn_estimator_with_a_membership_column(user, split, tmp_path, capsys):
    digits = load_digits()
    x, y = digits.data / 16.0, digits.target
    audit = np.union1d(split["members"], split["nonmembers"])
    np.savez(tmp_path / "audit.npz", X=x[audit], y=y[audit],
             member=np.isin(audit, split["members"]))
    np.savez(tmp_path / "public.npz", X=x[split["public"]], y=y[split["public"]])
    config = {"model": {"estimator": str(user["mlp"]), "dp_epsilon": 0.01, "dp_delta": 1e-5},
              "data": {"dataset": str(tmp_path / "audit.npz"), "membership_column": "member"},
              "public": {"dataset": str(tmp_path / "public.npz")},
              "references": {"models": 2},
              "attacks": ["loss", "confidence", "lira-offline", "rmia"],
              "metrics": {"bootstrap": 50}}
    (tmp_path / "audit.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    assert main(["audit", "--config", str(tmp_path / "audit.yaml"), "--out", str(out),
                 "--cache-dir", str(tmp_path / "cache"), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["target_kind"] == "sklearn" and summary["references"] == 2
    assert summary["skipped"] == {}
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"loss", "confidence", "lira-offline", "rmia"}
    assert metrics["loss"]["auc"] > 0.55
    assert not (out / "exposed.png").exists()  # tabular data: no thumbnails
    assert "exposed.csv" in {p.name for p in out.iterdir()}
    # the stated DP claim: every attack's ε lower bound is set beside it, in the verdict too
    privacy = summary["privacy_audit"]
    assert privacy["claimed"] == {"epsilon": 0.01, "delta": 1e-5}
    best = privacy["best"]
    # the best of K bounds is recounted at α/K (Bonferroni): below its own bound at α
    assert 0 < best["epsilon"] <= metrics[best["attack"]]["epsilon_lower_bound"]["epsilon"]
    assert best["epsilon"] <= max(b["epsilon"] for b in _bounds(metrics))
    verdict = json.loads((out / "verdict.json").read_text())
    line = next(p for p in verdict["paragraphs"] if p.startswith("Privacy: claimed ε 0.01"))
    # the user's split: a bound above the claim is evidence against it, assuming random
    # membership, never "does not hold" (no proof covers a split miaudit did not draw)
    assert privacy["membership"] == "user"
    assert ("evidence against the claim, assuming the members were chosen at random"
            in line) == (best["epsilon"] > 0.01)
    assert "does not hold" not in line


def _bounds(metrics: dict) -> list[dict]:
    return [m["epsilon_lower_bound"] for m in metrics.values()
            if m["epsilon_lower_bound"].get("epsilon") is not None]


def test_bad_input_gives_clear_errors(user, tmp_path, capsys):
    (tmp_path / "a.yaml").write_text("model: {estimator: x.joblib}\ndata: {dataset: digits, "
                                     "memebers: m.txt}\n")
    assert main(["audit", "--config", str(tmp_path / "a.yaml")]) == 2
    assert "unknown key 'data.memebers'" in capsys.readouterr().err
    (tmp_path / "b.yaml").write_text("model: {estimator: x.joblib}\nrefrences: {models: 1}\n")
    assert main(["audit", "--config", str(tmp_path / "b.yaml")]) == 2
    assert "Did you mean 'references'" in capsys.readouterr().err
    base = ["audit", "--data", "digits", "--members", str(user["members"]),
            "--out", str(tmp_path / "o"), "--quiet"]
    assert main(base) == 2
    assert "name the model exactly once" in capsys.readouterr().err
    assert main([*base, "--model", f"{user['nets']}:Net", "--weights", str(user["pt"]),
                 "--model-kwargs", "{hidden: 8}"]) == 2
    assert "do not fit the architecture" in capsys.readouterr().err
    p = np.full((1797, 10), 0.09)
    np.savez(tmp_path / "p.npz", probabilities=p)
    assert main([*base, "--outputs", str(tmp_path / "p.npz")]) == 2
    assert "probabilities must sum to 1 per row" in capsys.readouterr().err


def test_audit_a_prediction_function(user, tmp_path, capsys):
    out = tmp_path / "fn"
    base = ["audit", "--predict", f"{user['nets']}:predict_proba", "--data", "digits",
            "--members", str(user["members"]), "--nonmembers", str(user["nonmembers"]),
            "--out", str(out), "--quiet"]
    # listed, attacks it could never run are refused before any work, each with the reason
    assert main([*base, "--attacks", "loss,gradient-norm,boundary-distance,rmia"]) == 2
    err = capsys.readouterr().err
    assert "black-box prediction function" in err
    assert "signals.boundary_distance is off" in err  # queryable, but slow: opt in
    assert "no public data" in err and not out.exists()
    assert main([*base, "--attacks", "loss"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    # a fixed random map knows nothing of the training rows: near chance on them, and 300
    # non-members cannot support a 1% FPR figure, so no clearance, and each reason is named
    assert summary["verdict"]["level"] == "inconclusive"
    # (the audit's input check words the near-chance accuracy as a mismatch, with its fix)
    assert {r["code"] for r in summary["verdict"]["reasons"]} == {"input-mismatch",
                                                                 "few-nonmembers"}
    assert summary["checks"]["target_fit"]["near_chance"]


def test_config_paths_are_relative_to_the_config_file_and_saved_absolute(
    user, tmp_path, monkeypatch
):
    project = tmp_path / "project"
    (project / "rows").mkdir(parents=True)
    (project / "nets.py").write_text(user["nets"].read_text())
    for name in ("members", "nonmembers"):
        (project / "rows" / f"{name}.txt").write_text(user[name].read_text())
    (project / "audit.yaml").write_text(yaml.safe_dump({
        "model": {"predict": "nets.py:predict_proba"},
        "data": {"dataset": "digits", "members": "rows/members.txt",
                 "nonmembers": "./rows/nonmembers.txt"},
        "attacks": ["loss"], "metrics": {"bootstrap": 20}, "output": "out",
    }))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["audit", "--config", "../project/audit.yaml", "--quiet"]) == 0
    out = project / "out"  # the config's own `output: out`, beside it
    saved = yaml.safe_load((out / "audit.yaml").read_text())
    assert saved["model"]["predict"] == f"{project / 'nets.py'}:predict_proba"
    assert saved["data"]["members"] == str(project / "rows" / "members.txt")
    assert saved["data"]["nonmembers"] == str(project / "rows" / "nonmembers.txt")
    assert saved["data"]["dataset"] == "digits"  # a registry name stays a name
    assert saved["output"] == str(out)
    assert list((tmp_path / "elsewhere").iterdir()) == []
    # the saved config reruns from a third folder; a flag's relative path is the cwd's
    (tmp_path / "third").mkdir()
    monkeypatch.chdir(tmp_path / "third")
    assert main(["audit", "--config", str(out / "audit.yaml"), "--out", "again",
                 "--quiet"]) == 0
    first = json.loads((out / "metrics.json").read_text())
    again = json.loads((tmp_path / "third" / "again" / "metrics.json").read_text())
    assert again["loss"]["auc"] == first["loss"]["auc"]
    saved = yaml.safe_load((tmp_path / "third" / "again" / "audit.yaml").read_text())
    assert saved["output"] == str(tmp_path / "third" / "again")


def test_absolute_paths_leave_names_alone(tmp_path):
    from miaudit.external.audit_config import absolute_paths

    (tmp_path / "audit.npz").write_bytes(b"")
    data = {"model": {"module": "pkg.nets:Net", "weights": "w.safetensors"},
            "data": {"dataset": "audit.npz", "options": {"label_column": "y"}},
            "public": {"dataset": "fashion-mnist", "rows": "~/rows.txt"},
            "cache_dir": "/abs/cache", "data_dir": "data", "seed": 3}
    got = absolute_paths(data, tmp_path)
    assert got["model"] == {"module": "pkg.nets:Net", "weights": str(tmp_path / "w.safetensors")}
    assert got["data"] == {"dataset": str(tmp_path / "audit.npz"),
                           "options": {"label_column": "y"}}
    assert got["public"]["dataset"] == "fashion-mnist"
    assert not got["public"]["rows"].startswith("~") and got["public"]["rows"].endswith("rows.txt")
    assert (got["cache_dir"], got["data_dir"], got["seed"]) == ("/abs/cache",
                                                                str(tmp_path / "data"), 3)
    assert data["model"]["weights"] == "w.safetensors"  # the input is not changed


def test_flags_add_loader_options_to_the_config_files():
    from miaudit.external.audit_config import merge

    base = {"data": {"dataset": "d.csv", "options": {"label_column": "y"}}, "seed": 1}
    merged = merge(base, {"data": {"options": {"preprocessing": "raw"}}, "seed": 2})
    assert merged["data"] == {"dataset": "d.csv",
                              "options": {"label_column": "y", "preprocessing": "raw"}}
    assert merged["seed"] == 2
    assert base["data"]["options"] == {"label_column": "y"}  # the file's mapping is not changed


def test_a_dp_claim_needs_both_numbers():
    from miaudit.errors import ConfigError
    from miaudit.external.audit_config import audit_config

    base = {"data": {"dataset": "digits", "members": "rows.txt"}}
    with pytest.raises(ConfigError, match="both model.dp_epsilon and model.dp_delta"):
        audit_config({**base, "model": {"estimator": "m.joblib", "dp_epsilon": 8}})
    with pytest.raises(ConfigError, match="dp_epsilon must be a number > 0"):
        audit_config({**base, "model": {"estimator": "m.joblib", "dp_epsilon": 0,
                                        "dp_delta": 1e-5}})
    with pytest.raises(ConfigError, match="dp_delta must lie in"):
        audit_config({**base, "model": {"estimator": "m.joblib", "dp_epsilon": 8,
                                        "dp_delta": 1.5}})


def _quick_audit(user, out, *extra):
    """A quick audit (a black-box function, no references) into `out`."""
    return ["audit", "--predict", f"{user['nets']}:predict_proba", "--data", "digits",
            "--members", str(user["members"]), "--nonmembers", str(user["nonmembers"]),
            "--attacks", "loss,confidence", "--out", str(out), "--quiet", *extra]


def test_an_audit_replaces_another_run_only_with_overwrite(user, tmp_path, capsys):
    out = tmp_path / "runs" / "audit"
    assert main(_quick_audit(user, out)) == 0
    assert main(_quick_audit(user, out)) == 0  # the same audit reruns into its folder
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main(_quick_audit(user, out, "--seed", "3")) == 2
    err = capsys.readouterr().err
    assert (f"{out} already holds another run: 'audit', made by `miaudit audit` with a "
            "different config. This `miaudit audit` would replace its files (audit.yaml,") in err
    assert "Give --overwrite" in err and "or --out another folder" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert main(_quick_audit(user, out, "--seed", "3", "--overwrite")) == 0
    assert yaml.safe_load((out / "audit.yaml").read_text())["seed"] == 3


def test_the_python_api_passes_overwrite_through(user, tmp_path):
    import miaudit
    from miaudit.errors import ConfigError

    out = tmp_path / "api"
    args = dict(model=f"{user['nets']}:predict_proba", data="digits",
                members=user["members"], nonmembers=user["nonmembers"], references=0,
                attacks="loss", out=out, progress=False)
    miaudit.audit(**args)
    miaudit.audit(**args)  # its own run again
    with pytest.raises(ConfigError, match="already holds another run: 'audit', made by "
                                          "`miaudit audit` with a different config"):
        miaudit.audit(**args, seed=3)
    assert miaudit.audit(**args, seed=3, overwrite=True).out == out


def test_public_outputs_without_references_say_what_rmia_needs(user, tmp_path, capsys):
    """--public-outputs gives RMIA its population samples, not reference models: the help and
    the skip reason say so."""
    import joblib

    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert ("black box: its outputs on the public rows (--public / --public-rows), the "
            "population samples RMIA compares against; RMIA also needs reference models (a "
            "stand-in: --recipe with an architecture), else it is skipped") in help_text
    probabilities = joblib.load(user["mlp"]).predict_proba(load_digits().data / 16.0)
    np.savez(tmp_path / "out.npz", probabilities=probabilities)
    out = tmp_path / "run"
    assert main(["audit", "--outputs", str(tmp_path / "out.npz"), "--public-outputs",
                 str(tmp_path / "out.npz"), "--data", "digits", "--members",
                 str(user["members"]), "--nonmembers", str(user["nonmembers"]),
                 "--public-rows", str(user["public"]), "--attacks", "loss,rmia", "--out",
                 str(out), "--quiet"]) == 0
    reason = json.loads((out / "summary.json").read_text())["skipped"]["rmia"]
    assert reason.startswith("needs reference models: black-box target")
    assert "references.recipe with an architecture" in reason
    assert reason.endswith("; the population samples it has do not let it run without them")


def test_the_audit_takes_a_datasets_folder_flag():
    from miaudit.cli.audit import flags_to_dict
    from miaudit.cli.main import build_parser

    args = build_parser().parse_args(["audit", "--data-dir", "/data/here"])
    assert flags_to_dict(args)["data_dir"] == "/data/here"
    assert "data_dir" not in flags_to_dict(build_parser().parse_args(["audit"]))
