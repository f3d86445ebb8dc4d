"""``torch.export`` of a module calling ``sparse_attention``: masks in the README's 0/1 form (float, long) export and
are still checked when the program runs; what cannot be traced says so."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention

B, H, N, D = 2, 2, 21, 8


class Attend(torch.nn.Module):
    def __init__(self, pattern, backend):
        super().__init__()
        self.pattern, self.backend = pattern, backend

    def forward(self, q, k, v, attention_mask, global_attention_mask):
        return sparse_attention(
            q, k, v, self.pattern, attention_mask, global_attention_mask, backend=self.backend
        )


def _qkv(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, D, generator=g) for _ in range(3)]


def _masks(dtype, pad, globals_at):
    mask = torch.ones(B, N, dtype=dtype)
    mask[1, N - pad :] = 0
    g = torch.zeros(B, N, dtype=dtype)
    g[:, globals_at] = 1
    return mask, g


@pytest.mark.parametrize("backend", ["sdpa", "dense", "auto"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.long])
def test_export_takes_01_masks_and_serves_other_masks(dtype, backend):
    module = Attend(P.SlidingWindow(window=4), backend)
    exported = torch.export.export(module, (*_qkv(0), *_masks(dtype, 3, [0])), strict=False)
    args = (*_qkv(1), *_masks(dtype, 7, [2, 11]))
    torch.testing.assert_close(exported.module()(*args), module(*args), rtol=0, atol=1e-6)


def test_exported_program_refuses_an_additive_mask():
    exported = torch.export.export(
        Attend(P.SlidingWindow(window=4), "sdpa"), (*_qkv(0), *_masks(torch.float32, 3, [0])), strict=False
    )
    mask, g = _masks(torch.float32, 3, [0])
    with pytest.raises(RuntimeError, match="attention_mask must hold 0/1 values"):
        exported.module()(*_qkv(0), (mask - 1) * 1e9, g)  # additive: 0 = attend, -1e9 = masked


@pytest.mark.parametrize(
    "pattern",
    [
        P.LSH(bucket_size=8, num_hashes=2),
        P.TopKBlocks(block=8, k=2),
        P.SlidingWindow(window=4) | P.LSH(bucket_size=8),
    ],
    ids=["lsh", "topk", "window|lsh"],
)
@pytest.mark.parametrize("backend", ["sdpa", "dense"])
def test_export_refuses_content_based_patterns(pattern, backend):
    with pytest.raises(
        NotImplementedError, match=r"torch.export cannot trace .*chosen from the queries and keys"
    ):
        torch.export.export(Attend(pattern, backend), (*_qkv(0), *_masks(torch.bool, 3, [0])), strict=False)
