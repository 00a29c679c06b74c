"""The run config's sections whose checks read more than their own section (the split's
sizes and members against the design; forgetting by the recipe's rule), called by
:func:`miaudit.config.run.config_from_dict` (its ``_check_types``) with the built config."""

from __future__ import annotations

import numbers
from typing import Any

from miaudit.config.sections import ForgettingConfig, SplitConfig
from miaudit.errors import ConfigError


def whole(value: Any) -> bool:
    """An integer (numpy's too, as the Python API may give), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_split_sizes(cfg: Any) -> None:
    """``split.audit``, ``public`` and ``population``: each a count (integer >= 0) or a
    fraction in (0, 1), the rule make_split applies once the dataset's size is known."""
    if cfg.split is None:  # `split:` left empty in the YAML
        cfg.split = SplitConfig()
    for name in ("audit", "public", "population"):
        value = getattr(cfg.split, name)
        if not ((whole(value) and value >= 0) or (isinstance(value, float) and 0 < value < 1)):
            raise ConfigError(f"split.{name} must be a count (integer >= 0) or a fraction in "
                              f"(0, 1) of the dataset's rows; got {value!r}.")


def check_split_members(cfg: Any) -> None:
    """``split.members``: None, a count >= 1 or a fraction in (0, 1), offline design only
    (its size against the audit pool is checked with the dataset, in protocol.make_design)."""
    if cfg.split is None:  # `split:` left empty in the YAML
        cfg.split = SplitConfig()
    members = cfg.split.members
    if members is None:
        return
    count = whole(members) and members >= 1
    fraction = isinstance(members, float) and 0 < members < 1
    if not (count or fraction):
        raise ConfigError(f"split.members must be a count (integer >= 1) or a fraction in "
                          f"(0, 1) of the audit pool; got {members!r}.")
    if cfg.design != "offline":
        raise ConfigError("split.members applies to the offline design (the target's training "
                          "rows); remove it or set design: offline.")
    audit = cfg.split.audit
    if count and whole(audit) and members >= audit:
        raise ConfigError(f"split.members ({members}) must be smaller than split.audit "
                          f"({audit}): the audit rows the target does not train on are the "
                          "non-members.")


def check_forgetting(cfg: Any) -> None:
    """``forgetting``: a count of copies >= 0, and the copies' training, epochs (always given)
    and, when set, lr and batch_size, by the recipe's rule (miaudit.train.recipe's
    check_trainable)."""
    from miaudit.train.recipe import check_trainable

    if cfg.forgetting is None:  # `forgetting:` left empty in the YAML
        cfg.forgetting = ForgettingConfig()
    forgetting = cfg.forgetting
    models = forgetting.models
    if not whole(models) or models < 0:
        raise ConfigError(f"forgetting.models must be an integer >= 0 (0: off); got {models!r}.")
    fields = {"lr": forgetting.lr, "batch_size": forgetting.batch_size}  # None: the target's
    check_trainable({"epochs": forgetting.epochs,
                     **{k: v for k, v in fields.items() if v is not None}}, "forgetting")
