"""Configs of the calibration study: ``cpu`` (this 2-core machine, well under an hour) and
``paper`` (Watson et al.'s sizes and architectures, for a GPU machine).

Training hyper-parameters were chosen on seed 99 (never a study seed) to bring the targets'
train/test accuracy near the paper's Table 1 where the architecture allows; they were not
chosen by looking at any attack's result. The forgetting settings (5 epochs at 0.2 x the
target's learning rate) are a fixed choice, not tuned.
"""

from __future__ import annotations

from typing import Any

from miaudit.studies.sweep import StudyError

_MLP_IMAGES = {"architecture": "mlp", "arch_params": {"hidden": 256}, "optimizer": "sgd",
               "lr": 0.1, "batch_size": 64, "epochs": 30}
_TABULAR = {
    # Watson et al.: one hidden layer of 2 x features units; SGD lr 0.1 (Nesterov), weight
    # decay 1e-4 on the small tabular sets; batch sizes from 4 (very small sets) up.
    "german-credit": {
        "split": {"audit": 500, "public": 500},
        "recipe": {"architecture": "mlp", "optimizer": "sgd", "lr": 0.01, "weight_decay": 1e-4,
                   "batch_size": 8, "epochs": 25},
        "forgetting": {"epochs": 5, "lr": 0.002},
    },
    "adult": {
        "split": {"audit": 10_000, "public": 10_000},
        "recipe": {"architecture": "mlp", "optimizer": "sgd", "lr": 0.1, "weight_decay": 1e-4,
                   "batch_size": 64, "epochs": 30},
        "forgetting": {"epochs": 5, "lr": 0.02},
    },
}

CPU: dict[str, Any] = {
    "seed": 0,
    "repetitions": 3,
    "device": "cpu",
    "include": ["german-credit", "adult", "mnist", "fashion-mnist"],
    "if_present": [],  # CIFAR CNNs do not fit the CPU budget; see the paper config
    "datasets": {
        **_TABULAR,
        "mnist": {"split": {"audit": 2000, "public": 2000}, "recipe": dict(_MLP_IMAGES),
                  "forgetting": {"epochs": 5, "lr": 0.02}},
        "fashion-mnist": {"split": {"audit": 2000, "public": 2000}, "recipe": dict(_MLP_IMAGES),
                          "forgetting": {"epochs": 5, "lr": 0.02}},
    },
    "ratios": [1.0, 0.5, 0.2, 0.1],  # members per non-member in the evaluation (fig. 4)
    "figure_dataset": ["fashion-mnist"],  # figs 3, 5, 6: the first of these that is present
    "train_size": {"sizes": [250, 500, 1000, 2000, 4000], "repetitions": 3},
    # fig. 5: k reference models; each trains on a random half of a public pool of this size
    "references": {"counts": [1, 2, 4, 8], "public_sizes": [500, 2000, 8000], "repetitions": 3},
    "dp": {
        "epsilons": [None, 1, 10, 100],  # None: the same recipe without DP (the dotted line)
        "repetitions": 2,
        "references": 1,
        "split": {"audit": 2000, "public": 2000},
        # a smaller MLP and fewer epochs: DP-SGD's per-sample gradients cost ~10x here
        "recipe": {"arch_params": {"hidden": 128}, "epochs": 15},
        "dp": {"delta": 1e-5, "max_grad_norm": 1.0, "accountant": "rdp"},
    },
}

_CNN_IMAGES = {"architecture": "mnist-cnn", "optimizer": "sgd", "lr": 0.05, "batch_size": 128,
               "epochs": 50}
_CIFAR = {"architecture": "cifar-cnn", "optimizer": "sgd", "lr": 0.1, "batch_size": 128,
          "epochs": 100}

