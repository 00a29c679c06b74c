"""Tests of what the report says: readable histograms for any scores, dataset rows in
scores.csv and the exposure list, models loaded from the cache, the verdict in summary.json."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

import miaudit.report.write as write_mod
from miaudit.errors import MiauditError
from miaudit.metrics import evaluate
from miaudit.records.outcomes import AttackOutcome, AuditResult
from miaudit.report import format_table, write_report
from miaudit.report.exposure import rank_members
from miaudit.report.plots import figure_png, histograms_figure, normalised_ranks
from miaudit.report.table import STRONGEST_MARK, TRAIN_LABEL
from miaudit.verdict.headline import verdict_line
from miaudit.verdict.records import ReleaseVerdict

N = 400


@pytest.fixture
def fast_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny PNGs instead of the real figures where a test is about text, not plots."""
    png = figure_png(Figure(figsize=(1, 1)), dpi=10)
    monkeypatch.setattr(write_mod, "roc_png", lambda result: png)
    monkeypatch.setattr(write_mod, "histograms_png", lambda result: png)


def _result(meta: dict | None = None, rows: np.ndarray | None = None) -> AuditResult:
    rng = np.random.default_rng(1)
    members = np.arange(N) % 2 == 0
    scores = rng.normal(size=N) + 2.0 * members
    cost = {"models_trained": 5, "queries_per_sample": 1, "train_seconds": 2.9}
    outcome = AttackOutcome.from_dicts("lira", scores, evaluate(scores, members, n_bootstrap=20),
                                       cost)
    return AuditResult(np.arange(N) + 1000, members, [outcome], meta=meta or {}, rows=rows)


def test_normalised_ranks_handle_ties_infinities_and_nan() -> None:
    scores = np.array([3.0, -1.0, np.inf, np.nan, 3.0, -np.inf, 1e300])
    ranks = normalised_ranks(scores)
    # six scorable: -inf, -1, 3, 3, 1e300, inf; the tied 3s share the mid-rank 3.5
    expected = np.array([3.0, 1.5, 5.5, np.nan, 3.0, 0.5, 4.5]) / 6
    np.testing.assert_allclose(ranks, expected)
    assert np.isnan(normalised_ranks(np.full(3, np.nan))).all()
    assert normalised_ranks(np.array([7.0])).tolist() == [0.5]


def test_histograms_are_readable_for_awkward_scores() -> None:
    rng = np.random.default_rng(2)
    members = np.arange(N) % 2 == 0
    # a cube of a well-separated normal: huge, negative and heavy-tailed raw scores
    wild = (rng.normal(size=N) + 3.0 * members) ** 3 * 1e12 - 1e12
    wild[:7] = np.nan
    wild[7], wild[8] = np.inf, -np.inf
    tied = (rng.random(N) < np.where(members, 0.9, 0.6)).astype(float)
    spiky = np.where(rng.random(N) < 0.5, 0.0, rng.normal(size=N) + members)
    const, none = np.full(N, 4.0), np.full(N, np.nan)
    outcomes = [AttackOutcome.from_dicts(name, s, evaluate(s, members, n_bootstrap=0))
                for name, s in [("const", const), ("none", none), ("tied", tied),
                                ("spiky", spiky), ("wild", wild)]]
    result = AuditResult(np.arange(N), members, outcomes)
    fig = histograms_figure(result)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    titles = [ax.get_title() for ax in axes]
    assert len(axes) == 5
    assert titles[0].startswith(f"wild {STRONGEST_MARK}")  # the strongest panel comes first
    assert sum(STRONGEST_MARK in t for t in titles) == 1
    by_name = {t.split()[0]: (t, ax) for t, ax in zip(titles, axes, strict=True)}
    assert "7 unscorable, not shown" in by_name["wild"][0]
    assert "2 distinct scores: ties share a rank" in by_name["tied"][0]
    assert "1 distinct score: ties share a rank" in by_name["const"][0]
    assert re.search(r"\d+% of samples tie at one score", by_name["spiky"][0])
    assert "400 unscorable" in by_name["none"][0]
    assert any(t.get_text() == "no scorable samples" for t in by_name["none"][1].texts)
    for name in ("wild", "tied", "spiky", "const"):
        ax = by_name[name][1]
        assert ax.get_xlim() == (0.0, 1.0)  # ranks, whatever the raw scale
        assert ax.get_legend() is None  # one legend for all panels, on the figure
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["no leak (flat)", "members",
                                                          "non-members"]
    # members of `wild` score higher: their ranks pile up on the right
    def right_half(label: str) -> float:  # mean height of a group's filled steps at x > 0.5
        patch = next(p for p in by_name["wild"][1].patches if p.get_label() == label)
        xy = patch.get_path().vertices
        return float(xy[xy[:, 0] > 0.5, 1].mean())

    assert right_half("members") > 3 * right_half("non-members")
    assert figure_png(fig).startswith(b"\x89PNG")


