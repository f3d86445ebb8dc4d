"""generate() with the pattern-aware cache equals recomputing the whole prefix at every step."""

import pytest
import torch
from transformers.cache_utils import DynamicCache

from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import (
    PatternCacheLayer,
    SparsePatternCache,
    SparseTransformerForCausalLM,
)
from hf_sparse.models.sparse_transformer.modeling_sparse_transformer import CACHE_FIELD
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


# ----------------------------------------------------------------------------- transformers' generate() API
# (cache under both names, inputs_embeds, logits_to_keep, continuing from a cache, assisted decoding)


def _lm(pattern, seed=0, **overrides):
    torch.manual_seed(seed)
    kw = dict(
        hidden_size=64, num_hidden_layers=3, intermediate_size=128, vocab_size=50, initializer_range=0.3
    )
    kw.update(overrides)
    return SparseTransformerForCausalLM(tiny_decoder_config(pattern, **kw)).eval()


def _cache_of(out):
    return out[CACHE_FIELD]


def test_forward_takes_the_cache_under_both_names_without_deprecation_warnings(monkeypatch):
    from transformers.utils import generic

    said = []
    monkeypatch.setattr(generic.logger, "warning_once", lambda msg, *a, **k: said.append(msg))
    model = _lm(P.SlidingWindow(window=6, causal=True))
    ids = torch.randint(1, 50, (1, 12))
    with torch.no_grad():
        full = model(ids, use_cache=False).logits[:, -1]
        for name in ("cache", "past_key_values"):
            cache = SparsePatternCache(model.config)
            model(ids[:, :-1], **{name: cache})
            step = model(ids[:, -1:], **{name: cache})
            torch.testing.assert_close(step.logits[:, -1], full, rtol=0, atol=1e-5)
            assert _cache_of(step) is cache and cache.get_seq_length() == 12
        model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert not [m for m in said if "deprecated" in m]


