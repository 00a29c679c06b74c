import contextlib

import numpy as np
import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.signals.query import (
    augmented_queries,
    make_query,
    per_sample_grad_norms,
    query_logits,
)


def test_crop_flip_is_deterministic_per_row_regardless_of_batching():
    x = torch.rand(6, 3, 8, 8)
    fn = make_query("crop-flip-1", 6, "image")
    whole = fn(x, np.arange(6))
    parts = torch.cat([fn(x[:2], np.arange(2)), fn(x[2:], np.arange(2, 6))])
    assert torch.equal(whole, parts) and whole.shape == x.shape
    assert not torch.equal(whole, make_query("crop-flip-2", 6, "image")(x, np.arange(6)))


def test_crop_flip_shifts_content_by_at_most_the_padding():
    x = torch.zeros(1, 1, 12, 12)
    x[0, 0, 6, 6] = 1.0
    out = make_query("crop-flip-0", 1, "image")(x, np.array([0]))
    ys, xs = torch.nonzero(out[0, 0], as_tuple=True)
    assert out.sum() == 1.0 and abs(int(ys[0]) - 6) <= 4


def test_mirror_and_tabular_errors():
    x = torch.arange(4.0).view(1, 1, 1, 4)
    assert torch.equal(make_query("mirror", 1, "image")(x, np.array([0]))[0, 0, 0],
                       torch.tensor([3.0, 2, 1, 0]))
    with pytest.raises(ConfigError, match="tabular"):
        make_query("mirror", 1, "tabular")
    with pytest.raises(ConfigError, match="unknown query"):
        make_query("rotate", 1, "image")


def test_query_logits_and_grad_norms_match_direct_computation():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    features = np.random.default_rng(0).random((10, 1, 4, 4)).astype(np.float32)
    labels = np.arange(10) % 3
    rows = np.array([3, 1, 7])
    logits = query_logits([model], features, rows, ["plain", "mirror"], "image",
                          batch_size=2, progress=False)
    with torch.no_grad():
        plain = model(torch.from_numpy(features[rows])).numpy()
        mirror = model(torch.from_numpy(features[rows]).flip(-1)).numpy()
    np.testing.assert_allclose(logits[0, :, 0], plain, rtol=1e-6)
    np.testing.assert_allclose(logits[0, :, 1], mirror, rtol=1e-6)
    norms = per_sample_grad_norms(model, features, labels, rows, batch_size=2)
    for i, row in enumerate(rows):
        model.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            model(torch.from_numpy(features[row : row + 1])), torch.tensor([labels[row]])
        )
        loss.backward()
        direct = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()
        assert norms[i] == pytest.approx(direct, rel=1e-5)


def test_grad_norms_of_a_large_model_do_not_depend_on_the_batch():
    """The registry's MLP (1.2M parameters): the squares are summed in float64, so the norm
    agrees with a per-sample backward pass to float32 gradient precision whatever the batch
    (summed in float32, batches of 6 and 256 rows differed by up to 1.2e-4 on 2,000 rows;
    measured once, too big for this suite)."""
    torch.manual_seed(0)
    model = build_model("mlp", (784,), 10)
    features = np.random.default_rng(0).random((64, 784)).astype(np.float32)
    labels = np.arange(64) % 10
    rows = np.arange(64)
    default = per_sample_grad_norms(model, features, labels, rows)  # a few rows a batch
    six = per_sample_grad_norms(model, features, labels, rows, batch_size=6)
    whole = per_sample_grad_norms(model, features, labels, rows, batch_size=64)
    np.testing.assert_allclose(six, whole, rtol=1e-6)
    direct = []
    for row in rows[:8]:
        model.zero_grad()
        torch.nn.functional.cross_entropy(
            model(torch.from_numpy(features[row : row + 1])), torch.tensor([labels[row]])
        ).backward()
        direct.append(np.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in model.parameters())))
    np.testing.assert_allclose(default, whole, rtol=1e-6)
    np.testing.assert_allclose(default[:8], direct, rtol=1e-6)


