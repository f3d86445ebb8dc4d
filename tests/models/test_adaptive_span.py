"""SparseTransformer with adaptive_span: config checks, the kernel path equals the dense reference
through the whole model, the span penalty reaches the loss, generate() with the span-bounded cache
equals recomputation, and save/load keeps the spans."""

import pytest
import torch

from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import (
    SparsePatternCache,
    SparseTransformerConfig,
    SparseTransformerForCausalLM,
    SparseTransformerForMaskedLM,
    SparseTransformerForSequenceClassification,
)
from tests.models.tiny import set_checkpointing, tiny_config, tiny_decoder_config

SPAN = {"max_span": 12, "ramp": 4, "init": 5.0, "loss_coef": 0.01}


def _decoder(**kw):
    return tiny_decoder_config(P.Causal(), adaptive_span=dict(SPAN), **kw)


def _set_spans(model, values):
    with torch.no_grad():
        for layer, vals in zip(model.sparse_transformer.encoder.layer, values):
            mod = layer.attention.self.adaptive_span
            mod.span.copy_(torch.tensor(vals) / mod.max_span)


@pytest.mark.parametrize(
    "value, match",
    [
        ({"ramp": 4}, "needs max_span"),
        ({"max_span": 0}, "max_span must be a positive int"),
        ({"max_span": 8, "ramp": 2.5}, "ramp must be a positive int"),
        ({"max_span": 8, "init": 9}, "init=9.0 must be in"),
        ({"max_span": 8, "loss_coef": -1}, "loss_coef must be a finite number >= 0"),
        # NaN and inf passed "v < 0": a NaN init crashed the model ("cannot convert float NaN to integer"), a NaN
        # or inf loss_coef made every training loss NaN or inf
        ({"max_span": 8, "init": float("nan")}, "adaptive_span.init must be a finite number >= 0, got nan"),
        (
            {"max_span": 8, "loss_coef": float("nan")},
            "adaptive_span.loss_coef must be a finite number >= 0, got nan",
        ),
        (
            {"max_span": 8, "loss_coef": float("inf")},
            "adaptive_span.loss_coef must be a finite number >= 0, got inf",
        ),
        ({"max_span": 8, "init": True}, "adaptive_span.init must be a finite number"),
        ({"max_span": 8, "window": 3}, "unknown keys"),
        ({"max_span": 1000}, "larger than max_position_embeddings"),
        ([8], "must be a dict"),
    ],
)
def test_bad_adaptive_span_options_raise(value, match):
    with pytest.raises(ValueError, match=match):
        tiny_config(adaptive_span=value)


def test_adaptive_span_needs_a_band_pattern_and_no_global_projections():
    with pytest.raises(ValueError, match="Causal\\(\\) or SlidingWindow"):
        tiny_config(adaptive_span={"max_span": 8}, attention_pattern={"type": "strided", "stride": 4})
    with pytest.raises(ValueError, match="global_projections"):
        tiny_config(adaptive_span={"max_span": 8}, global_projections=True)


def test_an_adaptive_span_set_after_init_is_checked_and_filled_before_a_model_is_built(tmp_path):
    """``from_pretrained(path, adaptive_span=...)`` sets the attribute after ``__init__``: it was neither checked
    nor given its defaults."""
    from transformers import AutoModelForCausalLM

    SparseTransformerForCausalLM(_decoder()).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="adaptive_span.init must be a finite number >= 0, got nan"):
        AutoModelForCausalLM.from_pretrained(tmp_path, adaptive_span={"max_span": 12, "init": float("nan")})
    model = AutoModelForCausalLM.from_pretrained(tmp_path, adaptive_span={"max_span": 12})
    assert model.config.adaptive_span == {"max_span": 12, "ramp": 32, "init": 0.0, "loss_coef": 2e-6}


def test_defaults_are_filled_and_survive_a_round_trip():
    cfg = tiny_config(adaptive_span={"max_span": 8})
    assert cfg.adaptive_span == {"max_span": 8, "ramp": 32, "init": 0.0, "loss_coef": 2e-6}
    again = SparseTransformerConfig.from_dict(cfg.to_dict())
    assert again.adaptive_span == cfg.adaptive_span
    assert tiny_config().adaptive_span is None  # a config without it loads unchanged


