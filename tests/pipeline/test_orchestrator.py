"""The orchestrator both commands share (miaudit.pipeline.orchestrator): one run folder, one
split check, one bank write, one evaluation, one verdict, one meta record, one report; and the
typed evaluation entry point (evaluate_attacks) that studies and the API call."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import miaudit
from miaudit.config import MetricsConfig
from miaudit.pipeline import evaluate_bank
from miaudit.pipeline.evaluate import EvaluationOptions, evaluate_attacks
from miaudit.pipeline.orchestrator import (
    Obtained,
    RunPlan,
    SplitRows,
    Written,
    orchestrate,
)
from miaudit.records.run_meta import DatasetFacts, ModelCounts, RunMeta
from miaudit.report.table import cache_note
from miaudit.verdict.records import ReleaseVerdict


def _meta(command: str, **facts) -> RunMeta:
    return RunMeta(command=command, run="r", seed=3, dataset=DatasetFacts("digits", "sklearn",
                                                                          "standard", True),
                   queries="plain", audit_samples=10, trained=1, from_cache=2, device="cpu",
                   seconds=1.5, config={"seed": 3}, facts=facts, after={"warnings": []})


def test_the_meta_record_lays_out_each_commands_keys_in_their_order():
    run = _meta("run", design="balanced", recipes={}, dataset_notes="n").to_dict()
    assert list(run) == ["recipes", "run", "seed", "dataset", "dataset_source", "dataset_notes",
                         "dataset_preprocessing", "dataset_labels", "design", "queries",
                         "audit_samples", "models_trained", "models_from_cache", "device",
                         "seconds", "config", "warnings"]
    audit = _meta("audit", target="t", hf_task="x", references=2).to_dict()
    assert list(audit) == ["run", "seed", "target", "dataset", "dataset_source",
                           "dataset_preprocessing", "dataset_labels", "audit_samples",
                           "references", "references_trained", "references_from_cache",
                           "queries", "hf_task", "device", "seconds", "config", "warnings"]
    assert audit["dataset_labels"] == "labelled" and audit["references_from_cache"] == 2
    with pytest.raises(ValueError, match="may not replace the record's own fields"):
        _meta("run", seed=4)
    with pytest.raises(ValueError, match="command must be one of"):
        _meta("attack")


def test_model_counts_are_read_back_from_either_commands_meta():
    run, audit = _meta("run"), _meta("audit")
    assert run.models == ModelCounts(1, 2, "models")
    assert ModelCounts.of_meta(run.to_dict()) == run.models
    assert ModelCounts.of_meta(audit.to_dict()) == ModelCounts(1, 2, "reference models")
    assert ModelCounts.of_meta({"seed": 0}) is None
    # the table's footnote reads the one record, whichever command wrote it
    assert "2 of 3 models were loaded" in cache_note(run.to_dict())
    assert "2 of 3 reference models were loaded" in cache_note(audit.to_dict())
    assert cache_note({"models_trained": 3, "models_from_cache": 0}) is None


def test_evaluate_attacks_is_evaluate_bank_with_typed_options(digits_bank):
    metrics = MetricsConfig(bootstrap=10)
    typed = evaluate_attacks(digits_bank, 1, ["loss", "lira-offline"], EvaluationOptions(
        metrics=metrics, seed=2, train_seconds=[1.0] * 8, progress=False))
    spelled = evaluate_bank(digits_bank, 1, ["loss", "lira-offline"], metric_cfg=metrics, seed=2,
                            train_seconds=[1.0] * 8, progress=False)
    for a, b in zip(typed.outcomes, spelled.outcomes, strict=True):
        assert a.name == b.name and a.metrics == b.metrics  # the cost's seconds are timings
        assert (a.cost.models, a.cost.train_seconds) == (b.cost.models, b.cost.train_seconds)
        np.testing.assert_array_equal(a.scores, b.scores)
    assert miaudit.api.evaluate_attacks is evaluate_attacks  # re-exported, loaded on use
    assert miaudit.api.EvaluationOptions is EvaluationOptions


class _BankSource:
    """A source whose models are a ready bank: the orchestrator's steps, without training."""

    def __init__(self, bank, out: Path) -> None:
        self.bank, self.out, self.calls = bank, out, []

    def plan(self) -> RunPlan:
        self.calls.append("plan")
        return RunPlan(command="run", name="bank", output=str(self.out),
                       config_file="config.yaml", config_text="seed: 0\n",
                       identity={"seed": 0}, defaults={"seed": 0}, seed=0,
                       metrics=MetricsConfig(bootstrap=10))

    def obtain(self, progress: bool) -> Obtained:
        self.calls.append("obtain")
        audit = np.flatnonzero(self.bank.audit)
        return Obtained(
            bank=self.bank, target=0, attacks=["rmia", "loss", "lira-offline"],
            skipped={"rmia": "not here"},  # known up front: never scored
            options=EvaluationOptions(metrics=MetricsConfig(bootstrap=10), progress=False),
            split=SplitRows(self.bank.membership[0][audit], labels=self.bank.labels[audit],
                            features=self.bank.labels[audit, None].astype(float)),
            rows=audit + 1000, trained_models=[], outputs="outputs", references=7,
            reference_note="Seven references.")

    def complete(self, result, obtained, out, progress) -> Written:
        self.calls.append("complete")
        (out / "own.txt").write_text("mine")
        return Written(files=["own.txt"])

    def expose(self, result, verdict, obtained, out) -> Written:
        self.calls.append("expose")
        assert isinstance(verdict, ReleaseVerdict) and "verdict" not in result.meta
        return Written()

    def record(self, result, obtained, seconds) -> RunMeta:
        self.calls.append("record")
        return _meta("run", design="bank")

    def echo_lines(self, result) -> list[str]:
        return ["own line"]


