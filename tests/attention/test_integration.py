"""attn_implementation="hf_sparse" inside transformers models (tiny random configs, offline).

The reference ("hf_sparse_test_ref") is transformers' own eager path: ``eager_mask`` builds the
causal / padding / sliding-window mask, and the attention adds the layer's pattern
(``pattern.dense_mask``) as a second additive mask. It shares no code with the integration.
"""

import inspect

import pytest
import torch
import transformers
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

import hf_sparse
from hf_sparse import patterns as P
from hf_sparse.attention import integration
from hf_sparse.attention.integration import SparseMask

REF = "hf_sparse_test_ref"
VOCAB, N = 100, 13
SMALL = dict(hidden_size=32, num_hidden_layers=2, intermediate_size=64, vocab_size=VOCAB)


def reference_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Eager attention plus the layer's pattern as a dense additive mask."""
    spec = module.config.attention_pattern
    spec = spec[module.layer_idx] if isinstance(spec, list) else spec
    H, q_len, kv_len = query.shape[1], query.shape[2], key.shape[2]
    key = key.repeat_interleave(H // key.shape[1], dim=1)
    value = value.repeat_interleave(H // value.shape[1], dim=1)
    scores = query @ key.transpose(-1, -2) * (scaling or query.shape[-1] ** -0.5)  # (B, H, q, kv)
    if attention_mask is not None:
        scores = scores + attention_mask[..., :kv_len]
    allowed = P.from_dict(spec).dense_mask(q_len, kv_len)  # queries at the end of the keys
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1)
    return (probs @ value).transpose(1, 2).contiguous(), probs


@pytest.fixture(autouse=True)
def _reference_registered(monkeypatch):
    monkeypatch.setitem(AttentionInterface._global_mapping, REF, reference_attention)
    monkeypatch.setitem(AttentionMaskInterface._global_mapping, REF, eager_mask)


# ----------------------------------------------------------------------------- tiny models

CAUSAL_WINDOW_4 = {"type": "sliding_window", "window": 4, "causal": True}
FAMILIES = {
    # family: (config class, model class, extra config, pattern, decoder)
    "bert": ("BertConfig", "BertModel", {}, {"type": "sliding_window", "window": 4}, False),
    "roberta": ("RobertaConfig", "RobertaModel", {}, {"type": "block_local", "block": 4}, False),
    "modernbert": (
        "ModernBertConfig",
        "ModernBertModel",
        {"num_hidden_layers": 3, "local_attention": 4, "global_attn_every_n_layers": 2}
        | {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "cls_token_id": 1, "sep_token_id": 2},
        {"type": "union", "parts": [{"type": "block_local", "block": 4}, {"type": "global", "indices": [0]}]},
        False,
    ),
    "llama": ("LlamaConfig", "LlamaModel", {"num_key_value_heads": 2}, CAUSAL_WINDOW_4, True),
    # Mistral's own sliding window (5) is intersected with a bidirectional dilated pattern: i - j in {0, 2, 4}
    "mistral": (
        "MistralConfig",
        "MistralModel",
        {"num_key_value_heads": 2, "sliding_window": 5},
        {"type": "dilated", "window": 16, "dilation": 2},
        True,
    ),
}


def make_config(family, pattern=None, **extra):
    config_cls, _, fam_extra, fam_pattern, _ = FAMILIES[family]
    kwargs = {**SMALL, "num_attention_heads": 4, "max_position_embeddings": 64, **fam_extra, **extra}
    config = getattr(transformers, config_cls)(**kwargs)
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "attention_dropout"):
        if hasattr(config, name):
            setattr(config, name, 0.0)
    config.attention_pattern = fam_pattern if pattern is None else pattern
    return config


def make_model(family, pattern=None, model_cls=None, **extra):
    torch.manual_seed(0)
    cls = getattr(transformers, model_cls or FAMILIES[family][1])
    if (
        not cls._can_set_attn_implementation()
    ):  # e.g. ModernBERT before transformers 5.x: its own dispatch table
        pytest.skip(
            f"{cls.__name__} does not route attention through AttentionInterface in transformers {transformers.__version__}"
        )
    return cls(make_config(family, pattern, **extra)).eval()


def inputs(decoder, batch=2, n=N):
    ids = torch.randint(3, VOCAB, (batch, n))
    mask = torch.ones(batch, n, dtype=torch.long)
    if decoder:
        mask[1, :4] = 0  # left padding
    else:
        mask[1, 9:] = 0  # right padding
    return ids, mask


def run(model, impl, ids, mask, **kwargs):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, **kwargs)


# ----------------------------------------------------------------------------- equality with references


@pytest.mark.parametrize("family", list(FAMILIES))
def test_matches_dense_reference_with_padding(family):
    decoder = FAMILIES[family][4]
    model = make_model(family)
    ids, mask = inputs(decoder)
    got = run(model, "hf_sparse", ids, mask).last_hidden_state
    want = run(model, REF, ids, mask).last_hidden_state
    valid = mask.bool()  # padded query rows are undefined (zeros here, uniform in eager)
    torch.testing.assert_close(got[valid], want[valid], atol=1e-5, rtol=0)
    plain = run(model, "eager", ids, mask).last_hidden_state
    assert (plain[valid] - got[valid]).abs().max() > 1e-3  # the pattern really restricts attention


