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


def test_a_transposed_view_is_copied_into_the_pool_and_its_gradient_comes_back_in_its_layout(lib):
    base = torch.randn(2, 1024, 4, 64, requires_grad=True)  # a projection's (B, n, H, D) output: 2 MiB
    view = base.transpose(1, 2)  # (B, H, n, D), as attention gets it
    seen = []
    view.register_hook(lambda g: seen.append(g.stride()))
    y = fused.contiguous(view)
    assert y.is_contiguous() and torch.equal(y, view)
    g = torch.randn(y.shape)
    y.backward(g)
    assert seen == [view.stride()]  # base takes it as a view: no copy in autograd's reshape
    torch.testing.assert_close(base.grad, g.transpose(1, 2))
    sliced = torch.randn(2, 1024, 8, 64)[:, :, :4]  # not dense: torch's own copy
    assert fused._dense(view) and not fused._dense(sliced)
    assert torch.equal(fused.contiguous(sliced), sliced)


def test_projection_views_run_on_pooled_copies_with_exact_gradients(lib):
    """q, k, v viewed from (B, n, H * D) projections: their copies come from the pool, and the gradients reach
    the projections exactly and in the layout the views were taken from."""
    B, n, H, D = 1, 2048, 4, 32  # one head-major copy: 1 MiB
    leaves = [torch.randn(B, n, H * D, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    q, k, v = (t.view(B, n, H, D).transpose(1, 2) for t in leaves)
    seen = []
    q.register_hook(lambda g: seen.append(g.stride()))
    blocks = [fused.empty((B * H, n, D), q) for _ in range(4)]
    del blocks  # q, k, v's copies and the output take all four
    out = sparse_attention(q, k, v, WINDOW, backend="blocked")
    assert _held(lib) == 0
    out.square().sum().backward()
    assert seen == [q.stride()]
    refs = [t.detach().clone().requires_grad_() for t in leaves]
    rq, rk, rv = (t.view(B, n, H, D).transpose(1, 2) for t in refs)
    sparse_attention(rq, rk, rv, WINDOW, backend="dense").square().sum().backward()
    for got, ref in zip(leaves, refs):
        torch.testing.assert_close(got.grad, ref.grad, atol=1e-10, rtol=1e-10)
