"""Rows with no allowed key: zeros, never NaN, forward and backward, on every backend.

A float64 sweep over ``|`` / ``&`` compositions whose intersections leave query rows without a key
(plus padding that empties more rows, and global tokens, some of them on padding): outputs and the
q/k/v gradients equal the dense reference and are all finite.
"""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention
from tests.cases import all_patterns

# (name, pattern, n): every one leaves some query rows with no allowed key
EMPTY_ROW_PATTERNS = [
    ("window_and_global", P.SlidingWindow(window=35) & P.Global(indices=[11, 21, 47]), 438),
    (
        "strided_and_global_and_causal",
        P.Strided(stride=14, causal=True) & P.Global(indices=[49]) & P.Causal(),
        714,
    ),
    ("block_local_and_global", P.BlockLocal(block=8) & P.Global(indices=[3]), 100),
    (
        "union_of_intersections",
        (P.SlidingWindow(window=6, causal=True) & P.Global(indices=[40]))
        | (P.BlockLocal(block=16) & P.Global(every=50)),
        333,
    ),
    ("dilated_and_random", P.Dilated(window=24, dilation=3) & P.Random(block=16, num_blocks=1, seed=1), 257),
    ("strided_and_global_every", P.Strided(stride=5, causal=False) & P.Global(every=50), 190),
    ("longformer_window_and_global", P.SlidingWindow(window=64) & P.Global(every=97), 1000),
]
MODES = ["none", "padding", "global", "padding_global"]
BACKENDS = ["dense", "sdpa", "blocked", "flex"]


def _masks(mode, B, n):
    am = gm = None
    if "padding" in mode:
        am = torch.ones(B, n)
        am[-1, n // 2 + 1 :] = 0  # the last sequence is padded after its middle
        if B > 2:
            am[0] = 0  # and one sequence is all padding
    if "global" in mode:
        gm = torch.zeros(B, n)
        gm[0, n // 5] = 1
        gm[-1, n - 2] = 1  # on padding in "padding_global": it must stay unattended
    return am, gm


def _inputs(n, B, H, Hk, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, n, D, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(B, Hk, n, D, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    return q, k, v


def test_sweep_patterns_have_rows_without_keys():
    """The sweep is about empty rows: each pattern must actually produce some."""
    for name, pattern, n in EMPTY_ROW_PATTERNS:
        assert not bool(pattern.bind(n).dense_mask(n).any(-1).all()), name


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name, pattern, n", EMPTY_ROW_PATTERNS, ids=[c[0] for c in EMPTY_ROW_PATTERNS])
def test_rows_without_keys_match_dense_float64(name, pattern, n, mode, backend, monkeypatch):
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    B, H, Hk = (2, 4, 2) if n % 2 else (3, 2, 2)  # GQA on odd lengths, plain heads (and batch 3) on even
    q, k, v = _inputs(n, B, H, Hk)
    am, gm = _masks(mode, B, n)
    run = lambda b: sparse_attention(q, k, v, pattern, attention_mask=am, global_attention_mask=gm, backend=b)  # noqa: E731
    ref = run("dense")
    if backend == "flex":  # no backward on CPU: forward only
        q, k, v = (t.detach() for t in (q, k, v))  # FlexAttention refuses inputs that require grad
        out = run("flex")
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, ref.detach(), atol=1e-10, rtol=0)
        return
    out = run(backend)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    g_ref = torch.autograd.grad(ref, (q, k, v), grad)
    g_out = torch.autograd.grad(out, (q, k, v), grad)
    for a, b, what in zip(g_out, g_ref, "qkv"):
        assert torch.isfinite(a).all(), f"d{what} is not finite"
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0, msg=lambda m, w=what: f"d{w}: {m}")


@pytest.mark.parametrize("backend", ["auto", "dense", "sdpa", "blocked"])
@pytest.mark.parametrize("name", list(all_patterns()))
def test_empty_batch_and_empty_sequence_give_empty_outputs_and_gradients(name, backend):
    """As torch's own attention does: an empty batch (a rank's share of an uneven split), an empty sequence or no
    heads gives an empty output and empty gradients, on every backend, never the block planner's reshape error
    (nor a ZeroDivisionError from the grouped-query check)."""
    pattern = all_patterns()[name]
    for B, H, n in ((0, 3, 64), (2, 3, 0), (2, 0, 64)):
        q, k, v = (torch.randn(B, H, n, 8, requires_grad=True) for _ in range(3))
        if n == 0 and name == "global_indices":  # as for any sequence too short to hold one of its indices
            with pytest.raises(ValueError, match="index 0 is out of range for a sequence of 0 tokens"):
                sparse_attention(q, k, v, pattern, backend=backend)
            continue
        if H == 0 and name == "per_head":
            with pytest.raises(ValueError, match="PerHead has 3 patterns but the input has 0 heads"):
                sparse_attention(q, k, v, pattern, backend=backend)
            continue
        out = sparse_attention(q, k, v, pattern, backend=backend)
        assert out.shape == (B, H, n, 8)
        grads = torch.autograd.grad(out.sum(), (q, k, v), allow_unused=True)
        assert all(g is None or g.shape == q.shape for g in grads)