@pytest.mark.parametrize("family", list(FAMILIES))
def test_pattern_covering_everything_equals_eager_and_sdpa(family):
    decoder = FAMILIES[family][4]
    everything = "causal" if decoder else {"type": "sliding_window", "window": 2 * N}
    model = make_model(family, everything)
    ids, mask = inputs(decoder)
    got = run(model, "hf_sparse", ids, mask).last_hidden_state
    valid = mask.bool()
    for impl in ("eager", "sdpa"):
        want = run(model, impl, ids, mask).last_hidden_state
        torch.testing.assert_close(got[valid], want[valid], atol=1e-5, rtol=0)


def test_causal_lm_logits_and_gqa():
    model = make_model("llama", model_cls="LlamaForCausalLM")
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    ids, mask = inputs(True)
    valid = mask.bool()
    got, want = run(model, "hf_sparse", ids, mask).logits, run(model, REF, ids, mask).logits
    torch.testing.assert_close(got[valid], want[valid], atol=1e-5, rtol=0)


def test_causal_layer_makes_a_bidirectional_pattern_causal():
    # a bidirectional window on Llama must not see the future: equals the causal window of 3 keys
    model = make_model("llama", {"type": "sliding_window", "window": 6})
    ids, mask = inputs(True)
    got = run(model, "hf_sparse", ids, mask).last_hidden_state
    model.config.attention_pattern = {"type": "sliding_window", "window": 4, "causal": True}
    want = run(model, "hf_sparse", ids, mask).last_hidden_state
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-6, rtol=0)


def test_per_layer_patterns():
    windows = [{"type": "sliding_window", "window": 2}, {"type": "sliding_window", "window": 6}]
    model = make_model("bert", windows)
    ids, mask = inputs(False)
    valid = mask.bool()
    got = run(model, "hf_sparse", ids, mask).last_hidden_state
    torch.testing.assert_close(
        got[valid], run(model, REF, ids, mask).last_hidden_state[valid], atol=1e-5, rtol=0
    )
    for single in windows:
        model.config.attention_pattern = single
        other = run(model, "hf_sparse", ids, mask).last_hidden_state
        assert (other[valid] - got[valid]).abs().max() > 1e-3


def test_per_layer_list_of_wrong_length_raises():
    with pytest.raises(
        ValueError, match="attention_pattern has 3 per-layer specs but config.num_hidden_layers is 2"
    ):
        transformers.BertModel(make_config("bert", ["causal"] * 3, attn_implementation="hf_sparse"))


def test_cross_attention_attends_every_unpadded_key():
    config = make_config("bert", "causal", is_decoder=True, add_cross_attention=True)
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(3, VOCAB, (2, 7))
    enc = torch.randn(2, 11, 32)
    enc_mask = torch.ones(2, 11, dtype=torch.long)
    enc_mask[1, 8:] = 0
    kw = dict(encoder_hidden_states=enc, encoder_attention_mask=enc_mask, use_cache=False)
    got = run(model, "hf_sparse", ids, None, **kw).last_hidden_state
    want = run(model, "eager", ids, None, **kw).last_hidden_state
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------- the mask that arrives


def test_mask_reaching_the_attention_function_is_not_none(monkeypatch):
    seen = []

    def spy(module, query, key, value, attention_mask, *args, **kwargs):
        seen.append(attention_mask)
        return integration.sparse_attention_forward(
            module, query, key, value, attention_mask, *args, **kwargs
        )

    monkeypatch.setitem(AttentionInterface._global_mapping, "hf_sparse", spy)
    for family in ("bert", "llama"):
        seen.clear()
        model = make_model(family)
        ids, mask = inputs(FAMILIES[family][4])
        run(model, "hf_sparse", ids, mask)
        run(model, "hf_sparse", ids, None)  # no padding at all: still a mask object
        assert len(seen) == 4
        assert all(isinstance(m, SparseMask) for m in seen)
        assert torch.equal(seen[0].padding, mask.bool())
        assert seen[2].padding is None
        assert seen[0].causal is FAMILIES[family][4]
        assert seen[0].shape == (2, 1, N, N)


def test_mistral_window_reaches_the_mask(monkeypatch):
    seen = []
    original = integration.sparse_attention_forward

    def spy(module, query, key, value, attention_mask, *args, **kwargs):
        seen.append(attention_mask)
        return original(module, query, key, value, attention_mask, *args, **kwargs)

    monkeypatch.setitem(AttentionInterface._global_mapping, "hf_sparse", spy)
    model = make_model("mistral")
    run(model, "hf_sparse", *inputs(True))
    assert {m.window for m in seen} == {5} and all(m.causal for m in seen)


def test_dropout_only_in_training(monkeypatch):
    calls = []
    real = integration.sparse_attention

    def spy(*args, **kwargs):
        calls.append(args[7])  # dropout_p
        return real(*args, **kwargs)

    monkeypatch.setattr(integration, "sparse_attention", spy)
    model = make_model("bert")
    model.config.attention_probs_dropout_prob = 0.25
    for layer in model.encoder.layer:
        layer.attention.self.dropout.p = 0.25
    ids, mask = inputs(False)
    run(model, "hf_sparse", ids, mask)
    model.train()
    model(input_ids=ids, attention_mask=mask)
    assert calls == [0.0, 0.0, 0.25, 0.25]


# ----------------------------------------------------------------------------- decoding with a KV cache


def full_recompute_greedy(model, ids, mask, steps):
    """Greedy decoding without a cache through the reference attention (positions as generate makes them)."""
    model.set_attn_implementation(REF)
    for _ in range(steps):
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            logits = model(
                input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False
            ).logits
        ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=-1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
    return ids


