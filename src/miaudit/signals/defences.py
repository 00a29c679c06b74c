"""Output-side defences: what an attacker sees when the model's API hides part of its output.

A defence maps a model's logits [..., C] to the *defended* logits an attacker would store in
the bank. Defences act on probabilities p = softmax(z) and release p' (docs/algorithms.md §10;
Choquette-Choo et al., "Label-Only Membership Inference Attacks", ICML 2021, study
exactly these: top-k / rounded confidences and label-only outputs):

- ``top-k`` (param ``k``, default 1; ``renormalise``, default False): only the k largest
  probabilities are released, the others are 0. With ``renormalise`` the released values are
  divided by their sum (the API returns a distribution over the top k).
- ``round`` (param ``decimals``, default 2): every probability rounded to ``decimals``
  decimal places (numpy's round-half-to-even).
- ``label-only``: only the argmax is released, as a one-hot vector.

Representation. The bank stores logits, so a defended output is stored as ``log(p')`` with
released zeros mapped to ``log(FLOOR)`` = log(1e-30) ≈ −69.08: finite (the bank rejects
infinities) and so small that every statistic treats it as "no mass" (softmax of the stored
values is p' renormalised; a true class given 0 gets a cross-entropy of ≈ 69, the largest
loss the attacker can observe). Softmax renormalises, so for the bank's statistics
``renormalise`` only shifts the stored values by a constant per row.

The released label is the model's own argmax: where rounding or truncation creates a tie for
the largest released value (or rounds every probability to 0), the model's argmax entry is
raised to the next float32 above the runner-up, so ``argmax`` of the defended logits always
equals ``argmax`` of the raw logits and the ``correctness`` attack is unchanged by any
defence. (A real API releases the predicted label alongside its scores.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from scipy.special import softmax

from miaudit.errors import ConfigError
from miaudit.registry import Registry

FLOOR = 1e-30  # stored probability of a released 0: log(FLOOR) ≈ −69.08, finite in float32

DefenceFn = Callable[..., np.ndarray]  # (probabilities float64 [..., C], **params) -> p'
_DEFENCES: Registry[tuple[DefenceFn, dict[str, Any]]] = Registry(
    "defence", ConfigError, unknown="unknown defence '{name}'; known: {known}.{hint}"
)


def register_defence(name: str, **defaults: Any) -> Callable[[DefenceFn], DefenceFn]:
    """Register `fn(p, **params) -> released probabilities` under `name` with defaults."""
    return _DEFENCES.decorator(name, lambda fn: (fn, dict(defaults)))


def list_defences() -> list[str]:
    return _DEFENCES.names()


@register_defence("top-k", k=1, renormalise=False)
def _top_k(p: np.ndarray, k: int, renormalise: bool) -> np.ndarray:
    c = p.shape[-1]
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 1 <= k <= c:
        raise ConfigError(f"defence top-k needs an integer k in 1..{c} (the classes); got {k!r}.")
    # The k largest per row (stable: ties at the k-th place go to the lower class index).
    order = np.argsort(-p, axis=-1, kind="stable")[..., :k]
    released = np.zeros_like(p)
    np.put_along_axis(released, order, np.take_along_axis(p, order, axis=-1), axis=-1)
    if renormalise:
        released /= released.sum(axis=-1, keepdims=True)
    return released


@register_defence("round", decimals=2)
def _round(p: np.ndarray, decimals: int) -> np.ndarray:
    if not isinstance(decimals, (int, np.integer)) or isinstance(decimals, bool) or decimals < 0:
        raise ConfigError(
            f"defence round needs a non-negative integer 'decimals'; got {decimals!r}."
        )
    return np.round(p, int(decimals))


@register_defence("label-only")
def _label_only(p: np.ndarray) -> np.ndarray:
    released = np.zeros_like(p)
    np.put_along_axis(released, p.argmax(axis=-1)[..., None], 1.0, axis=-1)
    return released


def _parse(spec: str | Mapping[str, Any]) -> tuple[str, DefenceFn, dict[str, Any]]:
    if isinstance(spec, str):
        name, given = spec, {}
    elif isinstance(spec, Mapping):
        if "name" not in spec:
            raise ConfigError(f"a defence spec needs a 'name'; got {dict(spec)!r}.")
        name = spec["name"]
        given = {k: v for k, v in spec.items() if k != "name"}
    else:
        raise ConfigError(
            f"a defence is a name or a mapping like {{'name': 'top-k', 'k': 3}}; got {spec!r}."
        )
    fn, defaults = _DEFENCES.get(name)
    unknown = set(given) - set(defaults)
    if unknown:
        raise ConfigError(
            f"defence '{name}' has no parameter(s) {sorted(unknown)}; "
            f"its parameters are {sorted(defaults) or 'none'}."
        )
    return name, fn, {**defaults, **given}


def apply_defence(logits: np.ndarray, spec: str | Mapping[str, Any] | None) -> np.ndarray:
    """Defended logits float32 [..., C] of `logits` [..., C] under `spec` (None: unchanged).

    `spec` is a defence name ("label-only") or a mapping ({"name": "top-k", "k": 3}); an
    unknown name or parameter raises ConfigError. The result is finite and keeps the argmax.
    """
    z = np.asarray(logits, dtype=np.float64)
    if spec is None:
        return z.astype(np.float32)
    _, fn, params = _parse(spec)
    if z.ndim == 0 or z.shape[-1] < 2:
        raise ConfigError(f"logits must have a class axis of at least 2; got shape {z.shape}.")
    released = fn(softmax(z, axis=-1), **params)
    out = np.log(np.maximum(released, FLOOR)).astype(np.float32)
    return _keep_argmax(out, z.argmax(axis=-1))


def _keep_argmax(out: np.ndarray, top: np.ndarray) -> np.ndarray:
    """Make `top` the unique argmax of `out` (float32), nudging it up where it is not."""
    top = top[..., None]
    own = np.take_along_axis(out, top, axis=-1)
    others = out.copy()
    np.put_along_axis(others, top, -np.inf, axis=-1)
    runner_up = others.max(axis=-1, keepdims=True)
    fixed = np.where(own > runner_up, own, np.nextafter(runner_up, np.float32(np.inf)))
    np.put_along_axis(out, top, fixed.astype(np.float32), axis=-1)
    return out
