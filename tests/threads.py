"""The one-thread fixture: a module or conftest that imports ``one_torch_thread`` runs each of its tests on one torch
thread (the fixture is autouse)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models train faster on one thread, and 2 threads thrash when other jobs share the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
