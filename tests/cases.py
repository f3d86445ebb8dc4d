"""Shared test inputs: one instance of every pattern family (small geometry so n = 1..1000 is
interesting), plus the masks the kernels must honour."""

import torch

from hf_sparse import patterns as P


def all_patterns():
    """name -> pattern, covering every family in the public API and both compositions."""
    return {
        "sliding_window": P.SlidingWindow(window=16),
        "sliding_window_causal": P.SlidingWindow(window=6, causal=True),
        "causal": P.Causal(),
        "strided": P.Strided(stride=8, causal=True),
        "strided_bidirectional": P.Strided(stride=5, causal=False),
        "fixed": P.Fixed(block=16, summary=2, causal=True),
        "fixed_bidirectional": P.Fixed(block=8, summary=3, causal=False),
        "dilated": P.Dilated(window=8, dilation=3),
        "block_local": P.BlockLocal(block=16),
        "global_indices": P.Global(indices=[0, 5]),
        "global_every": P.Global(every=50),
        "random": P.Random(block=16, num_blocks=2, seed=1),
        "bigbird": P.BigBird(block=16, window_blocks=3, random_blocks=2, global_blocks=2, seed=0),
        "longformer": P.Longformer(window=12),
        "lsh": P.LSH(bucket_size=16, num_hashes=2, seed=0),
        "topk_blocks": P.TopKBlocks(block=16, k=3),
        "topk_blocks_causal": P.TopKBlocks(block=16, k=2, causal=True),
        "per_head": P.PerHead([P.SlidingWindow(window=h + 1, causal=True) for h in range(3)]),
        "union": P.SlidingWindow(window=8) | P.Strided(stride=10, causal=False),
        "intersection": P.SlidingWindow(window=20) & P.Causal(),
    }


def make_masks(mode: str, B: int, n: int):
    """(attention_mask, global_attention_mask) for mode in {"none", "padding", "global"}."""
    if mode == "none":
        return None, None
    if mode == "padding":
        am = torch.ones(B, n)
        am[-1, n // 2 + 1 :] = 0  # the last sequence is padded after its middle
        return am, None
    gm = torch.zeros(B, n)
    gm[0, 0] = 1
    gm[-1, n // 3] = 1
    gm[-1, n - 1] = 1
    return None, gm
