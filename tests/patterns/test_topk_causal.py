"""TopKBlocks(causal=True) is causal: what a query block selects depends on no later position, so output i does
not change when a token after i does, on every backend, and every backend computes the bound rule exactly."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse import sparse_attention
from hf_sparse.attention.flex import flex_available

B, H, D, BLOCK = 2, 2, 8, 4
PATTERN = P.TopKBlocks(block=BLOCK, k=2, causal=True)
BACKENDS = ["dense", "sdpa", "blocked"] + (["flex"] if flex_available() else [])
# (q_len, kv_len): a whole sequence of an odd length, and queries at an offset (decoding with a cache)
LENGTHS = [(19, 19), (7, 19)]


def _qkv(q_len, kv_len, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, q_len, D, generator=g),
        torch.randn(B, H, kv_len, D, generator=g),
        torch.randn(B, H, kv_len, D, generator=g),
    )


def _after(q, k, v, t, seed=1):
    """q, k, v with every position after t (in the keys' positions) replaced by large random values."""
    g = torch.Generator().manual_seed(seed)
    off = k.shape[-2] - q.shape[-2]
    q, k, v = q.clone(), k.clone(), v.clone()
    for x, start in ((q, max(t + 1 - off, 0)), (k, t + 1), (v, t + 1)):
        x[:, :, start:] = 10 * torch.randn(x[:, :, start:].shape, generator=g)
    return q, k, v


@pytest.mark.parametrize("q_len, kv_len", LENGTHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_output_ignores_later_tokens(backend, q_len, kv_len, monkeypatch):
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")  # eager FlexAttention on CPU
    q, k, v = _qkv(q_len, kv_len)
    off = kv_len - q_len
    # flex runs eagerly on CPU (seconds a call): positions inside blocks only
    positions = range(off, kv_len - 1) if backend != "flex" else sorted({off + 1, max(off, 9), 14})
    with torch.no_grad():
        out = sparse_attention(q, k, v, PATTERN, backend=backend)
        for t in positions:
            changed = sparse_attention(*_after(q, k, v, t), PATTERN, backend=backend)
            seen = t + 1 - off  # the queries at positions <= t
            torch.testing.assert_close(changed[:, :, :seen], out[:, :, :seen], atol=1e-5, rtol=0)


def test_output_ignores_later_tokens_with_padding():
    """Right padding (a block half padding): still causal, and a padded row attends as it would alone."""
    q, k, v = _qkv(19, 19)
    mask = torch.arange(19)[None, :] < torch.tensor([[19], [14]])
    with torch.no_grad():
        out = sparse_attention(q, k, v, PATTERN, attention_mask=mask, backend="blocked")
        for t in range(18):
            changed = sparse_attention(*_after(q, k, v, t), PATTERN, attention_mask=mask, backend="blocked")
            torch.testing.assert_close(changed[:, :, : t + 1], out[:, :, : t + 1], atol=1e-5, rtol=0)
        alone = sparse_attention(q[1:, :, :14], k[1:, :, :14], v[1:, :, :14], PATTERN, backend="blocked")
    torch.testing.assert_close(out[1:, :, :14], alone, atol=1e-5, rtol=0)


def test_selection_is_the_documented_rule():
    """Block b keeps itself and the k - 1 earlier key blocks whose mean key scores highest against the
    block's first query."""
    q, k, _ = _qkv(19, 19)
    table = PATTERN.select(q, k)  # (B, H, 5 blocks, 2)
    for b in range(B):
        for h in range(H):
            for qb in range(5):
                earlier = [k[b, h, j * BLOCK : (j + 1) * BLOCK].mean(0) for j in range(qb)]
                scores = torch.stack(earlier) @ q[b, h, qb * BLOCK] if earlier else torch.zeros(0)
                want = sorted([qb] + scores.topk(min(1, qb)).indices.tolist())
                want += [-1] * (2 - len(want))
                assert table[b, h, qb].tolist() == sorted(want, key=lambda j: (j < 0, j)), (b, h, qb)


@pytest.mark.parametrize("q_len, kv_len", LENGTHS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_match_the_dense_reference(backend, q_len, kv_len, monkeypatch):
    monkeypatch.setenv("HF_SPARSE_FLEX_COMPILE", "0")
    q, k, v = _qkv(q_len, kv_len)
    allowed = PATTERN.bind(q_len, kv_len, query=q, key=k).dense_mask(q_len, kv_len)
    allowed = allowed.reshape((1,) * (4 - allowed.dim()) + tuple(allowed.shape))
    scores = (q @ k.transpose(-1, -2)) / D**0.5
    want = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v
    with torch.no_grad():
        got = sparse_attention(q, k, v, PATTERN, backend=backend)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# a content-based pattern inside a causal one: bound causally (what a causal model's `& Causal()` gives)
COMPOSITES = {
    "topk_and_causal": P.TopKBlocks(block=BLOCK, k=2) & P.Causal(),
    "causal_and_topk": P.Causal() & P.TopKBlocks(block=BLOCK, k=2),
    "per_head_topk_and_causal": P.PerHead([P.TopKBlocks(block=BLOCK, k=2)] * H) & P.Causal(),
    "topk_or_window_and_causal": (P.TopKBlocks(block=BLOCK, k=2) | P.SlidingWindow(window=2, causal=True))
    & P.Causal(),
    "lsh_and_causal": P.LSH(bucket_size=4) & P.Causal(),
}


@pytest.mark.parametrize("backend", ["dense", "sdpa", "blocked"])
@pytest.mark.parametrize("name", list(COMPOSITES))
def test_content_based_part_of_a_causal_pattern_ignores_later_tokens(name, backend):
    """``TopKBlocks(...) & Causal()`` is causal (``is_causal``), so output i must not change when a later token
    does: its blocks are chosen as ``causal=True`` chooses them, never from block means over later positions."""
    pattern = COMPOSITES[name]
    assert pattern.is_causal
    q, k, v = _qkv(19, 19)
    with torch.no_grad():
        out = sparse_attention(q, k, v, pattern, backend=backend)
        for t in (5, 10, 13, 17):
            changed = sparse_attention(*_after(q, k, v, t), pattern, backend=backend)
            torch.testing.assert_close(changed[:, :, : t + 1], out[:, :, : t + 1], atol=1e-5, rtol=0)


def test_topk_in_a_causal_pattern_selects_as_causal_topk():
    """The same blocks as ``TopKBlocks(causal=True)``; serialised as written."""
    q, k, _ = _qkv(19, 19)
    pattern = P.TopKBlocks(block=BLOCK, k=2) & P.Causal()
    got = pattern.bind(19, query=q, key=k).dense_mask(19)
    want = PATTERN.bind(19, query=q, key=k).dense_mask(19)
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    assert P.from_dict(pattern.bind(19, query=q, key=k).to_dict()) == pattern


def test_causal_lm_with_topk_blocks_ignores_later_tokens():
    """A stock causal LM with ``attention_pattern`` TopKBlocks (``attn_implementation="hf_sparse"``, which
    intersects it with Causal()): the logits before the last position do not depend on the last token."""
    transformers = pytest.importorskip("transformers")
    import hf_sparse  # noqa: F401  (registers attn_implementation="hf_sparse")

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, attn_implementation="hf_sparse",
    )  # fmt: skip
    config.attention_pattern = {"type": "topk_blocks", "block": 4, "k": 2}
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(3, 64, (1, 24), generator=torch.Generator().manual_seed(0))
    other = ids.clone()
    other[0, -1] = (ids[0, -1] + 7) % 61 + 3
    with torch.no_grad():
        a, b = (model(input_ids=x, use_cache=False).logits for x in (ids, other))
    torch.testing.assert_close(a[:, :-1], b[:, :-1], atol=1e-6, rtol=0)
