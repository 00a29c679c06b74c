"""`device: cuda` paths, checked on a CPU-only machine: device names, the recipe's precision (and
that its default keeps every cache key), bf16 refused where it is not native (a CPU without
AVX-512 BF16 or AMX, mocked), autocast a no-op in fp32, and the
pinned, non-blocking copies chosen for CUDA (with `torch.cuda.is_available` mocked where the
choice depends on it)."""

import contextlib
import re
import subprocess
import sys
import warnings
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.runtime import devices
from miaudit.runtime.devices import (
    BF16_NOT_NATIVE,
    autocast,
    check_precision,
    is_cuda,
    pins_for,
    resolve_device,
    to_device,
)
from miaudit.train import Recipe, engine, loop, model_cache, predict_logits, train_model
from miaudit.train.stacked import can_stack, train_stacked

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 6)).astype(np.float32)
Y = np.arange(60) % 3
MLP = Recipe(architecture="mlp", arch_params={"hidden": 8}, epochs=2, batch_size=16)
BF16_REFUSED = ("bf16 autocast needs a CUDA device or a CPU with native bfloat16 (AVX-512 BF16 or "
                "AMX); set precision: fp32 or device: cuda")
NATIVE_CPU_BF16 = pytest.mark.skipif(not devices.native_bf16("cpu"),
                                     reason="this CPU has no native bfloat16")


@pytest.fixture
def no_native_bf16(monkeypatch):
    """A CPU without AVX-512 BF16 or AMX (CUDA still counts as native)."""
    monkeypatch.setattr(devices, "native_bf16", lambda device: is_cuda(device))


@contextlib.contextmanager
def cuda_available(available: bool):
    with mock.patch("torch.cuda.is_available", return_value=available):
        yield


# --- device names -----------------------------------------------------------------------------


def test_auto_is_the_cpu_without_cuda_and_cuda_with_it():
    with cuda_available(False):
        assert resolve_device("auto") == "cpu"
    with cuda_available(True):
        assert resolve_device("auto") == "cuda"
        assert resolve_device("cuda:1") == "cuda:1"
    assert resolve_device("cpu") == "cpu"
    if not torch.cuda.is_available():  # this machine, for real
        assert resolve_device("auto") == "cpu"


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_is_refused_with_the_fix_when_there_is_none(name):
    with cuda_available(False), pytest.raises(ConfigError) as err:
        resolve_device(name)
    message = str(err.value)
    assert f"device '{name}'" in message and "no CUDA device is available" in message
    assert "device: auto" in message and "device: cpu" in message


def test_is_cuda_reads_the_device_type():
    assert is_cuda("cuda") and is_cuda("cuda:2") and is_cuda(torch.device("cuda", 1))
    assert not is_cuda("cpu") and not is_cuda(torch.device("cpu")) and not is_cuda("meta")


# --- the recipe's precision and the cache keys --------------------------------------------------

# Computed at HEAD (e53ecce) before `precision` existed: the default must keep them.
HEAD_DEFAULT_KEY = "c7455c39b670f20d8467a6af9192518b51f464d2bbdd0520bae4b8da8a715507"
HEAD_CIFAR_KEY = "1aed0e526c66d3d41dea30140e9d7cedae8f1fc6754b302a62a595b754cb64ee"
HEAD_DP_KEY = "3c78951f3753b8f0fe9b77ef531ee06de1fa0246590997151de687f36b452452"
# key_for at HEAD with the code version pinned (the trainer digest moves with any edit of the
# training code, by design; what must not move is how a recipe enters the key).
HEAD_KEY_FOR = "aab136de1cf58647c267d7ee9a3a2aaafad07eaf8df205e75ec11d4c609470bf"
HEAD_KEY_FOR_CIFAR = "5d656f6ba7c4a03e027d0252ece20d3c79bb8cf4fa201247df74ac35e4a6c85d"
FIXED_VERSION = {"format": 1, "trainer_digest": "0" * 64, "miaudit_version": "x"}


def cifar_recipe(**changes):
    return Recipe(architecture="cifar-cnn", optimizer="adam", lr=1e-3, epochs=5,
                  augment=["crop", "mirror"], label_smoothing=0.1, **changes)  # fmt: skip