def test_orchestrate_runs_the_shared_steps_once_around_the_sources_own(digits_bank, tmp_path,
                                                                        capsys):
    source = _BankSource(digits_bank, tmp_path / "out")
    result, out = orchestrate(source, progress=False)
    assert source.calls == ["plan", "obtain", "complete", "expose", "record"]
    assert out == tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["files"][:6] == ["config.yaml", "bank.npz", "training.json", "own.txt",
                                    "verdict.txt", "verdict.json"]
    assert {p.name for p in out.iterdir()} == set(summary["files"])
    verdict = result.meta["verdict"]
    assert json.loads((out / "verdict.json").read_text()) == json.loads(
        json.dumps(verdict.to_dict()))
    assert summary["verdict"]["headline"] == verdict.headline
    assert "Seven references." in verdict.caveats
    # the source's skip first, in the listed order; the split check ran on its rows
    assert [o.name for o in result.outcomes] == ["loss", "lira-offline"]
    assert result.meta["skipped"] == {"rmia": "not here"}
    assert result.meta["checks"]["split"] is not None
    assert result.run_meta == _meta("run", design="bank")
    assert summary["models_trained"] == 1 and summary["design"] == "bank"
    np.testing.assert_array_equal(result.rows, np.flatnonzero(digits_bank.audit) + 1000)
    printed = capsys.readouterr().out
    assert verdict.headline.split()[0] in printed and "own line" in printed
    assert printed.rstrip().endswith(f"report: {out / 'report.html'}")


def test_a_run_gets_the_release_verdict(tiny_run_yaml, tmp_path):
    result = miaudit.run(tiny_run_yaml(), progress=False)
    out = result.out
    verdict = result.meta["verdict"]
    assert isinstance(verdict, ReleaseVerdict)
    assert (out / "verdict.txt").read_text().startswith(verdict.headline.split(":")[0])
    summary = json.loads((out / "summary.json").read_text())
    assert {"verdict.txt", "verdict.json"} <= set(summary["files"])
    assert summary["verdict"]["level"] == verdict.level and "line" in summary["verdict"]
    assert any("reference model" in c for c in verdict.caveats)
    assert result.run_meta is not None and result.run_meta.models.trained == 2
    assert summary["models_trained"] == 2 and "references_trained" not in summary
