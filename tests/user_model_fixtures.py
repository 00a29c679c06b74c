"""Fixtures (a pytest plugin, loaded by tests/conftest.py): models trained outside miaudit on
real data (sklearn digits), as a user would bring them, for the audit and its command line.

The torch model is a plain nn.Module in a file of its own, trained with a plain torch loop and
saved as safetensors; the estimator is a scikit-learn MLP pickled with joblib. Rows: 300
members, 300 non-members, the rest public.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import joblib
import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPClassifier

NETS = '''
import torch
from torch import nn


class Net(nn.Module):
    """A small MLP on 1x8x8 digits."""

    def __init__(self, hidden: int = 32, classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(),
                                  nn.Linear(hidden, classes))

    def forward(self, x):
        return self.body(x)


def predict_proba(x):
    """A black box: softmax of a fixed random linear map (deterministic)."""
    import numpy as np
    w = np.random.default_rng(0).normal(size=(64, 10))
    z = x.reshape(len(x), -1) @ w
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
'''


@pytest.fixture(scope="session")
def split() -> dict[str, np.ndarray]:
    """Seeded digits rows: members, non-members, public (the rest)."""
    order = np.random.default_rng(0).permutation(1797)
    return {"members": np.sort(order[:300]), "nonmembers": np.sort(order[300:600]),
            "public": np.sort(order[600:])}


@pytest.fixture(scope="session")
def user(tmp_path_factory, split) -> dict[str, Path]:
    """The user's files: nets.py, model.safetensors, model.pt, members.txt, ..., rf.joblib."""
    root = tmp_path_factory.mktemp("user")
    (root / "nets.py").write_text(NETS)
    digits = load_digits()
    x = torch.tensor(digits.images[:, None] / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    torch.manual_seed(0)
    from torch import nn

    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    rows = torch.from_numpy(split["members"])
    for _ in range(150):  # full batch, overfits the 300 members
        opt.zero_grad()
        nn.functional.cross_entropy(net(x[rows]), y[rows]).backward()
        opt.step()
    state = {f"body.{k}": v.contiguous() for k, v in net.state_dict().items()}  # Net's names
    save_file(state, str(root / "model.safetensors"))
    torch.save(state, root / "model.pt")
    for name in ("members", "nonmembers", "public"):
        np.savetxt(root / f"{name}.txt", split[name], fmt="%d")
    flat = digits.data / 16.0
    mlp = MLPClassifier(hidden_layer_sizes=(32,), max_iter=300, random_state=0)
    with warnings.catch_warnings():  # it overfits before converging: what we audit
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp.fit(flat[split["members"]], digits.target[split["members"]])
    joblib.dump(mlp, root / "mlp.joblib")
    return {"root": root, "nets": root / "nets.py", "safetensors": root / "model.safetensors",
            "pt": root / "model.pt", "members": root / "members.txt",
            "nonmembers": root / "nonmembers.txt", "public": root / "public.txt",
            "mlp": root / "mlp.joblib"}
