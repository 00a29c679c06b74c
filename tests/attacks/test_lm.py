"""Language-model attacks against naive re-implementations on a constructed
sequence bank whose padding holds garbage (NaN, inf, huge values): a score that read it
would be NaN, infinite or different."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from miaudit.attacks import TargetView, get_attack, list_attacks, run_attack
from miaudit.attacks.lm import lm_rapid_features
from miaudit.errors import AttackError
from miaudit.metrics import auc
from miaudit.signals import SignalBank
from miaudit.signals.bank import valid_positions

LM_ATTACKS = ["lm-loss", "zlib", "min-k", "min-k-plus-plus", "lm-calibrated",
              "lm-lira-offline", "lm-lira-offline-fixed-variance", "lm-rmia", "lm-rapid",
              "blind", "lm-base-reference", "recall", "dc-pdd", "ez-mia", "wbc"]
FAST = dict(epochs=3, max_train_samples=400)


def make_bank(m=6, n=80, t=12, seed=0, padding=(np.nan, np.inf, -1e30), effect=0.0,
              n_population=20, balanced=False, calibrated=False, vocab=9):
    """A seeded sequence bank: the last `n_population` samples are population; members'
    token log-probs are raised by `effect` (a planted leak). `balanced`: each sample is IN
    for exactly half the models (the online design), else for each model with chance 1/2."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, t + 1, size=n)
    lengths[:3] = (t, 1, 5)  # a full row, a one-token row
    if balanced:
        membership = rng.permuted(np.arange(m)[:, None].repeat(n, 1) < m // 2, axis=0)
    else:
        membership = rng.random((m, n)) < 0.5
    membership[:, n - n_population:] = False
    token = -rng.exponential(2.0, size=(m, n, t))
    token = np.minimum(token + effect * membership[:, :, None], 0.0).astype(np.float32)
    mean = -rng.uniform(1.0, 5.0, size=(m, n, t)).astype(np.float32)
    std = rng.uniform(0.0, 3.0, size=(m, n, t)).astype(np.float32)
    std[0, 0, 0] = 0.0  # a one-hot next-token distribution: sigma floored
    pad = ~valid_positions(lengths, t)
    for array, junk in zip((token, mean, std), padding, strict=True):
        array[:, pad] = junk
    zbytes = rng.integers(20, 300, size=n)
    chars = zbytes * 2 + rng.integers(0, 50, size=n)
    population = np.zeros(n, dtype=bool)
    population[n - n_population:] = True
    extra = {}
    if calibrated:  # the calibrated attacks' arrays: a base model, a prefix, token ids
        prefix = np.minimum(token - rng.exponential(0.5, size=token.shape), 0.0)
        base = -rng.exponential(2.0, size=(n, t)).astype(np.float32)
        ids = rng.integers(0, vocab, size=(n, t))  # a small vocabulary: repeated tokens
        prefix[:, pad], base[pad], ids[pad] = padding[0], padding[1], 10**6
        # each model's top-1 right or wrong (EZ-MIA), from a generator of its own (the draws
        # above are unchanged); likelier right where the token is likely; True at padding
        with np.errstate(invalid="ignore", over="ignore"):  # the padding's garbage
            top1 = np.random.default_rng([seed, 1]).random(token.shape) < np.exp(token)
        top1[:, pad] = True
        extra = dict(seq_prefix_token_logprob=prefix.astype(np.float32),
                     seq_base_token_logprob=base, seq_token_ids=ids,
                     seq_vocab_size=np.int64(vocab), seq_top1_correct=top1)
    return SignalBank(None, None, membership, population=population, seq_token_logprob=token,
                      seq_mean_logprob=mean, seq_std_logprob=std, seq_lengths=lengths,
                      text_zlib_bytes=zbytes, text_chars=chars, **extra)


@pytest.fixture(scope="module")
def bank():
    return make_bank()


def naive_loglik(bank):
    m, n = bank.membership.shape
    return np.array([[np.mean(bank.seq_token_logprob[i, j, : bank.seq_lengths[j]],
                              dtype=np.float64) for j in range(n)] for i in range(m)])


def naive_out_refs(out_models, n):
    """Sample n's OUT references; out_models bool [M, N]: the view's (`visible_sides`)."""
    return [r for r in range(len(out_models)) if out_models[r, n]]


def naive_lowest(values, k):
    values = np.sort(np.asarray(values, dtype=np.float64))
    return values[: max(1, int(k * len(values)))].mean()


def test_every_lm_attack_is_registered_in_its_family():
    names = {s.name for s in list_attacks() if s.family == "language-model"}
    assert names == set(LM_ATTACKS)
    assert get_attack("min-k").defaults == {"k": 0.2}
    assert get_attack("min-k-plus-plus").needs.next_token_moments
    assert get_attack("lm-rmia").needs.population
    blind = get_attack("blind").needs
    assert blind.text and not blind.sequence and not blind.out_references


@pytest.mark.parametrize("target", [0, 3])
def test_target_only_attacks_match_naive(bank, target):
    ll = naive_loglik(bank)
    view = TargetView.of(bank, target)
    n = bank.n_samples
    np.testing.assert_allclose(run_attack("lm-loss", view).scores, ll[target], rtol=1e-6)
    np.testing.assert_allclose(run_attack("zlib", view).scores,
                               ll[target] / bank.text_zlib_bytes, rtol=1e-6)
    for k in (0.2, 0.5, 1.0):
        minimum = [naive_lowest(bank.seq_token_logprob[target, j, : bank.seq_lengths[j]], k)
                   for j in range(n)]
        np.testing.assert_allclose(run_attack("min-k", view, k=k).scores, minimum, rtol=1e-6)
        plus = []
        for j in range(n):
            length = bank.seq_lengths[j]
            tok = bank.seq_token_logprob[target, j, :length].astype(np.float64)
            mu = bank.seq_mean_logprob[target, j, :length]
            sd = np.maximum(bank.seq_std_logprob[target, j, :length].astype(np.float64), 1e-6)
            plus.append(naive_lowest((tok - mu) / sd, k))
        np.testing.assert_allclose(run_attack("min-k-plus-plus", view, k=k).scores, plus,
                                   rtol=1e-6)
    np.testing.assert_allclose(run_attack("blind", view).scores,
                               -bank.text_zlib_bytes / bank.text_chars)


def test_min_k_takes_twenty_percent_by_default(bank):
    view = TargetView.of(bank, 1)
    j = 0  # the full row: 12 tokens, floor(0.2 * 12) = 2 lowest
    expected = np.sort(bank.seq_token_logprob[1, j].astype(np.float64))[:2].mean()
    assert run_attack("min-k", view).scores[j] == pytest.approx(expected)
    with pytest.raises(AttackError, match=r"'k' must be a number in \(0, 1\]"):
        run_attack("min-k", view, k=0.0)


@pytest.mark.parametrize("target", [0, 5])
def test_calibrated_matches_naive(bank, target, visible_sides):
    loss = -naive_loglik(bank)
    _, out_models = visible_sides(bank, target)
    expected = []
    for n in range(bank.n_samples):
        refs = naive_out_refs(out_models, n)
        expected.append(np.mean(loss[refs, n]) - loss[target, n] if refs else np.nan)
    scores = run_attack("lm-calibrated", TargetView.of(bank, target)).scores
    np.testing.assert_allclose(scores, expected, rtol=1e-6)


@pytest.mark.parametrize("equal_counts", [False, True])
def test_lira_offline_matches_naive(bank, equal_counts, visible_sides):
    """Per-sample OUT Gaussians; the fixed-variance variant is tested below."""
    target = 2
    ll = naive_loglik(bank)
    audit = bank.audit
    _, out_models = visible_sides(bank, target)
    refs = {n: naive_out_refs(out_models, n) for n in range(bank.n_samples)}
    if equal_counts:  # first k OUT references, k the least non-zero count among audit samples
        k = min(len(refs[n]) for n in range(bank.n_samples) if audit[n] and refs[n])
        refs = {n: r[:k] for n, r in refs.items()}
    expected = []
    for n in range(bank.n_samples):
        if not refs[n]:
            expected.append(np.nan)
            continue
        values = ll[refs[n], n]
        sd = max(values.std(), 1e-6)
        expected.append(norm.logcdf((ll[target, n] - values.mean()) / sd))
    scores = run_attack("lm-lira-offline", TargetView.of(bank, target),
                        equal_counts=equal_counts).scores
    np.testing.assert_allclose(scores, expected, rtol=1e-6, atol=1e-9)


def test_lira_offline_fixed_variance_matches_naive(visible_sides):
    bank = make_bank(m=8, balanced=True)  # k = 3 OUT references per sample to pool
    target = 2
    ll = naive_loglik(bank)
    _, out_models = visible_sides(bank, target)
    refs = {n: naive_out_refs(out_models, n) for n in range(bank.n_samples)}
    k = min(len(refs[n]) for n in range(bank.n_samples) if bank.audit[n] and refs[n])
    refs = {n: r[:k] for n, r in refs.items()}
    # One variance pooled over samples with >= 2 OUT references: sum of squared deviations
    # from each sample's mean over the count of pooled values.
    pooled = [n for n in refs if len(refs[n]) >= 2]
    assert pooled
    var = sum(((ll[refs[n], n] - ll[refs[n], n].mean()) ** 2).sum() for n in pooled) / sum(
        len(refs[n]) for n in pooled)
    expected = [norm.logcdf((ll[target, n] - ll[refs[n], n].mean()) / np.sqrt(var))
                if refs[n] else np.nan for n in range(bank.n_samples)]
    scores = run_attack("lm-lira-offline-fixed-variance", TargetView.of(bank, target)).scores
    np.testing.assert_allclose(scores, expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("a, gamma", [(0.3, 1.0), (0.0, 2.0), (1.0, 0.5)])
def test_rmia_matches_naive(bank, a, gamma, visible_sides):
    target = 4
    p = np.exp(naive_loglik(bank))
    _, out_models = visible_sides(bank, target)
    ratio = np.full(bank.n_samples, np.nan)
    for n in range(bank.n_samples):
        refs = naive_out_refs(out_models, n)
        if refs:
            ratio[n] = p[target, n] / (0.5 * ((1 + a) * np.mean(p[refs, n]) + (1 - a)))
    z = ratio[bank.population]
    expected = [np.nan if np.isnan(x) else np.mean(x / z > gamma) for x in ratio]
    scores = run_attack("lm-rmia", TargetView.of(bank, target), a=a, gamma=gamma).scores
    np.testing.assert_allclose(scores, expected)


def test_lm_rmia_has_no_temperature(bank):
    """A sequence bank lacks the next-token distribution a softmax temperature needs (lm_rmia's
    docstring), so lm-rmia declares none and refuses one, and rmia and informia refuse
    T != 1 there (the bank's logits are a derived two-class view, not the vocabulary's)."""
    assert "temperature" not in get_attack("lm-rmia").defaults
    assert "temperature" in get_attack("rmia").defaults
    view = TargetView.of(bank, 0)
    with pytest.raises(AttackError, match="has no parameter 'temperature'"):
        run_attack("lm-rmia", view, temperature=2.0)
    for name in ("rmia", "informia"):
        with pytest.raises(AttackError, match="sequence bank"):
            run_attack(name, view, temperature=2.0)
    assert np.isfinite(run_attack("rmia", view, temperature=1.0).scores[view.audit]).any()


def test_rapid_features_match_naive_on_target_and_shadows(bank, visible_sides):
    loss = -naive_loglik(bank)
    view = TargetView.of(bank, 1)

    def naive(model, out_models, excluded):
        rows = []
        for n in range(bank.n_samples):
            refs = [r for r in naive_out_refs(out_models, n) if r not in excluded]
            s_ref = np.mean(loss[refs, n]) if refs else np.nan
            rows.append((loss[model, n], loss[model, n] - s_ref))
        return np.array(rows)

    features, scorable = lm_rapid_features(view)
    np.testing.assert_allclose(features, naive(1, visible_sides(bank, 1)[1], {1}), rtol=1e-6)
    np.testing.assert_array_equal(scorable, np.isfinite(features[:, 1]))
    shadow = view.as_shadow(2)  # reference 2 = bank model 3; the target (1) is excluded
    np.testing.assert_allclose(lm_rapid_features(shadow)[0],
                               naive(3, visible_sides(bank, 1, shadow=2)[1], {1, 3}), rtol=1e-6)


def test_padding_is_never_read():
    """The same bank with other garbage in its padding gives the same scores."""
    one = make_bank(padding=(np.nan, np.inf, -1e30), calibrated=True)
    two = make_bank(padding=(0.0, -1e30, np.nan), calibrated=True)
    for name in LM_ATTACKS:
        params = FAST if name == "lm-rapid" else {}
        a = run_attack(name, TargetView.of(one, 0), **params).scores
        b = run_attack(name, TargetView.of(two, 0), **params).scores
        np.testing.assert_array_equal(a, b, err_msg=name)
        assert not np.isnan(a[one.audit]).all(), name


def test_planted_effect_separates_and_blind_stays_at_chance():
    bank = make_bank(m=8, n=600, effect=1.5, n_population=100, seed=1, balanced=True)
    members = bank.membership[0]
    audit = bank.audit
    for name in ("lm-loss", "min-k", "min-k-plus-plus", "zlib", "lm-calibrated",
                 "lm-lira-offline", "lm-lira-offline-fixed-variance", "lm-rmia", "lm-rapid"):
        params = FAST if name == "lm-rapid" else {}
        scores = run_attack(name, TargetView.of(bank, 0), **params).scores
        # Min-K% averages only the lowest 20% of tokens: noisier on this short-text bank.
        weak = name in ("min-k", "min-k-plus-plus", "zlib")  # noisier statistics of the effect
        assert auc(scores[audit], members[audit]) > (0.6 if weak else 0.75), name
    # The planted effect does not touch the text: blind is at chance on this i.i.d. split.
    blind = run_attack("blind", TargetView.of(bank, 0)).scores
    assert abs(auc(blind[audit], members[audit]) - 0.5) < 0.07


def test_blind_is_near_chance_on_an_iid_split():
    rng = np.random.default_rng(123)  # not the bank's seed: the text is independent of it
    n = 4000
    zbytes = rng.integers(20, 400, size=n)
    chars = zbytes * rng.uniform(1.5, 4.0, size=n)
    bank = make_bank(m=2, n=n, n_population=0, seed=7).replace(
        text_zlib_bytes=zbytes, text_chars=np.round(chars).astype(int)
    )
    scores = run_attack("blind", TargetView.of(bank, 0)).scores
    assert abs(auc(scores, bank.membership[0]) - 0.5) < 0.03


def test_blind_runs_on_a_classifier_bank_with_text_and_never_reads_a_model(digits_bank):
    n = digits_bank.n_samples
    rng = np.random.default_rng(0)
    zbytes = rng.integers(10, 100, size=n)
    chars = zbytes * 3
    chars[0] = 0  # an empty text cannot be scored
    bank = digits_bank.replace(text_zlib_bytes=zbytes, text_chars=chars)
    scores = run_attack("blind", TargetView.of(bank, 0)).scores
    assert np.isnan(scores[0])
    np.testing.assert_allclose(scores[1:], -1 / 3)
    other = bank.replace(logits=bank.logits[::-1].copy())  # other models, same text
    np.testing.assert_array_equal(run_attack("blind", TargetView.of(other, 0)).scores, scores)


def test_needs_errors(digits_bank, bank):
    view = TargetView.of(digits_bank, 0)
    for name in ("lm-loss", "min-k", "lm-calibrated", "lm-rapid"):
        with pytest.raises(AttackError, match="sequence signals of a causal language model"):
            run_attack(name, view)
    with pytest.raises(AttackError, match="text sizes"):
        run_attack("blind", view)
    no_moments = bank.replace(seq_mean_logprob=None, seq_std_logprob=None)
    with pytest.raises(AttackError, match="seq_mean_logprob and seq_std_logprob"):
        run_attack("min-k-plus-plus", TargetView.of(no_moments, 0))
    no_text = bank.replace(text_zlib_bytes=None, text_chars=None)
    with pytest.raises(AttackError, match="text sizes"):
        run_attack("zlib", TargetView.of(no_text, 0))
    no_population = bank.replace(population=np.zeros(bank.n_samples, dtype=bool), audit=None)
    with pytest.raises(AttackError, match="population"):
        run_attack("lm-rmia", TargetView.of(no_population, 0))
    alone = bank.replace(membership=bank.membership[:1],
                         seq_token_logprob=bank.seq_token_logprob[:1],
                         seq_mean_logprob=bank.seq_mean_logprob[:1],
                         seq_std_logprob=bank.seq_std_logprob[:1])
    with pytest.raises(AttackError, match="reference model"):
        run_attack("lm-calibrated", TargetView.of(alone, 0))


def test_classifier_attacks_run_on_a_sequence_bank(bank):
    """The derived two-class logits make the classifier statistics the sequence likelihood:
    `loss` is lm-loss (float32 rounding aside)."""
    view = TargetView.of(bank, 0)
    np.testing.assert_allclose(run_attack("loss", view).scores,
                               run_attack("lm-loss", view).scores, rtol=1e-4, atol=1e-5)


def test_the_blind_baseline_costs_no_model_and_no_query():
    from miaudit.attacks import get_attack

    blind, loss = get_attack("blind"), get_attack("lm-loss")
    assert blind.model_free and not loss.model_free


@pytest.fixture(scope="module")
def calibrated_bank():
    return make_bank(calibrated=True)


@pytest.mark.parametrize("target", [0, 3])
def test_base_reference_matches_naive(calibrated_bank, target):
    bank, view = calibrated_bank, TargetView.of(calibrated_bank, target)
    per_token, total = [], []
    for j in range(bank.n_samples):
        diff = 0.0
        for t in range(bank.seq_lengths[j]):
            diff += (float(bank.seq_token_logprob[target, j, t])
                     - float(bank.seq_base_token_logprob[j, t]))
        total.append(diff)
        per_token.append(diff / bank.seq_lengths[j])
    np.testing.assert_allclose(run_attack("lm-base-reference", view).scores, per_token,
                               rtol=1e-6)
    np.testing.assert_allclose(run_attack("lm-base-reference", view, reduction="sum").scores,
                               total, rtol=1e-6)


@pytest.mark.parametrize("target", [0, 3])
def test_recall_matches_naive(calibrated_bank, target):
    bank, view = calibrated_bank, TargetView.of(calibrated_bank, target)
    expected = []
    for j in range(bank.n_samples):
        length = bank.seq_lengths[j]
        plain = sum(float(v) for v in bank.seq_token_logprob[target, j, :length]) / length
        conditioned = sum(float(v) for v in
                          bank.seq_prefix_token_logprob[target, j, :length]) / length
        expected.append(conditioned / plain)
    np.testing.assert_allclose(run_attack("recall", view).scores, expected, rtol=1e-6)


def test_recall_is_nan_where_the_text_is_certain():
    bank = make_bank(calibrated=True)
    token = bank.seq_token_logprob.copy()
    token[0, 4] = 0.0
    scores = run_attack("recall", TargetView.of(bank.replace(seq_token_logprob=token), 0))
    assert np.isnan(scores.scores[4]) and np.isfinite(np.delete(scores.scores, 4)).all()


@pytest.mark.parametrize("a", [0.01, 0.3, 10.0])
def test_dc_pdd_matches_naive(calibrated_bank, a):
    bank, target = calibrated_bank, 2
    vocab = int(bank.seq_vocab_size)
    counts = [0] * vocab
    for j in np.flatnonzero(bank.population):
        for t in range(bank.seq_lengths[j]):
            counts[int(bank.seq_token_ids[j, t])] += 1
    freq = [(c + 1) / (sum(counts) + vocab) for c in counts]
    expected = []
    for j in range(bank.n_samples):
        seen, alphas = set(), []
        for t in range(bank.seq_lengths[j]):
            token = int(bank.seq_token_ids[j, t])
            if token in seen:
                continue
            seen.add(token)
            p = np.exp(float(bank.seq_token_logprob[target, j, t]))
            alphas.append(min(p * np.log(1.0 / freq[token]), a))
        expected.append(sum(alphas) / len(alphas))
    scores = run_attack("dc-pdd", TargetView.of(bank, target), a=a).scores
    np.testing.assert_allclose(scores, expected, rtol=1e-6)


def test_dc_pdd_counts_population_tokens_only(calibrated_bank):
    """Changing an audit sample's tokens leaves the frequencies (hence other samples'
    scores) unchanged; changing a population sample's tokens changes them."""
    bank = calibrated_bank
    base = run_attack("dc-pdd", TargetView.of(bank, 0), a=10.0).scores
    for row, changes in ((5, False), (bank.n_samples - 1, True)):
        ids = bank.seq_token_ids.copy()
        ids[row, : bank.seq_lengths[row]] = 0
        scores = run_attack("dc-pdd", TargetView.of(bank.replace(seq_token_ids=ids), 0),
                            a=10.0).scores
        others = np.delete(np.arange(bank.n_samples), [row])
        assert (not np.allclose(scores[others], base[others])) == changes


def test_calibrated_needs_errors(bank):
    view = TargetView.of(bank, 0)  # a sequence bank without the calibrated arrays
    with pytest.raises(AttackError, match="no base model"):
        run_attack("lm-base-reference", view)
    with pytest.raises(AttackError, match="seq_prefix_token_logprob"):
        run_attack("recall", view)
    with pytest.raises(AttackError, match="seq_token_ids"):
        run_attack("dc-pdd", view)


def test_calibrated_arrays_survive_save_and_load(calibrated_bank, tmp_path):
    loaded = SignalBank.load(calibrated_bank.save(tmp_path / "bank.npz"))
    for key in ("seq_prefix_token_logprob", "seq_base_token_logprob", "seq_token_ids",
                "seq_vocab_size"):
        np.testing.assert_array_equal(getattr(loaded, key), getattr(calibrated_bank, key))
    view = TargetView.of(loaded, 1)
    for name in ("lm-base-reference", "recall", "dc-pdd"):
        np.testing.assert_array_equal(run_attack(name, view).scores,
                                      run_attack(name, TargetView.of(calibrated_bank, 1)).scores)


def test_calibrated_attacks_rank_a_planted_leak_as_members():
    """Higher = member: members' token log-probs are raised (the base model's are not, and
    the prefix costs them the same), so each calibrated attack ranks members higher."""
    bank = make_bank(m=4, n=400, effect=1.5, n_population=100, seed=2, balanced=True,
                     calibrated=True)
    members, audit = bank.membership[0], bank.audit
    for name, params in (("lm-base-reference", {}), ("recall", {}), ("dc-pdd", {"a": 10.0})):
        scores = run_attack(name, TargetView.of(bank, 0), **params).scores
        assert auc(scores[audit], members[audit]) > 0.6, name
