"""Padding keys are never attended, whatever they hold: an inf or NaN there (an overflowed or uninitialised padding
state) changes no output and no gradient, on every backend."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention

PATTERNS = {
    "sliding_window": P.SlidingWindow(window=12),
    "strided": P.Strided(stride=8, causal=True),
    "bigbird": P.BigBird(block=8, window_blocks=3, random_blocks=1, global_blocks=1, seed=0),
}
# (backend, HF_SPARSE_FUSED): sdpa and the blocked kernels' PyTorch path (what CUDA runs) added the padding's -inf
# bias to scores that were already inf or NaN there
BACKENDS = [("dense", "0"), ("sdpa", "0"), ("blocked", "0"), ("blocked", "all"), ("flex", "0")]


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
@pytest.mark.parametrize("backend, fused", BACKENDS)
@pytest.mark.parametrize("name", list(PATTERNS))
def test_non_finite_padding_keys_change_nothing(name, backend, fused, bad, monkeypatch):
    monkeypatch.setenv("HF_SPARSE_FUSED", fused)
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 37, 8, generator=g, dtype=torch.float64) for _ in range(3))
    am = torch.ones(2, 37, dtype=torch.bool)
    am[1, 29:] = False
    dirty = k.clone()
    dirty[1, :, 29:] = bad
    grad = backend != "flex"  # no FlexAttention backward on CPU
    q, k, dirty, v = (t.requires_grad_(grad) for t in (q, k, dirty, v))
    pattern = PATTERNS[name]
    want = sparse_attention(q, k, v, pattern, attention_mask=am, backend="dense")
    got = sparse_attention(q, dirty, v, pattern, attention_mask=am, backend=backend)
    torch.testing.assert_close(got, want, atol=1e-10, rtol=0)
    if grad:
        dout = torch.randn(want.shape, generator=g, dtype=want.dtype)
        g_want = torch.autograd.grad(want, (q, k, v), dout)
        g_got = torch.autograd.grad(got, (q, dirty, v), dout)
        for a, b, what in zip(g_got, g_want, "qkv"):
            torch.testing.assert_close(a, b, atol=1e-10, rtol=0, msg=lambda m, w=what: f"d{w}: {m}")


def test_keys_are_copied_only_where_a_padding_key_is_not_finite():
    """The padding rows are read first: finite ones (every ordinary call) cost no copy of the keys."""
    from hf_sparse.attention.dense import zero_padding_keys

    k = torch.randn(2, 3, 10, 4)
    valid = torch.ones(2, 10, dtype=torch.bool)
    assert zero_padding_keys(k, None) is k and zero_padding_keys(k, valid) is k
    valid[1, 7:] = False
    assert zero_padding_keys(k, valid) is k
    k[1, 2, 8, 0] = float("nan")
    zeroed = zero_padding_keys(k, valid)
    assert torch.equal(zeroed[1, :, 7:], torch.zeros(3, 3, 4)) and torch.equal(zeroed[:, :, :7], k[:, :, :7])
    assert torch.equal(zeroed[0], k[0])
