"""The terminal table fits the terminal: wrapped verdict, privacy and footnote lines, columns
left out (cost columns first) with a note, while the full form (width None, what a pipe and
the report files get) keeps every column."""

from __future__ import annotations

import io

import numpy as np
import pytest

from miaudit.config import CanariesConfig, MetricsConfig
from miaudit.pipeline.evaluate import evaluate_bank
from miaudit.records.outcomes import AuditResult
from miaudit.report import format_table, write_report
from miaudit.report.table import build_table
from miaudit.report.terminal import MIN_WIDTH, terminal_width
from miaudit.signals import SignalBank
from miaudit.verdict.headline import verdict_line

ATTACKS = ["loss", "calibrated-loss", "calibrated-gradient-norm", "rmia", "correctness"]
COST_HEADERS = ["models", "queries", "train s (orig.)", "score s"]


def _bank(seed: int = 0) -> SignalBank:
    """A target and 4 offline references on 900 samples: 400 audit, 200 public, 100
    population and 200 canaries (half in the target's training set); members score higher."""
    rng = np.random.default_rng(seed)
    n, m, c = 900, 5, 4
    kind = np.repeat(np.array(["audit", "public", "population", "canary"]), [400, 200, 100, 200])
    membership = np.zeros((m, n), dtype=bool)
    membership[0, kind == "audit"] = rng.random(400) < 0.5
    membership[0, kind == "canary"] = rng.random(200) < 0.5
    for r in range(1, m):
        membership[r, kind == "public"] = rng.random(200) < 0.5
    labels = rng.integers(0, c, n)
    logits = rng.normal(size=(m, n, 1, c)).astype(np.float32)
    logits[:, np.arange(n), 0, labels] += 1.0 + 2.5 * membership
    grad = rng.gamma(2.0, 1.0, size=(m, n)) - membership
    return SignalBank(logits=logits, labels=labels, membership=membership,
                      population=kind == "population", audit=kind == "audit",
                      canary=kind == "canary", channels={"grad_norm": grad})


@pytest.fixture(scope="module")
def result() -> AuditResult:
    res = evaluate_bank(
        _bank(), 0, ATTACKS, {}, MetricsConfig(bootstrap=20), seed=0,
        train_seconds=[12.5, 3.25, 3.25, 3.25, 3.25], progress=False,
        canaries=CanariesConfig(count=200),
    )
    # a long skip reason, as `miaudit attack` lists them
    res.meta["skipped"] = {"lira-online": "attack 'lira-online' cannot run: needs at least 1 "
                           "reference model(s) trained ON the audit samples (the online "
                           "design: each audit sample IN for half the models); use the "
                           "online protocol or an offline attack."}
    return res


def test_the_full_form_is_wider_than_a_terminal_and_keeps_every_column(result):
    full = format_table(result, width=None)
    lines = full.splitlines()
    assert lines[0] == verdict_line(result)  # one line, as before
    header = build_table(result).header
    assert all(h in header for h in COST_HEADERS) and "bal.acc" in header
    assert all(h in full for h in header)
    assert "Left out" not in full
    assert max(len(line) for line in lines) > 120  # what the terminals below must fit


@pytest.mark.parametrize("width", [80, 100, 120])
def test_no_line_is_wider_than_the_terminal(result, width):
    text = format_table(result, width=width)
    lines = text.splitlines()
    too_wide = [line for line in lines if len(line) > width]
    assert not too_wide, too_wide
    # the verdict is all there, wrapped: its words in order in the first lines
    words = verdict_line(result).split()
    assert " ".join(text.split()[: len(words)]) == " ".join(words)
    if len(words) > 1 and len(verdict_line(result)) > width:
        assert lines[1].startswith("  ")  # a continuation, indented
    # every attack still has its row, the strongest first with its mark
    rows = [line.split()[0] for line in lines if line.split()
            and line.split()[0] in ATTACKS]
    assert sorted(set(rows)) == sorted(ATTACKS)
    assert "★" in text
    # and the note says what was left out and where the full table is
    note = " ".join(text[text.index("Left out to fit"):].split())
    assert note.startswith(f"Left out to fit {width} columns: ")
    listed = note.split(": ", 1)[1].split("; the full table")[0]
    assert ", ".join(COST_HEADERS) in listed  # the cost columns, in the table's order
    assert "the full table is in the report files (report.html)" in note


def test_cost_columns_go_first_and_the_ranking_tpr_stays(result):
    def header(width):
        return format_table(result, width=width).split("\n\n", 2)[1].splitlines()[0]

    wide = header(120)
    assert not any(f"  {h}" in wide for h in COST_HEADERS)
    assert "TPR@1% [CI]" in wide and "AUC [CI]" in wide  # figures kept before CIs go
    narrow = header(80)
    assert "TPR@1%" in narrow and "AUC" in narrow and "[CI]" not in narrow
    assert header(MIN_WIDTH).split()[:3] == ["attack", "AUC", "TPR@1%"]


def test_the_privacy_audit_section_fits_too(result):
    for width in (80, 120):
        text = format_table(result, width=width)
        section = text[text.index("\nPrivacy audit\n"):]
        assert "ε lb (audit)" in section
        assert max(len(line) for line in section.splitlines()) <= width
    assert "k₊" in format_table(result, width=None)


def test_legend_names_only_columns_shown(result):
    full = format_table(result, width=None)
    assert "μ lb: its μ-GDP lower bound" in full
    narrow = " ".join(format_table(result, width=80).split())
    assert "μ lb: its μ-GDP" not in narrow and "ε lb: the ε lower bound" in narrow


def test_the_report_files_keep_the_whole_table(result, tmp_path):
    write_report(result, tmp_path)
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    for h in [*COST_HEADERS, "bal.acc", "μ lb", "TPR@0.1% [CI]"]:
        assert f"<th>{h}" in page or f">{h}<" in page, h


def test_not_a_terminal_prints_the_full_table(result, monkeypatch):
    monkeypatch.setattr("sys.stdout", io.StringIO())  # a pipe or a log file
    assert terminal_width() is None
    assert format_table(result) == format_table(result, width=None)


def test_a_terminal_sets_the_width(result, monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdout", Tty())
    monkeypatch.setenv("COLUMNS", "90")
    assert terminal_width() == 90
    assert max(len(line) for line in format_table(result).splitlines()) <= 90
    monkeypatch.setenv("COLUMNS", "20")  # a tiny window: fitted to the narrowest we do
    assert terminal_width() == MIN_WIDTH


@pytest.mark.parametrize("width", [0, MIN_WIDTH - 1, 99.5, True, "wide"])
def test_a_bad_width_is_refused(result, width):
    with pytest.raises(ValueError, match="width must be"):
        format_table(result, width=width)
