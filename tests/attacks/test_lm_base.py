"""EZ-MIA and WBC against transcriptions of their authors' code, run text by text as the
authors run them, on a sequence bank whose padding holds garbage and whose rows hold the
edge cases (one error token, no negative delta, the target equal to the base model, texts
shorter than a window, one-token texts).

The transcriptions follow, almost line by line, JetBrains-Research/ez-mia `mia/ez_score.py`
(`_apply_mask_1d`, `error_zone_pos_neg_sum_ratio`, called per text by `mia/models.py`'s
`compute_ez_scores` on the shifted positions: `correct` = log p(x_{t+1}), `top1_idx`,
`target_ids = input_ids[1:]`, `mask = attention_mask[1:]`) and Stry233/WBC `attacks/wbc.py`
(`WbcAttack._compute_window_score` and the per-text loop of `_process_batch`, the losses of
`attacks/misc/utils.py`'s `compute_per_token_losses`: cross-entropy at the shifted positions,
padding masked out)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_lm import make_bank

from miaudit.attacks import TargetView, get_attack, run_attack
from miaudit.attacks.fit import BankPlan, unfit_attacks
from miaudit.attacks.lm_base import WBC_WINDOWS
from miaudit.errors import AttackError, ParamError
from miaudit.metrics import auc
from miaudit.signals import SignalBank
from miaudit.signals.bank import valid_positions

# ---- the authors' code, transcribed ---------------------------------------------------------


def _apply_mask_1d(values: torch.Tensor, mask: torch.Tensor, ignore_bos: bool
                   ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    values_flat = values
    mask_flat = mask
    if values_flat.ndim >= 2:
        if values_flat.ndim == 2:
            values_flat = values_flat.reshape(-1)
        elif values_flat.ndim >= 3:
            batch_size, seq_len = values_flat.shape[0], values_flat.shape[1]
            values_flat = values_flat.reshape(batch_size * seq_len, *values_flat.shape[2:])
    if mask_flat.ndim == 2:
        mask_flat = mask_flat.reshape(-1)
    mask_flat = mask_flat.to(torch.float32)
    if ignore_bos and mask_flat.numel() > 0:
        mask_flat = mask_flat.clone()
        mask_flat[0] = 0.0
    return values_flat, mask_flat


def error_zone_pos_neg_sum_ratio(tgt_correct_log_probs, ref_correct_log_probs, top1_indices_tgt,
                                 target_ids, mask, *, ignore_bos=True, min_tokens=2) -> float:
    target_correct_lp, mask_flat = _apply_mask_1d(tgt_correct_log_probs, mask, ignore_bos)
    ref_correct_lp, _ = _apply_mask_1d(ref_correct_log_probs, mask, ignore_bos)
    top1_indices_flat = top1_indices_tgt.reshape(-1)
    targets_flat = target_ids.reshape(-1)
    base_mask = (mask_flat > 0.5)
    error_mask = ((top1_indices_flat != targets_flat) & base_mask)
    if error_mask.sum().item() < min_tokens:
        return 0.0
    deltas = (target_correct_lp - ref_correct_lp)[error_mask]
    positive_sum = deltas[deltas > 0].sum()
    negative_sum = deltas[deltas < 0].abs().sum()
    if negative_sum.item() == 0:
        return 0.0
    value = float((positive_sum / (negative_sum + 1e-12)).item())
    if not (value == value) or value < 0:
        return 0.0
    return value


def compute_window_score(target_losses: np.ndarray, ref_losses: np.ndarray,
                         window_size: int) -> float:
    min_length = min(len(target_losses), len(ref_losses))
    if min_length == 0:
        return 0.0
    effective_window_size = min(window_size, min_length)
    target_trimmed = target_losses[:min_length]
    ref_trimmed = ref_losses[:min_length]
    kernel = np.ones(effective_window_size)
    target_sums = np.convolve(target_trimmed, kernel, mode='valid')
    ref_sums = np.convolve(ref_trimmed, kernel, mode='valid')
    return np.mean(ref_sums > target_sums)


def wbc_process(target_losses, target_mask, ref_losses, ref_mask, windows) -> list[float]:
    batch_scores = []
    for i in range(len(target_losses)):
        target_valid = target_losses[i][target_mask[i]]
        ref_valid = ref_losses[i][ref_mask[i]]
        window_scores = [compute_window_score(target_valid, ref_valid, window_size)
                         for window_size in windows]
        score = np.mean(window_scores) if window_scores else 0.0
        batch_scores.append(score)
    return batch_scores


# ---- the authors' inputs, from the bank ------------------------------------------------------


def authors_ez(bank: SignalBank, target: int, min_tokens: int, ignore_bos: bool) -> np.ndarray:
    """`compute_ez_scores`'s loop, one text at a time, its per-text tensors made from the bank:
    the shifted positions t = 0..T-1 (t predicts token t+1), the attention mask shifted
    (1 at t < L_n), ids such that top1_idx != target_ids exactly where the target's top-1 is
    wrong. float64 tensors (the code is dtype-generic) so that sums agree to 1e-12."""
    width = bank.seq_token_logprob.shape[2]
    mask = valid_positions(bank.seq_lengths, width)
    scores = []
    for j in range(bank.n_samples):
        t_correct = torch.from_numpy(bank.seq_token_logprob[target, j].astype(np.float64))
        r_correct = torch.from_numpy(bank.seq_base_token_logprob[j].astype(np.float64))
        target_ids_b = torch.from_numpy(np.arange(width) % 7)
        right = torch.from_numpy(bank.seq_top1_correct[target, j])
        t_top1_idx = torch.where(right, target_ids_b, target_ids_b + 1)
        mask_b = torch.from_numpy(mask[j].astype(np.int64))
        scores.append(error_zone_pos_neg_sum_ratio(
            t_correct, r_correct, t_top1_idx, target_ids_b, mask_b, ignore_bos=ignore_bos,
            min_tokens=min_tokens))
    return np.array(scores)


def authors_wbc(bank: SignalBank, target: int, windows) -> np.ndarray:
    """`_process_batch` on all texts: per-token losses float32 [N, T] (-log p, the
    cross-entropy of the shifted positions) and the valid masks (padding: ignore_index)."""
    width = bank.seq_token_logprob.shape[2]
    mask = valid_positions(bank.seq_lengths, width)
    with np.errstate(invalid="ignore", over="ignore"):  # the padding's garbage
        target_losses = -bank.seq_token_logprob[target]
        ref_losses = -bank.seq_base_token_logprob
    return np.array(wbc_process(target_losses, mask, ref_losses, mask, windows))


# ---- the bank --------------------------------------------------------------------------------

WIDTH = 48


def edge_bank(seed: int = 0) -> SignalBank:
    """`make_bank`'s calibrated sequence bank (padding: NaN, inf, -1e30; rows 0-2 of lengths
    T, 1, 5) with edge cases planted in rows 3-11 for every model."""
    bank = make_bank(m=4, n=70, t=WIDTH, seed=seed, calibrated=True, n_population=10)
    token = bank.seq_token_logprob.copy()
    base = bank.seq_base_token_logprob.copy()
    top1 = bank.seq_top1_correct.copy()
    lengths = bank.seq_lengths.copy()
    lengths[3:12] = (10, 10, 10, 10, 10, 3, 2, WIDTH, 40)
    rng = np.random.default_rng([seed, 5])
    for row in range(3, 12):  # fresh finite values over the row (its padding: see below)
        token[:, row] = -rng.exponential(2.0, size=(token.shape[0], WIDTH))
        base[row] = -rng.exponential(2.0, size=WIDTH)
    top1[:, 3] = True
    top1[:, 3, 6] = False  # one error token
    top1[:, 4] = True
    top1[:, 4, [0, 2]] = False  # two, one at position 0: ignore_first leaves one
    top1[:, 5] = False  # every token an error, none below the base model's: no negative delta
    token[:, 5] = np.minimum(base[5] + rng.uniform(0.0, 0.5, size=WIDTH), 0.0)
    top1[:, 6] = False  # the target equals the base model: zero deltas, tied windows
    token[:, 6] = base[6]
    top1[:, 7] = True  # no error token at all
    top1[:, 8, :3] = (False, False, True)  # a text shorter than most windows
    for row in (9, 10, 11):
        top1[:, row] = rng.random((token.shape[0], WIDTH)) < 0.5
    pad = ~valid_positions(lengths, WIDTH)
    token[:, pad], base[pad], top1[:, pad] = np.nan, np.inf, True
    return bank.replace(seq_token_logprob=token, seq_base_token_logprob=base,
                        seq_top1_correct=top1, seq_lengths=lengths, seq_mean_logprob=None,
                        seq_std_logprob=None, seq_prefix_token_logprob=None,
                        seq_token_ids=None, seq_vocab_size=None)


@pytest.fixture(scope="module")
def bank() -> SignalBank:
    return edge_bank()


# ---- EZ-MIA ----------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [0, 2])
@pytest.mark.parametrize(("min_tokens", "ignore_first"),
                         [(2, True), (2, False), (1, True), (3, False), (5, True)])
def test_ez_mia_matches_the_authors_code(bank, target, min_tokens, ignore_first):
    expected = authors_ez(bank, target, min_tokens, ignore_first)
    got = run_attack("ez-mia", TargetView.of(bank, target), min_tokens=min_tokens,
                     ignore_first=ignore_first).scores
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0.0)


def test_ez_mia_edge_cases(bank):
    """The authors' 0.0: a one-token text, one error token (with min_tokens 2), no negative
    delta, the target equal to the base model, no error token; ignore_first drops position 0."""
    scores = run_attack("ez-mia", TargetView.of(bank, 0)).scores  # the defaults: 2, True
    assert get_attack("ez-mia").defaults == {"min_tokens": 2, "ignore_first": True}
    for row in (1, 3, 4, 5, 6, 7):
        assert scores[row] == 0.0, row
    kept = run_attack("ez-mia", TargetView.of(bank, 0), ignore_first=False).scores
    assert kept[4] > 0.0  # positions 0 and 2: two error tokens once position 0 counts
    # one error token scores 0.0 whatever min_tokens: no positive delta, or no negative one
    assert run_attack("ez-mia", TargetView.of(bank, 0), min_tokens=1).scores[3] == 0.0
    assert (scores >= 0).all() and (scores > 0).sum() > bank.n_samples // 2


def test_ez_mia_reads_the_error_zone_only(bank):
    """Changing the target's log-probs where its top-1 is right, or the base model's there,
    changes nothing; the target's top-1 decides which tokens count."""
    view = TargetView.of(bank, 0)
    before = run_attack("ez-mia", view).scores
    right = bank.seq_top1_correct[0] & valid_positions(bank.seq_lengths, WIDTH)
    token, base = bank.seq_token_logprob.copy(), bank.seq_base_token_logprob.copy()
    token[0][right] = -20.0
    base[right] = -0.001
    moved = bank.replace(seq_token_logprob=token, seq_base_token_logprob=base)
    np.testing.assert_array_equal(run_attack("ez-mia", TargetView.of(moved, 0)).scores, before)
    top1 = bank.seq_top1_correct.copy()
    top1[1:] = ~top1[1:]  # the references' top-1: not read
    other = bank.replace(seq_top1_correct=top1)
    np.testing.assert_array_equal(run_attack("ez-mia", TargetView.of(other, 0)).scores, before)


