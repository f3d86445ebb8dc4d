"""Call-time global tokens with per-head patterns through the transformers integration: the materialised rule
(``PatternMask``: output_attentions, keys at non-consecutive positions, torch.export) adds them as the kernels
do (``dispatch.with_runtime_globals``): causally in a PerHead's causal heads, per head in a combination."""

import pytest
import torch
from transformers import AutoModelForMaskedLM

from hf_sparse import patterns as P
from hf_sparse.attention.dense import allowed_mask
from hf_sparse.attention.dispatch import with_runtime_globals
from hf_sparse.attention.integration import PatternMask
from tests.models.tiny import tiny_config

MIXED = [
    P.SlidingWindow(window=3),
    P.Causal(),
    P.SlidingWindow(window=3),
    P.SlidingWindow(window=2, causal=True),
]
PATTERNS = {
    "per_head": P.PerHead(MIXED),
    # combinations holding a PerHead are per-head too
    "per_head&window": P.PerHead(MIXED) & P.SlidingWindow(window=9),
    "per_head|global0": P.PerHead(MIXED) | P.Global(indices=[0]),
}
CAUSAL_HEADS = {"per_head": [1, 3], "per_head&window": [1, 3], "per_head|global0": []}
N = 11  # global tokens at 6 (row 0) and 2, 8 (row 1), after the causal heads' earlier rows


def _globals(B=2):
    g = torch.zeros(B, N, dtype=torch.bool)
    g[0, 6] = True
    g[1, [2, 8]] = True
    return g


@pytest.mark.parametrize("name", PATTERNS)
def test_pattern_mask_adds_globals_as_the_kernels_do(name):
    pattern, g = PATTERNS[name], _globals()
    padding = torch.ones(2, N, dtype=torch.bool)
    padding[1, -2:] = False
    rule = PatternMask(pattern, 0, N, torch.arange(N), padding=padding, global_tokens=g, key_start=0)
    got = rule.dense(2, len(MIXED))  # (B, H, q, kv)
    bound = P.base.bind_part(with_runtime_globals(pattern, g), N, N, key_valid=padding)
    want = allowed_mask(bound, 2, len(MIXED), N, N, padding)
    assert got.shape == want.shape == (2, len(MIXED), N, N)
    assert torch.equal(got, want)
    later = torch.ones(N, N, dtype=torch.bool).triu(1)  # key after the query
    for h in CAUSAL_HEADS[name]:
        assert not (got[:, h] & later).any(), f"causal head {h} attends a later key"


@pytest.mark.parametrize("name", PATTERNS)
def test_output_attentions_keep_globals_causal_in_causal_heads(name):
    """SparseTransformer, "hf_sparse": the weights output_attentions returns (the materialised rule) are those
    the kernels use: the logits do not change, and a causal head gives a later global token weight 0."""
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(tiny_config(attention_pattern=PATTERNS[name])).eval()
    ids = torch.randint(2, model.config.vocab_size, (2, N), generator=torch.Generator().manual_seed(0))
    am = torch.ones(2, N, dtype=torch.long)
    am[1, -2:] = 0
    inputs = {"input_ids": ids, "attention_mask": am, "global_attention_mask": _globals().long()}
    with torch.no_grad():
        plain = model(**inputs).logits
        out = model(**inputs, output_attentions=True)
    torch.testing.assert_close(out.logits, plain, rtol=0, atol=1e-5)
    for weights in out.attentions:  # (B, H, q, kv)
        for h in CAUSAL_HEADS[name]:
            assert weights[0, h, :6, 6].abs().max() == 0
            assert weights[1, h, 2:8, 8].abs().max() == 0
