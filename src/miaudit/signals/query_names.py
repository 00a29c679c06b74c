"""The names of the queries (see :mod:`miaudit.signals.query`) and which of them replay a
recipe's training augmentation, kept free of torch: a config check resolves
``signals.queries: auto`` with them. :mod:`miaudit.signals.query` re-exports them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from miaudit.errors import ConfigError
from miaudit.train.augment import parse_augmentation

_CROP_FLIP = re.compile(r"^crop(\d*)-flip-(\d+)$")  # crop-flip-K (padding 4), cropP-flip-K
CROP_FLIP_PADDING = 4  # crop-flip-K's padding (the training `crop` step's default too)
# airbench94's test-time views (Jordan 2024): a diagonal shift by P pixels (P omitted: 1)
# with reflect padding, down-right (dr) or up-left (ul), then optionally mirrored.
_TRANSLATE = re.compile(r"^(mirror-)?translate(\d*)-(dr|ul)$")
_TOKEN_QUERY = re.compile(r"^(token-dropout|adjacent-swap)-(\d+)$")
PAD_TOKEN = 0  # the tokenizers' pad id (see miaudit.models.text)
TOKEN_DROPOUT = 0.1


def text_queries(count: int) -> list[str]:
    """The first `count` of plain, token-dropout-1, adjacent-swap-1, token-dropout-2, ...
    (RAPID's multiple queries for text)."""
    if count < 1:
        raise ConfigError(f"need at least one query; got {count}.")
    more = [f"{kind}-{k}" for k in range(1, count) for kind in ("token-dropout", "adjacent-swap")]
    return (["plain"] + more)[:count]


def augmented_queries(count: int) -> list[str]:
    """The first `count` of plain, mirror, crop-flip-1, crop-flip-2, ... (RAPID's 8 and
    LiRA's 2 are prefixes of this list)."""
    if count < 1:
        raise ConfigError(f"need at least one query; got {count}.")
    return (["plain", "mirror"] + [f"crop-flip-{k}" for k in range(1, count - 1)])[:count]


def crop_flip_padding(name: str) -> int | None:
    """The padding of a crop-flip query (`crop-flip-K`: 4; `cropP-flip-K`: P), else None."""
    match = _CROP_FLIP.match(name)
    if not match:
        return None
    if not match.group(1):
        return CROP_FLIP_PADDING
    padding = int(match.group(1))
    if padding < 1:
        raise ConfigError(f"query '{name}': the crop padding P of cropP-flip-K must be >= 1.")
    return padding


def _crop_flip_name(padding: int, seed: int) -> str:
    return (f"crop-flip-{seed}" if padding == CROP_FLIP_PADDING
            else f"crop{padding}-flip-{seed}")


def _trained_steps(augment: Sequence[Any]) -> tuple[bool, set[int]]:
    """Whether ``augment`` (a recipe's, checked) mirrors, and the paddings it crops with."""
    steps = parse_augmentation(list(augment))
    mirror = any((name == "mirror" and params["p"] > 0) or name == "alternating-flip"
                 for name, params in steps)
    return mirror, {int(params["padding"]) for name, params in steps if name == "crop"}


def training_queries(augment: Sequence[Any], count: int) -> list[str]:
    """The first ``count`` queries that replay the training augmentation ``augment`` (a
    recipe's ``augment`` list): plain; mirror if it mirrors; then, if it also crops with
    padding P, crop-flip draws with that padding (``crop-flip-K`` for P = 4, so a
    ``[crop, mirror]`` recipe gets `augmented_queries`). A recipe that allows fewer than
    ``count`` such queries is a ConfigError (a mirror-only recipe has 2: plain and mirror)."""
    if count < 1:
        raise ConfigError(f"need at least one query; got {count}.")
    names = replay_queries(augment, count)
    if len(names) < count:
        raise ConfigError(
            f"the training augmentation {list(augment)!r} has {len(names)} queries that replay "
            f"it ({', '.join(names)}), not {count}: replaying crops needs one crop step and "
            "mirror."
        )
    return names[:count]


def replay_queries(augment: Sequence[Any], most: int) -> list[str]:
    """Up to ``most`` queries that replay the training augmentation ``augment``, as
    `training_queries` orders them, and fewer (never an error) when the augmentation has
    fewer: plain alone without mirror, plain and mirror without a single crop step."""
    mirror, paddings = _trained_steps(augment)
    names = ["plain"] + (["mirror"] if mirror else [])
    if mirror and len(paddings) == 1:
        padding = next(iter(paddings))
        names += [_crop_flip_name(padding, k) for k in range(1, most - 1)]
    return names[:max(most, 1)]


def untrained_queries(queries: Sequence[str], augment: Sequence[Any]) -> list[str]:
    """The image queries of ``queries`` that apply a transform the training augmentation
    ``augment`` does not: `mirror` without a mirror step, a crop-flip query without both a
    mirror step and a crop step of its padding, a translate view without a translate step of at
    least its shift (or, mirrored, without a mirror step). `plain` and the token queries never
    are."""
    mirror, paddings = _trained_steps(augment)
    shifts = [p["padding"] for n, p in parse_augmentation(list(augment)) if n == "translate"]
    out = []
    for name in queries:
        padding = crop_flip_padding(name)
        shift = _TRANSLATE.match(name)
        if (name == "mirror" and not mirror) or (
                padding is not None and not (mirror and padding in paddings)) or (
                shift and (int(shift.group(2) or 1) > max(shifts, default=0)
                           or (shift.group(1) and not mirror))):
            out.append(name)
    return out
