"""Torch's intra-op CPU threads for one block of work.

Small ops on two OpenMP threads wait at a barrier after each op; when other processes hold
the cores that made the statistics pass 3-8x and scorer training 5-25x slower than on one
thread (measured on the shared 2-core machine), so those run on one thread each.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from miaudit.errors import ConfigError


@contextlib.contextmanager
def cpu_threads(num_threads: int | None) -> Iterator[None]:
    """Use ``num_threads`` intra-op CPU threads inside the block (``None``: leave torch's),
    then torch's setting again."""
    if num_threads is None:
        yield
        return
    if int(num_threads) < 1:
        raise ConfigError(f"num_threads must be >= 1 or None, got {num_threads}.")
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(int(num_threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)