PAPER: dict[str, Any] = {
    "seed": 0,
    "repetitions": 5,  # T = 5 (the paper's T for every dataset but ImageNet)
    "device": "auto",
    "include": ["german-credit", "adult", "mnist", "fashion-mnist"],
    "if_present": ["cifar10", "cifar100"],
    "datasets": {
        "german-credit": _TABULAR["german-credit"],
        # the whole data set, half private, half public
        "adult": {**_TABULAR["adult"], "split": {"audit": 22_611, "public": 22_611}},
        "mnist": {"split": {"audit": 35_000, "public": 35_000}, "recipe": dict(_CNN_IMAGES),
                  "forgetting": {"epochs": 5, "lr": 0.01}},
        "fashion-mnist": {"split": {"audit": 35_000, "public": 35_000},
                          "recipe": dict(_CNN_IMAGES), "forgetting": {"epochs": 5, "lr": 0.01}},
        "cifar10": {"split": {"audit": 30_000, "public": 30_000}, "recipe": dict(_CIFAR),
                    "forgetting": {"epochs": 10, "lr": 0.01}},
        "cifar100": {"split": {"audit": 30_000, "public": 30_000}, "recipe": dict(_CIFAR),
                     "forgetting": {"epochs": 10, "lr": 0.01}},
    },
    "ratios": [1.0, 0.5, 0.2, 0.1, 0.05],
    "figure_dataset": ["cifar10", "fashion-mnist"],
    "train_size": {"sizes": [1000, 2500, 5000, 10_000, 15_000], "repetitions": 5},
    "references": {"counts": [1, 2, 4, 10], "public_sizes": [5000, 15_000, 30_000],
                   "repetitions": 5},
    "dp": {
        "epsilons": [None, 1, 10, 100, 1000],
        "repetitions": 5,
        "references": 2,
        "split": {"audit": 30_000, "public": 30_000},
        "recipe": {},
        "dp": {"delta": 1e-5, "max_grad_norm": 1.0, "accountant": "auto"},
    },
}

CONFIGS = {"cpu": CPU, "paper": PAPER}

# What the study measures, shared by its cells (calibration.py) and their work
# (rows.py).
FORGETTING_THRESHOLD = 1e-4  # Watson et al. §4.1's default threshold for calibrated scores
# (score name, original attack, calibrated attack) — the columns of Tables 2 and 3
SCORES = (
    ("gap", "correctness", None),
    ("loss", "loss", "calibrated-loss"),
    ("gn", "gradient-norm", "calibrated-gradient-norm"),
    ("confidence", "confidence", "calibrated-confidence"),
)
CURVE_ATTACKS = ("loss", "calibrated-loss")
ENTRY_KEYS = ("split", "recipe", "forgetting")  # what run_config reads of a dataset entry


def _present(name: str) -> bool:
    from miaudit.data import list_datasets

    return any(info.name == name and info.present for info in list_datasets(None))


def present_datasets(config: dict[str, Any]) -> list[str]:
    """``include`` (each must be defined and present) and the ``if_present`` ones found."""
    names = list(config["include"]) + [d for d in config["if_present"] if _present(d)]
    for name in names:
        if name not in config["datasets"]:
            raise StudyError(f"dataset {name!r} has no entry under `datasets` in the config; "
                             f"defined: {', '.join(config['datasets'])}.")
        entry = config["datasets"][name]
        missing = [k for k in ENTRY_KEYS if not isinstance(entry, dict) or k not in entry]
        if missing:
            raise StudyError(f"datasets.{name} lacks {', '.join(missing)}; an entry needs "
                             f"{', '.join(ENTRY_KEYS)} (see the german-credit entry).")
        if not _present(name):
            raise StudyError(f"dataset {name!r} is not present: run `miaudit data fetch {name}`"
                             " or drop it from `include`.")
    return names


def figure_dataset(config: dict[str, Any]) -> str:
    """The dataset of figs 3-6: the first of ``figure_dataset`` that is present."""
    choices = config["figure_dataset"]
    choices = [choices] if isinstance(choices, str) else list(choices)
    for name in choices:
        if name in config["datasets"] and _present(name):
            result: str = name
            return result
    raise StudyError(f"none of figure_dataset {choices} is defined and present; fetch one "
                     "(miaudit data fetch NAME) or change figure_dataset.")
