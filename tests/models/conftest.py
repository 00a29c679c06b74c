import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny forward passes gain nothing from intra-op threads; avoid OpenMP spinning."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