@pytest.mark.parametrize("spelled", [{}, {"precision": "fp32"}])
def test_the_default_precision_keeps_every_key_of_before(spelled, monkeypatch):
    assert Recipe(**spelled).key() == HEAD_DEFAULT_KEY
    assert cifar_recipe(**spelled).key() == HEAD_CIFAR_KEY
    assert Recipe(dp={"epsilon": 8}, **spelled).key() == HEAD_DP_KEY
    assert "precision" not in Recipe(**spelled).canonical_json()
    monkeypatch.setattr(model_cache, "cache_version", lambda: dict(FIXED_VERSION))
    rows = np.arange(0, 200, 2)
    small = Recipe(arch_params={"hidden": 16}, epochs=1, batch_size=64, **spelled)
    assert model_cache.key_for("digits-v1", rows, small, 3) == HEAD_KEY_FOR
    assert model_cache.key_for("digits-v1", rows, cifar_recipe(**spelled), 3, 10) == (
        HEAD_KEY_FOR_CIFAR)  # fmt: skip


def test_bf16_is_a_recipe_of_its_own():
    bf16 = Recipe(precision="bf16")
    assert bf16.key() != Recipe().key() and bf16 != Recipe()
    assert '"precision":"bf16"' in bf16.canonical_json()
    assert Recipe.from_dict(bf16.to_dict()) == bf16
    assert bf16.plain().precision == "bf16"  # a compute choice, not a training technique


@pytest.mark.parametrize("bad", ["fp16", "BF16", "float32"])
def test_unknown_precisions_are_refused(bad):
    with pytest.raises(ConfigError, match="precision .* is unknown; use one of fp32, bf16"):
        Recipe(precision=bad)
    with pytest.raises(ConfigError, match="is unknown"):
        check_precision(bad, "cuda")


def test_bf16_with_dp_is_refused():
    with pytest.raises(ConfigError, match="precision bf16 is not supported with dp"):
        Recipe(precision="bf16", dp={"epsilon": 8.0})


# --- bf16 needs native support -------------------------------------------------------------------


def test_native_bf16_is_cuda_or_onednns_cpu_bf16():
    assert devices.native_bf16("cuda") and devices.native_bf16("cuda:1")
    assert devices.native_bf16("cpu") == bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert not devices.native_bf16("meta")


def test_bf16_is_refused_on_a_cpu_without_it_with_the_fix(no_native_bf16):
    assert BF16_NOT_NATIVE == BF16_REFUSED
    with pytest.raises(ConfigError, match=re.escape(BF16_REFUSED)):
        check_precision("bf16", "cpu")
    check_precision("bf16", "cuda")  # allowed by name: resolve_device refuses a missing GPU
    check_precision("fp32", "cpu")


@NATIVE_CPU_BF16
def test_bf16_runs_on_a_cpu_with_native_bf16():
    check_precision("bf16", "cpu")
    context = autocast("cpu", "bf16")
    assert isinstance(context, torch.autocast)
    assert context.device == "cpu" and context.fast_dtype == torch.bfloat16


def test_training_bf16_on_the_cpu_is_refused_before_any_work(monkeypatch, no_native_bf16):
    built = []
    monkeypatch.setattr(loop, "training_rows", lambda *a, **k: built.append(1))
    with pytest.raises(ConfigError, match=re.escape(BF16_REFUSED)):
        train_model(MLP.replace(precision="bf16"), X, Y, np.arange(30), 0, progress=False)
    assert not built  # refused before the rows were gathered


def test_bf16_is_never_stacked_and_stacking_it_is_refused():
    assert can_stack(MLP) and not can_stack(MLP.replace(precision="bf16"))
    with pytest.raises(ConfigError, match="precision fp32"):
        train_stacked(MLP.replace(precision="bf16"), X, Y, [np.arange(30)], [0])


def test_predicting_bf16_on_the_cpu_is_refused(no_native_bf16):
    module = torch.nn.Linear(6, 3)
    with pytest.raises(ConfigError, match=re.escape(BF16_REFUSED)):
        predict_logits(module, X, precision="bf16")


# --- autocast -----------------------------------------------------------------------------------


def test_fp32_autocast_is_a_no_op():
    for device in ("cpu", "cuda"):
        context = autocast(device, "fp32")
        assert isinstance(context, contextlib.nullcontext)
    a = torch.randn(4, 4)
    with autocast("cpu", "fp32"):
        assert not torch.is_autocast_enabled("cpu") and not torch.is_autocast_enabled("cuda")
        assert (a @ a).dtype == torch.float32