# ---- WBC -------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [0, 3])
@pytest.mark.parametrize("windows", [list(WBC_WINDOWS), [1], [5, 60], [3, 3, 48], [47]])
def test_wbc_matches_the_authors_code(bank, target, windows):
    expected = authors_wbc(bank, target, windows)
    got = run_attack("wbc", TargetView.of(bank, target), window_sizes=windows).scores
    np.testing.assert_allclose(got, expected, rtol=0.0, atol=1e-12)


def test_wbc_edge_cases(bank):
    view = TargetView.of(bank, 0)
    assert get_attack("wbc").defaults == {"window_sizes": [2, 3, 4, 6, 9, 13, 18, 25, 32, 40]}
    scores = run_attack("wbc", view).scores
    assert scores[6] == 0.0  # the target is the base model: every window tied, none above
    assert ((scores >= 0) & (scores <= 1)).all()
    # a one-token text: every window is that token, base loss above the target's or not
    one = float(-bank.seq_base_token_logprob[1, 0] > -bank.seq_token_logprob[0, 1, 0])
    assert scores[1] == one
    # one window of the whole text for every size it is shorter than
    whole = float(-bank.seq_base_token_logprob[9, :2].astype(np.float64).sum()
                  > -bank.seq_token_logprob[0, 9, :2].astype(np.float64).sum())
    assert run_attack("wbc", view, window_sizes=[2, 40]).scores[9] == whole


