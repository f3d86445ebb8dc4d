"""Compiled FlexAttention on CPU (the default path off CUDA; the other CPU tests run it eagerly) equals the
dense reference for block-table patterns (BigBird, Random, TopKBlocks) wherever their mask is evaluated:
a last tile of one token, pattern blocks finer than the kernel's tile, causal diagonal tiles, padding."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention
from hf_sparse.attention import flex

pytestmark = pytest.mark.skipif(
    not flex.flex_available() or not flex.can_compile_on(torch.device("cpu")),
    reason="compiled FlexAttention on CPU needs torch's flex_attention and a C++ compiler",
)

CASES = {
    "bigbird64_last_tile_of_one": (P.BigBird(64), 257, False),
    "bigbird16_on_tiles_of_64": (P.BigBird(16), 129, False),
    "bigbird50_last_tile_of_one": (P.BigBird(50), 301, False),
    "random16": (P.Random(block=16, num_blocks=2, seed=1), 131, False),
    "topk_blocks_causal": (P.TopKBlocks(block=16, k=2, causal=True), 130, False),
    "bigbird64_padding": (P.BigBird(64), 256, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_flex_block_tables_match_dense(case, monkeypatch):
    """A mask that reduces over a block's listed key blocks (``(rows[qb] == kb[..., None]).any(-1)``) was
    silently miscompiled by inductor's CPU FlexAttention (torch 2.13: BigBird(16) at 129 tokens 0.39 off)."""
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "1")
    pattern, n, padded = CASES[case]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, n, 16, generator=g) for _ in range(3))
    am = None
    if padded:
        am = torch.ones(2, n)
        am[1, n - 56 :] = 0
    ref = sparse_attention(q, k, v, pattern, attention_mask=am, backend="dense")
    with torch.no_grad():
        out = sparse_attention(q, k, v, pattern, attention_mask=am, backend="flex")
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