def generate(model, impl, ids, mask, steps=10, **kwargs):
    model.set_attn_implementation(impl)
    return model.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=steps, do_sample=False, pad_token_id=0, **kwargs
    )


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_llama_generate_matches_full_recompute(cache):
    model = make_model("llama", model_cls="LlamaForCausalLM")
    ids, mask = inputs(True, n=6)
    got = generate(model, "hf_sparse", ids, mask, cache_implementation=cache)
    assert torch.equal(got, full_recompute_greedy(model, ids, mask, 10))


def test_llama_generate_with_full_pattern_equals_eager():
    model = make_model("llama", "causal", model_cls="LlamaForCausalLM")
    ids, mask = inputs(True, n=6)
    assert torch.equal(generate(model, "hf_sparse", ids, mask), generate(model, "eager", ids, mask))


def test_mistral_sliding_window_cache_matches_full_recompute():
    # sliding_window=5 < 6 + 10 tokens: the cache drops old keys (kv_offset > 0)
    model = make_model("mistral", CAUSAL_WINDOW_4 | {"window": 3}, model_cls="MistralForCausalLM")
    ids, mask = inputs(True, n=6)
    assert torch.equal(generate(model, "hf_sparse", ids, mask), full_recompute_greedy(model, ids, mask, 10))


def test_position_dependent_pattern_with_sliding_window_cache_raises():
    pattern = {"type": "union", "parts": [CAUSAL_WINDOW_4, {"type": "global", "indices": [0]}]}
    model = make_model("mistral", pattern, model_cls="MistralForCausalLM")
    ids, mask = inputs(True, n=6)
    with pytest.raises(ValueError, match="depends on absolute positions.*sliding-window cache"):
        generate(model, "hf_sparse", ids, mask)


# ----------------------------------------------------------------------------- output_attentions


def _assert_attentions_match_the_reference(model, ids, mask):
    """``output_attentions=True``: two layers of dense (batch, heads, N, N) weights, equal to the reference's at
    the tokens."""
    got = run(model, "hf_sparse", ids, mask, output_attentions=True).attentions
    want = run(model, REF, ids, mask, output_attentions=True).attentions
    assert len(got) == 2 and got[0].shape == (2, 4, N, N)
    valid = mask.bool()
    for g, w in zip(got, want):
        torch.testing.assert_close(g.transpose(1, 2)[valid], w.transpose(1, 2)[valid], atol=1e-6, rtol=0)


def test_output_attentions_dense_and_limited(monkeypatch):
    model = make_model("llama")
    ids, mask = inputs(True)
    _assert_attentions_match_the_reference(model, ids, mask)
    monkeypatch.setattr(integration, "MAX_DENSE_ATTENTION_WEIGHTS", N * N - 1)
    with pytest.raises(
        ValueError, match=r"output_attentions=True .* 13 \* 13 exceeds MAX_DENSE_ATTENTION_WEIGHTS"
    ):
        run(model, "hf_sparse", ids, mask, output_attentions=True)


# ----------------------------------------------------------------------------- errors


def test_missing_attention_pattern_raises():
    config = make_config("bert")
    del config.attention_pattern
    with pytest.raises(ValueError, match=r"needs config\.attention_pattern \(BertConfig has none\)"):
        config._attn_implementation = "hf_sparse"
        transformers.BertModel(config)
    config._attn_implementation = "sdpa"
    model = transformers.BertModel(config)
    with pytest.raises(ValueError, match="attention_pattern"):
        model.set_attn_implementation("hf_sparse")
    model.config._attn_implementation = "hf_sparse"  # set behind the checks: caught at the first call
    with pytest.raises(ValueError, match="attention_pattern"):
        model(input_ids=torch.randint(3, VOCAB, (1, 5)))


def test_bad_pattern_and_backend_raise():
    with pytest.raises(
        ValueError, match="config.attention_pattern = 'no_such_pattern' is not a valid pattern"
    ):
        transformers.BertModel(make_config("bert", "no_such_pattern", attn_implementation="hf_sparse"))
    config = make_config("bert", attn_implementation="hf_sparse")
    config.attention_backend = "fast"
    with pytest.raises(ValueError, match="config.attention_backend must be one of .* got 'fast'"):
        transformers.BertModel(config)


def _longformer():
    return transformers.LongformerConfig(
        **SMALL, num_attention_heads=2, attention_window=4, max_position_embeddings=64
    )


IGNORING = {
    "LongformerModel": _longformer,
    "LongformerForMaskedLM": _longformer,
    "LEDModel": lambda: transformers.LEDConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        attention_window=4,
        max_encoder_position_embeddings=64,
        max_decoder_position_embeddings=64,
    ),
    "BigBirdModel": lambda: transformers.BigBirdConfig(**SMALL, num_attention_heads=2, block_size=2),
    "BigBirdPegasusModel": lambda: transformers.BigBirdPegasusConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        block_size=2,
    ),
    "ReformerModel": lambda: transformers.ReformerConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_attention_heads=2,
        attention_head_size=16,
        attn_layers=["local", "lsh"],
        axial_pos_shape=[4, 8],
        axial_pos_embds_dim=[16, 16],
        feed_forward_size=32,
        local_attn_chunk_length=4,
        lsh_attn_chunk_length=4,
    ),
    # other attention classes of these modelling files dispatch, so transformers' heuristic says they can
    "PegasusXModel": lambda: transformers.PegasusXConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        block_size=4,
        num_global_tokens=2,
    ),
    "LongT5EncoderModel": lambda: transformers.LongT5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=32, num_layers=1, num_heads=2, local_radius=4
    ),
    "LongT5Model": lambda: transformers.LongT5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=8,
        d_ff=32,
        num_layers=1,
        num_heads=2,
        local_radius=4,
        encoder_attention_type="transient-global",
    ),
}


