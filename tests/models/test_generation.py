"""generate() with the pattern-aware cache equals recomputing the whole prefix at every step."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import SparsePatternCache, SparseTransformerForCausalLM
from tests.models.tiny import tiny_decoder_config

DECODER_PATTERNS = {
    "sliding_window": P.SlidingWindow(window=8, causal=True),
    "strided": P.Strided(stride=5),
    "fixed": P.Fixed(block=8, summary=2),
}


def _greedy_recompute(model, ids, steps):
    for _ in range(steps):
        with torch.no_grad():
            logits = model(ids, use_cache=False).logits[:, -1]
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids


@pytest.mark.parametrize(
    "name, positions", [("sliding_window", "absolute"), ("strided", "rotary"), ("fixed", "absolute")]
)
def test_greedy_generate_with_cache_equals_full_recompute(name, positions):
    torch.manual_seed(0)
    cfg = tiny_decoder_config(DECODER_PATTERNS[name], position_embedding_type=positions)
    model = SparseTransformerForCausalLM(cfg).eval()
    prompt = torch.randint(1, cfg.vocab_size, (2, 5))
    fast = model.generate(prompt, max_new_tokens=64, do_sample=False, attention_mask=torch.ones_like(prompt))
    slow = _greedy_recompute(model, prompt, 64)
    assert torch.equal(fast, slow)


def test_sliding_window_cache_stops_growing_at_the_window():
    cfg = tiny_decoder_config(P.SlidingWindow(window=8, causal=True))
    model = SparseTransformerForCausalLM(cfg).eval()
    ids = torch.randint(1, cfg.vocab_size, (1, 3))
    cache = SparsePatternCache(cfg)
    sizes = []
    with torch.no_grad():
        out = model(ids, past_key_values=cache, use_cache=True)
        for _ in range(40):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            out = model(nxt, past_key_values=cache, use_cache=True)
            sizes.append(cache.stored_length(0))
    assert max(sizes) == 7 and sizes[-10:] == [7] * 10  # window - 1 keys, whatever the length
    assert cache.get_seq_length() == 43


def test_fixed_cache_keeps_only_summaries_and_the_current_block():
    cfg = tiny_decoder_config(P.Fixed(block=8, summary=2))
    model = SparseTransformerForCausalLM(cfg).eval()
    cache = SparsePatternCache(cfg)
    with torch.no_grad():
        model(torch.randint(1, cfg.vocab_size, (1, 40)), past_key_values=cache, use_cache=True)
    # 40 tokens = 5 full blocks: 5 x 2 summaries are all a later query can still see
    assert cache.stored_length(0) == 10
    assert cache.layers[0].positions.tolist() == [6, 7, 14, 15, 22, 23, 30, 31, 38, 39]


def test_decoder_config_refuses_non_causal_patterns():
    with pytest.raises(
        ValueError, match=r"attention_pattern: SlidingWindow\(window=8, causal=False\) is not causal"
    ):
        tiny_decoder_config(P.SlidingWindow(window=8))
    with pytest.raises(ValueError, match="cannot be decoded incrementally"):
        tiny_decoder_config(P.Random(block=4) & P.Causal())
