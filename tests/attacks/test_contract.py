"""The contract every registered attack keeps, checked over the whole registry: it runs on one
of two real-shaped banks (the digits classifiers, a sequence bank of causal LMs), never reads
the target's membership, gives the same scores twice, scores identical samples identically,
and returns no infinite score (NaN only where it cannot score, ranked lowest by the
metrics); a NaN in a model's outputs never reaches an attack: the bank refuses it. A new attack
is checked the moment it is registered; one that no contract bank can run fails here."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_lm import make_bank

from miaudit.attacks import TargetView, list_attacks, run_attack
from miaudit.errors import AttackError, BankError
from miaudit.signals import SignalBank

TARGET = 0
# scorer attacks train a small network: a few epochs on a few rows keep the contract cheap
FAST = {"epochs": 3, "max_train_samples": 400}


def _replace(bank: SignalBank, **arrays) -> SignalBank:
    """A new bank from ``bank``'s arrays (copied) with some replaced."""
    fields = {f.name: getattr(bank, f.name) for f in dataclasses.fields(bank)}
    if getattr(bank, "_logits_derived", False):
        fields["logits"] = fields["labels"] = None  # derived again from the sequences
    fields = {k: (v.copy() if isinstance(v, np.ndarray) else
                  {c: a.copy() for c, a in v.items()} if isinstance(v, dict) else v)
              for k, v in fields.items()}
    fields.update(arrays)
    return SignalBank(**fields)


@pytest.fixture(scope="module")
def banks(digits_bank) -> list[SignalBank]:
    """The digits bank with the channels and text sizes no model run here computed (seeded
    stand-ins: the contract is about what an attack reads, not its power), and a sequence
    bank in the balanced design with the calibrated LM attacks' arrays (a base model's
    log-probs, prefix-conditioned log-probs, token ids, each model's top-1 right or wrong)."""
    rng = np.random.default_rng(0)
    m, n = digits_bank.membership.shape
    channels = {**digits_bank.channels,
                "boundary_distance": rng.gamma(2.0, 1.0, size=(m, n)),
                "boundary_distance_queries": np.full((m, n), 50.0)}
    classifier = _replace(digits_bank, channels=channels,
                          text_zlib_bytes=rng.integers(20, 300, n),
                          text_chars=rng.integers(300, 900, n))
    return [classifier, make_bank(m=8, n=120, balanced=True, calibrated=True)]


def _params(spec) -> dict:
    return {k: v for k, v in FAST.items() if k in spec.defaults}


def _bank_for(spec, banks: list[SignalBank]) -> SignalBank:
    for bank in banks:
        try:
            spec.needs.check(TargetView.of(bank, TARGET), spec.name)
        except AttackError:
            continue
        return bank
    raise AssertionError(f"no contract bank can run '{spec.name}': give this test a bank "
                         "with what its Needs declare")


def _scores(name: str, bank: SignalBank, params: dict) -> np.ndarray:
    return run_attack(name, TargetView.of(bank, TARGET), **params).scores


def _two_audit_samples(bank: SignalBank) -> tuple[int, int]:
    audit = np.flatnonzero(bank.audit if bank.audit is not None else ~bank.population)
    return int(audit[3]), int(audit[7])


def _duplicated(bank: SignalBank, i: int, j: int) -> SignalBank:
    """``bank`` with sample i made an exact copy of sample j: every model's outputs, its
    label, its membership, channels and text sizes."""
    arrays = {}
    if bank.has_sequences:
        for key in ("seq_token_logprob", "seq_mean_logprob", "seq_std_logprob",
                    "seq_prefix_token_logprob", "seq_top1_correct"):
            if getattr(bank, key) is not None:
                a = getattr(bank, key).copy()
                a[:, i] = a[:, j]
                arrays[key] = a
        for key in ("seq_base_token_logprob", "seq_token_ids"):  # per sample, not per model
            if getattr(bank, key) is not None:
                a = getattr(bank, key).copy()
                a[i] = a[j]
                arrays[key] = a
        lengths = bank.seq_lengths.copy()
        lengths[i] = lengths[j]
        arrays["seq_lengths"] = lengths
    else:
        logits, labels = bank.logits.copy(), bank.labels.copy()
        logits[:, i], labels[i] = logits[:, j], labels[j]
        arrays.update(logits=logits, labels=labels)
        arrays["channels"] = {c: np.where(np.arange(a.shape[1]) == i, a[:, [j]], a)
                              for c, a in bank.channels.items()}
    membership = bank.membership.copy()
    membership[:, i] = membership[:, j]
    arrays["membership"] = membership
    for key in ("text_zlib_bytes", "text_chars"):
        if getattr(bank, key) is not None:
            a = getattr(bank, key).copy()
            a[i] = a[j]
            arrays[key] = a
    return _replace(bank, **arrays)


def test_a_nan_output_never_reaches_an_attack(banks):
    classifier, sequences = banks
    logits = classifier.logits.copy()
    logits[TARGET, 5] = np.nan
    with pytest.raises(BankError, match=r"logits are NaN or infinite \(models \[0\]\)"):
        _replace(classifier, logits=logits)
    token = sequences.seq_token_logprob.copy()
    token[TARGET, 5, 0] = np.nan
    with pytest.raises(BankError, match=r"NaN or infinite \(models \[0\]\)"):
        _replace(sequences, seq_token_logprob=token)
    channels = {c: a.copy() for c, a in classifier.channels.items()}
    channels["grad_norm"][TARGET, 5] = np.nan
    with pytest.raises(BankError, match="channel 'grad_norm' holds NaN"):
        _replace(classifier, channels=channels)


@pytest.mark.parametrize("spec", list_attacks(), ids=lambda s: s.name)
def test_every_attack_keeps_the_contract(spec, banks, redrawn_target):
    bank = _bank_for(spec, banks)
    params = _params(spec)
    scores = _scores(spec.name, bank, params)
    assert scores.shape == (bank.n_samples,) and not np.isinf(scores).any()
    # deterministic: the same bank, the same scores
    np.testing.assert_array_equal(_scores(spec.name, bank, params), scores)
    # blind to the target's membership: two other membership rows give the same scores
    # (random draws: the design is no longer balanced, so no view sets a reference aside,
    # which in a balanced design hangs on the target's membership by design)
    one, two = (redrawn_target(bank, TARGET, seed) for seed in (1, 2))
    np.testing.assert_array_equal(_scores(spec.name, one, params),
                                  _scores(spec.name, two, params))
    # ties: a sample identical to another in every way scores the same
    i, j = _two_audit_samples(bank)
    tied = _scores(spec.name, _duplicated(bank, i, j), params)
    np.testing.assert_array_equal(tied[i], tied[j])