@pytest.mark.parametrize("name", list(IGNORING))
def test_models_that_ignore_attn_implementation_raise(name):
    config = IGNORING[name]()
    config.attention_pattern = "causal"  # even with a pattern: the model would never use it
    config._attn_implementation = "hf_sparse"
    with pytest.raises(
        ValueError, match=rf"{name} cannot use attn_implementation='hf_sparse'.*hf_sparse\.conversion"
    ):
        getattr(transformers, name)(config)


def test_longformer_from_pretrained_and_set_attn_implementation_raise(tmp_path):
    model = transformers.LongformerModel(_longformer())  # a normal Longformer still works
    with torch.no_grad():
        out = model(input_ids=torch.randint(3, VOCAB, (1, 8))).last_hidden_state
    assert out.shape == (1, 8, 32)
    with pytest.raises(ValueError, match="LongformerModel cannot use attn_implementation='hf_sparse'"):
        model.set_attn_implementation("hf_sparse")
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="Longformer models run their own attention code"):
        transformers.LongformerModel.from_pretrained(tmp_path, attn_implementation="hf_sparse")
    with pytest.raises(ValueError, match="LongformerForMaskedLM cannot use"):
        transformers.AutoModelForMaskedLM.from_pretrained(tmp_path, attn_implementation="hf_sparse")


def _informer(attention_type):
    return transformers.InformerConfig(
        prediction_length=2,
        context_length=4,
        lags_sequence=[1],
        num_time_features=1,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        attention_type=attention_type,
        distil=False,
    )


OWN_ATTENTION_MODULES = {
    # model class: (config, the class of the module that runs its own attention)
    "InformerModel": (lambda: _informer("prob"), "InformerProbSparseAttention"),
    "MiniMaxModel": (
        lambda: transformers.MiniMaxConfig(
            **SMALL,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            num_local_experts=2,
            num_experts_per_tok=1,
            layer_types=["linear_attention", "full_attention"],
            block_size=4,
        ),
        "MiniMaxLightningAttention",
    ),
}


@pytest.mark.parametrize("name", list(OWN_ATTENTION_MODULES))
def test_models_with_an_attention_module_of_their_own_raise(name, tmp_path):
    """A model whose family mostly dispatches, but which built a module that runs its own attention (Informer's
    ProbSparse, MiniMax's linear layers), raises instead of running that module as it is: at construction (the
    post_init check), in set_attn_implementation and in from_pretrained."""
    make_config, module = OWN_ATTENTION_MODULES[name]
    config = make_config()
    config.attention_pattern = {"type": "sliding_window", "window": 1}
    model = getattr(transformers, name)(config)  # its own attention: fine
    # the model, or the sub-model (InformerEncoder) whose construction finds the module, names it and its path
    match = rf"cannot use attn_implementation='hf_sparse': its module [\w.]+ \({module}\) runs its own attention code"
    with pytest.raises(ValueError, match=match):
        model.set_attn_implementation("hf_sparse")
    assert model.config._attn_implementation != "hf_sparse"
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=match):
        getattr(transformers, name).from_pretrained(tmp_path, attn_implementation="hf_sparse")
    config._attn_implementation = "hf_sparse"
    with pytest.raises(ValueError, match=match):
        getattr(transformers, name)(config)


def test_informer_with_full_attention_runs_hf_sparse():
    """Only the modules a model builds count: Informer with attention_type="full" dispatches everywhere."""
    config = _informer("full")
    config.attention_pattern = {"type": "sliding_window", "window": 1}
    model = transformers.InformerModel(config)
    model.set_attn_implementation("hf_sparse")
    assert model.config._attn_implementation == "hf_sparse"
    assert (
        integration._own_attention_module(make_model("bert")) is None
    )  # BertAttention holds BertSelfAttention


def test_four_dimensional_mask_and_packed_sequences_raise():
    model = make_model("llama")
    model.set_attn_implementation("hf_sparse")
    ids = torch.randint(3, VOCAB, (1, 8))
    with pytest.raises(NotImplementedError, match="never materialises n x n masks"):
        model(input_ids=ids, attention_mask=torch.zeros(1, 1, 8, 8))
    packed = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]])
    with pytest.raises(NotImplementedError, match="packed sequences"):
        model(input_ids=ids, position_ids=packed, use_cache=False)


def test_register_attention_is_idempotent():
    wrapped = transformers.PreTrainedModel.get_correct_attn_implementation
    hf_sparse.register_attention()
    hf_sparse.register_attention()
    assert transformers.PreTrainedModel.get_correct_attn_implementation is wrapped
    assert AttentionInterface._global_mapping["hf_sparse"] is integration.sparse_attention_forward
    assert AttentionMaskInterface._global_mapping["hf_sparse"] is integration.sparse_attention_mask


