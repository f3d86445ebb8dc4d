"""A ``torch.jit.trace`` (``"sdpa"``/``"eager"``) or ``torch.export`` of a SparseTransformer serves later inputs, not
only the example: no shortcut taken on the example's values (no global tokens, no left padding) is baked in, and
what cannot be traced says so."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

from hf_sparse import patterns as P
from tests.models.tiny import tiny_config, tiny_decoder_config

N = 37  # not a multiple of any block


def _ids(B=2, n=N):
    return torch.randint(2, 97, (B, n), generator=torch.Generator().manual_seed(0))


def _globals_at(ids, *positions):
    g = torch.zeros_like(ids)
    g[:, list(positions)] = 1
    return g


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::DeprecationWarning")
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_jit_trace_without_global_tokens_serves_inputs_with_them(impl):
    torch.manual_seed(0)
    cfg = tiny_config(attention_pattern=P.Longformer(window=8), return_dict=False)
    model = AutoModelForMaskedLM.from_config(cfg).eval()
    model.set_attn_implementation(impl)
    ids = _ids()
    mask = torch.ones_like(ids)
    traced = torch.jit.trace(model, (ids, mask, _globals_at(ids)), check_trace=False)
    with torch.no_grad():
        for g in (_globals_at(ids, 0), _globals_at(ids, 10, 20), _globals_at(ids)):
            want = model(ids, attention_mask=mask, global_attention_mask=g)[0]
            torch.testing.assert_close(traced(ids, mask, g)[0], want, rtol=0, atol=1e-5)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::DeprecationWarning")
def test_jit_trace_without_left_padding_serves_left_padded_inputs():
    torch.manual_seed(0)  # Fixed counts positions from each row's first token
    cfg = tiny_decoder_config(P.Fixed(block=8, summary=2, causal=True), return_dict=False, use_cache=False)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    model.set_attn_implementation("sdpa")
    ids = _ids()
    traced = torch.jit.trace(model, (ids, torch.ones_like(ids)), check_trace=False)
    padded = torch.ones_like(ids)
    padded[1, :6] = 0
    with torch.no_grad():
        torch.testing.assert_close(
            traced(ids, padded)[0], model(ids, attention_mask=padded)[0], rtol=0, atol=1e-5
        )


@pytest.mark.parametrize("backend", ["auto", "sdpa", "dense"])
@pytest.mark.parametrize(
    "pattern", [P.LSH(bucket_size=8, num_hashes=2), P.TopKBlocks(block=8, k=2)], ids=["lsh", "topk"]
)
def test_export_refuses_content_based_patterns(pattern, backend):
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(
        tiny_config(attention_pattern=pattern, attention_backend=backend)
    )
    ids = _ids()
    with pytest.raises(
        NotImplementedError, match=r"torch.export cannot trace .*chosen from the queries and keys"
    ):
        torch.export.export(model.eval(), (), kwargs={"input_ids": ids}, strict=False)


@pytest.mark.parametrize("use_cache", [None, True])
def test_export_of_a_decoder_with_its_cache_says_to_pass_use_cache_false(use_cache):
    torch.manual_seed(0)
    cfg = tiny_decoder_config(P.SlidingWindow(window=6, causal=True))  # use_cache=True by default
    model = AutoModelForCausalLM.from_config(cfg).eval()
    ids = _ids()
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "use_cache": use_cache}
    with pytest.raises(
        NotImplementedError, match=r"cannot trace the decoder's SparsePatternCache.*use_cache=False"
    ):
        torch.export.export(model, (), kwargs=inputs, strict=False)
    inputs["use_cache"] = False
    exported = torch.export.export(model, (), kwargs=inputs, strict=False)
    inputs["attention_mask"][1, :6] = 0  # left padding
    with torch.no_grad():
        torch.testing.assert_close(
            exported.module()(**inputs).logits, model(**inputs).logits, rtol=0, atol=1e-5
        )
