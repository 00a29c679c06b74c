"""Membership inference attacks: pure functions of a signal bank, found by name.

Importing this package registers every attack module below.
"""

from miaudit.attacks import (  # noqa: F401  (importing a module registers its attacks)
    attack_r,
    bavaria,
    bayes_optimal,
    calibration,
    hybrid,
    label_only,
    lira,
    lm,
    lm_base,
    lm_calibrated,
    qmia,
    rapid,
    rmia,
    shokri,
    threshold,
)
from miaudit.attacks.params import Param
from miaudit.attacks.registry import (
    AttackRun,
    AttackSpec,
    Needs,
    check_params,
    get_attack,
    list_attacks,
    register_attack,
    run_attack,
)
from miaudit.attacks.view import TargetView

__all__ = [
    "AttackRun",
    "AttackSpec",
    "Needs",
    "Param",
    "TargetView",
    "check_params",
    "get_attack",
    "list_attacks",
    "register_attack",
    "run_attack",
]