def test_returned_weights_are_on_the_output_path_in_bert():
    """As in eager attention, the output is computed from the returned weights: gradients reach them."""
    model = make_model("bert")
    ids, mask = inputs(False)
    model.set_attn_implementation("hf_sparse")
    out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    weights = out.attentions[0]
    assert weights.shape == (2, 4, N, N)
    weights.retain_grad()
    out.last_hidden_state[0, 0, 0].backward()  # (a sum over a layer-normed vector is constant)
    assert weights.grad is not None and weights.grad.abs().sum() > 0


# ----------------------------------------------------------------------------- encoder-decoders

SEQ2SEQ = ["Bart", "MBart", "Pegasus", "M2M100", "Blenderbot", "PLBart"]


def make_seq2seq(family, pattern, encoder_layers=1, decoder_layers=1):
    config = getattr(transformers, f"{family}Config")(
        vocab_size=VOCAB, d_model=32, encoder_layers=encoder_layers, decoder_layers=decoder_layers,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32,
        max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
    )  # fmt: skip
    config.attention_pattern = pattern
    torch.manual_seed(0)
    return getattr(transformers, f"{family}ForConditionalGeneration")(config).eval()


@pytest.mark.parametrize("family", SEQ2SEQ)
def test_encoder_decoder_cross_attention_attends_every_unpadded_key(family, monkeypatch):
    """BART-style models use one attention class for the decoder's self- and cross-attention: the pattern
    applies to self-attention only, and a decoder longer than the encoder works."""
    model = make_seq2seq(family, {"type": "sliding_window", "window": 2})
    cross = {m for name, m in model.named_modules() if name.endswith("encoder_attn")}
    assert cross and not any(hasattr(m, "is_cross_attention") for m in cross)

    def reference(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        if module not in cross:
            return reference_attention(module, query, key, value, attention_mask, scaling=scaling)
        scores = query @ key.transpose(-1, -2) * scaling + attention_mask  # eager: every unpadded key
        probs = torch.softmax(scores, dim=-1)
        return (probs @ value).transpose(1, 2).contiguous(), probs

    monkeypatch.setitem(AttentionInterface._global_mapping, "seq2seq_ref", reference)
    monkeypatch.setitem(AttentionMaskInterface._global_mapping, "seq2seq_ref", eager_mask)
    ids = torch.randint(3, VOCAB, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    for decoder_len in (4, 11):  # shorter and longer than the encoder
        kw = dict(decoder_input_ids=torch.randint(3, VOCAB, (2, decoder_len)), output_attentions=True)
        got = run(model, "hf_sparse", ids, mask, **kw)
        want = run(model, "seq2seq_ref", ids, mask, **kw)
        torch.testing.assert_close(got.logits, want.logits, atol=1e-5, rtol=0)
        kernels = run(model, "hf_sparse", ids, mask, decoder_input_ids=kw["decoder_input_ids"]).logits
        torch.testing.assert_close(kernels, want.logits, atol=1e-5, rtol=0)
        weights = got.cross_attentions[0]  # (B, H, decoder_len, 7)
        assert bool((weights[0] > 0).all()) and bool((weights[1, ..., :5] > 0).all())
        assert not weights[1, ..., 5:].any()


def test_encoder_decoder_generate_matches_eager_with_a_pattern_covering_everything():
    model = make_seq2seq("Bart", {"type": "sliding_window", "window": 64}, decoder_layers=2)
    ids = torch.randint(3, VOCAB, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    kw = dict(steps=12, min_new_tokens=12, num_beams=1)  # a decoder longer than the encoder
    assert torch.equal(
        generate(model, "hf_sparse", ids, mask, **kw), generate(model, "eager", ids, mask, **kw)
    )


def test_encoder_decoder_per_layer_patterns_cover_both_stacks():
    window = {"type": "sliding_window", "window": 2}
    with pytest.raises(
        ValueError, match=r"2 per-layer specs but BartConfig has 2 encoder and 3 decoder layers.*give 3 specs"
    ):
        make_seq2seq("Bart", [window] * 2, encoder_layers=2, decoder_layers=3).set_attn_implementation(
            "hf_sparse"
        )
    model = make_seq2seq("Bart", [window] * 3, encoder_layers=2, decoder_layers=3)
    ids = torch.randint(3, VOCAB, (1, 7))
    out = run(model, "hf_sparse", ids, None, decoder_input_ids=ids).logits
    model.config.attention_pattern = window
    torch.testing.assert_close(out, run(model, "hf_sparse", ids, None, decoder_input_ids=ids).logits)


def test_encoder_decoder_without_a_decoder_flag_raises():
    # Moonshine's encoder self-attention and decoder cross-attention are the same class with the same flags
    config = transformers.MoonshineConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=32, encoder_num_hidden_layers=1,
        decoder_num_hidden_layers=1, encoder_num_attention_heads=4, decoder_num_attention_heads=4,
    )  # fmt: skip
    config.attention_pattern = {"type": "sliding_window", "window": 2}
    model = transformers.MoonshineModel(config).eval()
    model.set_attn_implementation("hf_sparse")
    with pytest.raises(NotImplementedError, match="cannot tell whether MoonshineAttention"):
        with torch.no_grad():
            model(input_values=torch.randn(1, 4000), decoder_input_ids=torch.randint(3, VOCAB, (1, 5)))


# ----------------------------------------------------------------------------- patterns a stock model cannot run


UNFIXED = {
    "random|window": P.Random(block=2, num_blocks=1, seed=0) | P.SlidingWindow(window=3, causal=True),
    "bigbird": P.BigBird(block=2, window_blocks=1, random_blocks=1, global_blocks=1, seed=0),
    "lsh": P.LSH(bucket_size=4, num_hashes=1),
    "topk": P.TopKBlocks(block=2, k=2),
}


@pytest.mark.parametrize("name", list(UNFIXED))
@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated")  # `cache` is new in transformers 5.24
def test_length_or_content_dependent_pattern_with_a_cache_raises(name):
    model = make_model("llama", UNFIXED[name].to_dict(), model_cls="LlamaForCausalLM")
    model.set_attn_implementation("hf_sparse")
    ids = torch.randint(3, VOCAB, (1, 9))
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)  # without a cache it runs
        cache = transformers.DynamicCache(config=model.config)
        model(input_ids=ids[:, :8], past_key_values=cache)  # the prompt: no cached keys yet
        with pytest.raises(
            ValueError, match=r"cannot be decoded incrementally: layer 0 .* 1 queries after 8"
        ):
            model(input_ids=ids[:, 8:], past_key_values=cache)
    with pytest.raises(ValueError, match="cannot be decoded incrementally"):
        generate(model, "hf_sparse", ids, None, steps=2)
    generate(model, "hf_sparse", ids, None, steps=2, use_cache=False)


def test_pattern_object_in_config_is_saved_as_its_spec(tmp_path):
    pattern = P.SlidingWindow(window=4, causal=True) | P.Global(indices=[0])
    config = make_config("llama", pattern)
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation="hf_sparse").eval()
    assert model.config.attention_pattern == pattern.to_dict()
    ids = torch.randint(3, VOCAB, (1, 10))
    with torch.no_grad():
        want = model(input_ids=ids).logits
    model.save_pretrained(tmp_path)
    reloaded = transformers.LlamaForCausalLM.from_pretrained(tmp_path, attn_implementation="hf_sparse").eval()
    assert reloaded.config.attention_pattern == pattern.to_dict()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, want, atol=0, rtol=0)
    # per layer, and set later
    model = make_model("llama", model_cls="LlamaForCausalLM")
    model.config.attention_pattern = [pattern, CAUSAL_WINDOW_4]
    model.set_attn_implementation("hf_sparse")
    assert model.config.attention_pattern == [pattern.to_dict(), CAUSAL_WINDOW_4]
    assert "sliding_window" in repr(model.config)
    model.config.attention_pattern = P.SlidingWindow(window=4) | P.Global.from_mask(torch.ones(1, 4))
    with pytest.raises(ValueError, match=r"config.attention_pattern = .* has no spec.*Global\(indices="):
        model.set_attn_implementation("hf_sparse")


