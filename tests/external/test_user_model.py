"""The `import` model kind (src/miaudit/models/user.py): the trainer builds the user's class."""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.models.user import source_digest
from miaudit.train import ModelCache, Recipe, train_model


def test_build_and_train_a_user_class(user):
    path = f"{user['nets']}:Net"
    module = build_model("import", (1, 8, 8), 10, path=path, kwargs={"hidden": 8})
    assert module.body[1].out_features == 8
    digits = load_digits()
    x = (digits.images[:200, None] / 16.0).astype(np.float32)
    y = digits.target[:200]
    recipe = Recipe(architecture="import",
                    arch_params={"path": path, "kwargs": {"hidden": 8},
                                 "source_sha256": source_digest(path)},
                    optimizer="adam", lr=0.01, epochs=20, batch_size=50)
    trained = train_model(recipe, x, y, np.arange(200), seed=0)
    assert trained.losses[-1] < trained.losses[0] / 2  # it learns
    again = train_model(recipe, x, y, np.arange(200), seed=0)
    for a, b in zip(trained.module.state_dict().values(), again.module.state_dict().values(),
                    strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # seeded: same weights


def test_cache_round_trip_of_a_user_class(user, tmp_path):
    path = f"{user['nets']}:Net"
    recipe = Recipe(architecture="import", arch_params={"path": path}, epochs=2, batch_size=32)
    x = np.random.default_rng(0).random((40, 1, 8, 8), dtype=np.float32)
    y = np.arange(40) % 10
    cache = ModelCache(tmp_path)
    first = cache.get_or_train("fp", np.arange(40), recipe, 0, features=x, labels=y)
    second = ModelCache(tmp_path).get_or_train("fp", np.arange(40), recipe, 0, features=x,
                                               labels=y)
    assert second.from_cache
    with torch.no_grad():
        torch.testing.assert_close(first.module(torch.from_numpy(x)),
                                   second.module(torch.from_numpy(x)))


def test_user_class_errors(user, tmp_path):
    path = f"{user['nets']}:Net"
    with pytest.raises(ConfigError, match=r"labels have 3 classes"):
        build_model("import", (1, 8, 8), 3, path=path)
    with pytest.raises(ConfigError, match="fails on a batch of inputs of shape"):
        build_model("import", (1, 28, 28), 10, path=path)
    with pytest.raises(ConfigError, match="unexpected keyword|failed"):
        build_model("import", (1, 8, 8), 10, path=path, kwargs={"depth": 3})
    with pytest.raises(ConfigError, match="source file of .* changed"):
        build_model("import", (1, 8, 8), 10, path=path, source_sha256="0" * 64)
    with pytest.raises(ConfigError, match="needs arch_params.path"):
        build_model("import", (1, 8, 8), 10)


def test_a_package_in_the_current_directory_imports(user, tmp_path, monkeypatch):
    package = tmp_path / "mynets_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text(user["nets"].read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", ".")])
    module = build_model("import", (1, 8, 8), 10, path="mynets_pkg.nets:Net")
    assert type(module).__name__ == "Net"
