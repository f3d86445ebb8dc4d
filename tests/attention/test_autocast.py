"""``torch.autocast`` is off inside ``sparse_attention``: every backend computes in the inputs' dtype, so the output's
dtype and precision do not depend on the backend ``auto`` picks."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention


# n=16: "auto" runs sdpa (512 query-key pairs); n=96: the blocked kernels
@pytest.mark.parametrize("n", [16, 96])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("backend", ["auto", "dense", "sdpa", "blocked", "flex"])
def test_autocast_changes_neither_dtype_nor_values(backend, dtype, n, monkeypatch):
    """Under autocast(bfloat16) float32 inputs came back in bfloat16 from sdpa (so from auto on small inputs), in
    float32 from blocked, and in float32 from dense computed in bfloat16 matmuls."""
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    g = torch.Generator().manual_seed(0)
    grad = backend != "flex"  # no FlexAttention backward on CPU
    q, k, v = (torch.randn(1, 2, n, 16, generator=g).to(dtype).requires_grad_(grad) for _ in range(3))
    pattern = P.SlidingWindow(window=8)
    want = sparse_attention(q, k, v, pattern, backend=backend)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = sparse_attention(q, k, v, pattern, backend=backend)
    assert got.dtype == dtype
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    if grad:
        dout = torch.randn(want.shape, generator=g).to(dtype)
        for a, b in zip(
            torch.autograd.grad(got, (q, k, v), dout), torch.autograd.grad(want, (q, k, v), dout)
        ):
            assert a.dtype == dtype
            torch.testing.assert_close(a, b, atol=0, rtol=0)
