"""Assisted decoding with the pattern-aware cache: self-speculative decoding (``assistant_early_exit``), whose draft
runs the first layers only, and past recording, which assisted decoding turns on and any other decoding off."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import SparsePatternCache, SparseTransformerForCausalLM
from hf_sparse.models.sparse_transformer.modeling_sparse_transformer import CACHE_FIELD
from tests.models.tiny import tiny_decoder_config

WINDOW = P.SlidingWindow(window=4, causal=True)


def _lm(pattern, **overrides):
    torch.manual_seed(0)
    kw = dict(hidden_size=32, num_hidden_layers=4, intermediate_size=64, vocab_size=50, initializer_range=0.3)
    kw.update(overrides)
    return SparseTransformerForCausalLM(tiny_decoder_config(pattern, **kw)).eval()


_EARLY_EXIT_MODELS = {
    "sliding_window": (WINDOW, {}),
    "causal": (P.Causal(), {}),
    "per_layer_patterns": ([WINDOW, P.Causal(), P.Strided(stride=3, causal=True), WINDOW], {}),
    "moe": (WINDOW, dict(num_experts=4, num_experts_per_tok=2, moe_layer_frequency=2)),
    "adaptive_span": (P.Causal(), dict(adaptive_span={"max_span": 12, "ramp": 4, "init": 5.0})),
}


@pytest.mark.parametrize("name", list(_EARLY_EXIT_MODELS))
def test_self_speculative_decoding_runs_the_first_layers_as_draft_and_equals_greedy(name):
    pattern, extra = _EARLY_EXIT_MODELS[name]
    model = _lm(pattern, **extra)
    ids = torch.randint(1, 50, (1, 8)).repeat(1, 2)
    kw = dict(do_sample=False, pad_token_id=0, max_new_tokens=12, min_new_tokens=12)
    layers = model.sparse_transformer.encoder.layer
    calls = {0: 0, 3: 0}
    hooks = [
        layers[i].register_forward_pre_hook(lambda m, a, i=i: calls.__setitem__(i, calls[i] + 1))
        for i in calls
    ]
    with torch.no_grad():
        greedy = model.generate(ids, **kw)
        calls.update({0: 0, 3: 0})
        assisted = model.generate(ids, assistant_early_exit=1, **kw)
    for hook in hooks:
        hook.remove()
    assert torch.equal(assisted, greedy)
    assert calls[0] > calls[3]  # the draft ran layer 0 alone
    assert model.config.num_hidden_layers == 4


def test_a_model_runs_only_the_first_num_hidden_layers_of_its_config():
    model = _lm(WINDOW)
    ids = torch.randint(1, 50, (1, 9))
    with torch.no_grad():
        model.config.num_hidden_layers = 2
        try:
            out = model(ids, output_hidden_states=True, use_cache=True)
        finally:
            model.config.num_hidden_layers = 4
    assert len(out.hidden_states) == 3 and len(out[CACHE_FIELD].layers) == 2


def test_plain_decoding_with_a_cache_from_assisted_decoding_keeps_only_the_window():
    model = _lm(WINDOW, num_hidden_layers=2, position_embedding_type="rotary")
    ids = torch.randint(1, 50, (1, 8)).repeat(1, 3)
    # (transformers 5.10's prompt lookup needs an eos_token_id)
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=0, return_dict_in_generate=True)
    with torch.no_grad():
        first = model.generate(ids, prompt_lookup_num_tokens=3, max_new_tokens=10, min_new_tokens=10, **kw)
        cache = first[CACHE_FIELD]
        more = model.generate(
            first.sequences, **{CACHE_FIELD: cache}, max_new_tokens=40, min_new_tokens=40, **kw
        )
        plain = model.generate(ids, max_new_tokens=50, min_new_tokens=50, **kw)
    assert torch.equal(more.sequences, plain.sequences)
    kept = more[CACHE_FIELD]
    assert kept.get_seq_length() == 73
    # window - 1 keys per layer, not every key since the first call
    assert [kept.stored_length(i) for i in range(2)] == [3, 3]
    assert not any(layer.record_past for layer in kept.layers)


def test_assisted_decoding_with_a_given_cache_records_and_equals_greedy():
    model = _lm(WINDOW, num_hidden_layers=2)
    ids = torch.randint(1, 50, (1, 8)).repeat(1, 3)
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=0, max_new_tokens=12, min_new_tokens=12)
    with torch.no_grad():
        greedy = model.generate(ids, **kw)
        # the window drops keys: rolling back rejected drafts needs the past recorded
        cache = SparsePatternCache(model.config)
        assisted = model.generate(ids, **{CACHE_FIELD: cache}, prompt_lookup_num_tokens=3, **kw)
    assert torch.equal(assisted, greedy)
    assert cache.get_seq_length() == ids.shape[1] + 11 and cache.stored_length(0) == 3


def test_reset_stops_past_recording_and_the_cache_decodes_a_new_prompt():
    model = _lm(WINDOW, num_hidden_layers=2)
    cache = SparsePatternCache(model.config)
    cache.activate_past_recording()
    ids = torch.randint(1, 50, (1, 10))
    with torch.no_grad():
        model(torch.randint(1, 50, (1, 7)), **{CACHE_FIELD: cache}, use_cache=True)
        cache.reset()
        got = model(ids, **{CACHE_FIELD: cache}, use_cache=True).logits
        want = model(ids, use_cache=False).logits
    assert not cache.layers[0].record_past and cache.stored_length(0) == 3 and cache.get_seq_length() == 10
    torch.testing.assert_close(got, want)