def test_wbc_refuses_no_window_and_a_zero_window(bank):
    view = TargetView.of(bank, 0)
    with pytest.raises(AttackError, match="at least one window"):
        run_attack("wbc", view, window_sizes=[])
    with pytest.raises(ParamError, match="window_sizes"):
        run_attack("wbc", view, window_sizes=[3, 0])


# ---- needs, the plan, a planted leak ---------------------------------------------------------


def test_needs_name_what_is_missing():
    plain = make_bank()  # a sequence bank without a base model or top-1
    with pytest.raises(AttackError, match="seq_top1_correct") as caught:
        run_attack("ez-mia", TargetView.of(plain, 0))
    assert "seq_base_token_logprob" in str(caught.value)
    with pytest.raises(AttackError, match="seq_base_token_logprob"):
        run_attack("wbc", TargetView.of(plain, 0))
    calibrated = make_bank(calibrated=True)
    without = calibrated.replace(seq_top1_correct=None)
    with pytest.raises(AttackError, match="same forward pass"):
        run_attack("ez-mia", TargetView.of(without, 0))
    run_attack("wbc", TargetView.of(without, 0))  # WBC needs no top-1
    with pytest.raises(AttackError, match="seq_top1_correct"):
        TargetView.of(without, 0).target_top1_correct()
    assert get_attack("ez-mia").needs.top1_correct and get_attack("ez-mia").needs.base_model
    assert get_attack("wbc").needs.base_model and not get_attack("wbc").needs.top1_correct


