"""Secret formats for language-model canaries (Carlini, Liu, Erlingsson, Kos & Song 2019, "The
Secret Sharer: Evaluating and Testing Unintended Memorization in Neural Networks";
docs/algorithms.md §15, "Exposure and extraction").

A canary text is a fixed **prefix** followed by a **secret** drawn uniformly from a candidate
space R: ``"my account number is" + " 1234 5678"``. A format fixes the prefix, a template with
``k`` slots (``{}``) and the alphabet every slot draws from, so R is the alphabet's k-fold
product: |R| is exact, a secret is k uniform symbol indices, and candidates (what exposure ranks
the secret against) are drawn the same way. Exposure needs exactly that: a secret and a
uniform sample of its competitors, rendered the same way.

Templates start with a space: the secret begins at a word boundary, where byte-level BPE
pre-tokenizers (GPT-2's, SmolLM2's) split, so the prefix's tokens are a prefix of the canary
text's tokens (:func:`miaudit.privacy.exposure.split_secret_tokens` checks it).

A pure library: no model. Formats live in a registry (``SECRET_FORMATS``), as canary kinds do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from miaudit.errors import ConfigError
from miaudit.registry import Registry

# Seed streams (numpy SeedSequence entropy [seed, tag]): the canaries' secrets and the exposure
# candidates never share draws (canaries.py uses tag 4 for labels).
SECRETS_STREAM, CANDIDATES_STREAM = 7, 8
# all_secrets() enumerates R only up to this size.
MAX_ENUMERATED = 1_000_000

# random-tokens' alphabet: 100 common English words (one or two BPE tokens each, with their
# leading space), so the secret reads as words and |R| = 100**k exactly.
WORDS: tuple[str, ...] = tuple("""
apple river stone cloud tiger piano candle forest window garden silver rocket orange winter
summer butter pencil mirror castle dragon island jacket ladder market needle ocean pepper rabbit
saddle tunnel violin wagon yellow zebra anchor basket carpet desert engine feather glacier hammer
insect jungle kettle lemon marble napkin oyster parrot quartz ribbon spider teapot umbrella
valley walnut yogurt blanket cactus dolphin falcon goblet harbor igloo jigsaw koala lantern
meadow nickel orchid pebble quiver raisin shovel thunder unicorn velvet whistle bamboo cherry
domino eagle fossil guitar helmet iron jasmine kitten lizard mango noodle olive pillow radish
salmon tomato tulip walrus wizard
""".split())


@dataclass(frozen=True)
class SecretFormat:
    """A fixed ``prefix`` and a secret ``template`` whose ``{}`` slots each take one symbol of
    ``alphabet`` uniformly and independently: R = alphabet^slots."""

    name: str
    description: str
    prefix: str
    template: str  # e.g. " {}{}{}{} {}{}{}{}"; literal braces doubled, as str.format
    alphabet: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ConfigError(f"secret format {self.name!r}: the template {self.template!r} "
                              "has no {} slot for the secret.")
        if len(self.alphabet) < 2 or len(set(self.alphabet)) != len(self.alphabet) or not all(
                self.alphabet):
            raise ConfigError(f"secret format {self.name!r}: the alphabet needs at least 2 "
                              "distinct non-empty symbols.")
        if not self.prefix:
            raise ConfigError(f"secret format {self.name!r}: the prefix is empty; the secret "
                              "is scored given the prefix, so it needs one.")

    @property
    def slots(self) -> int:
        """k, the secret's number of symbols."""
        return self.template.count("{}")

    @property
    def space_size(self) -> int:
        """|R| = |alphabet|^k (an exact Python int: it may exceed int64)."""
        result: int = len(self.alphabet) ** self.slots
        return result

    @property
    def log2_space(self) -> float:
        """log₂|R|, the most exposure any secret of this format can have."""
        return self.slots * math.log2(len(self.alphabet))

    def draw(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` secrets as symbol indices, int64 [count, k], uniform over R (with
        replacement)."""
        return rng.integers(0, len(self.alphabet), size=(int(count), self.slots))

    def render(self, symbols: np.ndarray) -> list[str]:
        """The secrets' texts (without the prefix) of symbol indices [n, k]."""
        table = np.asarray(self.alphabet, dtype=object)
        return [self.template.format(*row) for row in table[np.asarray(symbols, dtype=np.int64)]]

    def text(self, secret: str) -> str:
        """The canary text: prefix + secret."""
        return self.prefix + secret

    def candidates(self, count: int, rng: np.random.Generator) -> list[str]:
        """``count`` secrets drawn uniformly from R, with replacement: exposure's sample."""
        return self.render(self.draw(count, rng))

    def all_secrets(self) -> list[str]:
        """Every secret of R, in index order (mixed radix): for exact ranks on a small R."""
        if self.space_size > MAX_ENUMERATED:
            raise ConfigError(f"secret format {self.name!r} has |R| = {self.space_size:,} "
                              f"secrets, more than {MAX_ENUMERATED:,} to enumerate: sample "
                              "candidates instead.")
        base, k = len(self.alphabet), self.slots
        index = np.arange(self.space_size, dtype=np.int64)[:, None]
        digits = (index // base ** np.arange(k - 1, -1, -1, dtype=np.int64)) % base
        return self.render(digits)


@dataclass(frozen=True)
class CanarySecret:
    """One canary: the ``text`` that replaces a dataset row's, its ``prefix`` and ``secret``
    (``text == prefix + secret``), and the name of its ``format``."""

    text: str
    prefix: str
    secret: str
    format: str = ""


SECRET_FORMATS: Registry[SecretFormat] = Registry(
    "secret format", ConfigError, ordered=False,
    unknown="secret format must be one of {known}; got {name!r}.{hint}",
)


def register_secret_format(fmt: SecretFormat) -> SecretFormat:
    """Register ``fmt`` under its name (a taken name is refused)."""
    return SECRET_FORMATS.register(fmt.name, fmt)


def secret_format_names() -> list[str]:
    return SECRET_FORMATS.names()


def secret_format(fmt: str | SecretFormat) -> SecretFormat:
    """A format by name (a ConfigError naming the known ones), or ``fmt`` itself."""
    return fmt if isinstance(fmt, SecretFormat) else SECRET_FORMATS.get(fmt)


register_secret_format(SecretFormat(
    "account-number",
    "a natural sentence with an 8-digit account number (Carlini et al. 2019's numeric secret); "
    "|R| = 10^8",
    "my account number is", " {}{}{}{} {}{}{}{}", tuple("0123456789"),
))
register_secret_format(SecretFormat(
    "random-tokens",
    f"5 words drawn uniformly from a fixed list of {len(WORDS)} common words; "
    f"|R| = {len(WORDS)}^5",
    "the secret words are", " {} {} {} {} {}", WORDS,
))


def draw_canary_texts(fmt: str | SecretFormat, count: int, seed: int) -> list[CanarySecret]:
    """``count`` canaries of a format with **distinct** secrets, uniform over R, seeded.

    Distinct so that no two canaries (one included, one not) carry the same secret: the
    one-run bound treats the canaries as independent. Secrets are drawn uniformly and repeats
    redrawn (the distinct ones keep their draw order); ``count`` may be at most |R|.
    """
    spec = secret_format(fmt)
    count = int(count)
    if count < 0 or count > spec.space_size:
        raise ConfigError(f"secret format {spec.name!r} has |R| = {spec.space_size:,} secrets; "
                          f"cannot draw {count} distinct ones.")
    rng = np.random.default_rng([int(seed), SECRETS_STREAM])
    seen: dict[tuple[int, ...], None] = {}
    while len(seen) < count:
        for row in spec.draw(2 * (count - len(seen)), rng):
            seen.setdefault(tuple(row.tolist()), None)
            if len(seen) == count:
                break
    secrets = spec.render(np.array(list(seen), dtype=np.int64).reshape(count, spec.slots))
    return [CanarySecret(spec.text(s), spec.prefix, s, spec.name) for s in secrets]


def canary_strings(canaries: Sequence[CanarySecret]) -> list[str]:
    """The canaries' texts, in order (what replaces the canary rows' texts)."""
    return [c.text for c in canaries]