@pytest.mark.parametrize("decoder", [True, False], ids=["causal_lm", "masked_lm"])
def test_kernel_path_equals_eager_reference_through_the_model(decoder):
    torch.manual_seed(0)
    if decoder:
        cfg, cls = _decoder(), SparseTransformerForCausalLM
    else:
        cfg = tiny_config(adaptive_span=dict(SPAN), attention_pattern=P.SlidingWindow(window=20))
        cls = SparseTransformerForMaskedLM
    model = cls(cfg).double()
    _set_spans(model, [[0.0, 2.5, 7.0, 12.0], [1.0, 1.0, 4.0, 9.5]])
    ids = torch.randint(1, cfg.vocab_size, (2, 37))
    mask = torch.ones_like(ids)
    mask[1, :6] = 0 if decoder else 1
    mask[1, -4:] = 1 if decoder else 0
    losses = {}
    for impl in ("hf_sparse", "eager"):
        model.set_attn_implementation(impl)
        model.zero_grad()
        out = model(ids, attention_mask=mask, labels=ids)
        out.loss.backward()
        losses[impl] = (out.logits, [p.grad.clone() for p in model.parameters() if p.grad is not None])
    (la, ga), (lb, gb) = losses["hf_sparse"], losses["eager"]
    assert torch.allclose(la, lb, atol=1e-8)
    assert len(ga) == len(gb) and all(torch.allclose(a, b, atol=1e-8) for a, b in zip(ga, gb))
    span_grads = [
        layer.attention.self.adaptive_span.span.grad for layer in model.sparse_transformer.encoder.layer
    ]
    assert all(g is not None and g.abs().sum() > 0 for g in span_grads)


def test_span_penalty_is_added_to_the_training_loss_only():
    torch.manual_seed(0)
    model = SparseTransformerForSequenceClassification(tiny_config(adaptive_span=dict(SPAN)))
    ids = torch.randint(1, 97, (2, 10))
    labels = torch.tensor([0, 2])
    model.eval()
    plain = model(ids, labels=labels).loss
    model.train()
    trained = model(ids, labels=labels).loss
    penalty = model.sparse_transformer.adaptive_span_loss()
    assert torch.allclose(penalty, torch.tensor(0.01 * 2 * 5.0))  # coef * layers * mean span
    assert torch.allclose(trained, plain + penalty)
    trained.backward()
    for layer in model.sparse_transformer.encoder.layer:
        # d penalty / d fraction = coef * max_span / heads per head, plus the task's gradient
        assert layer.attention.self.adaptive_span.span.grad is not None


def test_explicit_global_tokens_are_refused():
    model = SparseTransformerForMaskedLM(tiny_config(adaptive_span=dict(SPAN))).eval()
    ids = torch.randint(1, 97, (1, 9))
    g = torch.zeros_like(ids)
    g[0, 0] = 1
    with pytest.raises(ValueError, match="no global tokens"):
        model(ids, global_attention_mask=g)


@pytest.mark.parametrize("positions", ["absolute", "rotary"])
def test_generate_with_the_span_cache_equals_generate_without(positions):
    torch.manual_seed(0)
    model = SparseTransformerForCausalLM(_decoder(position_embedding_type=positions)).double().eval()
    _set_spans(model, [[0.0, 2.0, 6.5, 3.0], [1.0, 0.0, 5.0, 2.0]])
    prompt = torch.randint(1, 97, (2, 6))
    mask = torch.ones_like(prompt)
    mask[0, :2] = 0  # left padding
    kw = dict(
        attention_mask=mask,
        max_new_tokens=40,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
    )
    fast = model.generate(prompt, use_cache=True, **kw)
    slow = model.generate(prompt, use_cache=False, **kw)
    assert torch.equal(fast.sequences, slow.sequences)
    for a, b in zip(fast.logits, slow.logits):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-9)  # float64: a dropped key shows
    alone = model.generate(prompt[:1, 2:], **{**kw, "attention_mask": None})  # the padded row alone
    assert torch.equal(alone.sequences[0, 4:], fast.sequences[0, 6:])
    for a, b in zip(alone.logits, fast.logits):
        torch.testing.assert_close(a[0], b[0], rtol=0, atol=1e-9)


