"""Shared fixtures: a small bank from real models trained on real data (sklearn digits).

The bank is built with plain torch (no miaudit trainer), so attack tests do not depend on it.
"""

from __future__ import annotations

import inspect
import itertools
import math
import os
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from miaudit.signals import SignalBank

# the user's own models (tests/user_model_fixtures.py), for the audit's and its CLI's tests
pytest_plugins = ["user_model_fixtures"]

# The suite never reads a dataset or model from the user's caches: before any test module is
# imported, the model cache and the data folder point at an empty private folder (tests that
# need files make them under it or under their own tmp_path). `.ci/run` also runs the whole
# suite with HOME and every cache moved to an empty folder, to prove it.
_PRIVATE = Path(tempfile.mkdtemp(prefix="miaudit-tests-"))
SUITE_CACHES = {"MIAUDIT_CACHE_DIR": _PRIVATE / "models", "MIAUDIT_DATA_DIR": _PRIVATE / "data"}


def pytest_configure(config: pytest.Config) -> None:
    for var, path in SUITE_CACHES.items():
        os.environ[var] = str(path)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_PRIVATE, ignore_errors=True)

# The suite's models and tensors are tiny: one intra-op thread avoids OpenMP spin-waiting,
# which made a two-thread run several times slower on a 2-core machine (measured).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def one_thread():
    """Every test starts on one intra-op thread, whatever the previous one left (a test that
    wants two sets them itself), and leaves the setting as it found it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _train_mlp(x: torch.Tensor, y: torch.Tensor, seed: int) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):  # full-batch; overfits the small training set, so it leaks
        order = torch.randperm(len(x), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[order]), y[order]).backward()
        opt.step()
    return model.eval()


def _grad_norms(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss_fn(p, xi, yi):
        out = torch.func.functional_call(model, p, (xi[None],))
        return torch.nn.functional.cross_entropy(out, yi[None])

    grads = torch.func.vmap(torch.func.grad(loss_fn), in_dims=(None, 0, 0))(params, x, y)
    flat = torch.cat([g.reshape(len(x), -1) for g in grads.values()], dim=1)
    return flat.norm(dim=1).numpy().astype(np.float64)


@pytest.fixture(scope="session")
def digits_bank() -> SignalBank:
    """8 real MLPs on sklearn digits in the balanced design; Q=2 (plain, shifted); grad_norm.

    1797 samples: 297 population (no model trains on them), 1500 in the balanced design
    (each IN for exactly 4 of 8 models); of those, the first 1000 are audit samples.
    """
    digits = load_digits()
    x_all = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y_all = torch.tensor(digits.target, dtype=torch.int64)
    n, m = len(y_all), 8
    rng = np.random.default_rng(0)
    order = rng.permutation(n)
    population = np.zeros(n, dtype=bool)
    population[order[1500:]] = True
    design = order[:1500]
    membership = np.zeros((m, n), dtype=bool)
    for idx in design:  # each design sample IN for exactly half the models
        membership[rng.permutation(m)[: m // 2], idx] = True
    audit = np.zeros(n, dtype=bool)
    audit[design[:1000]] = True
    # Query 1 shifts the image one pixel right: a label-preserving augmentation (mirroring a
    # digit changes what it is, and would swamp the query-averaged scores with noise).
    image = x_all.view(n, 8, 8)
    shifted = torch.nn.functional.pad(image, (1, 0))[:, :, :8].reshape(n, 64)
    logits = np.zeros((m, n, 2, 10), dtype=np.float32)
    grad_norm = np.zeros((m, n))
    for k in range(m):
        train = torch.from_numpy(np.nonzero(membership[k])[0])
        model = _train_mlp(x_all[train], y_all[train], seed=k)
        with torch.no_grad():
            logits[k, :, 0] = model(x_all).numpy()
            logits[k, :, 1] = model(shifted).numpy()
        grad_norm[k] = _grad_norms(model, x_all, y_all)
    return SignalBank(
        logits=logits,
        labels=digits.target,
        membership=membership,
        population=population,
        audit=audit,
        channels={"grad_norm": grad_norm},
    )


def _visible_sides(bank: SignalBank, target: int,
                   shadow: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The references' IN and OUT sides as `TargetView.of(bank, target)` defines them
    (docs/algorithms.md: IN(n) and OUT(n) are the references available for n that did and
    did not train on it; in a balanced design the view sets one aside per sample). bool
    [M, N] each, indexed by bank model; the target's row all False. With `shadow` (a
    reference index r): the sides of `view.as_shadow(r)`, whose target is that reference."""
    from miaudit.attacks import TargetView  # here: the conftest imports no attack module

    view = TargetView.of(bank, target)
    if shadow is not None:
        view = view.as_shadow(shadow)
    in_models = np.zeros(bank.membership.shape, dtype=bool)
    out_models = np.zeros(bank.membership.shape, dtype=bool)
    in_models[view.reference_ids] = view.reference_membership
    out_models[view.reference_ids] = view.out_mask()
    # a view only ever withholds references: each side is within the bank's own
    assert not (in_models & ~bank.membership).any() and not (out_models & bank.membership).any()
    return in_models, out_models


