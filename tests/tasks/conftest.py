import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny models train faster on one thread, and 2 threads thrash when other jobs share the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