def test_bf16_autocast_is_cudas_bfloat16_autocast(no_native_bf16):
    with warnings.catch_warnings():  # "CUDA is not available. Disabling" on this machine
        warnings.simplefilter("ignore", UserWarning)
        context = autocast("cuda:0", "bf16")
    assert isinstance(context, torch.autocast)
    assert context.device == "cuda" and context.fast_dtype == torch.bfloat16
    with pytest.raises(ConfigError, match=re.escape(BF16_REFUSED)):
        autocast("cpu", "bf16")


def test_every_training_step_runs_in_the_recipes_autocast(monkeypatch):
    """The plain strategy enters `autocast(device, precision)` around each step's forward and
    loss (and not around the backward); with the CUDA check passed, a bf16 recipe reaches it."""
    entered, inside = [], []

    @contextlib.contextmanager
    def recording(device, precision):
        entered.append((torch.device(device).type, precision))
        inside.append(True)
        yield
        inside.pop()

    def forward_hook(module, args, output):
        assert inside, "forward ran outside the autocast context"

    monkeypatch.setattr(loop, "autocast", recording)
    monkeypatch.setattr(loop, "check_precision", lambda precision, device: None)
    real_build = loop.build_model

    def build(*args, **kwargs):
        module = real_build(*args, **kwargs)
        module.register_forward_hook(forward_hook)
        return module

    monkeypatch.setattr(loop, "build_model", build)
    model = train_model(MLP.replace(precision="bf16"), X, Y, np.arange(30), 0, progress=False)
    steps = 2 * 2  # 30 rows, batch 16: 2 steps an epoch, 2 epochs
    assert entered == [("cpu", "bf16")] * steps and len(model.losses) == 2


def test_fp32_training_on_the_cpu_is_unchanged_by_the_precision_field():
    a = train_model(MLP, X, Y, np.arange(30), 0, progress=False)
    b = train_model(MLP.replace(precision="fp32"), X, Y, np.arange(30), 0, progress=False)
    for (name, va), vb in zip(a.module.state_dict().items(), b.module.state_dict().values(),
                              strict=True):  # fmt: skip
        assert torch.equal(va, vb), name
    assert a.losses == b.losses


# --- pinned, non-blocking copies ----------------------------------------------------------------


def test_pinned_copies_are_chosen_only_from_the_host_to_cuda_with_cuda():
    host = torch.zeros(3)
    with cuda_available(True):
        assert pins_for(host, "cuda") and pins_for(host, torch.device("cuda", 1))
        assert not pins_for(host, "cpu")
        assert not pins_for(torch.zeros(3, device="meta"), "cuda")  # not a host tensor
    with cuda_available(False):
        assert not pins_for(host, "cuda")


def test_to_device_pins_and_does_not_block_for_cuda():
    tensor = mock.MagicMock()
    tensor.device = torch.device("cpu")
    tensor.is_pinned.return_value = False
    pinned = tensor.pin_memory.return_value
    with cuda_available(True):
        moved = to_device(tensor, "cuda:0")
    tensor.pin_memory.assert_called_once_with()
    pinned.to.assert_called_once_with("cuda:0", non_blocking=True)
    assert moved is pinned.to.return_value
    tensor.to.assert_not_called()


def test_to_device_does_not_pin_what_is_pinned_already():
    tensor = mock.MagicMock()
    tensor.device = torch.device("cpu")
    tensor.is_pinned.return_value = True
    with cuda_available(True):
        to_device(tensor, "cuda")
    tensor.pin_memory.assert_not_called()
    tensor.to.assert_called_once_with("cuda", non_blocking=True)


def test_to_device_on_the_cpu_is_a_plain_move():
    host = torch.arange(5)
    assert to_device(host, "cpu") is host  # no copy, no pinning
    tensor = mock.MagicMock()
    tensor.device = torch.device("cpu")
    with cuda_available(False):  # a CUDA device asked for without CUDA: torch's own error
        to_device(tensor, "cuda")
    tensor.pin_memory.assert_not_called()
    tensor.to.assert_called_once_with("cuda")