def test_squared_norms_match_a_float64_sum():
    from miaudit.signals.query import _squared_norms

    rng = np.random.default_rng(0)
    rows = rng.normal(size=(5, 300_001)).astype(np.float32)  # not a multiple of the chunk
    rows[1] *= 1e-6
    rows[2, :1000] *= 1e4  # a few large values among many small ones
    want = (rows.astype(np.float64) ** 2).sum(1)
    got = _squared_norms(torch.from_numpy(rows)).numpy()
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-7)
    assert _squared_norms(torch.from_numpy(rows[:, :100])).numpy() == pytest.approx(
        (rows[:, :100].astype(np.float64) ** 2).sum(1), rel=1e-12)  # all in the remainder


def test_augmented_queries_are_prefixes_of_one_list():
    assert augmented_queries(1) == ["plain"]
    assert augmented_queries(2) == ["plain", "mirror"]
    eight = augmented_queries(8)
    assert eight[:2] == ["plain", "mirror"] and eight[2:] == [f"crop-flip-{k}" for k in range(1, 7)]
    assert augmented_queries(3) == eight[:3]
    with pytest.raises(ConfigError, match="at least one query"):
        augmented_queries(0)


def _token_rows() -> torch.Tensor:
    """Token ids as the trainer holds them (float32), [CLS]=101 ... [SEP]=102, padding 0."""
    rows = [[101, 7, 8, 9, 10, 11, 12, 102, 0, 0], [101, 5, 102, 0, 0, 0, 0, 0, 0, 0],
            [101, 20, 21, 22, 23, 24, 25, 26, 27, 102]]
    return torch.tensor(rows, dtype=torch.float32)


def test_token_dropout_keeps_the_ends_and_order_and_repads():
    x = _token_rows()
    out = make_query("token-dropout-3", 3, "tokens", width=10)(x, np.arange(3))
    again = make_query("token-dropout-3", 3, "tokens", width=10)(x, np.arange(3))
    assert torch.equal(out, again)  # the same draw for every model
    for before, after in zip(x.tolist(), out.tolist(), strict=True):
        real = [t for t in before if t != 0]
        kept = [t for t in after if t != 0]
        assert kept[0] == real[0] and kept[-1] == real[-1]
        it = iter(real)
        assert all(t in it for t in kept)  # a subsequence: order kept, nothing invented
        assert after[len(kept):] == [0] * (len(after) - len(kept))  # re-padded at the end
    # with 10% dropout over many rows, some tokens go and most stay
    many = torch.tensor([[101, *range(1000, 1030), 102]] * 50, dtype=torch.float32)
    out = make_query("token-dropout-1", 50, "tokens", width=32)(many, np.arange(50))
    dropped = 1 - (out != 0).sum().item() / (many != 0).sum().item()
    assert 0.03 < dropped < 0.15


def test_adjacent_swap_swaps_one_inner_pair():
    x = _token_rows()
    out = make_query("adjacent-swap-2", 3, "tokens", width=10)(x, np.arange(3))
    for before, after in zip(x.tolist(), out.tolist(), strict=True):
        diff = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
        n_real = sum(t != 0 for t in before)
        if n_real < 4:  # [CLS] t [SEP]: no inner pair
            assert diff == []
            continue
        assert len(diff) == 2 and diff[1] == diff[0] + 1 and 1 <= diff[0] <= n_real - 3
        assert (after[diff[0]], after[diff[1]]) == (before[diff[1]], before[diff[0]])


def test_token_queries_need_token_data_and_the_text_query_list():
    from miaudit.signals.query import text_queries

    with pytest.raises(ConfigError, match="perturbs token ids"):
        make_query("token-dropout-1", 3, "image")
    with pytest.raises(ConfigError, match="token-dropout-K"):
        make_query("mirror", 3, "tokens", width=10)
    assert text_queries(4) == ["plain", "token-dropout-1", "adjacent-swap-1", "token-dropout-2"]


# --- devices: querying many models at once, the CUDA path's landing, precision -------------------


