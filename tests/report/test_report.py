"""Tests of the report: files written, their contents, the table, atomicity."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

import miaudit.io
import miaudit.report.write as write_mod
from miaudit.errors import MiauditError
from miaudit.metrics import evaluate
from miaudit.records.outcomes import AttackCost, AttackOutcome, AuditResult
from miaudit.report import format_table, write_report

N = 600
NAMES = ["loss", "lira-online", "correctness"]
EXPECTED_FILES = {
    "metrics.json",
    "scores.csv",
    "roc.png",
    "histograms.png",
    "report.html",
    "summary.json",
}


def _result() -> AuditResult:
    rng = np.random.default_rng(0)
    members = rng.random(N) < 0.5
    loss = rng.normal(size=N) + 0.5 * members
    lira = rng.standard_t(3, size=N) * np.pi + 3 * members  # non-round floats
    lira[:9] = np.nan  # unscorable
    correct = (rng.random(N) < np.where(members, 0.95, 0.8)).astype(float)
    costs = [
        {},
        {
            "models_trained": 16,
            "queries_per_sample": 2,
            "train_seconds": 12.5,
            "score_seconds": 0.25,
        },
        {},
    ]
    outcomes = [
        AttackOutcome.from_dicts(name, s, evaluate(s, members, n_bootstrap=50, threshold=0.5),
                                 cost)
        for name, s, cost in zip(NAMES, [loss, lira, correct], costs, strict=True)
    ]
    meta = {
        "dataset": "digits <script>alert(1)</script>",
        "target": 3,
        "models": {"m3": {"train_acc": 1.0, "test_acc": 0.93}},
        "config": {"epochs": 5, "lr": 0.01, "note": "see https://example.org"},
        "warnings": ["only 8 reference models"],
    }
    return AuditResult(
        indices=np.arange(N, dtype=np.int64) * 3 + 1, members=members, outcomes=outcomes, meta=meta
    )


@pytest.fixture(scope="module")
def result() -> AuditResult:
    return _result()


@pytest.fixture
def fast_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the real figures with a tiny PNG where a test is about files, not plots."""
    fig = Figure(figsize=(1, 1))
    png = write_mod.figure_png(fig, dpi=10)
    monkeypatch.setattr(write_mod, "roc_png", lambda result: png)
    monkeypatch.setattr(write_mod, "histograms_png", lambda result: png)


