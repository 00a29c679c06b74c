"""The power study's anchors: RMIA as the library runs it and as its paper does, each
described by the parameters it ran with, and the stronger of them on a dataset (the one the
goal, ≥ 2× RMIA's TPR@0.1% FPR, is measured against)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from miaudit.records.columns import tpr_column

TPR01 = tpr_column(0.001)
_SYMBOLS = {"temperature": "T", "a": "a", "gamma": "γ", "tie_break": "ties"}


def best_anchor(table: pd.DataFrame, anchors: list[str]) -> str:
    """The anchor of ``anchors`` with the highest mean TPR@0.1% on ``table`` (one dataset's
    rows), the first on a tie; the first when none is in the table."""
    means = {a: float(table.loc[table["attack"] == a, TPR01].mean()) for a in anchors
             if (table["attack"] == a).any()}
    return max(means, key=lambda a: (means[a], -anchors.index(a))) if means else anchors[0]


def anchor_descriptions(anchors: list[str], attack_params: dict[str, Any] | None = None
                        ) -> dict[str, str]:
    """Each anchor's parameters as it ran (the registry's defaults and the config's
    ``attack_params``): "lib default: T=1, a=0.3, γ=2, ties=ratio", "paper: T=2, a=0.2, γ=2,
    ties=none"; "set: ..." when the config overrides one of them; "" for an attack this
    process does not know."""
    from miaudit.attacks import get_attack
    from miaudit.errors import AttackError

    out = {}
    for name in anchors:
        try:
            spec = get_attack(name)
        except AttackError:
            out[name] = ""
            continue
        given = (attack_params or {}).get(name) or {}
        values = {p.name: given.get(p.name, p.default) for p in spec.params}
        shown = ", ".join(f"{_SYMBOLS[k]}={_value(values[k])}" for k in _SYMBOLS
                          if k in values)
        kind = ("paper" if name.endswith("-paper") else "lib default") if not given else "set"
        out[name] = f"{kind}: {shown}" if shown else ""
    return out


def _value(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def anchor_labels(anchors: list[str], attack_params: dict[str, Any] | None = None
                  ) -> dict[str, str]:
    """Each anchor's ratio-column header: "× rmia (lib default: T=1, a=0.3, γ=2,
    ties=ratio)"."""
    return {name: f"× {name} ({text})" if text else f"× {name}"
            for name, text in anchor_descriptions(anchors, attack_params).items()}
