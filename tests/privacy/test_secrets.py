"""Secret formats for language-model canaries (miaudit.privacy.secrets)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from miaudit.errors import ConfigError
from miaudit.privacy import secrets
from miaudit.privacy.secrets import (
    SECRET_FORMATS,
    CanarySecret,
    SecretFormat,
    draw_canary_texts,
    secret_format,
    secret_format_names,
)

TWO_DIGITS = SecretFormat("two-digits", "test: 2 digits", "code", " {}{}", tuple("0123456789"))


def test_builtin_formats():
    assert {"account-number", "random-tokens"} <= set(secret_format_names())
    account = secret_format("account-number")
    assert account.space_size == 10**8 and account.slots == 8
    assert account.log2_space == pytest.approx(8 * math.log2(10))
    words = secret_format("random-tokens")
    assert len(words.alphabet) == len(set(words.alphabet)) == 100
    assert words.space_size == 100**5
    assert all(" " not in w for w in words.alphabet)  # one word per slot, injective rendering
    assert secret_format(TWO_DIGITS) is TWO_DIGITS


def test_unknown_format_names_the_known_ones():
    with pytest.raises(ConfigError, match="account-number.*got 'acount-number'.*Did you mean"):
        secret_format("acount-number")


def test_bad_formats_are_refused():
    with pytest.raises(ConfigError, match="no {} slot"):
        SecretFormat("x", "", "p", " none", tuple("01"))
    with pytest.raises(ConfigError, match="distinct"):
        SecretFormat("x", "", "p", " {}", ("a", "a"))
    with pytest.raises(ConfigError, match="prefix is empty"):
        SecretFormat("x", "", "", " {}", tuple("01"))
    with pytest.raises(ValueError, match="already registered"):
        secrets.register_secret_format(SecretFormat("account-number", "", "p", " {}", ("a", "b")))


def test_canary_texts_are_seeded_distinct_and_well_formed():
    canaries = draw_canary_texts("account-number", 50, seed=3)
    assert canaries == draw_canary_texts("account-number", 50, seed=3)
    assert canaries != draw_canary_texts("account-number", 50, seed=4)
    assert len({c.secret for c in canaries}) == 50
    for c in canaries:
        assert isinstance(c, CanarySecret) and c.text == c.prefix + c.secret
        assert c.prefix == "my account number is" and c.format == "account-number"
        assert re.fullmatch(r" \d{4} \d{4}", c.secret)
    # a prefix of a longer draw: the same stream, so adding canaries keeps the first ones
    assert draw_canary_texts("account-number", 10, seed=3) == canaries[:10]
    words = draw_canary_texts("random-tokens", 5, seed=0)
    vocabulary = set(secret_format("random-tokens").alphabet)
    assert all(len(w.secret.split()) == 5 and set(w.secret.split()) <= vocabulary for w in words)


def test_small_space_draws_every_secret_once(monkeypatch):
    monkeypatch.setitem(SECRET_FORMATS, TWO_DIGITS.name, TWO_DIGITS)
    every = draw_canary_texts("two-digits", 100, seed=1)
    assert sorted(c.secret for c in every) == [f" {i:02d}" for i in range(100)]
    with pytest.raises(ConfigError, match="cannot draw 101 distinct"):
        draw_canary_texts("two-digits", 101, seed=1)
    assert draw_canary_texts("two-digits", 0, seed=1) == []


def test_candidates_are_uniform_and_enumeration_is_complete():
    rng = np.random.default_rng(0)
    account = secret_format("account-number")
    digits = np.array([[int(ch) for ch in s.replace(" ", "")] for s in account.candidates(4000,
                                                                                       rng)])
    freq = np.bincount(digits.ravel(), minlength=10) / digits.size
    assert np.abs(freq - 0.1).max() < 0.01  # 32,000 digits: sd 0.0017 per frequency
    assert TWO_DIGITS.all_secrets() == [f" {i:02d}" for i in range(100)]
    with pytest.raises(ConfigError, match="enumerate"):
        account.all_secrets()
