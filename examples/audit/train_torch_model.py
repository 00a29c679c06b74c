"""A model trained outside miaudit: a small CNN on 3,000 Fashion-MNIST images, plain PyTorch.

Nothing here imports miaudit. The script reads the standard Fashion-MNIST IDX files (as
`miaudit data fetch fashion-mnist` stores them, or any folder given with --data-dir), trains
`SmallCNN` with Adam, and writes what an engineer would have after training:

    OUT/model.safetensors   the weights (state dict)
    OUT/members.txt         the training rows (0-based, train images first, then the test set)
    OUT/nonmembers.txt      rows never trained on: the 10,000 official test images
    OUT/public.txt          7,500 other training-set images an attacker may hold

Run:  python examples/audit/train_torch_model.py --out runs/audit-example/torch
The audit then imports `SmallCNN` from this file (`examples/audit/train_torch_model.py:SmallCNN`);
training runs only under `__main__`.
"""

from __future__ import annotations

import argparse
import gzip
import os
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn


class SmallCNN(nn.Module):
    """conv(16) -> pool -> conv(32) -> pool -> fc(128) -> 10 logits, for 1x28x28 images."""

    def __init__(self, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(2 * width * 7 * 7, 128), nn.ReLU(),
                                  nn.Linear(128, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def read_idx(path: Path) -> np.ndarray:
    """One IDX file (gzip or not) as a numpy array."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    ndim = raw[3]
    dims = np.frombuffer(raw, dtype=">u4", count=ndim, offset=4)
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fashion_mnist(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """70,000 images [N, 1, 28, 28] in [0, 1] (train then test) and their labels."""
    def find(stem: str) -> Path:
        for name in (stem, stem + ".gz"):
            if (folder / name).is_file():
                return folder / name
        raise SystemExit(f"{folder} lacks {stem}; run `miaudit data fetch fashion-mnist`")

    images = [read_idx(find(f"{s}-images-idx3-ubyte")) for s in ("train", "t10k")]
    labels = [read_idx(find(f"{s}-labels-idx1-ubyte")) for s in ("train", "t10k")]
    x = np.concatenate(images)[:, None].astype(np.float32) / 255.0
    return x, np.concatenate(labels).astype(np.int64)


def main() -> None:
    default_dir = Path(os.environ.get("MIAUDIT_DATA_DIR", Path.home() / ".cache/miaudit/data"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=default_dir / "fashion-mnist")
    parser.add_argument("--out", type=Path, default=Path("runs/audit-example/torch"))
    parser.add_argument("--members", type=int, default=3000)
    parser.add_argument("--epochs", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = load_fashion_mnist(args.data_dir)
    order = np.random.default_rng(0).permutation(60_000)  # the training-set images
    members = np.sort(order[: args.members])
    public = np.sort(order[args.members : args.members + 7_500])
    nonmembers = np.arange(60_000, 70_000)  # the official test set
    model = SmallCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    xt, yt = torch.from_numpy(x[members]), torch.from_numpy(y[members])
    start = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        total = 0.0
        for batch in torch.randperm(len(members)).split(64):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(xt[batch]), yt[batch])
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(batch)
        print(f"epoch {epoch + 1:2d}  loss {total / len(members):.4f}", flush=True)
    model.eval()
    with torch.no_grad():
        train_acc = (model(xt).argmax(1) == yt).float().mean().item()
        test = torch.from_numpy(x[nonmembers])
        test_acc = (model(test).argmax(1) == torch.from_numpy(y[nonmembers])).float().mean()
    print(f"trained in {time.perf_counter() - start:.0f} s: train accuracy {train_acc:.3f}, "
          f"test accuracy {test_acc.item():.3f}")
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(model.state_dict(), str(args.out / "model.safetensors"))
    for name, rows in (("members", members), ("nonmembers", nonmembers), ("public", public)):
        np.savetxt(args.out / f"{name}.txt", rows, fmt="%d")
    print(f"wrote {args.out}/model.safetensors, members.txt, nonmembers.txt, public.txt")


if __name__ == "__main__":
    main()