@pytest.fixture(scope="session")
def visible_sides():
    """`visible_sides(bank, target, shadow=None) -> (in_models, out_models)`: the masks a
    direct transcription of an attack takes its IN and OUT references from."""
    return _visible_sides


def _redrawn_target(bank: SignalBank, target: int, seed: int) -> SignalBank:
    """`bank` with the target's membership row a fresh random draw (population rows OUT): no
    longer a balanced design, so no view of it sets a reference aside (checked). Two draws
    differ only in the target's membership: an attack blind to it scores them alike."""
    from miaudit.attacks import TargetView

    membership = bank.membership.copy()
    free = ~bank.population if bank.population is not None else np.ones(bank.n_samples, bool)
    membership[target] = free & (np.random.default_rng(seed).random(bank.n_samples) < 0.5)
    redrawn = bank.replace(membership=membership)
    assert not TargetView.of(redrawn, target).set_aside.any()
    return redrawn


@pytest.fixture(scope="session")
def redrawn_target():
    """`redrawn_target(bank, target, seed) -> bank`: the target's membership row redrawn."""
    return _redrawn_target


@pytest.fixture(scope="session")
def docstring_texts() -> tuple[list[str], np.ndarray]:
    """Real English text made here, nothing downloaded: the first paragraphs of public
    callables' docstrings in four standard-library modules, labelled by module (0..3)."""
    texts, labels = [], []
    for label, module in enumerate([math, os.path, random, itertools]):
        for name in sorted(dir(module)):
            obj = getattr(module, name)
            doc = inspect.getdoc(obj) if not name.startswith("_") and callable(obj) else None
            if doc:
                texts.append(" ".join(doc.split("\n\n")[0].split()))
                labels.append(label)
    return texts, np.asarray(labels, dtype=np.int64)


@pytest.fixture
def umask():
    """Set the process umask for one test (restored after it)."""
    previous = os.umask(0o022)
    os.umask(previous)
    yield os.umask
    os.umask(previous)


@pytest.fixture
def tiny_run_yaml(tmp_path):
    """Writes a tiny `miaudit run` config (2 MLPs, 1 epoch on digits; calibrated-loss draws
    calibration.png; output tmp_path/runs/tiny, cache tmp_path/cache) as tmp_path/NAME.yaml
    and returns its path: ``tiny_run_yaml(name="good", **overrides)``."""
    import yaml

    def write(name: str = "good", **overrides) -> Path:
        data = {
            "name": "tiny", "seed": 0, "dataset": {"name": "digits"},
            "split": {"audit": 200, "public": 200, "population": 100}, "models": 2,
            "recipe": {"architecture": "mlp", "epochs": 1, "batch_size": 64},
            "signals": {"queries": ["plain"]}, "attacks": ["loss", "calibrated-loss"],
            "metrics": {"bootstrap": 20}, "output": str(tmp_path / "runs" / "tiny"),
            "cache_dir": str(tmp_path / "cache"), **overrides,
        }
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    return write


@pytest.fixture(scope="session")
def digits():
    """300 sklearn digits as float32 [N, 1, 8, 8] in [0, 1] and int64 labels."""
    data = load_digits()
    x = (data.images[:300] / 16.0).astype(np.float32)[:, None]
    y = data.target[:300].astype(np.int64)
    return x, y


@pytest.fixture(scope="session")
def base_folder(tmp_path_factory, docstring_texts):
    """A save_pretrained folder: a tiny random Llama and a byte-level BPE trained on the
    test texts, with a pad token of its own."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docstring_texts[0], trainer)
    from tokenizers import decoders

    tok.decoder = decoders.ByteLevel()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>",
                                                eos_token="<eos>")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, pad_token_id=0, eos_token_id=1, bos_token_id=None,
    )  # fmt: skip
    folder = tmp_path_factory.mktemp("base") / "tiny-llama"
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder
