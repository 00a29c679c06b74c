"""Nothing miaudit writes and later reads is a pickle (issue #34): a malicious pickle planted in
a gradient-canary record (its sha256 updated in the entry's json) never runs, the entry is
retrained with a warning; and no code of the package unpickles, save the two documented
places (the user's own --estimator file, and CIFAR batches through a restricted unpickler).

The model cache's safetensors entries and the scikit-learn reference cache are planted in
tests/external/test_no_code_execution.py, through `miaudit audit`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import miaudit

N = 256
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class Planted:
    """Unpickling this object creates ``marker`` (``open(marker, "w")``)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.marker, "w"))


def test_a_pickle_planted_in_a_gradient_canary_record_never_runs(tmp_path, caplog):
    from sklearn.datasets import load_digits

    from miaudit.train import ModelCache, Recipe
    from miaudit.train.gradient_canaries import GradientCanaries
    from miaudit.train.gradient_records import RECORD_SUFFIX

    digits = load_digits()
    x, y = (digits.data[:N] / 16.0).astype(np.float32), digits.target[:N].astype(np.int64)
    recipe = Recipe(epochs=1, batch_size=64, lr=0.1, arch_params={"hidden": 16},
                    dp={"epsilon": 4.0, "accountant": "rdp"})

    def get(cache: ModelCache) -> Any:
        return cache.get_or_train_with_canaries(
            "digits-fp", np.arange(N), recipe, 7, GradientCanaries(50, seed=3), features=x,
            labels=y, num_classes=10, progress=False)

    get(ModelCache(tmp_path))
    (record,) = tmp_path.glob(f"*{RECORD_SUFFIX}")
    marker = tmp_path / "PWNED"
    # the record's arrays, one of them an object array holding the payload
    with np.load(record) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["meta"] = np.array([Planted(marker)], dtype=object)
    np.savez(record, **arrays)
    np.load(record, allow_pickle=True)["meta"]  # the payload is live ...
    assert marker.exists()
    marker.unlink()
    blob = record.read_bytes()
    meta_path = tmp_path / (record.name[: -len(RECORD_SUFFIX)] + ".json")
    meta = json.loads(meta_path.read_text())
    meta["gradient_canary_record_sha256"] = hashlib.sha256(blob).hexdigest()
    meta_path.write_text(json.dumps(meta))
    cache = ModelCache(tmp_path)
    with caplog.at_level(logging.WARNING):
        _, loaded = get(cache)
    assert not marker.exists()  # ... and never runs when the cache reads it
    assert "is corrupt" in caplog.text and "retraining" in caplog.text
    assert "Object arrays cannot be loaded" in caplog.text
    assert cache.stats.misses == 1 and loaded.included.size == 50


# Every way of unpickling, and the only places in the package allowed one (what they read)
_UNPICKLING = re.compile(
    r"\bpickle\.loads?\(|\bjoblib\.load\(|Unpickler\(|allow_pickle=True|"
    r"weights_only=False|\bpd\.read_pickle\(|\bdill\b|\bcloudpickle\.loads?\(|\bshelve\.")
_ALLOWED = {
    "external/sources.py": "joblib.load(",  # the user's --estimator file, warned about
    "data/cifar.py": "Unpickler(",  # CIFAR batches: numpy arrays and bytes only
}


def test_no_code_of_the_package_unpickles_but_the_documented_two():
    root = Path(miaudit.__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            code = line.split("#")[0]
            if _UNPICKLING.search(code):
                found.setdefault(str(path.relative_to(root)), []).append(line.strip())
    unexpected = {f: lines for f, lines in found.items()
                  if f not in _ALLOWED or not all(_ALLOWED[f] in ln for ln in lines)}
    assert not unexpected, unexpected
    # torch.load only with weights_only=True (a state dict of tensors, never a pickled object)
    for path in sorted(root.rglob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if "torch.load(" in line.split("#")[0]:
                assert "weights_only=True" in line, (path, line)
