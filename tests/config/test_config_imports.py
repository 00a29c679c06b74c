"""Checking a config loads neither torch nor transformers (~1-2 s to import): `miaudit run` /
`miaudit audit` refuse a bad config before paying for them, and a tool that only validates
configs never does. Each check runs in a fresh interpreter, where nothing else loaded them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

HEAVY = ("torch", "transformers")


def _loaded_after(code: str, tmp_path: Path) -> list[str]:
    """The heavy modules loaded by ``code`` run in a fresh interpreter (in ``tmp_path``)."""
    script = textwrap.dedent(code) + (
        f"\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, check=True)
    return eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 - our own print


def test_checking_an_audit_config_loads_no_torch(tmp_path: Path) -> None:
    (tmp_path / "audit.yaml").write_text(textwrap.dedent("""\
        model: {predict: nets.py:predict_proba, augment: [crop, mirror]}
        data: {dataset: digits, members: members.txt}
        references: {models: 2, recipe: {epochs: 3, lr: 0.01, batch_size: 64}}
        attacks: [loss, rmia]
        attack_params: {rmia: {gamma: 2.0}}
        metrics: {fprs: [0.01], bootstrap: 10}
        """))
    code = """
        from miaudit.config import read_yaml
        from miaudit.external.audit_config import audit_config
        audit_config(read_yaml("audit.yaml", "audit config"))
        """
    assert _loaded_after(code, tmp_path) == []


def test_checking_a_run_config_loads_no_torch(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(textwrap.dedent("""\
        name: tiny
        dataset: {name: digits}
        models: 2
        recipe: {epochs: 2, augment: [crop]}
        attacks: [loss]
        """))
    code = """
        from miaudit.config import load_config
        load_config("run.yaml")
        """
    assert _loaded_after(code, tmp_path) == []


def test_checking_gradient_canaries_loads_no_torch(tmp_path: Path) -> None:
    """kind gradient's direction and coordinates are checked against the canaries' choices
    (torch-free: miaudit.train.gradient_canary_kinds), not the torch module using them."""
    (tmp_path / "run.yaml").write_text(textwrap.dedent("""\
        name: dp-canaries
        dataset: {name: digits}
        models: 1
        recipe: {architecture: mlp, epochs: 2, dp: {epsilon: 4}}
        canaries: {kind: gradient, count: 10, direction: dirac, coordinates: random}
        attacks: [loss]
        """))
    code = """
        from miaudit.config import load_config
        config = load_config("run.yaml")
        assert config.canaries.kind == "gradient" and config.canaries.coordinates == "random"
        """
    assert _loaded_after(code, tmp_path) == []


def test_the_recipe_rules_a_config_check_reads_load_no_torch(tmp_path: Path) -> None:
    """What of miaudit.train and miaudit.runtime a config check reads (the recipe's own
    rules, the augmentation steps, the precisions) is torch-free; torch loads where a step is
    built, a model trains or a device is used."""
    code = """
        from miaudit.runtime.devices import DEFAULT_PRECISION, PRECISIONS
        from miaudit.train.augment import AUGMENTATIONS, normalize_augmentation
        from miaudit.train.recipe import TRAINABLE, Recipe, check_dp, check_trainable
        check_trainable({"epochs": 2, "lr": 0.1, "batch_size": 8}, "recipe")
        normalize_augmentation(["crop", {"name": "cutout", "size": 4}])
        check_dp({"epsilon": 4.0})
        import miaudit.train
        assert miaudit.train.__all__
        """
    assert _loaded_after(code, tmp_path) == []
    # ... and the package's public names still load, torch with them
    code = """
        from miaudit.train import ModelCache, Recipe, train_model
        assert Recipe().key() and callable(train_model) and ModelCache
        """
    assert _loaded_after(code, tmp_path) == ["torch"]