def _models(n: int, classes: int = 3) -> list[torch.nn.Module]:
    torch.manual_seed(0)
    return [torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, classes)) for _ in range(n)]


def _image_rows():
    features = np.random.default_rng(1).random((11, 1, 4, 4)).astype(np.float32)
    return features, np.array([9, 0, 4, 4, 2, 7, 1])


def test_models_queried_together_answer_as_each_queried_alone():
    """Each chunk is transformed once for all models: every model still sees exactly the
    inputs (and batches) it saw queried alone, so the logits are bit for bit the same."""
    models = _models(3)
    features, rows = _image_rows()
    queries = ["plain", "mirror", "crop-flip-1"]
    together = query_logits(models, features, rows, queries, "image", batch_size=3,
                            progress=False)  # fmt: skip
    assert together.shape == (3, len(rows), 3, 3) and together.dtype == np.float32
    for m, model in enumerate(models):
        alone = query_logits([model], features, rows, queries, "image", batch_size=3,
                             progress=False)  # fmt: skip
        np.testing.assert_array_equal(together[m], alone[0])
        with torch.no_grad():
            direct = torch.cat([model(torch.from_numpy(features[rows[i : i + 3]]))
                                for i in range(0, len(rows), 3)]).numpy()  # fmt: skip
        np.testing.assert_array_equal(together[m, :, 0], direct)


def test_the_cuda_path_lands_every_chunk_where_the_cpu_path_does(monkeypatch):
    """The CUDA branch (pinned host blocks, a chunk's copies waited for after the next chunk
    is queued), run on the CPU with its two CUDA calls replaced: the same logits as the
    CPU branch, one event per chunk, each waited for once."""
    from miaudit.signals import query

    models = _models(2)
    features, rows = _image_rows()
    want = query_logits(models, features, rows, ["plain", "mirror"], "image", batch_size=3,
                        progress=False)  # fmt: skip
    events = []

    class Event:
        def __init__(self) -> None:
            self.waits = 0
            events.append(self)

        def synchronize(self) -> None:
            self.waits += 1

    blocks = []

    def host_block(shape):
        blocks.append(shape)
        return torch.full(shape, float("nan"))  # anything not overwritten would show

    monkeypatch.setattr(query, "is_cuda", lambda device: True)
    monkeypatch.setattr(query, "_pinned_empty", host_block)
    monkeypatch.setattr(query, "_queued_event", lambda device: Event())
    got = query_logits(models, features, rows, ["plain", "mirror"], "image", batch_size=3,
                       progress=False)  # fmt: skip
    np.testing.assert_array_equal(got, want)
    assert blocks == [(2, 2, 3, 3), (2, 2, 3, 3), (2, 2, 1, 3)]  # [M, Q, B, C] per chunk
    assert [e.waits for e in events] == [1, 1, 1]


def test_query_precision_is_per_model_and_bf16_needs_native_support(monkeypatch):
    from miaudit.runtime import devices
    from miaudit.signals import query

    models = _models(2)
    features, rows = _image_rows()
    monkeypatch.setattr(devices, "native_bf16", devices.is_cuda)  # a CPU without bf16 units
    with pytest.raises(ConfigError, match="bf16 autocast needs a CUDA device or a CPU with "
                                          "native bfloat16"):  # fmt: skip
        query_logits(models, features, rows, ["plain"], "image", progress=False,
                     precision="bf16")  # fmt: skip
    with pytest.raises(ConfigError, match="2 models"):
        query_logits(models, features, rows, ["plain"], "image", progress=False,
                     precision=["fp32"])  # fmt: skip
    entered = []

    def recording(device, precision):
        entered.append(precision)
        return contextlib.nullcontext()

    monkeypatch.setattr(query, "autocast", recording)
    monkeypatch.setattr(query, "check_precision", lambda precision, device: None)
    query_logits(models, features, rows, ["plain", "mirror"], "image", batch_size=4,
                 progress=False, precision=["fp32", "bf16"])  # fmt: skip
    # 2 chunks x 2 queries, each model in its own precision
    assert entered == ["fp32", "bf16"] * 4
