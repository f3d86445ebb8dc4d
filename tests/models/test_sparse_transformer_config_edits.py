"""``model.config.attention_pattern = ...`` after the model was built takes effect in every layer (as transformers
models read ``config.sliding_window``), is what ``save_pretrained`` stores, and is refused where the model cannot
follow it (an invalid pattern, adaptive span changed, a cache holding the old pattern's keys)."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import (
    SparsePatternCache,
    SparseTransformerForCausalLM,
    SparseTransformerForMaskedLM,
)
from tests.models.tiny import tiny_config, tiny_decoder_config

W4, W32 = P.SlidingWindow(window=4), P.SlidingWindow(window=32)


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def _built_with(model, pattern):
    """A model with ``model``'s weights built from a config with ``pattern``."""
    other = type(model)(tiny_config(attention_pattern=pattern, initializer_range=0.3)).eval()
    other.load_state_dict(model.state_dict())
    return other


@pytest.mark.parametrize(
    "built, edited",
    [
        (W4, W32),  # one pattern for all layers, changed
        (
            [W4, W32],
            W32,
        ),  # per-layer list to one pattern: was W4 in every layer (sharing by spec, masks by layer)
        (W32, [W32, W4]),  # one pattern to a per-layer list
        (W4, {"type": "sliding_window", "window": 32}),  # a spec dict
    ],
    ids=["single", "list-to-single", "single-to-list", "spec"],
)
def test_an_edited_attention_pattern_runs_and_is_saved(built, edited, tmp_path):
    torch.manual_seed(0)
    model = SparseTransformerForMaskedLM(tiny_config(attention_pattern=built, initializer_range=0.3)).eval()
    ids = torch.randint(5, 97, (1, 40))
    before = _logits(model, ids)
    model.config.attention_pattern = edited
    after = _logits(model, ids)
    assert (after - before).abs().max() > 1e-3
    torch.testing.assert_close(after, _logits(_built_with(model, edited), ids), rtol=0, atol=1e-5)
    model.save_pretrained(tmp_path)
    reloaded = SparseTransformerForMaskedLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(_logits(reloaded, ids), after, rtol=0, atol=1e-5)


def test_an_in_place_edit_of_the_spec_takes_effect():
    torch.manual_seed(0)
    model = SparseTransformerForMaskedLM(tiny_config(attention_pattern=W4, initializer_range=0.3)).eval()
    ids = torch.randint(5, 97, (1, 40))
    model.config.attention_pattern["window"] = 32
    torch.testing.assert_close(_logits(model, ids), _logits(_built_with(model, W32), ids), rtol=0, atol=1e-5)


def test_an_invalid_edit_is_refused_at_the_next_forward():
    model = SparseTransformerForCausalLM(tiny_decoder_config(P.SlidingWindow(window=4, causal=True))).eval()
    model.config.attention_pattern = P.SlidingWindow(window=8)  # not causal
    with pytest.raises(ValueError, match="attention_pattern: .* is not causal but is_decoder=True"):
        model(torch.randint(5, 97, (1, 10)))


@pytest.mark.parametrize("span", [None, {"max_span": 16}])
def test_changing_adaptive_span_after_the_model_was_built_is_refused(span):
    model = SparseTransformerForCausalLM(
        tiny_decoder_config(P.Causal(), adaptive_span={"max_span": 12, "ramp": 4})
    ).eval()
    model.config.adaptive_span = span
    with pytest.raises(
        ValueError, match="adaptive_span=.* was changed after the model was built with max_span=12"
    ):
        model(torch.randint(5, 97, (1, 10)))


def test_a_cache_that_dropped_keys_of_the_old_pattern_is_refused_others_follow():
    torch.manual_seed(0)
    model = SparseTransformerForCausalLM(tiny_decoder_config(P.SlidingWindow(window=4, causal=True))).eval()
    ids = torch.randint(5, 97, (1, 12))
    empty, kept_all = SparsePatternCache(model.config), SparsePatternCache(model.config)
    with torch.no_grad():
        dropped = model(ids[:, :8], use_cache=True).past_key_values  # keeps the last 3 keys
        model(ids[:, :3], past_key_values=kept_all)  # 3 keys: none dropped yet
        model.config.attention_pattern = P.Causal()
        with pytest.raises(
            ValueError, match="the cache dropped layer 0's keys for SlidingWindow.*now gives Causal"
        ):
            model(ids[:, 8:], past_key_values=dropped)
        model(ids[:, :8], past_key_values=empty)
        continued = model(ids[:, 3:], past_key_values=kept_all).logits
        want = model(ids).logits[:, 3:]
    assert [layer.pattern for layer in empty.layers + kept_all.layers] == [P.Causal()] * 4
    torch.testing.assert_close(continued, want, rtol=0, atol=1e-5)


def test_a_compiled_model_compiles_once():
    """The layers parsed their pattern on the first forward: a compiled model's first trace guarded on it being
    unparsed, so its second call compiled everything again."""
    from torch._dynamo.utils import counters

    model = SparseTransformerForMaskedLM(tiny_config(attention_pattern=W4)).eval()
    ids = torch.randint(5, 50, (2, 24))
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad():
        compiled(ids)
        frames = counters["stats"]["unique_graphs"]
        compiled(ids)
    assert counters["stats"]["unique_graphs"] == frames
    torch._dynamo.reset()
