"""The numbers of "Generalization and Membership Inference Attack: a Practical Perspective"
(`GENERALIZATION_PAPER`), transcribed as data from the paper's text.

Setup stated by the paper (§IV): CIFAR (CIFAR-10 by its 60k images and 10-class accuracies),
the whole 60k pool, each target on half of it (30k); ResNet-18; attack LiRA, metric TPR at 0.1 %
FPR (in percent in the tables). Not stated: the number of shadow models, online or offline
LiRA, the optimizer, epochs, learning rate, the checkpoint spacing of the early-stopping table,
which recipe knobs vary in the many-model study, and any correlation coefficient.
"""

from __future__ import annotations

GENERALIZATION_PAPER = '"Generalization and Membership Inference Attack: a Practical Perspective"'

# Table of §IV-A1 (augmentation techniques): technique -> (train acc %, test acc %, TPR@0.1%FPR %)
PAPER_AUGMENTATION: dict[str, tuple[float, float, float]] = {
    "No Augmentation": (100.0, 76.55, 19.56),
    "Crop": (95.75, 84.26, 0.73),
    "Mirror": (98.75, 72.59, 4.52),
    "CIFAR-Policy": (99.4, 80.75, 2.91),
    "Cutout": (99.2, 76.49, 9.95),
    "Crop + Cutout": (96.81, 85.29, 0.63),
    "Crop + Mirror": (92.93, 82.43, 0.33),
    "Cutout + Mirror": (98.9, 81.43, 4.61),
    "Crop + Cutout + Mirror": (95.35, 84.16, 0.54),
    "All Techniques": (94.94, 89.15, 0.18),
}

# Our augmentation steps for each row (miaudit.train.augment). "CIFAR-Policy" is AutoAugment's
# CIFAR-10 policy; "All Techniques" = crop, mirror, cutout and the policy (the paper does not
# give the order; ours is the usual crop -> flip -> policy -> cutout).
AUGMENTATION_STEPS: dict[str, list[str]] = {
    "No Augmentation": [],
    "Crop": ["crop"],
    "Mirror": ["mirror"],
    "CIFAR-Policy": ["autoaugment"],
    "Cutout": ["cutout"],
    "Crop + Cutout": ["crop", "cutout"],
    "Crop + Mirror": ["crop", "mirror"],
    "Cutout + Mirror": ["mirror", "cutout"],
    "Crop + Cutout + Mirror": ["crop", "mirror", "cutout"],
    "All Techniques": ["crop", "mirror", "autoaugment", "cutout"],
}

# Table of §IV-A2 (early stopping, "Figure 2"): checkpoint step -> (train acc %, test acc %,
# TPR@0.1%FPR %). Step 6 is the end of training; the spacing of the steps is not given.
PAPER_EARLY_STOPPING: dict[int, tuple[float, float, float]] = {
    6: (100.0, 76.8, 18.28),
    5: (99.8, 75.7, 14.63),
    4: (97.4, 73.2, 8.31),
    3: (93.6, 72.3, 4.6),
    2: (86.0, 68.3, 0.16),
    1: (75.9, 67.4, 0.1),
}

# §IV-B (attacker knowledge of the training technique, Figures 3 and 4): ROC curves only, no
# table. What the text states, per technique of the target:
PAPER_KNOWLEDGE: dict[str, str] = {
    "CIFAR-Policy": "references trained with the target's policy raise the attack 'by up to "
                    "5 times' (Figure 3; no number per FPR given)",
    "All Techniques": "references trained like the target make the attack weaker than plain "
                      "references (Figure 4; no number given)",
}

# §IV-C (Figures 5-7): over 1K ResNet-18 models, one training set, varied training methods.
PAPER_MANY_MODEL: dict[str, str] = {
    "models": "over 1K, identical architecture (ResNet-18), the same training and test set",
    "figure 5": "TPR@0.1% FPR against train-test accuracy gap, coloured by test accuracy: "
                "'a clear upward trend'; at equal gap, higher test accuracy -> higher TPR",
    "figure 6": "TPR against test accuracy (coloured by gap): test accuracy alone is 'not a "
                "reliable predictor'",
    "figure 7": "TPR against train-test loss gap: aligns with figure 5, 'smoother'",
    "correlations": "none reported (figures only)",
}
