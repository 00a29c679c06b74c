"""cpu_threads: torch's intra-op threads inside a block, restored after (also on error)."""

import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.runtime.threads import cpu_threads


def test_threads_are_set_inside_and_restored_after():
    before = torch.get_num_threads()
    with cpu_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), cpu_threads(1):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before
    with cpu_threads(None):
        assert torch.get_num_threads() == before


def test_bad_thread_counts_are_config_errors():
    with pytest.raises(ConfigError, match="num_threads"), cpu_threads(0):
        pass
