"""SparseTransformer attention through transformers' attention interface: "hf_sparse" (default),
"sdpa" and "eager" are selectable the usual three ways and compute the same thing."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM
from transformers.dynamic_module_utils import get_class_from_dynamic_module
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import hf_sparse  # noqa: F401  (registers "hf_sparse")
from hf_sparse import patterns as P
from hf_sparse.attention.integration import SparseMask
from hf_sparse.models.sparse_transformer import SparseTransformerForMaskedLM
from tests.models.tiny import tiny_config, tiny_decoder_config

IMPLEMENTATIONS = ["hf_sparse", "sdpa", "eager"]
N = 37  # not a multiple of any block; longer than every window below

CASES = {
    # encoder patterns, right padding, global tokens from the call
    "window_6": (P.SlidingWindow(window=6), False),
    "longformer_8|strided_5": (P.Longformer(window=8) | P.Strided(stride=5, causal=False), False),
    "dilated&global": (P.Dilated(window=8, dilation=2) | P.Global(indices=[3]), False),
    # random blocks: sdpa/eager bind them to the length as the hf_sparse kernels do
    "bigbird": (P.BigBird(block=4, window_blocks=3, random_blocks=1, global_blocks=1, seed=0), False),
    # decoder patterns, left padding
    "causal_window_6": (P.SlidingWindow(window=6, causal=True), True),
    "fixed_8_2": (P.Fixed(block=8, summary=2, causal=True), True),
    "strided_5": (P.Strided(stride=5, causal=True), True),
}


def _model(case, backend="auto", **overrides):
    pattern, decoder = CASES[case]
    torch.manual_seed(0)
    if decoder:
        cfg = tiny_decoder_config(pattern, attention_backend=backend, **overrides)
        return AutoModelForCausalLM.from_config(cfg).eval()
    cfg = tiny_config(attention_pattern=pattern, attention_backend=backend, **overrides)
    return AutoModelForMaskedLM.from_config(cfg).eval()


def _inputs(model, B=2, n=N):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, model.config.vocab_size, (B, n), generator=g)
    am = torch.ones(B, n, dtype=torch.long)
    if model.config.is_decoder:
        am[1, :6] = 0  # left padding
        return {"input_ids": ids, "attention_mask": am}
    am[1, -5:] = 0  # right padding
    gm = torch.zeros(B, n, dtype=torch.long)
    gm[:, 0] = 1
    gm[0, 17] = 1
    return {"input_ids": ids, "attention_mask": am, "global_attention_mask": gm}


def _run(model, impl, inputs, **kw):
    model.set_attn_implementation(impl)
    assert model.config._attn_implementation == impl
    return model(**inputs, **kw)


@pytest.mark.parametrize("backend", ["auto", "blocked"])
@pytest.mark.parametrize("case", CASES)
def test_implementations_give_the_same_outputs(case, backend):
    model = _model(case, backend)
    inputs = _inputs(model)
    with torch.no_grad():
        out = {impl: _run(model, impl, inputs, output_hidden_states=True) for impl in IMPLEMENTATIONS}
    ref = out["hf_sparse"]
    for impl in ("sdpa", "eager"):
        torch.testing.assert_close(out[impl].logits, ref.logits, rtol=0, atol=1e-5, msg=impl)
        for a, b in zip(out[impl].hidden_states, ref.hidden_states):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=impl)


@pytest.mark.parametrize("case", ["longformer_8|strided_5", "fixed_8_2"])
def test_implementations_give_the_same_gradients(case):
    model = _model(case, "blocked")
    inputs = _inputs(model)
    grads = {}
    for impl in IMPLEMENTATIONS:
        model.zero_grad()
        _run(model, impl, inputs, labels=inputs["input_ids"]).loss.backward()
        grads[impl] = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    for impl in ("sdpa", "eager"):
        for k, g in grads["hf_sparse"].items():
            torch.testing.assert_close(grads[impl][k], g, rtol=1e-4, atol=1e-5, msg=f"{impl} {k}")


def test_attn_implementation_is_selectable_three_ways(tmp_path):
    model = _model("window_6")
    assert model.config._attn_implementation == "hf_sparse"  # the default
    model.save_pretrained(tmp_path)
    for impl in IMPLEMENTATIONS:
        loaded = AutoModelForMaskedLM.from_pretrained(tmp_path, attn_implementation=impl)
        assert loaded.config._attn_implementation == impl
        built = SparseTransformerForMaskedLM(tiny_config(attn_implementation=impl))
        assert built.config._attn_implementation == impl
    assert AutoModelForMaskedLM.from_pretrained(tmp_path).config._attn_implementation == "hf_sparse"
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"
    with pytest.raises(ValueError):
        model.set_attn_implementation("flash_attention_2")


def test_class_flags_are_truthful():
    cls = SparseTransformerForMaskedLM
    assert cls._supports_attention_backend and cls._supports_sdpa
    assert not cls._supports_flash_attn and not cls._supports_flex_attn
    assert cls._can_set_attn_implementation()


def test_hf_sparse_goes_through_the_attention_and_mask_interfaces(monkeypatch):
    """The model calls ALL_ATTENTION_FUNCTIONS["hf_sparse"] (the function BERT/Llama use too) with the mask
    from the "hf_sparse" mask interface: a SparseMask, never None, never n x n."""
    seen = []
    original = ALL_ATTENTION_FUNCTIONS["hf_sparse"]

    def spy(module, query, key, value, attention_mask, **kwargs):
        seen.append((type(module).__name__, attention_mask))
        return original(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, "hf_sparse", spy)
    model = _model("window_6")
    with torch.no_grad():
        model(**_inputs(model))
    assert len(seen) == model.config.num_hidden_layers
    for name, mask in seen:
        assert name == "SparseTransformerSelfAttention"
        assert isinstance(mask, SparseMask) and mask.padding is not None and mask.padding.shape == (2, N)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_returned_attention_weights_are_on_the_output_path(impl):
    model = _model("longformer_8|strided_5")
    inputs = _inputs(model)
    ref = _run(model, "eager", inputs, output_attentions=True).attentions
    out = _run(model, impl, inputs, output_attentions=True)
    assert len(out.attentions) == model.config.num_hidden_layers
    for a, b in zip(out.attentions, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    weights = out.attentions[0]
    weights.retain_grad()
    out.logits[0, 0, 7].backward()  # (token 0 is padding: its logit is the bias alone)
    assert weights.grad is not None and weights.grad.abs().sum() > 0


# patterns fixed per input: random blocks drawn for the length, LSH buckets and top-k blocks chosen from q and k
PER_INPUT = {
    "bigbird": P.BigBird(block=4, window_blocks=3, random_blocks=1, global_blocks=1, seed=0),
    "random": P.Random(block=4, num_blocks=2, seed=1),
    "lsh": P.LSH(bucket_size=4, num_hashes=2, seed=0),
    "topk_blocks": P.TopKBlocks(block=4, k=2),
}


@pytest.mark.parametrize("name", PER_INPUT)
def test_output_attentions_of_patterns_fixed_per_input(name, monkeypatch):
    """With "hf_sparse", output_attentions=True returns the softmax over exactly the pairs the kernels attend (the
    same random blocks, buckets and top-k blocks, padding and global tokens), and the outputs do not change."""
    pattern = PER_INPUT[name]
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(tiny_config(attention_pattern=pattern)).eval()
    inputs = _inputs(model)
    calls = []
    original = ALL_ATTENTION_FUNCTIONS["hf_sparse"]

    def spy(module, query, key, value, attention_mask, **kwargs):
        calls.append((query, key, attention_mask))
        return original(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, "hf_sparse", spy)
    with torch.no_grad():
        plain = model(**inputs).logits
        calls.clear()
        out = model(**inputs, output_attentions=True)
    torch.testing.assert_close(out.logits, plain, rtol=0, atol=1e-5)
    assert len(out.attentions) == len(calls) == model.config.num_hidden_layers
    for (q, k, mask), weights in zip(calls, out.attentions):
        rule = pattern | P.Global.from_mask(mask.global_tokens)
        # (q, kv), (H, q, kv) or (B, H, q, kv), bound to the real tokens as the kernels bind it
        allowed = rule.bind(N, query=q, key=k, key_valid=mask.padding).dense_mask(N)
        allowed = allowed.reshape((1,) * (4 - allowed.dim()) + tuple(allowed.shape))
        allowed = allowed & mask.padding[:, None, None, :]  # (B, H, q, kv)
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        want = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
        assert weights.shape == (2, model.config.num_attention_heads, N, N)
        torch.testing.assert_close(weights, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("case", ["window_6", "bigbird"])
def test_output_attentions_limit_follows_max_attention_weights_length(case, monkeypatch):
    """A SparseTransformer config's max_attention_weights_length, not the fixed limit for stock transformers
    models, bounds the weights "hf_sparse" materialises: raised above that limit, it is honoured as by "eager"."""
    from hf_sparse.attention import integration

    monkeypatch.setattr(integration, "MAX_DENSE_ATTENTION_WEIGHTS", N * N - 1)
    model = _model(case, max_attention_weights_length=64)
    inputs = _inputs(model)
    want = _run(model, "eager", inputs, output_attentions=True).attentions
    got = _run(model, "hf_sparse", inputs, output_attentions=True).attentions
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("case", ["window_6", "longformer_8|strided_5", "fixed_8_2", "strided_5"])
@pytest.mark.parametrize(
    "impl, backend", [("hf_sparse", "auto"), ("hf_sparse", "sdpa"), ("hf_sparse", "dense"), ("sdpa", "auto"),
                      ("eager", "auto")],
)  # fmt: skip
def test_torch_export(case, impl, backend):
    """torch.export traces the model (no data-dependent Python branch: padding, global tokens, left padding) and
    the exported program gives the eager outputs."""
    model = _model(case, backend, max_position_embeddings=64)
    model.set_attn_implementation(impl)
    inputs = _inputs(model)
    if model.config.is_decoder:
        inputs["use_cache"] = False
    exported = torch.export.export(model, (), kwargs=inputs, strict=False)
    with torch.no_grad():
        got, want = exported.module()(**inputs).logits, model(**inputs).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "case, impl, backend, match",
    [
        ("window_6", "hf_sparse", "blocked", "cannot trace backend='blocked'"),
        ("bigbird", "hf_sparse", "auto", "cannot trace BigBird.*random blocks"),
        ("bigbird", "sdpa", "auto", "cannot trace BigBird.*random blocks"),
        ("bigbird", "eager", "auto", "cannot trace BigBird.*random blocks"),
    ],
)
def test_torch_export_says_what_it_cannot_trace(case, impl, backend, match):
    model = _model(case, backend, max_position_embeddings=64)
    model.set_attn_implementation(impl)
    with pytest.raises(NotImplementedError, match=match):
        torch.export.export(model, (), kwargs=_inputs(model), strict=False)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::DeprecationWarning")
def test_torch_jit_trace_refuses_hf_sparse_and_traces_sdpa():
    """torch.jit.trace would fix hf_sparse's padding check, backend and block plan (Python) to the example input:
    a clear error that names the alternatives (not a TypeError on a length); "sdpa" traces, padding included."""
    model = _model("window_6", return_dict=False)  # jit.trace takes tuple outputs
    inputs = _inputs(model)
    args = (inputs["input_ids"], inputs["attention_mask"])
    match = (
        r"torch.jit.trace cannot trace hf-sparse attention.*torch.export.*set_attn_implementation\('sdpa'\)"
    )
    with pytest.raises(NotImplementedError, match=match):
        torch.jit.trace(model, args, check_trace=False)
    q = torch.randn(1, 2, 16, 8)
    with pytest.raises(NotImplementedError, match="torch.jit.trace cannot trace hf-sparse attention"):
        torch.jit.trace(lambda q: hf_sparse.sparse_attention(q, q, q, P.SlidingWindow(window=4)), (q,))
    model.set_attn_implementation("sdpa")
    traced = torch.jit.trace(model, args, check_trace=False)
    with torch.no_grad():
        torch.testing.assert_close(traced(*args)[0], model(*args)[0], rtol=0, atol=1e-5)


def test_a_remote_code_copy_imported_later_leaves_the_package_registered(tmp_path):
    """Loading a saved folder with trust_remote_code imports its own copy of the attention functions, which
    registers under "hf_sparse" only where the installed package has not: the package's functions keep serving
    the package's models (the copy's model runs the copy's own functions, registered under a name of its own)."""
    from hf_sparse.attention.integration import register_attention, sparse_attention_forward

    model = _model("longformer_8|strided_5")
    inputs = _inputs(model)
    with torch.no_grad():
        want = _run(model, "eager", inputs).logits
    model.save_pretrained(tmp_path)
    try:
        auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
        try:
            cls = get_class_from_dynamic_module(auto_map["AutoModelForMaskedLM"], str(tmp_path))
        except FileNotFoundError as e:  # transformers 5.0 copies the bundle's sibling modules differently
            pytest.skip(f"this transformers cannot import the remote-code bundle in-process: {e}")
        remote = cls.from_pretrained(tmp_path)
        assert type(remote).__module__ != type(model).__module__
        assert ALL_ATTENTION_FUNCTIONS["hf_sparse"] is sparse_attention_forward  # not the copy's function
        with torch.no_grad():
            got = _run(model, "hf_sparse", inputs).logits
            again = remote.eval()(**inputs).logits
    finally:
        register_attention()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(again, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize(
    "pattern",
    [
        P.PerHead([P.SlidingWindow(window=4), P.Strided(stride=5, causal=False)] * 2),
        P.PerHead([P.SlidingWindow(window=4), P.Strided(stride=5, causal=False)] * 2) | P.Global(indices=[0]),
    ],
    ids=["per_head", "per_head|global"],
)
def test_one_mask_for_all_heads_refuses_a_pattern_that_differs_per_head(pattern, impl):
    """sdpa and eager take one mask for every head (transformers' mask functions ask for head 0): a PerHead, also
    inside a combination, is refused rather than run with head 0's rule in every head."""
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(tiny_config(attention_pattern=pattern)).eval()
    model.set_attn_implementation(impl)
    with pytest.raises(NotImplementedError, match="builds one mask for all heads"):
        model(**_inputs(model))
