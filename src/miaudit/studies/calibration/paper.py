"""Watson et al.'s published numbers ("On the Importance of Difficulty Calibration in
Membership Inference Attacks", ICLR 2022), transcribed from the paper's text as printed.

Tables 2 (AUC) and 3 (accuracy): columns gap, then loss / GN / confidence each as
original, calibrated (reference models trained from scratch) and calibrated via forgetting.
The paper's text prints Table 2's header one label short (its "Cal.-F" of confidence is
missing), but every row has the ten values of Table 3's header, so the columns are the same.
The figures (2-6) are images whose numbers the text does not contain: only the claims quoted in
FIGURE_CLAIMS are available for them.
"""

from __future__ import annotations

COLUMNS = (
    ("gap", "orig"),
    ("loss", "orig"), ("loss", "cal"), ("loss", "cal-f"),
    ("gn", "orig"), ("gn", "cal"), ("gn", "cal-f"),
    ("confidence", "orig"), ("confidence", "cal"), ("confidence", "cal-f"),
)

# our dataset name -> the paper's row name (Fashion-MNIST is not in the paper)
PAPER_ROW = {"german-credit": "Credit", "adult": "Adult", "mnist": "MNIST",
             "cifar10": "CIFAR10", "cifar100": "CIFAR100"}

TABLE1 = {  # target train / test accuracy
    "Credit": (0.921, 0.751), "Hep.": (0.998, 0.871), "Adult": (0.904, 0.842),
    "MNIST": (0.990, 0.989), "CIFAR10": (0.946, 0.740), "CIFAR100": (0.938, 0.373),
    "ImageNet": (0.773, 0.637),
}

_T2 = {
    "Credit": (0.549, 0.542, 0.648, 0.594, 0.513, 0.579, 0.559, 0.501, 0.553, 0.543),
    "Hep.": (0.535, 0.514, 0.558, 0.559, 0.515, 0.553, 0.548, 0.513, 0.525, 0.533),
    "Adult": (0.514, 0.516, 0.554, 0.529, 0.510, 0.523, 0.515, 0.507, 0.510, 0.512),
    "MNIST": (0.506, 0.505, 0.519, 0.509, 0.504, 0.514, 0.509, 0.503, 0.510, 0.505),
    "CIFAR10": (0.663, 0.676, 0.731, 0.708, 0.678, 0.787, 0.762, 0.629, 0.635, 0.631),
    "CIFAR100": (0.854, 0.911, 0.903, 0.886, 0.912, 0.924, 0.912, 0.852, 0.707, 0.760),
    "ImageNet": (0.536, 0.547, 0.557, 0.551, 0.540, 0.511, 0.520, 0.544, 0.515, 0.512),
    "CIFAR10 (aug.)": (0.603, 0.603, 0.690, 0.674, 0.603, 0.666, 0.707, 0.560, 0.568, 0.575),
    "CIFAR100 (aug.)": (0.784, 0.812, 0.844, 0.831, 0.811, 0.856, 0.843, 0.679, 0.672, 0.647),
}
_T3 = {
    "Credit": (0.589, 0.617, 0.618, 0.577, 0.569, 0.573, 0.567, 0.557, 0.554, 0.555),
    "Hep.": (0.561, 0.574, 0.575, 0.591, 0.574, 0.593, 0.585, 0.574, 0.577, 0.576),
    "Adult": (0.534, 0.536, 0.534, 0.522, 0.518, 0.518, 0.515, 0.512, 0.511, 0.511),
    "MNIST": (0.506, 0.508, 0.513, 0.509, 0.508, 0.511, 0.508, 0.507, 0.508, 0.506),
    "CIFAR10": (0.664, 0.712, 0.657, 0.662, 0.719, 0.720, 0.702, 0.642, 0.623, 0.622),
    "CIFAR100": (0.854, 0.911, 0.829, 0.862, 0.915, 0.876, 0.898, 0.820, 0.731, 0.711),
    "ImageNet": (0.536, 0.542, 0.545, 0.542, 0.538, 0.518, 0.521, 0.540, 0.541, 0.553),
    "CIFAR10 (aug.)": (0.602, 0.609, 0.626, 0.625, 0.610, 0.610, 0.651, 0.562, 0.542, 0.558),
    "CIFAR100 (aug.)": (0.784, 0.785, 0.765, 0.775, 0.788, 0.793, 0.789, 0.647, 0.641, 0.621),
}

TABLE2_AUC = {row: dict(zip(COLUMNS, values, strict=True)) for row, values in _T2.items()}
TABLE3_ACC = {row: dict(zip(COLUMNS, values, strict=True)) for row, values in _T3.items()}

STD_NOTE = {
    "auc": "paper std over T=5: up to 0.024 (Credit), 0.034 (Hep.), 0.003 (MNIST), 0.015 (others)",
    "acc": "paper std over T=5: up to 0.018 (Credit), 0.026 (Hep.), 0.002 (MNIST), 0.005 (others)",
}

FIGURE_CLAIMS = {
    "fig3": "CIFAR-10 (sizes not given in the text): for the gap attack and calibrated / "
            "uncalibrated loss, both AUC and accuracy increase when the training set is "
            "smaller; calibration improves the attack across the whole range of sizes.",
    "fig4": "As non-members outnumber members, accuracy increases drastically (the accuracy-"
            "optimal threshold favours high recall, low precision: 'non-membership "
            "inference') while the precision-recall trade-off worsens; the calibrated attack "
            "still reaches high precision at low recall at low ratios, the uncalibrated does "
            "not. (Ratios and dataset not given in the text.)",
    "fig5": "CIFAR-10, calibrated loss via forgetting, each reference on a different subset of "
            "the public data: more reference models and larger shadow sets strictly improve "
            "AUC and accuracy; 1 vs 10 references differ by up to 0.05 AUC and 0.03 accuracy.",
    "fig6": "CIFAR-10 DP-SGD models: DP reduces both attacks; at epsilon = 100 and 1000 the "
            "calibrated attack still has a non-trivial TPR/FPR and precision-recall trade-off; "
            "only near epsilon = 1 do AUC and accuracy approach the uncalibrated attack's and "
            "both approach random guessing.",
}
