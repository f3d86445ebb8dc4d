"""The compiled kernel's pool of freed outputs (``csrc/block_sparse.cpp``, ``BlockPool``): a freed output is
reused at the same size instead of faulting fresh pages in again, reused gradients start at zero, the limit
holds, and a bad ``HF_SPARSE_POOL_MB`` is refused."""

import pytest
import torch

from hf_sparse import sparse_attention
from hf_sparse.attention import fused

WINDOW = {"type": "sliding_window", "window": 64}


@pytest.fixture
def lib(monkeypatch):
    if not fused.available():
        pytest.skip("the fused CPU kernel could not be built here (see the warning)")
    monkeypatch.delenv("HF_SPARSE_FUSED", raising=False)
    monkeypatch.delenv("HF_SPARSE_POOL_MB", raising=False)
    fused.empty_cache()
    yield fused.ops()
    fused.empty_cache()


def _held(lib) -> int:
    return lib.pool_limit(fused.pool_limit_bytes())  # sets the same limit, returns the bytes held


def test_a_freed_output_is_reused(lib):
    q, k, v = (torch.randn(1, 4, 2048, 32) for _ in range(3))  # outputs of 1 MiB: the smallest pooled
    with torch.no_grad():
        out = sparse_attention(q, k, v, WINDOW, backend="blocked")
        ptr, nbytes = out.data_ptr(), out.nbytes
        assert _held(lib) == 0
        del out
        assert _held(lib) == nbytes
        again = sparse_attention(q, k, v, WINDOW, backend="blocked")
    assert again.data_ptr() == ptr and _held(lib) == 0


def test_reused_gradient_blocks_start_at_zero(lib):
    q, k, v = (torch.randn(1, 4, 2048, 32, dtype=torch.float32, requires_grad=True) for _ in range(3))
    blocks = [fused.empty((4, 2048, 32), q).fill_(float("nan")) for _ in range(3)]
    del blocks  # blocks of the gradients' size, full of NaN, freed into the pool
    assert _held(lib) == 3 * q.nbytes
    sparse_attention(q, k, v, WINDOW, backend="blocked").square().sum().backward()
    assert _held(lib) < 3 * q.nbytes  # the backward took blocks from the pool
    refs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    sparse_attention(*refs, WINDOW, backend="dense").square().sum().backward()
    for got, ref in zip((q.grad, k.grad, v.grad), refs):
        torch.testing.assert_close(got, ref.grad, atol=1e-4, rtol=1e-4)


def test_the_limit_holds(lib):
    like = torch.empty(1 << 19)  # 2 MiB
    assert lib.pool_limit(3 << 20) == 0
    blocks = [fused.empty(like.shape, like) for _ in range(3)]
    del blocks
    assert lib.pool_limit(3 << 20) == 2 << 20  # the first two freed: one block fits
    assert lib.pool_limit(0) == 0
    with pytest.raises(RuntimeError, match="pool limit must be >= 0, got -1"):
        lib.pool_limit(-1)


@pytest.mark.parametrize("value", ["lots", "-1", "1.5"])
def test_bad_pool_size_is_refused(value, monkeypatch):
    monkeypatch.setenv("HF_SPARSE_POOL_MB", value)
    with pytest.raises(ValueError, match=f"HF_SPARSE_POOL_MB.*'{value}'"):
        fused.pool_limit_bytes()
    monkeypatch.setenv("HF_SPARSE_POOL_MB", "64")
    assert fused.pool_limit_bytes() == 64 << 20


def test_pure_pytorch_mode_leaves_the_pool_alone(lib, monkeypatch):
    monkeypatch.setenv("HF_SPARSE_FUSED", "0")
    block = fused.empty((1 << 19,), torch.empty(1))  # 2 MiB
    del block
    assert _held(lib) == 0