def test_a_pattern_object_in_a_stock_config_saves_as_its_spec_under_any_attention(tmp_path):
    """Without ``"hf_sparse"`` nothing replaces the object: the config's ``to_dict`` writes its spec."""
    pattern = P.SlidingWindow(window=4) | P.Global(indices=[0])
    model = make_model("bert", pattern)  # sdpa
    assert "sliding_window" in repr(model.config)
    model.save_pretrained(tmp_path)
    assert transformers.AutoConfig.from_pretrained(tmp_path).attention_pattern == pattern.to_dict()
    reloaded = transformers.BertModel.from_pretrained(
        tmp_path, attention_pattern=P.SlidingWindow(window=2), attn_implementation="hf_sparse"
    )
    assert reloaded.config.attention_pattern == P.SlidingWindow(window=2).to_dict()
    config = make_config("bert", [pattern, P.SlidingWindow(window=2)])
    config.save_pretrained(tmp_path / "per_layer")
    reloaded = transformers.AutoConfig.from_pretrained(tmp_path / "per_layer")
    assert reloaded.attention_pattern == [pattern.to_dict(), P.SlidingWindow(window=2).to_dict()]
    config.attention_pattern = P.Global.from_mask(torch.ones(1, 4))
    with pytest.raises(ValueError, match=r"config.attention_pattern = .* has no spec"):
        config.to_dict()


@pytest.mark.parametrize("backbone", ["sparse_transformer", "longformer"])
def test_set_attn_implementation_on_a_task_model_defers_to_its_own_check(backbone):
    """A task model's config has no attention_pattern (its backbone's has): its own
    ``get_correct_attn_implementation`` decides, not the task config's missing field."""
    from tests.models.motif_tiny import motif_model

    model = motif_model(backbone)
    if backbone == "longformer":
        with pytest.raises(ValueError, match="with a Longformer backbone runs Longformer's own attention"):
            model.set_attn_implementation("hf_sparse")
        return
    model.set_attn_implementation("hf_sparse")  # already running it
    model.set_attn_implementation("sdpa")
    assert model.backbone.config._attn_implementation == "sdpa"
    model.set_attn_implementation("hf_sparse")
    assert model.backbone.config._attn_implementation == "hf_sparse"


def test_call_time_global_tokens_raise_on_a_stock_model():
    with pytest.raises(
        ValueError, match=r"Global\(\)\), which BertModel has no way to pass.*Global\(indices=\[0\]\)"
    ):
        make_model("bert", P.Longformer(window=4).to_dict()).set_attn_implementation("hf_sparse")
    per_layer = [{"type": "sliding_window", "window": 4}, P.Longformer(window=4).to_dict()]
    with pytest.raises(ValueError, match=r"config.attention_pattern\[1\] = Longformer"):
        make_model("bert", per_layer).set_attn_implementation("hf_sparse")
    model = make_model("bert")  # fixed global tokens are fine
    model.config.attention_pattern = (P.SlidingWindow(window=4) | P.Global(indices=[0])).to_dict()
    run(model, "hf_sparse", *inputs(False))
    model.config.attention_pattern = P.Longformer(window=4).to_dict()  # set behind the checks: the first call
    with pytest.raises(ValueError, match="which BertSelfAttention has no way to pass"):
        model(input_ids=torch.randint(3, VOCAB, (1, 5)))


