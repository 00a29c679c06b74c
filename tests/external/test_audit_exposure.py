import numpy as np
import pytest

from miaudit import metrics
from miaudit.data import Dataset
from miaudit.external.data import AuditData
from miaudit.external.exposed import exposure_csv, rank_exposed, thumbnail_figure
from miaudit.records.outcomes import AttackOutcome, AuditResult


def _setup(kind: str = "image"):
    rng = np.random.default_rng(0)
    n = 40
    members = np.zeros(n, bool)
    members[::2] = True
    scores = rng.normal(size=n) + members
    scores[4] = np.nan  # a member the attack cannot score
    shape = (n, 1, 4, 4) if kind == "image" else (n, 16)
    features = rng.random(shape, dtype=np.float32)
    labels = np.arange(n) % 3
    dataset = Dataset("toy", features, labels, 3, kind)
    data = AuditData(features=features, labels=labels, members=members,
                     audit_rows=np.arange(100, 100 + n), pool_rows=np.zeros(0, int),
                     population_rows=np.zeros(0, int), data=dataset, public=None)
    result = AuditResult(indices=np.arange(n), members=members, outcomes=[
        AttackOutcome.from_dicts("a", scores, metrics.evaluate(scores, members, n_bootstrap=0))])
    return result, data, scores, members


def test_ranking_is_members_by_score_with_their_fpr():
    result, data, scores, members = _setup()
    rows = rank_exposed(result, "a", data, top=100, predicted=np.zeros(40, int))
    ranked = [r["bank_index"] for r in rows]
    scorable = [i for i in np.flatnonzero(members) if not np.isnan(scores[i])]
    assert sorted(ranked) == sorted(scorable) and 4 not in ranked  # NaN member not ranked
    assert [scores[i] for i in ranked] == sorted((scores[i] for i in scorable), reverse=True)
    nonmember = scores[~members]
    for r in rows:  # brute force: share of non-members scoring at least as high
        above = int((nonmember >= r["score"]).sum())
        assert r["nonmembers_above"] == above
        assert r["flagged_at_fpr"] == pytest.approx(above / nonmember.size)
        assert r["row"] == 100 + r["bank_index"] and r["label"] == r["bank_index"] % 3
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    top = rank_exposed(result, "a", data, top=3, predicted=np.zeros(40, int))
    assert top == rows[:3]
    text = exposure_csv(rows).splitlines()
    assert text[0].startswith("rank,row,label") and len(text) == len(rows) + 1


def test_thumbnails_for_images_only():
    result, data, _, _ = _setup("image")
    rows = rank_exposed(result, "a", data, top=12, predicted=np.zeros(40, int))
    figure = thumbnail_figure(rows, data, "a")
    assert figure is not None and len(figure.axes) == 12
    assert figure.axes[0].get_title().startswith(f"#1 row {rows[0]['row']}")
    result, data, _, _ = _setup("tabular")
    rows = rank_exposed(result, "a", data, top=5, predicted=np.zeros(40, int))
    assert thumbnail_figure(rows, data, "a") is None