def test_each_epochs_order_goes_to_the_device_through_to_device(monkeypatch):
    calls = []

    def recording(tensor, device):
        calls.append((tuple(tensor.shape), torch.device(device).type))
        return devices.to_device(tensor, device)

    monkeypatch.setattr(engine, "to_device", recording)
    x, y = torch.from_numpy(X), torch.from_numpy(Y)
    batches = engine.ShuffledBatches(x, y, [1, 2], 16, torch.stack([torch.arange(30)] * 2))
    for _ in range(3):  # three epochs
        assert sum(len(yb) for _, yb in batches) == 60
    assert calls == [((2, 30), "cpu")] * 3


# --- the GPU benchmark --------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="measures on a GPU: not for the suite")
def test_the_gpu_benchmark_has_nothing_to_measure_without_cuda():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_gpu.py")],
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1",
                               "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no CUDA device: nothing to measure"


def test_a_bf16_model_trains_and_is_queried_through_autocast(monkeypatch):
    """bf16's data flow (bf16 activations, float32 weights and loss total, float32 logits out),
    with CPU bf16 autocast standing in for CUDA's: the code path a GPU runs, minus the GPU."""
    from miaudit.signals import query

    def cpu_bf16(device, precision):
        if precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast("cpu", dtype=torch.bfloat16)

    for module in (loop, query):
        monkeypatch.setattr(module, "autocast", cpu_bf16)
        monkeypatch.setattr(module, "check_precision", lambda precision, device: None)
    recipe = MLP.replace(precision="bf16", epochs=3)
    model = train_model(recipe, X, Y, np.arange(60), 0, progress=False)
    assert all(p.dtype == torch.float32 for p in model.module.parameters())
    assert len(model.losses) == 3 and all(np.isfinite(model.losses))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.module(torch.from_numpy(X[:4])).dtype == torch.bfloat16
    bf16, fp32 = (query.query_logits([model.module], X, np.arange(60), ["plain"], "tabular",
                                     progress=False, precision=p) for p in ("bf16", "fp32"))
    assert bf16.dtype == np.float32 and bf16.shape == (1, 60, 1, 3)
    assert not np.array_equal(bf16, fp32)  # it did run in bf16 ...
    np.testing.assert_allclose(bf16, fp32, atol=0.1)  # ... to bf16's precision


def test_a_bf16_run_on_a_cpu_machine_fails_before_the_data_loads(tiny_run_yaml, monkeypatch,
                                                                  no_native_bf16):
    """The pipeline checks every recipe's precision on the run's device first."""
    from miaudit.config import load_config
    from miaudit.errors import ConfigError
    from miaudit.pipeline import build_bank

    def no_data(*args, **kwargs):
        raise AssertionError("the dataset was loaded")

    monkeypatch.setattr("miaudit.pipeline.querying.load_dataset", no_data)
    cfg = load_config(tiny_run_yaml(recipe={"architecture": "mlp", "epochs": 1,
                                            "precision": "bf16"}))
    with pytest.raises(ConfigError, match="bf16 autocast needs a CUDA device"):
        build_bank(cfg, progress=False)


@NATIVE_CPU_BF16
def test_a_bf16_model_trains_and_is_queried_on_a_cpu_with_native_bf16():
    """No mocks: the recipe's bf16 runs under the CPU's bfloat16 autocast, end to end."""
    from miaudit.signals import query

    model = train_model(MLP.replace(precision="bf16", epochs=3), X, Y, np.arange(60), 0,
                        progress=False)  # fmt: skip
    same = train_model(MLP.replace(precision="bf16", epochs=3), X, Y, np.arange(60), 0,
                       progress=False)  # fmt: skip
    fp32 = train_model(MLP.replace(epochs=3), X, Y, np.arange(60), 0, progress=False)
    for a, b, c in zip(model.module.parameters(), same.module.parameters(),
                       fp32.module.parameters(), strict=True):  # fmt: skip
        assert a.dtype == torch.float32
        assert torch.equal(a, b)  # seeded: bit for bit again
        assert not torch.equal(a, c)  # it did train in bf16 ...
        torch.testing.assert_close(a, c, atol=0.05, rtol=0)  # ... to bf16's precision
    got = query.query_logits([model.module], X, np.arange(60), ["plain"], "tabular",
                             progress=False, precision="bf16")  # fmt: skip
    want = query.query_logits([model.module], X, np.arange(60), ["plain"], "tabular",
                              progress=False, precision="fp32")  # fmt: skip
    assert got.dtype == np.float32 and not np.array_equal(got, want)
    np.testing.assert_allclose(got, want, atol=0.1)