def test_span_cache_is_bounded_by_the_reach():
    torch.manual_seed(0)
    model = SparseTransformerForCausalLM(_decoder()).eval()
    _set_spans(model, [[0.0, 2.0, 6.5, 3.0], [1.0, 0.0, 2.0, 2.0]])  # reaches 10 and 6
    cache = SparsePatternCache(model.config)
    ids = torch.randint(1, 97, (1, 3))
    sizes = []
    with torch.no_grad():
        out = model(ids, past_key_values=cache, use_cache=True)
        for _ in range(30):
            out = model(out.logits[:, -1:].argmax(-1), past_key_values=cache, use_cache=True)
            sizes.append((cache.stored_length(0), cache.stored_length(1)))
    assert max(s[0] for s in sizes) == 10 and max(s[1] for s in sizes) == 6
    assert cache.get_seq_length() == 33


def test_save_and_load_keep_the_spans(tmp_path):
    torch.manual_seed(0)
    model = SparseTransformerForCausalLM(_decoder()).eval()
    _set_spans(model, [[0.0, 2.0, 6.5, 3.0], [1.0, 0.0, 5.0, 2.0]])
    model.save_pretrained(tmp_path)
    again = SparseTransformerForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(1, 97, (1, 20))
    spans = [layer.attention.self.adaptive_span.spans() for layer in again.sparse_transformer.encoder.layer]
    assert torch.allclose(spans[0], torch.tensor([0.0, 2.0, 6.5, 3.0]))
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, again(ids).logits)


def test_new_model_starts_at_the_init_span():
    model = SparseTransformerForCausalLM(_decoder())
    for layer in model.sparse_transformer.encoder.layer:
        assert torch.allclose(layer.attention.self.adaptive_span.spans(), torch.full((4,), 5.0))


def test_causal_lm_card_describes_the_adaptive_span_only_when_trained_with_it():
    from hf_sparse.hub.cards import render_model_card

    with_span = render_model_card(
        "causal-lm", model_name="lm", training_config={"model_kwargs": {"adaptive_span": {"max_span": 128}}}
    )
    without = render_model_card("causal-lm", model_name="lm", training_config={"max_steps": 3})
    assert "Adaptive attention span" in str(with_span)
    assert "Adaptive attention span" not in str(without)


def test_lm_recipes_share_the_dense_base_model():
    import yaml

    root = __import__("pathlib").Path(__file__).resolve().parents[2] / "pipelines" / "lm"
    dense, window, span = (
        yaml.safe_load((root / f"{n}.yaml").read_text()) for n in ("dense", "window", "adaptive_span")
    )
    drop = {"output_dir", "model_name", "attention_window", "attention_pattern", "model_kwargs"}
    assert {k: v for k, v in dense.items() if k not in drop} == {
        k: v for k, v in window.items() if k not in drop
    }
    assert {k: v for k, v in dense.items() if k not in drop} == {
        k: v for k, v in span.items() if k not in drop
    }
    assert window["attention_window"] == 32
    assert (
        span["attention_pattern"] == {"type": "causal"}
        and span["model_kwargs"]["adaptive_span"]["max_span"] == 128
    )


def test_gradient_checkpointing_with_attention_dropout_gives_the_same_gradients():
    """The kernel draws its dropout seed from torch's RNG, which checkpointing restores on recompute."""
    cfg = _decoder(attention_probs_dropout_prob=0.2)
    ids = torch.randint(1, 97, (2, 30), generator=torch.Generator().manual_seed(1))
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = SparseTransformerForCausalLM(cfg).double().train()
        if checkpointing:
            set_checkpointing(model)
        torch.manual_seed(5)
        model(ids, labels=ids).loss.backward()
        grads.append([p.grad for p in model.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1])
    assert all(torch.allclose(a, b, atol=1e-10) for a, b in zip(*grads))