# ----------------------------------------------------------------------------- left padding

POSITIONAL = {
    "global0|window": P.SlidingWindow(window=4, causal=True) | P.Global(indices=[0]),
    "fixed": P.Fixed(block=4, summary=1, causal=True),
    "block_local": P.BlockLocal(block=4),
    "random|window": UNFIXED["random|window"],
}


@pytest.mark.parametrize("name", list(POSITIONAL))
def test_left_padded_rows_attend_as_alone(name):
    """Positions count from each row's first token, so a left-padded prompt gives what it gives alone."""
    model = make_model("llama", POSITIONAL[name].to_dict(), model_cls="LlamaForCausalLM")
    model.set_attn_implementation("hf_sparse")
    prompt = torch.randint(3, VOCAB, (1, 10))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), prompt], 1)
    mask = (padded != 0).long()
    with torch.no_grad():
        alone = model(input_ids=prompt, output_attentions=True)
        left = model(
            input_ids=padded, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
            output_attentions=True,
        )  # fmt: skip
        torch.testing.assert_close(left.logits[:, 3:], alone.logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(left.attentions[1][..., 3:, 3:], alone.attentions[1], atol=1e-6, rtol=0)
        without_weights = model(
            input_ids=padded, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)
        )
        torch.testing.assert_close(without_weights.logits[:, 3:], alone.logits, atol=1e-5, rtol=0)
    if POSITIONAL[name].bound:  # a batch of left-padded prompts generates what each generates alone
        prompts = torch.randint(3, VOCAB, (2, 7))
        mask = torch.ones_like(prompts)
        mask[1, :3] = 0
        batch = generate(model, "hf_sparse", prompts, mask, steps=6)
        for b, start in ((0, 0), (1, 3)):
            one = generate(model, "hf_sparse", prompts[b : b + 1, start:], None, steps=6)
            assert torch.equal(batch[b, start:], one[0])


def test_left_padded_rows_under_torch_export():
    """torch.export cannot trace the per-row slices: the rule is materialised instead, with the same result."""
    model = make_model("llama", POSITIONAL["fixed"].to_dict())
    model.set_attn_implementation("hf_sparse")
    ids, mask = inputs(True, n=12)
    kw = dict(input_ids=ids, attention_mask=mask, use_cache=False)
    exported = torch.export.export(model, (), kw)
    valid = mask.bool()
    with torch.no_grad():
        want = model(**kw).last_hidden_state[valid]
    torch.testing.assert_close(exported.module()(**kw).last_hidden_state[valid], want, atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------- models that build their own masks


def tiny(config_cls, **extra):
    config = getattr(transformers, config_cls)(
        **SMALL, num_attention_heads=4, max_position_embeddings=64, **extra
    )
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "attention_dropout"):
        if hasattr(config, name):
            setattr(config, name, 0.0)
    return config


@pytest.mark.parametrize("name", ["LayoutLM", "MarkupLM"])
def test_key_padding_mask_built_by_the_model_is_its_padding(name):
    """LayoutLM and MarkupLM turn the 2D mask into a (batch, 1, 1, kv) additive mask themselves (finfo.min and
    -10000 at padding keys): it is the padding, exactly."""
    config = tiny(f"{name}Config")
    config.attention_pattern = {"type": "sliding_window", "window": 4}
    torch.manual_seed(0)
    model = getattr(transformers, f"{name}Model")(config).eval()
    ids, mask = inputs(False)
    valid = mask.bool()
    got = run(model, "hf_sparse", ids, mask).last_hidden_state
    want = run(model, REF, ids, mask).last_hidden_state
    torch.testing.assert_close(got[valid], want[valid], atol=1e-5, rtol=0)
    model.config.attention_pattern = {
        "type": "sliding_window",
        "window": 2 * N,
    }  # everything: eager attention
    got = run(model, "hf_sparse", ids, mask).last_hidden_state
    torch.testing.assert_close(
        got[valid], run(model, "eager", ids, mask).last_hidden_state[valid], atol=1e-5, rtol=0
    )
    run(model, "hf_sparse", ids, None)  # no mask: the model builds an all-zero one


def test_key_padding_mask_values():
    module = torch.nn.Module()
    keep = torch.tensor([[True, True, True, False], [False, True, True, True]])  # (B, kv)
    want = integration._mask_info(keep.long(), 2, 4, 4, module)
    additive = torch.zeros(2, 1, 1, 4).masked_fill(~keep[:, None, None], float("-inf"))
    for mask in (
        keep[:, None, None],
        additive,
        additive.clamp(min=torch.finfo(torch.float32).min),
        additive.clamp(min=-10000.0).half(),
    ):
        got = integration._mask_info(mask, 2, 4, 4, module)
        assert torch.equal(got.padding, want.padding) and torch.equal(got.row_offsets, want.row_offsets)
    assert integration._mask_info(torch.zeros(2, 1, 1, 4), 2, 4, 4, module).padding is None
    with pytest.raises(ValueError, match=r"holds -0\.5, neither 0 \(token\) nor <= -10000"):
        integration._mask_info(additive.clamp(min=-0.5), 2, 4, 4, module)
    with pytest.raises(TypeError, match="must be bool .* got dtype torch.int64"):
        integration._mask_info(keep[:, None, None].long(), 2, 4, 4, module)
    with pytest.raises(ValueError, match=r"\(batch, 1, 1, kv_len\), got \(2, 1, 1, 4\)"):
        integration._mask_info(additive, 2, 5, 5, module)
    with pytest.raises(NotImplementedError, match="never materialises n x n masks"):
        integration._mask_info(torch.zeros(2, 1, 4, 4), 2, 4, 4, module)


