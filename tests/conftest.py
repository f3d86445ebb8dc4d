import os
import tempfile

# Before anything imports huggingface_hub (it reads these once, at import time).
_HF_HOME = tempfile.mkdtemp(prefix="hf_sparse_tests_")
os.environ.update(
    HF_HOME=_HF_HOME,
    HF_HUB_OFFLINE="1",
    TRANSFORMERS_OFFLINE="1",
    HF_DATASETS_OFFLINE="1",
    HF_EVALUATE_OFFLINE="1",
    HF_HUB_DISABLE_TELEMETRY="1",
)

# pytest-xdist's workers share the cores: with torch's default (a thread per core) in each, `-n auto` on 2 cores
# ran the kernel tables 2.3x slower (OpenMP threads waiting on busy cores). Each worker gets its share; the
# kernels' splits over several threads have tests of their own (test_kernels.py, `threads`).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ["OMP_NUM_THREADS"] = str(max(1, _cores // _WORKERS))

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _offline_hf(tmp_path_factory, monkeypatch):
    """Every test runs offline with a private, empty Hugging Face cache."""
    home = tmp_path_factory.mktemp("hf_home")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    yield


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


@pytest.fixture
def shared_data():
    """Path to ../shared/data; tests that need it are skipped where it is absent."""
    if not os.path.isdir(SHARED_DATA):
        pytest.skip("../shared/data is not available")
    return os.path.abspath(SHARED_DATA)