def test_the_plan_refuses_them_without_a_base_model_or_a_sequence_bank():
    lm = BankPlan("sequence", sequence=True, base_model=True, texts=True)
    assert unfit_attacks(["ez-mia", "wbc"], lm) == {}
    no_base = unfit_attacks(["ez-mia", "wbc"], BankPlan("sequence", sequence=True))
    assert set(no_base) == {"ez-mia", "wbc"} and "top-1" not in no_base["ez-mia"]
    classifier = unfit_attacks(["ez-mia"], BankPlan("image"))
    assert "top-1 next-token prediction" in classifier["ez-mia"]


def test_a_planted_leak_ranks_members_higher():
    """Members' token log-probs raised (the base model's are not): both rank members higher.
    The top-1 right or wrong at a fixed rate (make_bank's follows p(x_{t+1}), so that a
    member, its tokens raised towards 0, would keep too few error tokens to score)."""
    bank = make_bank(m=4, n=400, t=30, effect=1.0, n_population=100, seed=2, balanced=True,
                     calibrated=True)
    top1 = np.random.default_rng(3).random(bank.seq_token_logprob.shape) < 0.3
    bank = bank.replace(seq_top1_correct=top1)
    members, audit = bank.membership[0], bank.audit
    for name in ("ez-mia", "wbc"):
        scores = run_attack(name, TargetView.of(bank, 0)).scores
        assert auc(scores[audit], members[audit]) > 0.6, name


def test_they_survive_save_and_load(bank, tmp_path):
    loaded = SignalBank.load(bank.save(tmp_path / "bank.npz"))
    for name in ("ez-mia", "wbc"):
        np.testing.assert_array_equal(run_attack(name, TargetView.of(loaded, 1)).scores,
                                      run_attack(name, TargetView.of(bank, 1)).scores)
