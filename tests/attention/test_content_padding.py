"""Content-based patterns choose from the real tokens only: a padded row attends as it would alone."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention
from hf_sparse.attention.flex import flex_available

H, D, L = 4, 8, 32
LENGTHS = (12, 13)  # real tokens of each row, right-padded to L (13: a block half padding)

CONTENT = {
    "topk": P.TopKBlocks(block=4, k=2),
    "topk_causal": P.TopKBlocks(block=4, k=3, causal=True),
    "window|topk": P.SlidingWindow(window=3) | P.TopKBlocks(block=4, k=2),
    "per_head_topk": P.PerHead([P.TopKBlocks(block=4, k=2), P.SlidingWindow(window=3)] * 2),
    "lsh": P.LSH(bucket_size=4, num_hashes=2),  # its number of buckets follows the real length
}
CASES = [(name, backend) for name in CONTENT for backend in ("blocked", "dense", "sdpa")]
# eager FlexAttention on CPU takes seconds a call: two patterns
CASES += [(name, "flex") for name in ("topk", "window|topk")] if flex_available() else []


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(len(LENGTHS), H, L, D, generator=g) for _ in range(3))
    mask = torch.arange(L)[None, :] < torch.tensor(LENGTHS)[:, None]  # (B, L): True = token
    return q, k, v, mask


@pytest.mark.parametrize("name, backend", CASES)
def test_padded_rows_attend_as_alone(name, backend, monkeypatch):
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")  # eager FlexAttention on CPU (forward only)
    pattern = CONTENT[name]
    q, k, v, mask = _inputs()
    with torch.no_grad():
        padded = sparse_attention(q, k, v, pattern, attention_mask=mask, backend=backend)
        for b, n in enumerate(LENGTHS):
            alone = sparse_attention(
                q[b : b + 1, :, :n], k[b : b + 1, :, :n], v[b : b + 1, :, :n], pattern, backend=backend
            )
            torch.testing.assert_close(padded[b : b + 1, :, :n], alone, atol=1e-5, rtol=0)


def test_topk_never_selects_a_block_of_padding_only():
    pattern = P.TopKBlocks(block=4, k=2)
    q, k, _, mask = _inputs()
    mask[:, 2] = False  # a padding key inside the first block: means over the other three
    table = pattern.select(q, k, mask)  # (B, H, 8 blocks, 2)
    for b, n in enumerate(LENGTHS):
        real_blocks = -(-n // 4)
        rows = table[b, :, :real_blocks]
        assert ((rows < real_blocks) | (rows == -1)).all(), rows
        q_alone, k_alone = q[b : b + 1, :, :n], k[b : b + 1, :, :n]
        alone = pattern.select(q_alone, k_alone, mask[b : b + 1, :n])
        assert torch.equal(rows, alone[0])
    # all padding: each query block keeps its own block only
    none = pattern.select(q, k, torch.zeros_like(mask))
    assert torch.equal(none[..., 0], torch.arange(8).expand(2, H, 8))
    assert (none[..., 1] == -1).all()


def test_bound_without_padding_is_unchanged():
    """``key_valid`` of all tokens (or None) selects as before: every block counts."""
    q, k, _, mask = _inputs()
    for pattern in (CONTENT["topk"], CONTENT["lsh"]):
        plain = pattern.bind(L, query=q, key=k)
        assert pattern.bind(L, query=q, key=k, key_valid=torch.ones_like(mask)) == plain
        assert pattern.bind(L, query=q, key=k, key_valid=None) == plain


@pytest.mark.parametrize(
    "key_valid, exc, words",
    [
        (
            [[True] * L] * 2,
            TypeError,
            "key_valid must be a \\(batch, kv_len\\) bool tensor or None, got list",
        ),
        (torch.ones(2, L), TypeError, "key_valid must be a bool tensor .* got dtype torch.float32"),
        (
            torch.ones(2, L - 1, dtype=torch.bool),
            ValueError,
            r"shape \(batch, kv_len\) = \(2, 32\), got \(2, 31\)",
        ),
    ],
)
@pytest.mark.parametrize("name", ["topk", "lsh"])
def test_bad_key_valid_raises(name, key_valid, exc, words):
    q, k, _, _ = _inputs()
    with pytest.raises(exc, match=words):
        CONTENT[name].bind(L, query=q, key=k, key_valid=key_valid)


def test_a_bind_without_key_valid_is_bound_without_it():
    """A content-based pattern written before ``key_valid`` (its ``bind`` does not take it) still runs."""

    class OldTopK(P.TopKBlocks):
        type_name = "old_topk"

        def bind(self, q_len, kv_len=None, *, query=None, key=None):
            return super().bind(q_len, kv_len, query=query, key=key)

    q, k, v, mask = _inputs()
    old = OldTopK(block=4, k=2)
    for pattern in (old, old | P.SlidingWindow(window=3)):
        out = sparse_attention(q, k, v, pattern, attention_mask=mask, backend="dense")
        assert out.shape == q.shape
