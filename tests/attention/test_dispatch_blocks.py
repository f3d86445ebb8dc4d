"""The kernel block ``sparse_attention`` runs a pattern on: patterns whose own blocks are no power of two (127,
100, 50 positions) run on a divisor of them or on 64, not on tiny blocks, and any ``block_size`` runs every
pattern exactly (the tiles across a pattern block's edge are partial)."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention
from hf_sparse.attention.dispatch import choose_block

ODD = {
    "block_local_127": P.BlockLocal(block=127),
    "bigbird_50": P.BigBird(block=50, seed=1),
    "fixed_100": P.Fixed(block=100, summary=8),
    "fixed_100_bidirectional": P.Fixed(block=100, summary=8, causal=False),
    "random_100": P.Random(block=100, num_blocks=1, seed=2),
    "topk_blocks_50": P.TopKBlocks(block=50, k=2, causal=True),
    "window_and_block_local_100": P.SlidingWindow(window=16) | P.BlockLocal(block=100),
}


def _bound(p, q_len, kv_len):
    if p.content_based:
        g = torch.Generator().manual_seed(0)
        return p.bind(
            q_len,
            kv_len,
            query=torch.randn(1, 1, q_len, 4, generator=g),
            key=torch.randn(1, 1, kv_len, 4, generator=g),
        )
    return p.bind(q_len, kv_len)


@pytest.mark.parametrize(
    "pattern, block",
    [
        (P.BlockLocal(block=127), 64),  # no divisor from 8 to 63: partial tiles at its blocks' edges
        (P.BigBird(block=50), 50),
        (P.Fixed(block=100, summary=8), 50),
        (P.BlockLocal(block=48), 48),
        (P.BlockLocal(block=1000), 50),
        (P.BlockLocal(block=12), 12),
        (P.BlockLocal(block=7), 64),
        (P.BlockLocal(block=128), 64),
        (P.BigBird(block=64), 64),
        (P.BigBird(block=16), 64),
        (P.SlidingWindow(window=128), 32),
    ],
)
def test_choose_block_avoids_tiny_blocks(pattern, block):
    """BlockLocal(127) ran on blocks of 1 (25x slower than BlockLocal(128)), BigBird(50) on 2, Fixed(100) on 4:
    now a divisor of the pattern's block from 8 to 63, else 64; powers of two as before."""
    assert choose_block(_bound(pattern, 400, 400), 400) == block


@pytest.mark.parametrize(
    "block_size, dtype",
    [(None, torch.float64), (64, torch.float64), (48, torch.float64), (None, torch.float32)],
)
@pytest.mark.parametrize("q_len, kv_len", [(301, 301), (7, 301)])
@pytest.mark.parametrize("name", list(ODD))
def test_odd_pattern_blocks_are_exact_on_every_kernel_block(name, q_len, kv_len, block_size, dtype):
    """Forward and gradients of the blocked kernels equal the dense reference, at the chosen block and at blocks
    that straddle the pattern's (``block_size=64`` was refused for BlockLocal(127)), on lengths that are no
    multiple of either, also decoding (queries at the end of the keys); float32 runs the register-blocked
    kernels where the CPU has them."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 2, q_len, 8, generator=g, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(2, 2, kv_len, 8, generator=g, dtype=dtype, requires_grad=True) for _ in range(2))
    am = torch.ones(2, kv_len)
    am[1, kv_len - 30 :] = 0
    pattern = ODD[name]
    outs = []
    for backend, kw in (("dense", {}), ("blocked", {"block_size": block_size})):
        out = sparse_attention(q, k, v, pattern, attention_mask=am, backend=backend, **kw)
        outs.append((out, *torch.autograd.grad((out * out).sum(), (q, k, v))))
    for got, want in zip(outs[1], outs[0]):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10 if dtype == torch.float64 else 2e-5)


@pytest.mark.parametrize(
    "block_size, exc", [(0, ValueError), (-64, ValueError), (64.0, TypeError), (True, TypeError)]
)
def test_bad_block_size_names_it(block_size, exc):
    q = torch.randn(1, 1, 16, 4)
    with pytest.raises(
        exc, match=f"block_size must be .*{block_size!r}|block_size must be > 0, got {block_size}"
    ):
        sparse_attention(q, q, q, P.BlockLocal(block=5), block_size=block_size)
