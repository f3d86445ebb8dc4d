"""PerHead inside combinations: content-based parts select per head, nested combinations distribute over
heads, density is a fraction, and the merged block layout's full tiles are full in every head."""

import math

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention

HEADS = [P.Causal(), P.SlidingWindow(window=3)]


def _combine(op, a, b):
    return a | b if op == "|" else a & b


def _reference(q, k, v, allowed):
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.softmax(s.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0) @ v


@pytest.mark.parametrize("backend", ["dense", "sdpa", "blocked", "flex"])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("op", ["|", "&"])
@pytest.mark.parametrize("content", [P.LSH(bucket_size=8, seed=1), P.TopKBlocks(block=8, k=2)])
def test_content_based_part_combined_with_per_head_selects_per_head(content, op, left, backend, monkeypatch):
    """``c op PerHead([a, b])``: head h attends where c's selection for head h's queries and keys, op head h's
    pattern, allows (as ``PerHead([c op a, c op b])``: in a causal head, ``c & Causal()``, c selects causally), on
    every backend."""
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    g = torch.Generator().manual_seed(0)
    B, H, n, D = 2, 2, 32, 8
    q, k, v = (torch.randn(B, H, n, D, generator=g, dtype=torch.float64) for _ in range(3))
    per_head = P.PerHead(HEADS)
    pattern = _combine(op, content, per_head) if left else _combine(op, per_head, content)
    want = []
    for h in range(H):
        causal = _combine(op, content, HEADS[h]).is_causal
        chosen = P.base.bind_part(content, n, query=q, key=k, causal=causal).dense_mask(n)  # each head's own
        chosen = chosen if chosen.dim() == 4 else chosen[None]
        want.append(_combine(op, chosen[:, h], HEADS[h].dense_mask(n)))
    want = torch.stack(want, 1)
    got = pattern.bind(n, query=q, key=k).dense_mask(n)
    assert torch.equal(got.expand(B, H, n, n), want.expand(B, H, n, n))
    out = sparse_attention(q, k, v, pattern, backend=backend)
    torch.testing.assert_close(out, _reference(q, k, v, want), rtol=0, atol=1e-10)


@pytest.mark.parametrize("backend", ["dense", "sdpa", "blocked"])
@pytest.mark.parametrize("outer", [P.BlockLocal(block=8), P.TopKBlocks(block=8, k=2)])
def test_per_head_nested_in_a_combination_distributes_over_heads(outer, backend):
    """``c | (PerHead([a, b]) & w)``: the inner combination is per-head too, so the outer one runs per head (its
    plan used to drop the per-head part on the blocked backend)."""
    g = torch.Generator().manual_seed(0)
    B, H, n, D = 1, 2, 32, 8
    q, k, v = (torch.randn(B, H, n, D, generator=g, dtype=torch.float64) for _ in range(3))
    w = P.SlidingWindow(window=9)
    pattern = outer | (P.PerHead(HEADS) & w)
    chosen = outer.bind(n, query=q, key=k).dense_mask(n) if outer.content_based else outer.dense_mask(n)
    chosen = chosen.expand(B, H, n, n)
    want = torch.stack([chosen[:, h] | (HEADS[h].dense_mask(n) & w.dense_mask(n)) for h in range(H)], 1)
    out = sparse_attention(q, k, v, pattern, backend=backend)
    torch.testing.assert_close(out, _reference(q, k, v, want), rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "pattern",
    [
        P.PerHead([P.Causal()] * 3),
        P.PerHead([P.SlidingWindow(window=3), P.Causal()]),
        P.PerHead([P.SlidingWindow(window=3), P.Causal()]) | P.Global(indices=[0]),
    ],
)
def test_per_head_density_is_the_fraction_of_allowed_pairs(pattern):
    n = 16
    assert pattern.density(n) == pytest.approx(pattern.dense_mask(n).double().mean().item(), rel=1e-12)
    assert P.PerHead([P.Causal()] * 3).density(8) == P.Causal().density(8)


@pytest.mark.parametrize(
    "pattern",
    [
        P.PerHead([P.SlidingWindow(window=3), P.Causal()]),
        P.PerHead([P.BlockLocal(block=16), P.SlidingWindow(window=9)]),
        P.PerHead([P.SlidingWindow(window=3), P.Causal()]) | P.Global(indices=[5]),
    ],
)
def test_per_head_block_layout_full_tiles_are_full_in_every_head(pattern):
    """FlexAttention skips the mask in a full tile for every head: such a tile must be full in each of them."""
    n, block = 64, 16
    lay = pattern.block_layout(n, block=block)
    full = lay.to_dense(full=True).repeat_interleave(block, -2).repeat_interleave(block, -1)[..., :n, :n]
    every = pattern.dense_mask(n).all(0)
    assert not (full & ~every).any()


def test_per_head_of_one_pattern_keeps_its_full_tiles():
    n, block = 64, 16
    one = P.Causal().block_layout(n, block=block)
    heads = P.PerHead([P.Causal()] * 3).block_layout(n, block=block)
    assert torch.equal(heads.to_dense(full=True), one.to_dense(full=True))
    assert torch.equal(heads.to_dense(), one.to_dense())


@pytest.mark.parametrize("backend", ["dense", "sdpa", "blocked", "flex"])
@pytest.mark.parametrize(
    "pattern",
    [
        P.PerHead([P.SlidingWindow(window=3), P.Causal()]),
        P.PerHead([P.SlidingWindow(window=3), P.Causal()]) | P.Strided(stride=4, causal=True),
    ],
)
def test_runtime_globals_stay_causal_in_the_causal_heads(pattern, backend, monkeypatch):
    """``global_attention_mask`` on a PerHead mixing causal and non-causal heads: a causal head attends a global
    token only from it on, and the global token only earlier keys; a non-causal head both ways."""
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    g = torch.Generator().manual_seed(0)
    B, H, n, D = 2, 2, 13, 4
    q, k, v = (torch.randn(B, H, n, D, generator=g, dtype=torch.float64) for _ in range(3))
    gm = torch.zeros(B, n)
    gm[0, 5], gm[1, 0], gm[1, 9] = 1, 1, 1
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    glob = gm.bool()[:, None, :] | gm.bool()[:, :, None]  # (B, n, n): row or column of a global token
    heads = pattern.heads()
    want = torch.stack(
        [heads[h].dense_mask(n) | (glob & (j <= i if heads[h].is_causal else True)) for h in range(H)], 1
    )
    out = sparse_attention(q, k, v, pattern, global_attention_mask=gm, backend=backend)
    torch.testing.assert_close(out, _reference(q, k, v, want), rtol=0, atol=1e-10)