def test_gpt2_output_attentions_returns_the_weights():
    """GPT-2 drops output_attentions before its attention layers and records the weights they return."""
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, attn_pdrop=0.0, resid_pdrop=0.0,
        embd_pdrop=0.0,
    )  # fmt: skip
    config.attention_pattern = CAUSAL_WINDOW_4
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids, mask = inputs(True)
    _assert_attentions_match_the_reference(model, ids, mask)
    assert not run(model, "hf_sparse", ids, mask).attentions


def test_per_layer_list_without_layer_idx_raises_at_construction():
    config = transformers.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64)
    config.attention_pattern = [
        {"type": "sliding_window", "window": 2},
        {"type": "sliding_window", "window": 6},
    ]
    match = (
        r"per-layer list but the attention module transformer.layer.0.attention \(DistilBertSelfAttention\)"
    )
    with pytest.raises(ValueError, match=match):
        transformers.DistilBertModel._from_config(config, attn_implementation="hf_sparse")
    model = transformers.DistilBertModel._from_config(config, attn_implementation="sdpa")
    with pytest.raises(ValueError, match=match):
        model.set_attn_implementation("hf_sparse")
    model.config.attention_pattern = {"type": "sliding_window", "window": 2}  # one spec for all layers: fine
    model.set_attn_implementation("hf_sparse")
    model(input_ids=torch.randint(3, VOCAB, (1, 5)))


def test_chunked_attention_raises_with_its_own_advice():
    """Llama 4's chunked layers: the advice (full-attention layers, the chunks as their pattern) is exact."""
    extra = dict(num_key_value_heads=2, head_dim=8, num_local_experts=2, intermediate_size_mlp=64)
    config = tiny("Llama4TextConfig", attention_chunk_size=4, **extra)
    assert config.layer_types == ["chunked_attention"] * 2
    config.attention_pattern = "causal"
    torch.manual_seed(0)
    chunked = transformers.Llama4TextModel(config).eval()
    ids, mask = inputs(True, n=11)
    with pytest.raises(
        NotImplementedError, match=r"chunked attention .* 'full_attention' .* 'block_local'"
    ) as e:
        run(chunked, "hf_sparse", ids, mask)
    assert "unpacked" not in str(e.value)
    if "lambda: create_chunked_causal_mask" not in inspect.getsource(transformers.Llama4TextModel.forward):
        return  # older transformers build the chunked mask whatever the layer types: no way around it
    config = tiny("Llama4TextConfig", attention_chunk_size=4, layer_types=["full_attention"] * 2, **extra)
    config.attention_pattern = [{"type": "block_local", "block": 4}] * 2
    full = transformers.Llama4TextModel(config).eval()
    full.load_state_dict(chunked.state_dict())
    valid = mask.bool()
    got = run(full, "hf_sparse", ids, mask).last_hidden_state
    torch.testing.assert_close(
        got[valid], run(chunked, "sdpa", ids, mask).last_hidden_state[valid], atol=1e-5, rtol=0
    )


def test_pattern_is_resolved_once_and_follows_the_config(monkeypatch):
    """The layer's pattern is kept on its module (no json.dumps per layer and call, which breaks torch.compile
    graphs) while the config holds the same spec; a spec changed in place or replaced is resolved again."""
    specs = []
    resolve = integration.resolve_pattern

    def spy(spec):
        specs.append(spec)
        return resolve(spec)

    model = make_model("bert", {"type": "sliding_window", "window": 2})
    model.set_attn_implementation("hf_sparse")
    ids, mask = inputs(False)
    monkeypatch.setattr(integration, "resolve_pattern", spy)
    with torch.no_grad():
        first = model(input_ids=ids, attention_mask=mask).last_hidden_state
        assert len(specs) == 2  # one per layer
        torch.testing.assert_close(
            model(input_ids=ids, attention_mask=mask).last_hidden_state, first, atol=0, rtol=0
        )
        assert len(specs) == 2
        model.config.attention_pattern["window"] = 6  # in place
        got = model(input_ids=ids, attention_mask=mask).last_hidden_state
    want = run(make_model("bert", {"type": "sliding_window", "window": 6}), "hf_sparse", ids, mask)
    torch.testing.assert_close(got, want.last_hidden_state, atol=0, rtol=0)
    module = model.encoder.layer[0].attention.self
    assert integration.pattern_for_module(module) is resolve({"type": "sliding_window", "window": 6})
    model.config.attention_pattern["window"] = 1
    integration.pattern_for_module(module)
    model.config.attention_pattern["window"] = True  # equal to 1, but not a window
    with pytest.raises(TypeError, match="window must be an int, got bool"):
        integration.pattern_for_module(module)