@pytest.fixture(scope="module")
def written(result: AuditResult, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_report(result, tmp_path_factory.mktemp("report") / "out")


def test_every_file_exists(written: dict[str, Path]) -> None:
    assert {p.name for p in written.values()} == EXPECTED_FILES
    folder = next(iter(written.values())).parent
    assert {p.name for p in folder.iterdir()} == EXPECTED_FILES  # no temporary leftovers
    for name in ("roc", "histograms"):
        assert written[name].read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    summary = json.loads(written["summary"].read_text())
    assert set(summary["files"]) == EXPECTED_FILES
    assert summary["target"] == 3 and summary["warnings"] == ["only 8 reference models"]


def test_metrics_json(written: dict[str, Path], result: AuditResult) -> None:
    doc = json.loads(written["metrics"].read_text(), parse_constant=pytest.fail)
    assert list(doc) == NAMES
    # an older cost spelling ("models_trained") is written as the pipeline's ("models")
    assert "cost" not in doc["loss"] and doc["lira-online"]["cost"]["models"] == 16
    for outcome in result.outcomes:
        assert doc[outcome.name]["auc"] == outcome.metrics.auc
        assert doc[outcome.name]["tpr_at_fpr"] == outcome.metrics.to_dict()["tpr_at_fpr"]
    assert doc["lira-online"]["n_unscorable"] == 9


def test_scores_csv_round_trips_exactly(written: dict[str, Path], result: AuditResult) -> None:
    with open(written["scores"], newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["index", "member", *NAMES]
    body = rows[1:]
    assert len(body) == N
    assert [int(r[0]) for r in body] == result.indices.tolist()
    assert [r[1] for r in body] == ["1" if m else "0" for m in result.members]
    for j, outcome in enumerate(result.outcomes):
        values = np.array([float(r[2 + j]) for r in body])
        np.testing.assert_array_equal(values, outcome.scores)  # NaN == NaN here, exact floats
    assert body[0][3] == "nan"


def test_html_is_self_contained(written: dict[str, Path]) -> None:
    page = written["report"].read_text()
    assert "<table" in page and "TPR@1%" in page
    for name in NAMES:
        assert name in page
    assert page.count("data:image/png;base64,") == 2
    assert "http://" not in page
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', page)
    assert refs and all(ref.startswith("data:") for ref in refs)
    assert "<script>" not in page and "&lt;script&gt;" in page  # escaped
    assert "only 8 reference models" in page  # run warnings
    assert "Most exposed samples" in page and "train_acc" in page


def test_html_links_only_in_escaped_text(written: dict[str, Path]) -> None:
    page = written["report"].read_text()
    # the only URL is inside the <pre> config dump (text, not an asset reference)
    assert page.count("https://") == 1 and "see https://example.org" in page
    assert not re.search(r'(?:src|href|url\()\s*=?\s*"?https?://', page)


def test_format_table(result: AuditResult) -> None:
    text = format_table(result)
    lines = text.splitlines()
    assert lines[0].startswith("Verdict: ") and lines[1] == ""  # the verdict comes first
    lines = lines[2:]
    for name in NAMES:
        assert any(line.startswith(name) for line in lines)
    assert "TPR@0.1%" in lines[0] and "TPR@1%" in lines[0] and "models" in lines[0]
    assert "0.326 exp. FP*" in lines[1] and "3.26 exp. FP*" in lines[1]  # 326 non-members
    # 300 non-members < 10,000: the legend explains the mark once, with no repeated footnote
    assert "a TPR resting on fewer than 10 is marked * (indicative)" in text
    assert "treat as indicative" not in text
    assert "lira-online: 9 of 600 samples unscorable" in text
    assert re.search(r"\d+\.\d% \[\d+\.\d+, \d+\.\d+\]", text)  # "12.3% [10.1, 14.2]"
    # fits a wide terminal (the "train s (orig.)" label costs 8 columns)
    assert max(len(line) for line in lines[: 3 + len(NAMES)]) <= 130


def test_format_table_without_costs(result: AuditResult) -> None:
    bare = AuditResult(
        result.indices,
        result.members,
        [AttackOutcome(o.name, o.scores, o.metrics) for o in result.outcomes],
    )
    header = format_table(bare, verdict=False).splitlines()[0]
    assert header.startswith("attack") and "models" not in header and "score s" not in header


def test_extra_figures_are_written_and_embedded(
    result: AuditResult, tmp_path: Path, fast_plots: None
) -> None:
    fig = Figure()
    fig.add_subplot().plot([0, 1], [1, 0])
    png = write_mod.figure_png(fig)
    paths = write_report(result, tmp_path, extra_figures={"calib": fig, "raw_png": png})
    assert paths["calib"].name == "calib.png" and paths["raw_png"].read_bytes() == png
    assert paths["report"].read_text().count("data:image/png;base64,") == 4
    assert "calib.png" in json.loads(paths["summary"].read_text())["files"]


def test_run_files_are_listed_and_must_exist(
    result: AuditResult, tmp_path: Path, fast_plots: None
) -> None:
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    paths = write_report(result, tmp_path, run_files=["config.yaml"])
    listed = json.loads(paths["summary"].read_text())["files"]
    assert listed[0] == "config.yaml" and set(listed) == {p.name for p in tmp_path.iterdir()}
    with pytest.raises(MiauditError, match="bank.npz"):
        write_report(result, tmp_path / "other", run_files=["bank.npz"])
    assert not (tmp_path / "other").exists()  # nothing written


@pytest.mark.parametrize("bad", [{"roc": b"\x89PNG\r\n\x1a\n"}, {"../x": b"x"}, {"ok": b"x"}])
def test_bad_extra_figures_rejected(result: AuditResult, tmp_path: Path, bad) -> None:
    with pytest.raises(MiauditError):
        write_report(result, tmp_path / "out", extra_figures=bad)
    assert not (tmp_path / "out").exists()


def test_inconsistent_result_rejected(result: AuditResult, tmp_path: Path) -> None:
    short = AttackOutcome.from_dicts("short", np.zeros(N - 1), {})
    bad = AuditResult(result.indices, result.members, [*result.outcomes, short])
    with pytest.raises(MiauditError, match="one score per audit sample"):
        write_report(bad, tmp_path)
    dup = AuditResult(result.indices, result.members, [*result.outcomes, result.outcomes[0]])
    with pytest.raises(MiauditError, match="unique"):
        write_report(dup, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_failure_while_rendering_writes_nothing(
    result: AuditResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast_plots: None
) -> None:
    def boom(*args, **kwargs):
        raise RuntimeError("html writer failed")

    monkeypatch.setattr(write_mod, "render_html", boom)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="html writer failed"):
        write_report(result, out)
    assert not out.exists() or list(out.iterdir()) == []


def test_failure_while_writing_leaves_no_partial_file(
    result: AuditResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast_plots: None
) -> None:
    real_write_text = write_mod.write_text

    def half_then_fail(path, text: str) -> None:
        if Path(path).name != "report.html":
            return real_write_text(path, text)
        with miaudit.io.atomic_open(path, "w", encoding="utf-8") as handle:
            handle.write(text[: len(text) // 2])
            handle.flush()
            raise OSError("disk full")

    monkeypatch.setattr(write_mod, "write_text", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        write_report(result, tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert "report.html" not in names and "summary.json" not in names  # no completion marker
    assert not any(name.endswith(".tmp") or name.startswith(".") for name in names)
    json.loads((tmp_path / "metrics.json").read_text())  # files written before are complete
    assert len((tmp_path / "scores.csv").read_text().splitlines()) == N + 1


def test_constant_and_all_nan_scores_render(tmp_path: Path) -> None:
    members = np.r_[np.ones(20, bool), np.zeros(30, bool)]
    const = np.full(50, 2.0)
    nan_all = np.full(50, np.nan)
    outcomes = [
        AttackOutcome.from_dicts("const", const, evaluate(const, members, n_bootstrap=5)),
        AttackOutcome.from_dicts("none", nan_all, evaluate(nan_all, members, n_bootstrap=5)),
    ]
    res = AuditResult(np.arange(50), members, outcomes)
    paths = write_report(res, tmp_path)
    assert math.isclose(json.loads(paths["metrics"].read_text())["const"]["auc"], 0.5)
    assert "none: 50 of 50 samples unscorable" in format_table(res)


def test_format_table_cost_alias_and_skipped(result: AuditResult) -> None:
    outcome = result.outcomes[0]
    aliased = AttackOutcome(outcome.name, outcome.scores, outcome.metrics, AttackCost(models=7))
    res = AuditResult(
        result.indices,
        result.members,
        [aliased],
        meta={"skipped": {"rapid": "needs shadow models"}},
    )
    lines = format_table(res, verdict=False).splitlines()
    assert lines[0].split()[-1] == "models" and lines[3].split()[-1] == "7"  # header, support, --
    assert "rapid: skipped (needs shadow models)" in lines