def test_scores_csv_and_exposure_name_dataset_rows(tmp_path: Path, fast_plots: None) -> None:
    rows = (np.arange(N) * 7 + 3)[::-1].copy()  # dataset rows differ from bank positions
    result = _result(rows=rows)
    paths = write_report(result, tmp_path)
    with open(paths["scores"], newline="") as handle:
        table = list(csv.reader(handle))
    assert table[0] == ["index", "row", "member", "lira"]
    assert [int(r[0]) for r in table[1:]] == result.indices.tolist()
    assert [int(r[1]) for r in table[1:]] == rows.tolist()
    ranked = rank_members(result, "lira", 20)
    scores = result.outcomes[0].scores
    best = np.flatnonzero(result.members)[np.argsort(-scores[result.members])[:20]]
    assert [r["row"] for r in ranked] == rows[best].tolist()
    page = paths["report"].read_text()
    section = page[page.index("<h2>Most exposed samples</h2>"):page.index("<h2>Run metadata")]
    assert "<th>dataset row</th>" in section and "bank position" not in section
    listed = [int(x) for x in re.findall(r'<tr><td class="num">\d+</td><td class="num">(\d+)<',
                                         section)]
    assert listed == rows[best].tolist()


def test_bare_bank_exposure_says_bank_position(tmp_path: Path, fast_plots: None) -> None:
    result = _result()
    paths = write_report(result, tmp_path)
    assert paths["scores"].read_text().splitlines()[0] == "index,member,lira"
    page = paths["report"].read_text()
    section = page[page.index("<h2>Most exposed samples</h2>"):page.index("<h2>Run metadata")]
    assert "<th>bank position</th>" in section and "does not record dataset rows" in section
    first = rank_members(result, "lira", 1)[0]
    assert first["row"] is None and first["bank_index"] >= 1000
    assert f'<td class="num">{first["bank_index"]}</td>' in section
    with pytest.raises(MiauditError, match="one dataset row per audit sample"):
        write_report(_result(rows=np.arange(3)), tmp_path / "bad")


def test_ties_rank_the_lower_dataset_row_first() -> None:
    members = np.array([True, True, True, False])
    scores = np.array([1.0, 1.0, 0.5, 0.0])
    result = AuditResult(np.arange(4), members, [AttackOutcome.from_dicts("a", scores, {})],
                         rows=np.array([90, 40, 10, 5]))
    ranked = rank_members(result, "a")
    assert [r["row"] for r in ranked] == [40, 90, 10]
    assert [r["flagged_at_fpr"] for r in ranked] == [0.0, 0.0, 0.0]


def test_summary_and_table_say_models_came_from_the_cache(tmp_path: Path,
                                                          fast_plots: None) -> None:
    meta = {"models_trained": 0, "models_from_cache": 5, "train_wall_seconds": 0.1,
            "train_seconds_original": 2.9}
    result = _result(meta)
    paths = write_report(result, tmp_path)
    summary = json.loads(paths["summary"].read_text())
    assert summary["models_from_cache"] == 5 and summary["models_trained"] == 0
    note = summary["train_note"]
    assert "5 of 5 models were loaded from the model cache" in note
    assert "original training took (2.9 s in all)" in note and "0.1 s" in note
    text = format_table(result)
    header = next(line for line in text.splitlines() if line.startswith("attack"))
    assert TRAIN_LABEL in header
    assert note in text and "2.9" in text.split(TRAIN_LABEL)[1]
    assert note in paths["report"].read_text()
    fresh = _result({"models_trained": 5, "models_from_cache": 0, "train_wall_seconds": 2.9})
    assert "train_note" not in json.loads(write_report(fresh, tmp_path / "f")["summary"]
                                          .read_text())


def test_summary_leads_with_the_verdict(tmp_path: Path, fast_plots: None) -> None:
    result = _result({"dataset": "toy"})
    summary = json.loads(write_report(result, tmp_path)["summary"].read_text())
    assert list(summary)[0] == "verdict"
    line = verdict_line(result)
    assert summary["verdict"]["line"] == line and summary["verdict"]["level"] == "exposed"
    assert summary["verdict"]["attack"] == "lira" and line.startswith("Verdict: Exposed")
    assert format_table(result).splitlines()[0] == line
    # `miaudit audit`'s release statement is kept whole, with the line added
    audit = _result({"verdict": ReleaseVerdict(level="exposed",
                                               headline="Membership is exposed.")})
    summary = json.loads(write_report(audit, tmp_path / "a")["summary"].read_text())
    assert summary["verdict"]["headline"] == "Membership is exposed."
    assert summary["verdict"]["line"] == verdict_line(audit)
