"""The split check: can the members be told from the non-members without the model?
(docs/algorithms.md §20)

Membership figures measure leakage only when members and non-members are exchangeable: drawn
from one distribution, membership assigned at random. When a user's members come from another
slice of the data (an earlier date, easier images, another source), an attack can separate
them through the rows alone, and its figures mix the model's leak with that shift: the
distribution-shift problem behind many published membership results on foundation models
(Das et al. 2024, "Blind Baselines Beat Membership Inference Attacks for Foundation Models";
Duan et al. 2024, "Do Membership Inference Attacks Work on Large Language Models?").

The check fits a classifier that never sees the model to the audit rows' membership, from the
rows themselves: their features (principal components above 64 dimensions) and label with
gradient-boosted trees, or for texts their words (hashed TF-IDF uni- and bigrams), simple
statistics and label with a logistic regression. It is *cross-fitted* over two seeded halves
stratified by membership: each half is scored by the classifier fitted on the other, never on
itself, so every audit row gets an honest score (ranked within its half, so that the two
classifiers' scales do not mix) and the pooled AUC estimates how separable the split is; on
a random split it is about 0.5.

The split counts as *shifted* when the one-sided DeLong test of AUC > 0.5 (on the logit
scale, as the interval) on the held-out halves gives p < :data:`SHIFT_P_VALUE` after
Bonferroni over the two halves (p = 2 · min(p₁, p₂)). Each half's test is exact in the DeLong
sense: its scores come from a classifier that never saw its labels. The pooled AUC's DeLong
interval is not: the two classifiers' variation is not in it (simulated on random splits of
digits, it rejected at p < 0.001 ten times too often), so the pooled figures carry no
interval and each half's AUC carries its own. The same test applies to a model-free attack's
scores (``blind``), which no fitting touches.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from miaudit import metrics
from miaudit.config.sections import MetricsConfig
from miaudit.records.outcomes import AttackMetrics
from miaudit.verdict.split_record import (
    ModelFreeEvidence,
    SplitCheck,
    SplitHalf,
    SplitRecord,
    SplitSkipped,
    split_record,
)

SHIFT_P_VALUE = 0.001  # one-sided: what counts as "clearly above chance"
FOLDS = 2  # halves: each one's test is valid alone (see the module docstring)
MAX_ROWS = 20_000  # a seeded stratified subsample above this many audit rows
PCA_COMPONENTS = 64  # numeric rows wider than this are projected first (unsupervised)
HASHED_FEATURES = 2**18
MIN_EACH = 10  # members and non-members, for two halves with a test each


def auc_p_value(auc: float, auc_ci: Sequence[float] | None, confidence: float) -> float | None:
    """One-sided p-value of AUC > 0.5 from an AUC and its DeLong interval on the logit scale
    (:func:`miaudit.metrics.evaluate`'s ``auc_ci``): the interval's half-width gives the
    standard error of logit(AUC), and the test is logit(AUC) > 0. None without an interval."""
    if auc is None or auc_ci is None:
        return None
    lo, hi = float(auc_ci[0]), float(auc_ci[1])
    if not 0.0 < lo < 1.0 or not 0.0 < hi < 1.0 or hi <= lo:  # degenerate: no spread at all
        return 0.0 if auc > 0.5 else 1.0
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    se = (math.log(hi / (1 - hi)) - math.log(lo / (1 - lo))) / (2 * z)
    logit = math.log(auc / (1 - auc)) if 0.0 < auc < 1.0 else math.copysign(math.inf, auc - 0.5)
    return float(1.0 - NormalDist().cdf(logit / se))


def _subsample(members: np.ndarray, seed: int, max_rows: int) -> np.ndarray:
    """Row positions to use: all, or a seeded subsample keeping the member share."""
    n = members.size
    if n <= max_rows:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    keep = []
    for flag in (True, False):
        rows = np.flatnonzero(members == flag)
        take = max(1, round(max_rows * rows.size / n))
        keep.append(rng.choice(rows, size=min(take, rows.size), replace=False))
    return np.sort(np.concatenate(keep))


def _numeric_design(features: np.ndarray, labels: np.ndarray | None, seed: int
                    ) -> tuple[np.ndarray, list[int], str]:  # fmt: skip
    """[n, d] floats (PCA'd when wide) with the label as the last, categorical, column."""
    x = np.asarray(features, dtype=np.float64).reshape(len(features), -1)
    x = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    words = f"the {x.shape[1]} feature values"
    if x.shape[1] > PCA_COMPONENTS:
        from sklearn.decomposition import PCA

        k = min(PCA_COMPONENTS, x.shape[0])
        x = PCA(n_components=k, random_state=seed).fit_transform(x)
        words = f"{k} principal components of the {features[0].size} feature values"
    categorical: list[int] = []
    if labels is not None:
        x = np.column_stack([x, labels.astype(np.float64)])
        if int(labels.max(initial=0)) < 250:  # the trees' categorical limit
            categorical = [x.shape[1] - 1]
        words += " and the label"
    return x, categorical, words


_STATISTICS = ("characters", "words", "lines", "zlib bytes per character",
               "digit share", "upper-case share", "punctuation share", "non-ASCII share",
               "mean word length")


def text_statistics(texts: Sequence[str]) -> np.ndarray:
    """[n, 9] simple statistics of each text (:data:`_STATISTICS`)."""
    import zlib

    rows = []
    for t in texts:
        n = max(len(t), 1)
        words = t.split()
        rows.append([
            math.log1p(len(t)), math.log1p(len(words)), math.log1p(t.count("\n")),
            len(zlib.compress(t.encode("utf-8"))) / n,
            sum(c.isdigit() for c in t) / n, sum(c.isupper() for c in t) / n,
            sum((not c.isalnum()) and not c.isspace() for c in t) / n,
            sum(ord(c) > 127 for c in t) / n,
            float(np.mean([len(w) for w in words])) if words else 0.0,
        ])
    return np.asarray(rows, dtype=np.float64).reshape(len(texts), len(_STATISTICS))


def _text_design(texts: Sequence[str], labels: np.ndarray | None) -> tuple[Any, str]:
    """Sparse [n, 2¹⁸ + 9 (+ classes)]: TF-IDF of hashed words and word pairs, the
    standardised statistics and the one-hot label (all unsupervised transforms)."""
    from scipy import sparse
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

    counts = HashingVectorizer(n_features=HASHED_FEATURES, ngram_range=(1, 2),
                               alternate_sign=False, norm=None).transform(list(texts))
    words = TfidfTransformer(sublinear_tf=True).fit_transform(counts)
    stats = text_statistics(texts)
    stats = (stats - stats.mean(axis=0)) / np.maximum(stats.std(axis=0), 1e-12)
    blocks = [words, sparse.csr_matrix(stats)]
    what = "hashed TF-IDF words and word pairs, 9 text statistics"
    if labels is not None:
        blocks.append(sparse.csr_matrix(np.eye(int(labels.max()) + 1)[labels]))
        what += " and the label"
    return sparse.hstack(blocks).tocsr(), what


def _cross_fitted(x: Any, members: np.ndarray, make: Any, seed: int
                  ) -> tuple[np.ndarray, list[np.ndarray]]:  # fmt: skip
    """Scores of every row from the classifier fitted on the other half, ranked within its
    half into (0, 1); and each half's row positions."""
    from scipy.stats import rankdata
    from sklearn.model_selection import StratifiedKFold

    scores = np.empty(members.size, dtype=np.float64)
    halves = []
    for fit_rows, score_rows in StratifiedKFold(FOLDS, shuffle=True,
                                                random_state=seed).split(scores, members):
        model = make().fit(x[fit_rows], members[fit_rows])
        raw = model.predict_proba(x[score_rows])[:, 1]
        scores[score_rows] = (rankdata(raw) - 0.5) / raw.size
        halves.append(score_rows)
    return scores, halves


def split_check(members: np.ndarray, *, features: np.ndarray | None = None,
                labels: np.ndarray | None = None,
                texts: Sequence[str] | np.ndarray | None = None,
                metric_cfg: MetricsConfig | None = None, seed: int = 0,
                max_rows: int = MAX_ROWS) -> SplitRecord:
    """The split check of one audit: ``members`` bool [n] over the audit rows, with the rows'
    ``features`` (numeric, any shape [n, ...]) or ``texts`` (then features are ignored), and
    their ``labels``. Returns a :class:`~miaudit.verdict.split_record.SplitCheck`: ``metrics``
    (:func:`miaudit.metrics.evaluate` of the out-of-fold scores), ``p_value`` (one-sided,
    AUC > 0.5), ``shifted``, and what it rests on; a
    :class:`~miaudit.verdict.split_record.SplitSkipped` saying why when it cannot run."""
    metric_cfg = metric_cfg or MetricsConfig()
    members = np.asarray(members, dtype=bool)
    n1, n0 = int(members.sum()), int((~members).sum())
    if min(n1, n0) < MIN_EACH:
        return SplitSkipped(f"needs at least {MIN_EACH} members and {MIN_EACH} non-members "
                            f"(has {n1:,} and {n0:,})")
    if texts is None and features is None:
        return SplitSkipped("the audit rows' features are not available (a bare bank)")
    from threadpoolctl import threadpool_limits

    _load_libraries()  # threadpool_limits reaches only the thread pools already loaded
    start = time.perf_counter()
    # one thread: the trees' OpenMP threads wait at a barrier per split, and when another
    # process holds a core that made this check 100-300x slower (adult's 8,000 rows: 98-288 s
    # against 0.9-1.0 s on one thread, on the shared 2-core machine at load 2-4)
    with threadpool_limits(1):
        return _split_check(members, features, labels, texts, metric_cfg, seed, max_rows,
                            start)


def _load_libraries() -> None:
    """Import what the check fits with, so that its OpenMP and BLAS pools (scikit-learn's own
    libgomp, scipy's OpenBLAS) exist when the limit is set: one loaded inside the limit keeps
    every core (seen: a torch audit's first check took 373 s under load)."""
    import scipy.stats  # noqa: F401
    import sklearn.decomposition  # noqa: F401
    import sklearn.ensemble  # noqa: F401
    import sklearn.feature_extraction.text  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    import sklearn.model_selection  # noqa: F401


def _split_check(members: np.ndarray, features: np.ndarray | None, labels: np.ndarray | None,
                 texts: Sequence[str] | np.ndarray | None, metric_cfg: MetricsConfig, seed: int,
                 max_rows: int, start: float) -> SplitCheck:
    rows = _subsample(members, seed, max_rows)
    m = members[rows]
    y = None if labels is None else np.asarray(labels)[rows].astype(np.int64)
    if texts is not None:
        from sklearn.linear_model import LogisticRegression

        x, what = _text_design([str(texts[i]) for i in rows], y)
        classifier = "logistic regression"

        def make() -> Any:
            return LogisticRegression(C=1.0, max_iter=2000)
    else:
        from sklearn.ensemble import HistGradientBoostingClassifier

        x, categorical, what = _numeric_design(np.asarray(features)[rows], y, seed)
        classifier = "gradient-boosted trees"

        def make() -> Any:
            return HistGradientBoostingClassifier(
                max_iter=100, early_stopping=False, random_state=seed,
                categorical_features=categorical or None)
    scores, halves = _cross_fitted(x, m, make, seed)
    # the pooled figures without an interval (see the module docstring), each half's AUC with
    # its own DeLong interval and test
    met = metrics.evaluate(scores, m, fprs=metric_cfg.fprs, n_bootstrap=0, seed=seed,
                           recalls=metric_cfg.recalls)
    held_out = []
    for rows_k in halves:
        half = metrics.evaluate(scores[rows_k], m[rows_k], fprs=metric_cfg.fprs, n_bootstrap=1,
                                confidence=metric_cfg.confidence, seed=seed, recalls=())
        held_out.append(SplitHalf.from_dict({
            **half, "p_value": auc_p_value(half["auc"], half["auc_ci"], metric_cfg.confidence)}))
    # a half without a test (no DeLong interval; not seen, each half holds both classes)
    # counts as p = 1: no evidence of a shift
    p = min(1.0, len(held_out) * min(1.0 if h.p_value is None else h.p_value
                                     for h in held_out))
    return SplitCheck(
        classifier=classifier, features=what, folds=FOLDS, rows=int(rows.size),
        subsampled_from=int(members.size) if rows.size < members.size else None,
        metrics=AttackMetrics.from_dict(met), halves=tuple(held_out),
        confidence=metric_cfg.confidence, p_value=p, shift_p_value=SHIFT_P_VALUE,
        shifted=bool(p < SHIFT_P_VALUE), seconds=round(time.perf_counter() - start, 2),
    )


def model_free_evidence(split: SplitRecord | Mapping[str, Any] | None,
                        outcomes: Sequence[Any], confidence: float) -> list[ModelFreeEvidence]:
    """Every model-free measurement of the split, strongest AUC first: the split check
    (``split``, its record, or its dict as summary.json holds it) and each model-free attack
    among ``outcomes`` (one that read no model, ``cost.models == 0``: the ``blind``
    baseline). ``confidence``: of the attacks' AUC intervals."""
    found = []
    check = split_record(split)
    if isinstance(check, SplitCheck):
        found.append(ModelFreeEvidence(source="the split check", auc=check.auc,
                                       p_value=check.p_value, shifted=check.shifted,
                                       tpr=check.metrics.tpr))
    for o in outcomes:
        if not is_model_free(o):
            continue
        met = o.metrics  # an AttackMetrics (miaudit.records.outcomes)
        p = auc_p_value(met.auc, met.auc_ci, confidence)
        found.append(ModelFreeEvidence(source=f"the model-free attack {o.name}", auc=met.auc,
                                       p_value=p, shifted=p is not None and p < SHIFT_P_VALUE,
                                       tpr=met.tpr))
    return sorted(found, key=lambda e: -(e.auc or 0.0))


def is_model_free(outcome: Any) -> bool:
    """An attack outcome that read no model (its cost's ``models`` is 0): it measures the
    split, never the model."""
    return bool(outcome.cost.models == 0)


def split_shifted(split: SplitRecord | Mapping[str, Any] | None, outcomes: Sequence[Any],
                  confidence: float) -> bool | None:
    """True when some model-free measurement is clearly above chance; None when there is
    none (no split check, no model-free attack), else False."""
    found = model_free_evidence(split, outcomes, confidence)
    return any(e.shifted for e in found) if found else None