def test_generate_from_inputs_embeds_equals_from_input_ids():
    model = _lm(P.Fixed(block=8, summary=2, causal=True))
    ids = torch.randint(1, 50, (2, 9))
    kw = dict(max_new_tokens=10, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        from_ids = model.generate(ids, **kw)
        from_embeds = model.generate(inputs_embeds=model.get_input_embeddings()(ids), **kw)
    assert torch.equal(from_embeds, from_ids[:, 9:])  # generate returns only new tokens for embeddings


def test_logits_to_keep_int_and_tensor():
    model = _lm(P.Strided(stride=4, causal=True))
    ids = torch.randint(1, 50, (2, 11))
    with torch.no_grad():
        full = model(ids, use_cache=False).logits
        last = model(ids, use_cache=False, logits_to_keep=1).logits
        some = model(ids, use_cache=False, logits_to_keep=torch.tensor([2, 7])).logits
    assert last.shape == (2, 1, 50) and some.shape == (2, 2, 50)
    torch.testing.assert_close(last, full[:, -1:], rtol=0, atol=1e-5)
    torch.testing.assert_close(some, full[:, [2, 7]], rtol=0, atol=1e-5)


@pytest.mark.parametrize("pattern", [P.SlidingWindow(window=6, causal=True), P.Fixed(block=8, summary=2)])
def test_generate_continues_from_a_returned_cache(pattern):
    model = _lm(pattern)
    ids = torch.randint(1, 50, (2, 13))
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        scratch = model.generate(ids, **kw)
        cache = _cache_of(model(ids[:, :10], use_cache=True))
        resumed = model.generate(ids, **{CACHE_FIELD: cache}, **kw)
    assert torch.equal(resumed, scratch)


_ROLLBACK_PATTERNS = [
    P.Causal(),
    P.Strided(stride=4, causal=True),
    P.SlidingWindow(window=6, causal=True),  # drops keys: generate must turn on past recording
    P.Fixed(block=8, summary=2, causal=True),
]


@pytest.mark.parametrize("pattern", _ROLLBACK_PATTERNS, ids=repr)
@pytest.mark.parametrize("assist", ["prompt_lookup", "assistant_model"])
def test_assisted_decoding_rolls_back_every_cache_and_equals_greedy(pattern, assist, monkeypatch):
    model = _lm(pattern)
    ids = torch.randint(1, 50, (1, 10)).repeat(1, 2)  # repeats: prompt lookup proposes candidates
    kw = dict(max_new_tokens=16, do_sample=False, pad_token_id=0, eos_token_id=0)  # 5.0's lookup needs an eos
    extra = (
        {"prompt_lookup_num_tokens": 3}
        if assist == "prompt_lookup"
        else {"assistant_model": _lm(pattern, seed=1)}
    )
    crops = []
    crop = SparsePatternCache.crop
    monkeypatch.setattr(
        SparsePatternCache, "crop", lambda self, n: crops.append((self.get_seq_length(), n)) or crop(self, n)
    )
    with torch.no_grad():
        greedy = model.generate(ids, **kw)
        assisted = model.generate(ids, return_dict_in_generate=True, **extra, **kw)
    assert torch.equal(assisted.sequences, greedy)
    # some draft tokens were rejected after the sequence outgrew the window (crop to fewer tokens than seen)
    assert any(seen > 8 and (n < 0 or 0 < n < seen) for seen, n in crops), crops
    cache = _cache_of(assisted)
    if pattern.cache_keep(torch.arange(30), 30).sum() < 30:  # a cache that drops keys is back to its minimum
        seen = cache.get_seq_length()
        assert cache.stored_length(0) == int(pattern.cache_keep(torch.arange(seen), seen).sum())


def test_generate_refuses_caches_that_cannot_hold_a_pattern():
    model = _lm(P.SlidingWindow(window=6, causal=True))
    ids = torch.randint(1, 50, (1, 10))
    for implementation in ("static", "offloaded_static"):
        with pytest.raises(ValueError, match="cannot use StaticCache.*cache_implementation"):
            model.generate(ids, max_new_tokens=3, cache_implementation=implementation, pad_token_id=0)
    with pytest.raises(ValueError, match="DynamicCache with offloading"):
        model(ids, cache=DynamicCache(offloading=True), use_cache=True)


def test_window_cache_refuses_a_crop_it_cannot_honour():
    model = _lm(P.SlidingWindow(window=6, causal=True))
    cache = SparsePatternCache(model.config)
    with torch.no_grad():
        model(torch.randint(1, 50, (1, 20)), cache=cache)
    cache.crop(0)  # transformers calls crop(0) as a no-op
    assert cache.get_seq_length() == 20
    with pytest.raises(NotImplementedError, match="cannot crop"):
        cache.crop(-3)  # query 17 needs keys 12..13, dropped already
    full = SparsePatternCache(_lm(P.Causal()).config)
    with torch.no_grad():
        _lm(P.Causal())(torch.randint(1, 50, (1, 20)), cache=full)
    full.crop(-3)
    assert full.get_seq_length() == 17 and full.stored_length(0) == 17


class _ConcatenatingLayer(PatternCacheLayer):
    """transformers' DynamicLayer's way: every key kept, each token's keys concatenated onto a copy of the cache."""

    def _append(self, stored, new, which):
        return torch.cat([stored, new], dim=-2)


@pytest.mark.parametrize(
    "pattern", [P.Causal(), P.Strided(stride=5), P.SlidingWindow(window=32, causal=True)], ids=repr
)
def test_decoding_writes_each_token_in_place_and_keeps_the_same_keys(pattern):
    """A token's keys go into the cache's storage after the stored ones, not into a concatenated copy of the
    whole cache (O(n) per token); the keys held are those a concatenating cache keeps, crop and beam reorder
    included."""
    model = _lm(pattern)
    cache, reference = SparsePatternCache(model.config), SparsePatternCache(model.config)
    reference.layers = [_ConcatenatingLayer() for _ in reference.layers]  # no pattern: keeps every key
    moved = steps = 0
    with torch.no_grad():
        nxt = torch.randint(1, 50, (2, 4))
        for step in range(60):
            before = cache.layers[0].keys
            logits = model(nxt, cache=cache).logits
            model(nxt, cache=reference)
            if step:
                steps += 1
                moved += (
                    cache.layers[0].keys.untyped_storage().data_ptr() != before.untyped_storage().data_ptr()
                )
            nxt = logits[:, -1:].argmax(-1)
            if step == 10:  # before the window drops a key
                for c in (cache, reference):
                    c.crop(-2)
                    c.reorder_cache(torch.tensor([1, 0]))
        assert (
            reference.get_seq_length() == reference.stored_length(0) == cache.get_seq_length() == 4 + 59 - 2
        )
        compared = 0
        for got, full in zip(cache.layers, reference.layers, strict=True):
            kept = got.positions
            assert torch.equal(full.positions, torch.arange(61))
            # (a window layer attends its kept keys, the reference masks the others: equal up to rounding)
            torch.testing.assert_close(got.keys, full.keys[..., kept, :], rtol=0, atol=1e-5)
            torch.testing.assert_close(got.values, full.values[..., kept, :], rtol=0, atol=1e-5)
            compared += 1
        assert compared == model.config.num_hidden_layers
    assert moved <= steps // 4, f"the stored keys moved in {moved} of {steps} steps"


# ----------------------------------------------------------------------------- a DynamicCache given by the user


@pytest.mark.parametrize("pattern", [P.Causal(), P.SlidingWindow(window=4, causal=True)], ids=repr)
@pytest.mark.parametrize("make", [DynamicCache, "config"], ids=["DynamicCache()", "DynamicCache(config)"])
def test_manual_decoding_loop_with_a_dynamic_cache_equals_recompute(pattern, make):
    """transformers' manual decoding loop passes the same DynamicCache at every step: the model fills that object
    (it used to put its own cache in its place and leave the user's empty, so every step restarted at position 0)."""
    model = _lm(pattern)
    ids = torch.randint(1, 50, (1, 7))
    cache = DynamicCache(config=model.config) if make == "config" else make()
    seq, mask = ids, torch.ones_like(ids)
    with torch.no_grad():
        out = model(ids, attention_mask=mask, cache=cache)
        for _ in range(6):
            assert _cache_of(out) is cache and cache.get_seq_length() == seq.shape[1]
            nxt = out.logits[:, -1:].argmax(-1)
            seq, mask = torch.cat([seq, nxt], 1), torch.cat([mask, torch.ones_like(nxt)], 1)
            out = model(nxt, attention_mask=mask, past_key_values=cache)
    assert torch.equal(seq, _greedy_recompute(model, ids, 6))
    if pattern.cache_keep(torch.arange(12), 12).sum() < 12:  # the user's cache keeps what the pattern needs
        assert cache.layers[0].keys.shape[-2] == 3


def test_generate_fills_a_dynamic_cache_it_is_given_and_continues_from_it():
    model = _lm(P.SlidingWindow(window=4, causal=True))
    ids = torch.randint(1, 50, (1, 7))
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        cache = DynamicCache()
        out = model.generate(ids, **{CACHE_FIELD: cache}, **kw)
        assert torch.equal(out, model.generate(ids, **kw)) and cache.get_seq_length() == 12
        assert torch.equal(model.generate(out, **{CACHE_FIELD: cache}, **kw), model.generate(out, **kw))


@pytest.mark.parametrize("start", [DynamicCache, SparsePatternCache], ids=lambda c: c.__name__)
def test_a_given_cache_is_used_with_use_cache_false(start):
    """As in transformers' models, ``use_cache`` only says whether to make a cache: one given is read and written
    (it was dropped, so a decoding step restarted at position 0 and its logits were wrong without a word)."""
    model = _lm(P.Causal())
    ids = torch.randint(1, 50, (1, 9))
    with torch.no_grad():
        full = model(ids, use_cache=False).logits
        cache = start() if start is DynamicCache else start(model.config)
        model(ids[:, :5], cache=cache, use_cache=False)
        assert cache.get_seq_length() == 5
        for t in range(5, 9):
            out = model(ids[:, t : t + 1], cache=cache, use_cache=False)
            torch.testing.assert_close(out.logits[:, -1], full[:, t], rtol=0, atol=1e-4)


# ----------------------------------------------------------------------------- gradients and memory


def test_backward_through_a_cache_over_chunks_when_keys_need_no_gradient():
    """LoRA on query and value: the keys need no gradient, the queries do. Attention saved the stored keys for
    backward, so the next chunk's keys must not be written into their buffer (it raised "modified by an inplace
    operation"); the gradients are those of one forward over the whole sequence."""
    model = _lm(P.SlidingWindow(window=6, causal=True))
    model.requires_grad_(False)
    trainable = [layer.attention.self.query.weight for layer in model.sparse_transformer.encoder.layer]
    for w in trainable:
        w.requires_grad_(True)
    ids = torch.randint(1, 50, (1, 12))

    def grads(logits):
        torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:]).backward()
        out = [w.grad.clone() for w in trainable]
        model.zero_grad()
        return out

    cache = SparsePatternCache(model.config)
    chunked = grads(
        torch.cat([model(ids[:, :6], cache=cache).logits, model(ids[:, 6:], cache=cache).logits], 1)
    )
    for got, want in zip(chunked, grads(model(ids, use_cache=False).logits), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def _storage_length(t):
    """Positions the storage behind a (B, H, n, D) cache tensor holds."""
    return t.untyped_storage().nbytes() // (t.element_size() * t.shape[0] * t.shape[1] * t.shape[-1])


@pytest.mark.parametrize(
    "pattern, kept, at_most",
    [
        (P.SlidingWindow(window=8, causal=True), 7, 2 * (7 + 16)),  # not the prompt's buffer
        (P.Causal(), 300, 300 + 300 // 4),  # a quarter to spare, not a second prompt
        (P.Fixed(block=16, summary=2, causal=True), 2 * 18 + 12, 2 * 18 + 12),  # a gather lets the buffer go
    ],
    ids=repr,
)
def test_cache_memory_after_a_long_prompt_follows_what_it_keeps(pattern, kept, at_most):
    model = _lm(pattern, max_position_embeddings=512)
    cache = SparsePatternCache(model.config)
    with torch.no_grad():
        model(torch.randint(1, 50, (2, 300)), cache=cache)
    for layer in cache.layers:
        assert layer.keys.shape[-2] == kept
        held = [
            _storage_length(t)
            for t in (layer.keys, layer.values, *[b for b in layer._buffers if b is not None])
        ]
        assert max(held) <= at_most, held


# ----------------------------------------------------------------------------- global tokens still to come


_GLOBAL_AT_4 = (P.SlidingWindow(window=3, causal=True) | P.Global(indices=[4])) & P.Causal()


def test_global_every_kth_decodes_with_the_cache_as_recomputed():
    """A later global row attends every key: the cache kept only the global keys and the window, so the tokens
    after position 5 differed from recomputing the prefix."""
    model = _lm((P.SlidingWindow(window=3, causal=True) | P.Global(every=5)) & P.Causal())
    torch.manual_seed(0)
    ids = torch.randint(1, 50, (1, 6))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=10, do_sample=False, pad_token_id=0)
    assert torch.equal(out, _greedy_recompute(model, ids, 10))


@pytest.mark.parametrize("prompt_length", [1, 4])
def test_a_global_position_past_a_short_prompt_is_still_to_come(prompt_length):
    """A decoder with a global token at position 4 takes a prompt of fewer than 5 tokens (it refused: "index 4 is
    out of range for a sequence of 4 tokens"); past position 4 the cached decoding equals recomputing the prefix
    (the global row attends every earlier key, so the cache keeps them until it has been decoded)."""
    model = _lm(_GLOBAL_AT_4)
    ids = torch.randint(1, 50, (1, prompt_length))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert out.shape[1] == prompt_length + 8 > 5
    assert torch.equal(out, _greedy_recompute(model, ids, 8))


def test_a_global_position_past_a_short_left_padded_row_is_still_to_come():
    model = _lm(_GLOBAL_AT_4)
    torch.manual_seed(1)
    long, short = torch.randint(1, 50, (1, 6)), torch.randint(1, 50, (1, 2))
    batch = torch.cat([long, torch.cat([torch.zeros(1, 4, dtype=torch.long), short], 1)])
    mask = torch.cat([torch.ones(1, 6, dtype=torch.long), (batch[1:] != 0).long()])
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        out = model.generate(batch, attention_mask=mask, **kw)
        assert torch.equal(out[1, 4:], model.generate(short, use_cache=False, **kw)[0])
        assert torch.equal(out[0], model.generate(long, use_cache=False, **kw)[0])


@pytest.mark.parametrize("global_projections", [False, True])
@pytest.mark.parametrize("pattern", [P.Causal(), P.SlidingWindow(window=3, causal=True)], ids=repr)
def test_a_decoders_global_tokens_see_no_later_token(pattern, global_projections):
    """A causal LM's global token attends only the keys up to it: with global_projections its row saw every key,
    so changing the last token changed the logits at the global token and after it (by up to 2.3)."""
    model = _lm(pattern, global_projections=global_projections)
    torch.manual_seed(0)
    ids = torch.randint(1, 50, (2, 10))
    changed = ids.clone()
    changed[:, 9] = ids[:, 9] % 49 + 1
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding: a global padding token before the row's first token has no key
    g = torch.zeros_like(ids)
    g[:, [0, 2, 6]] = 1
    with torch.no_grad():
        a = model(ids, attention_mask=mask, global_attention_mask=g, use_cache=False).logits
        b = model(changed, attention_mask=mask, global_attention_mask=g, use_cache=False).logits
    assert torch.isfinite(a).all()
    torch.testing.assert_close(a[:, :9], b[:, :9], rtol=0, atol=0)


@pytest.mark.parametrize("use_cache", [True, False])
def test_roberta_position_ids_generate_as_forward_does(use_cache):
    """position_ids_style="roberta" counts positions from pad_token_id + 1: generate passed its own 0-based ids
    (first-step logits 2.5 away from model(ids)). A left-padded row generates as it does alone."""
    model = _lm(P.SlidingWindow(window=4, causal=True), position_ids_style="roberta", pad_token_id=1)
    torch.manual_seed(3)
    long, short = torch.randint(2, 50, (1, 6)), torch.randint(2, 50, (1, 3))
    batch = torch.cat([long, torch.cat([torch.ones(1, 3, dtype=torch.long), short], 1)])
    kw = dict(max_new_tokens=8, do_sample=False, use_cache=use_cache)
    with torch.no_grad():
        out = model.generate(batch, attention_mask=(batch != 1).long(), **kw)
    assert torch.equal(out[:1], _greedy_recompute(model, long, 8))
    assert torch.equal(out[1:, 3:], _greedy_recompute(model, short, 8))


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_refuses_a_global_attention_mask_up_front(use_cache):
    """generate never extends global_attention_mask: the first error advised use_cache=False, which then failed
    on the mask's shape at the second step."""
    model = _lm(P.Causal(), num_hidden_layers=1)
    ids = torch.randint(1, 50, (1, 6))
    g = torch.zeros_like(ids)
    g[:, 0] = 1
    with pytest.raises(ValueError, match=r"cannot take global_attention_mask.*Global\(indices="):
        model.generate(ids, global_attention_mask=g, max_new_tokens=3, do_sample=False, pad_token_id=0,
                       use_cache=use_cache)  # fmt: skip


# a table of 32 rows; "roberta" positions start at pad_token_id + 1 = 2
@pytest.mark.parametrize(
    "style, embeds, longest", [("bert", False, 33), ("roberta", False, 31), ("bert", True, 33)]
)
def test_generate_checks_the_length_against_the_position_table_up_front(style, embeds, longest):
    """Past the absolute position table generate ran every step up to it, then failed ("position id 32 is out of
    range ... input of length 1"); the last token is never fed, so a table of 32 rows takes 33 tokens."""
    model = _lm(P.SlidingWindow(window=4, causal=True), num_hidden_layers=1, max_position_embeddings=32,
                position_ids_style=style, pad_token_id=1)  # fmt: skip
    ids = torch.randint(2, 50, (1, 5))
    calls = []
    model.register_forward_pre_hook(lambda *_: calls.append(1))
    prompt = {"inputs_embeds": model.get_input_embeddings()(ids)} if embeds else {"input_ids": ids}
    kw = dict(do_sample=False, min_new_tokens=1)
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=longest - 5, **kw)
        assert out.shape[1] == (longest - 5 if embeds else longest)
        with pytest.raises(
            ValueError, match=rf"max_new_tokens={longest - 4} .* at most {longest - 5} new tokens"
        ):
            model.generate(**prompt, max_new_tokens=longest - 4, **kw)
        calls.clear()
        with pytest.raises(ValueError, match=rf"max_length={longest + 1}.*max_position_embeddings=32"):
            model.generate(**prompt, max_length=longest + 1, **kw)
    assert not calls  # refused before the first step


def test_rotary_positions_generate_past_max_position_embeddings():
    model = _lm(P.SlidingWindow(window=4, causal=True), num_hidden_layers=1, max_position_embeddings=8,
                position_embedding_type="rotary")  # fmt: skip
    with torch.no_grad():
        out = model.generate(
            torch.randint(1, 50, (1, 5)), max_new_tokens=20, min_new_tokens=20, do_sample=False
        )
    assert out.shape[1] == 25
