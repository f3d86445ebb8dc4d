"""generate() conformance of SparseTransformerForCausalLM, for causal patterns whose caches behave
differently: a sliding window shorter than the sequence (the cache drops old keys), Strided and Causal
(the cache keeps everything) and Fixed (summary columns, absolute block boundaries).

Every test runs on a model whose next token depends on more than the previous token (asserted first),
so a dropped or misplaced cache cannot go unnoticed.
"""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import SparseTransformerForCausalLM
from tests.models.tiny import tiny_decoder_config

PATTERNS = {
    "sliding_window": P.SlidingWindow(window=6, causal=True),
    "strided": P.Strided(stride=4, causal=True),
    "fixed": P.Fixed(block=8, summary=2, causal=True),
    "causal": P.Causal(),
}
PROMPT, NEW = 9, 14  # prompt + generated = 23 tokens: longer than the window, spans 3 Fixed blocks


def _model(name, **overrides):
    torch.manual_seed(0)
    kw = dict(
        hidden_size=64, num_hidden_layers=3, intermediate_size=128, vocab_size=50, initializer_range=0.3
    )
    kw.update(overrides)
    cfg = tiny_decoder_config(PATTERNS[name], **kw)
    return SparseTransformerForCausalLM(cfg).eval()


def _prompt(model, batch=2, n=PROMPT, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, model.config.vocab_size, (batch, n), generator=g)


def _generate(model, ids, **kw):
    kw.setdefault("max_new_tokens", NEW)
    kw.setdefault("attention_mask", torch.ones_like(ids))
    with torch.no_grad():
        return model.generate(ids, pad_token_id=0, **kw)


@pytest.mark.parametrize("name", PATTERNS)
def test_next_token_depends_on_more_than_the_previous_token(name):
    model = _model(name)
    ids = _prompt(model, batch=1, n=20)
    changed = ids.clone()
    changed[0, -4] = (changed[0, -4] % (model.config.vocab_size - 1)) + 1  # a token 3 before the previous one
    with torch.no_grad():
        a = model(ids, use_cache=False).logits[0, -1]
        b = model(changed, use_cache=False).logits[0, -1]
    assert (a - b).abs().max() > 0.5  # logits span about +-4


@pytest.mark.parametrize("name", PATTERNS)
def test_greedy_with_cache_equals_without(name):
    model = _model(name)
    ids = _prompt(model)
    fast = _generate(model, ids, do_sample=False)
    slow = _generate(model, ids, do_sample=False, use_cache=False)
    assert fast.shape == (2, PROMPT + NEW)
    assert torch.equal(fast, slow)


@pytest.mark.parametrize("name", PATTERNS)
def test_sampling_with_cache_equals_without(name):
    model = _model(name)
    ids = _prompt(model)
    torch.manual_seed(7)
    fast = _generate(model, ids, do_sample=True, top_k=0, temperature=1.0)
    torch.manual_seed(7)
    slow = _generate(model, ids, do_sample=True, top_k=0, temperature=1.0, use_cache=False)
    assert torch.equal(fast, slow)


@pytest.mark.parametrize("name", PATTERNS)
def test_beam_search_with_cache_equals_without(name):
    model = _model(name)
    ids = _prompt(model)
    fast = _generate(model, ids, do_sample=False, num_beams=3, max_new_tokens=8)
    slow = _generate(model, ids, do_sample=False, num_beams=3, max_new_tokens=8, use_cache=False)
    assert torch.equal(fast, slow)


@pytest.mark.parametrize("name", PATTERNS)
def test_every_step_logits_equal_a_full_forward(name):
    model = _model(name)
    ids = _prompt(model)
    out = _generate(model, ids, do_sample=False, output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        full = model(out.sequences, use_cache=False).logits  # (B, PROMPT + NEW, V)
    assert len(out.logits) == NEW
    for t, step in enumerate(out.logits):
        torch.testing.assert_close(step, full[:, PROMPT - 1 + t], rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", PATTERNS)
def test_left_padded_rows_generate_what_they_generate_alone(name):
    model = _model(name)
    lengths = [PROMPT, PROMPT - 3, PROMPT - 6]
    prompts = [_prompt(model, batch=1, n=n, seed=10 + i)[0] for i, n in enumerate(lengths)]
    ids = torch.zeros(len(prompts), PROMPT, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, PROMPT - len(p) :] = p
        mask[i, PROMPT - len(p) :] = 1
    batch = _generate(
        model, ids, attention_mask=mask, do_sample=False, output_logits=True, return_dict_in_generate=True
    )
    for i, p in enumerate(prompts):
        alone = _generate(model, p[None], do_sample=False, output_logits=True, return_dict_in_generate=True)
        assert torch.equal(batch.sequences[i, PROMPT:], alone.sequences[0, len(p) :]), f"row {i}"
        for t in range(NEW):
            torch.testing.assert_close(batch.logits[t][i], alone.logits[t][0], rtol=0, atol=1e-4)
