"""SparseTransformer heads: Auto classes, save/load, options, PEFT and Trainer."""

import json
import re

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

import hf_sparse  # noqa: F401  (registers the Auto classes)
from hf_sparse import patterns as P
from hf_sparse.models.sparse_transformer import SparseTransformerConfig, SparseTransformerForMaskedLM
from tests.models.tiny import set_checkpointing, tiny_config, tiny_decoder_config

HEADS = {
    "base": AutoModel,
    "masked_lm": AutoModelForMaskedLM,
    "sequence_classification": AutoModelForSequenceClassification,
    "token_classification": AutoModelForTokenClassification,
    "multiple_choice": AutoModelForMultipleChoice,
    "question_answering": AutoModelForQuestionAnswering,
    "causal_lm": AutoModelForCausalLM,
}


def _inputs(head, cfg, B=2, n=37):
    g = torch.Generator().manual_seed(0)
    shape = (B, 3, n) if head == "multiple_choice" else (B, n)
    ids = torch.randint(2, cfg.vocab_size, shape, generator=g)
    am = torch.ones(shape, dtype=torch.long)
    am[-1, ..., n - 5 :] = 0
    return {"input_ids": ids, "attention_mask": am}


def _config(head):
    pattern = P.SlidingWindow(window=8, causal=True) if head == "causal_lm" else P.Longformer(window=8)
    return tiny_decoder_config(pattern) if head == "causal_lm" else tiny_config(attention_pattern=pattern)


def _outputs(out):
    return [v for v in out.values() if torch.is_tensor(v)]


@pytest.mark.parametrize("head", list(HEADS))
def test_auto_classes_resolve_and_save_load_round_trip(head, tmp_path):
    cfg = _config(head)
    model = HEADS[head].from_config(cfg).eval()
    assert type(model).__name__.startswith("SparseTransformer")
    inputs = _inputs(head, cfg)
    with torch.no_grad():
        before = _outputs(model(**inputs))
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "sparse_transformer" and isinstance(saved["attention_pattern"], dict)
    again = HEADS[head].from_pretrained(tmp_path).eval()
    assert type(again) is type(model)
    with torch.no_grad():
        after = _outputs(again(**inputs))
    # Same weights, same values; not bitwise: safetensors loads some weights at addresses that are
    # not 64-byte aligned, and BLAS then sums in another order (differences ~1e-9).
    for a, b in zip(before, after):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_autoconfig_round_trip_keeps_per_layer_patterns(tmp_path):
    cfg = tiny_config(attention_pattern=[P.SlidingWindow(window=4), P.BigBird(block=8, seed=3)])
    cfg.save_pretrained(tmp_path)
    again = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(again, SparseTransformerConfig)
    assert again.layer_pattern(1) == P.BigBird(block=8, seed=3)
    assert json.loads((tmp_path / "config.json").read_text())["attention_pattern"][0] == {
        "type": "sliding_window",
        "window": 4,
        "causal": False,
    }


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"attention_pattern": {"type": "nope"}}, "attention_pattern: unknown pattern 'nope'"),
        (
            {"attention_pattern": [{"type": "causal"}]},
            "attention_pattern has 1 entries but num_hidden_layers is 2",
        ),
        (
            {"attention_pattern": [{"type": "causal"}, {"type": "sliding_window", "window": 1000}]},
            r"attention_pattern\[1\]: SlidingWindow.window=1000 reaches 500 positions, beyond max_position_embeddings=256",
        ),
        ({"hidden_size": 30}, r"hidden_size \(30\) must be divisible by num_attention_heads \(4\)"),
        ({"attention_backend": "fast"}, "attention_backend must be one of"),
        ({"position_embedding_type": "relative"}, "position_embedding_type must be one of"),
        (
            {"attention_pattern": {"type": "sliding_window", "window": 0}},
            "attention_pattern: window must be > 0, got 0",
        ),
        (
            {"attention_pattern": P.PerHead([P.Causal()] * 3)},
            "PerHead has 3 patterns but num_attention_heads is 4",
        ),
        (
            {"global_tokens_from_sep": "question", "sep_token_id": 1},
            r"global_tokens_from_sep must be one of \('before', 'after'\) or None, got 'question'",
        ),
        ({"global_tokens_from_sep": "before"}, "sep_token_id, which must be an int, got sep_token_id=None"),
        (
            {"global_tokens_from_sep": "after", "sep_token_id": 1, "adaptive_span": {"max_span": 8}},
            "adaptive_span has no global tokens: it cannot be combined with global_tokens_from_sep='after'",
        ),
    ],
)
def test_bad_configs_name_the_field(overrides, words):
    with pytest.raises(ValueError, match=words):
        tiny_config(**overrides)


def test_kernels_agree_inside_the_model():
    """The same weights with the blocked kernel and the dense reference give the same outputs."""
    cfg = tiny_config(attention_pattern=P.Longformer(window=8) | P.Strided(stride=6, causal=False))
    model = SparseTransformerForMaskedLM(cfg).eval()
    inputs = _inputs("masked_lm", cfg, n=70)
    g = torch.zeros(2, 70, dtype=torch.long)
    g[:, 0] = 1
    with torch.no_grad():
        blocked = model(**inputs, global_attention_mask=g).logits
        model.config.attention_backend = "dense"
        dense = model(**inputs, global_attention_mask=g).logits
    torch.testing.assert_close(blocked, dense, atol=1e-5, rtol=1e-5)


def test_global_tokens_change_the_outputs_and_first_token_default():
    cfg = tiny_config(attention_pattern=P.SlidingWindow(window=4))
    model = AutoModelForSequenceClassification.from_config(cfg).eval()
    inputs = _inputs("sequence_classification", cfg, n=50)
    g = torch.zeros(2, 50, dtype=torch.long)
    g[:, 0] = 1
    with torch.no_grad():
        default = model(**inputs).logits
        explicit = model(**inputs, global_attention_mask=g).logits
        none = model(**inputs, global_attention_mask=torch.zeros_like(g)).logits
    assert torch.equal(default, explicit)  # first token is global by default (documented)
    assert not torch.allclose(default, none)


@pytest.mark.parametrize(
    "head, side",
    [("question_answering", "before"), ("multiple_choice", "after"), ("sequence_classification", "after")],
)
def test_global_tokens_from_sep_mark_the_tokens_around_the_first_sep(head, side, tmp_path):
    """Without a global_attention_mask, ``global_tokens_from_sep`` makes positions i < s ("before") or i > s + 1
    ("after") global, s each row's first sep_token_id; it survives save/load, needs input_ids and a sep per row."""
    cfg = tiny_config(
        attention_pattern=P.SlidingWindow(window=4), sep_token_id=1, global_tokens_from_sep=side
    )
    cfg.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).global_tokens_from_sep == side
    model = HEADS[head].from_config(cfg).eval()
    inputs = _inputs(head, cfg, n=30)
    ids = inputs["input_ids"].view(-1, 30)  # (rows, seq), a view: the seps land in the inputs
    firsts = [5 + 3 * r for r in range(ids.shape[0])]
    for r, s in enumerate(firsts):
        ids[r, [s, s + 1, s + 9]] = 1  # several seps per row: the first counts
    pos = torch.arange(30)
    g = torch.stack([pos < s if side == "before" else pos > s + 1 for s in firsts]).long()
    first = torch.zeros_like(g)
    first[:, 0] = 1
    with torch.no_grad():
        default = _outputs(model(**inputs))
        explicit = _outputs(model(**inputs, global_attention_mask=g.view_as(inputs["input_ids"])))
        first_token = _outputs(model(**inputs, global_attention_mask=first.view_as(inputs["input_ids"])))
    for a, b in zip(default, explicit):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.allclose(default[0], first_token[0])  # not the first-token rule
    with pytest.raises(
        ValueError, match=f"global_tokens_from_sep='{side}' finds sep_token_id=1 in input_ids"
    ):
        model(inputs_embeds=torch.randn(*inputs["input_ids"].shape, 32))
    ids[1] = 7  # a row without a sep
    with pytest.raises(ValueError, match=r"input_ids rows \[1\] have none"):
        model(**inputs)
    model.config.sep_token_id = None  # set after the config was built: checked when a model is built
    with pytest.raises(ValueError, match="sep_token_id, which must be an int"):
        HEADS[head].from_config(model.config)


def test_output_attentions_and_hidden_states():
    cfg = tiny_config(attention_pattern=P.SlidingWindow(window=4), max_attention_weights_length=64)
    model = AutoModel.from_config(cfg).eval()
    inputs = _inputs("base", cfg, n=20)
    with torch.no_grad():
        out = model(**inputs, output_attentions=True, output_hidden_states=True)
    assert (
        len(out.hidden_states) == cfg.num_hidden_layers + 1 and len(out.attentions) == cfg.num_hidden_layers
    )
    w = out.attentions[0]
    assert w.shape == (2, 4, 20, 20)
    torch.testing.assert_close(w[0].sum(-1), torch.ones(4, 20))
    torch.testing.assert_close(w[1, :, :13].sum(-1), torch.ones(4, 13))  # later rows only see padding
    outside = ~P.SlidingWindow(window=4).dense_mask(20)
    assert torch.count_nonzero(w[..., outside]) == 0 and torch.count_nonzero(w[1, :, :, 15:]) == 0
    with pytest.raises(ValueError, match="max_attention_weights_length=64"):
        model(**_inputs("base", cfg, n=80), output_attentions=True)


@pytest.mark.parametrize("impl", ["hf_sparse", "eager", "sdpa"])
def test_output_attentions_of_global_rows_are_the_global_projections_weights(impl):
    """With global_projections the global tokens' outputs come from query/key/value_global: their returned
    weights are those (weights @ value_global gives the layer's context), not the local projections'."""
    cfg = tiny_config(attention_pattern=P.Longformer(window=8), global_projections=True, num_hidden_layers=1)
    torch.manual_seed(0)
    model = AutoModel.from_config(cfg, attn_implementation=impl).eval()
    inputs = _inputs("base", cfg, n=20)
    glob = torch.zeros_like(inputs["input_ids"])
    glob[:, [0, 7]] = 1
    sa = model.encoder.layer[0].attention.self
    seen = {}
    sa.register_forward_hook(lambda mod, args, res: seen.update(hidden=args[0], context=res[0]))
    with torch.no_grad():
        w = model(**inputs, global_attention_mask=glob, output_attentions=True).attentions[0]  # (B, H, n, n)
        value_global = sa._heads(sa.value_global(seen["hidden"]))  # (B, H, n, D)
        context = seen["context"].view(2, 20, cfg.num_attention_heads, -1).transpose(1, 2)  # (B, H, n, D)
        torch.testing.assert_close(w[:, :, [0, 7]] @ value_global, context[:, :, [0, 7]])
        sa.query_global.weight.mul_(5.0)
        again = model(**inputs, global_attention_mask=glob, output_attentions=True).attentions[0]
    assert not torch.allclose(again[:, :, [0, 7]], w[:, :, [0, 7]], atol=1e-4)
    torch.testing.assert_close(again[:, :, 1:7], w[:, :, 1:7])  # local rows: the local projections'


def test_global_rows_of_causal_heads_attend_no_later_key():
    """With global_projections a global row attended every key; in a causal pattern (here a PerHead's causal
    heads) it attends the keys up to it, as the local attention's global tokens do."""
    causal, both = P.SlidingWindow(window=5, causal=True), P.SlidingWindow(window=5)
    cfg = tiny_config(attention_pattern=P.PerHead([causal, both, causal, both]), global_projections=True,
                      num_hidden_layers=1)  # fmt: skip
    torch.manual_seed(0)
    model = AutoModel.from_config(cfg).eval()
    ids = _inputs("base", cfg, n=12)["input_ids"]
    glob = torch.zeros_like(ids)
    glob[:, [2, 7]] = 1
    with torch.no_grad():
        w = model(ids, global_attention_mask=glob, output_attentions=True).attentions[0]  # (B, H, n, n)
    later = torch.arange(12)[None, :] > torch.tensor([2, 7])[:, None]  # (2, n)
    assert (w[:, 0::2][:, :, [2, 7]][..., later] == 0).all()  # causal heads
    assert (w[:, 1::2][:, :, [2, 7]][..., later] > 0).all()  # bidirectional heads: every key


def test_gradient_checkpointing_gives_the_same_gradients():
    cfg = tiny_config(attention_pattern=P.Longformer(window=8))
    torch.manual_seed(0)
    model = SparseTransformerForMaskedLM(cfg)
    inputs = _inputs("masked_lm", cfg, n=40)
    labels = inputs["input_ids"].clone()
    model(**inputs, labels=labels).loss.backward()
    ref = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    set_checkpointing(model)
    model.train()
    model(**inputs, labels=labels).loss.backward()
    for k, p in model.named_parameters():
        if k in ref:
            torch.testing.assert_close(p.grad, ref[k], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "pattern", [P.Longformer(window=8) | P.Strided(stride=6, causal=False), P.BigBird(block=8)]
)
def test_attention_dropout_is_one_function_of_torch_seed_on_every_path(pattern, monkeypatch):
    """A training step with attention dropout draws its seed from torch's generator, and the mask is a function
    of that seed alone (``hf_sparse.attention.dropout``): the loss and every gradient are the same on the compiled
    kernels, on the PyTorch path, with the dense reference, and with gradient checkpointing (which replays the
    generator); another torch seed gives another step."""
    cfg = tiny_config(attention_pattern=pattern, attention_probs_dropout_prob=0.3)
    torch.manual_seed(0)
    model = SparseTransformerForMaskedLM(cfg).double().train()
    inputs = _inputs("masked_lm", cfg, n=90)
    labels = inputs["input_ids"].clone()

    def step(backend, fused="all", checkpointing=False, seed=5):
        monkeypatch.setenv("HF_SPARSE_FUSED", fused)
        model.config.attention_backend = backend
        set_checkpointing(model, on=False)
        if checkpointing:
            set_checkpointing(model)
        model.zero_grad()
        torch.manual_seed(seed)
        loss = model(**inputs, labels=labels).loss
        loss.backward()
        return loss.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    ref_loss, ref = step("dense")
    for kw in (
        dict(backend="blocked"),
        dict(backend="blocked", fused="0"),
        dict(backend="blocked", checkpointing=True),
    ):
        loss, grads = step(**kw)
        torch.testing.assert_close(loss, ref_loss, atol=1e-10, rtol=0)
        assert grads.keys() == ref.keys()
        for k in ref:
            torch.testing.assert_close(grads[k], ref[k], atol=1e-10, rtol=0, msg=f"{kw} {k}")
    other = step("blocked", seed=6)[1]
    assert not all(torch.allclose(other[k], ref[k], atol=1e-8, rtol=0) for k in ref)


def test_resize_token_embeddings_keeps_the_head_tied():
    model = SparseTransformerForMaskedLM(tiny_config())
    model.resize_token_embeddings(120)
    assert model.get_input_embeddings().weight.shape[0] == 120
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert model(torch.tensor([[1, 119]])).logits.shape == (1, 2, 120)


def test_too_long_input_is_an_error_not_a_silent_truncation():
    model = AutoModel.from_config(
        tiny_config(max_position_embeddings=32, attention_pattern=P.SlidingWindow(window=8))
    )
    with pytest.raises(ValueError, match="position id 39 is out of range: max_position_embeddings is 32"):
        model(torch.ones(1, 40, dtype=torch.long))


def test_peft_lora_default_targets_and_a_training_step():
    peft = pytest.importorskip("peft")
    model = SparseTransformerForMaskedLM(tiny_config())
    lora = peft.get_peft_model(
        model, peft.LoraConfig(r=4, lora_alpha=8)
    )  # targets from the registered default
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert any("attention.self.query" in n for n in trainable)
    before = {n: p.detach().clone() for n, p in lora.named_parameters()}
    opt = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-2)
    inputs = _inputs("masked_lm", model.config)
    lora(**inputs, labels=inputs["input_ids"]).loss.backward()
    opt.step()
    changed = {n for n, p in lora.named_parameters() if not torch.equal(p, before[n])}
    assert changed and changed <= set(trainable)


def test_peft_prompt_tuning_trains_and_generates_and_prefix_tuning_is_refused():
    """Prompt tuning (virtual token embeddings) trains, and generates with the cache the tokens of a greedy loop
    over [virtual tokens; ids] (PEFT 0.21 looks for the cache as ``past_key_values``, which transformers 5.24 no
    longer passes: without it the virtual tokens were prepended again at every step); prefix tuning hands the
    model keys computed outside it, which an encoder would drop and a pattern cache cannot place: a TypeError
    naming it, never a run without them."""
    from transformers import DynamicCache

    from hf_sparse.models.sparse_transformer import (
        SparseTransformerForCausalLM,
        SparseTransformerForSequenceClassification,
    )

    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    ids = torch.randint(2, 97, (2, 12))
    mask = torch.ones_like(ids)

    def decoder(**kw):
        return SparseTransformerForCausalLM(tiny_decoder_config(P.SlidingWindow(window=6, causal=True), **kw))

    prompt = peft.get_peft_model(
        decoder(initializer_range=0.3), peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4)
    )
    prompt(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    assert prompt.prompt_encoder.default.embedding.weight.grad.abs().sum() > 0
    prompt.eval()
    with torch.no_grad():
        prompt.prompt_encoder.default.embedding.weight.normal_()  # virtual tokens that change the output
    mask[1, :3] = 0  # left padding
    generated = prompt.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0
    )
    base, seq, seq_mask = prompt.get_base_model(), ids, mask
    with torch.no_grad():  # greedy over [virtual tokens; ids], no cache
        for _ in range(6):
            embeds = torch.cat([prompt.get_prompt(batch_size=2), base.get_input_embeddings()(seq)], 1)
            full_mask = torch.cat([torch.ones(2, 4, dtype=mask.dtype), seq_mask], 1)
            logits = base(inputs_embeds=embeds, attention_mask=full_mask, use_cache=False).logits
            seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], 1)
            seq_mask = torch.cat([seq_mask, torch.ones(2, 1, dtype=mask.dtype)], 1)
    assert generated.tolist() == seq.tolist()
    no_cache = prompt.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0, use_cache=False
    )
    assert no_cache.tolist() == seq.tolist()

    cases = [
        (
            decoder(),
            "CAUSAL_LM",
            {"labels": ids},
            r"must be a SparsePatternCache \(keys are kept per pattern\), got DynamicCache holding 4 tokens",
        ),
        (
            SparseTransformerForSequenceClassification(tiny_config()),
            "SEQ_CLS",
            {"labels": torch.tensor([0, 1])},
            "an encoder .* has no cache, got DynamicCache holding 4 tokens",
        ),
    ]
    for model, task, labels, match in cases:
        prefix = peft.get_peft_model(model, peft.PrefixTuningConfig(task_type=task, num_virtual_tokens=4))
        with pytest.raises(TypeError, match=match + ".*PEFT prefix tuning"):
            prefix(input_ids=ids, attention_mask=mask, **labels)
    past = DynamicCache()
    for layer in range(2):
        past.update(torch.randn(2, 4, 4, 8), torch.randn(2, 4, 4, 8), layer)
    with pytest.raises(TypeError, match="holding 4 tokens"):  # not dropped because use_cache is off
        decoder()(ids, past_key_values=past, use_cache=False)


def test_trainer_lowers_the_masked_lm_loss(tmp_path):
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(0)
    cfg = tiny_config(vocab_size=20, attention_pattern=P.SlidingWindow(window=6))
    model = SparseTransformerForMaskedLM(cfg)
    # a learnable language: each sequence counts up modulo 18 from a random start
    data = []
    for s in range(64):
        ids = (torch.arange(32) + s) % 18 + 2
        labels = ids.clone()
        masked = ids.clone()
        pos = torch.arange(32) % 4 == s % 4
        masked[pos] = 1  # mask token
        labels[~pos] = -100
        data.append({"input_ids": masked, "labels": labels})

    def loss_now():
        model.eval()
        with torch.no_grad():
            batch = {k: torch.stack([d[k] for d in data]) for k in data[0]}
            return model(**batch).loss.item()

    start = loss_now()
    args = TrainingArguments(output_dir=str(tmp_path), num_train_epochs=20, per_device_train_batch_size=16, learning_rate=3e-3,
                             report_to=[], save_strategy="no", logging_steps=5, disable_tqdm=True, use_cpu=True)  # fmt: skip
    Trainer(model=model, args=args, train_dataset=data).train()
    assert loss_now() < 0.5 * start


# ----------------------------------------------------------------------------- weights by v5 conventions


def _lm_head_model(head, tie):
    torch.manual_seed(0)
    cfg = _config(head)
    cfg.tie_word_embeddings = tie
    model = HEADS[head].from_config(cfg).eval()
    with torch.no_grad():  # non-zero biases, so that a bias lost on the way shows in the logits
        model.lm_head.bias.normal_()
        if not tie:
            model.lm_head.decoder.weight.normal_()
    return model


@pytest.mark.parametrize("head", ["masked_lm", "causal_lm"])
@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_lm_heads_round_trip_exactly(head, tie, tmp_path):
    model = _lm_head_model(head, tie)
    emb, dec = model.get_input_embeddings().weight, model.lm_head.decoder
    assert (dec.weight is emb) == tie and dec.bias is model.lm_head.bias  # one bias, tied or not
    inputs = _inputs(head, model.config)
    with torch.no_grad():
        before = model(**inputs).logits
    model.save_pretrained(tmp_path)
    again, info = HEADS[head].from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    again.eval()
    assert (again.lm_head.decoder.weight is again.get_input_embeddings().weight) == tie
    with torch.no_grad():
        after = again(**inputs).logits
    torch.testing.assert_close(after, before, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "tie, dropped",
    [(False, "lm_head.bias"), (False, "lm_head.decoder.weight"), (True, "lm_head.dense.weight")],
)
def test_a_checkpoint_missing_a_real_parameter_is_reported_missing(tie, dropped, tmp_path):
    from safetensors.torch import load_file, save_file

    _lm_head_model("masked_lm", tie).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    assert dropped in weights
    del weights[dropped]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    _, info = AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert dropped in info["missing_keys"]


@pytest.mark.parametrize("head", ["masked_lm", "causal_lm"])
@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_lm_heads_have_one_bias_through_resize_save_and_reload(head, tie, tmp_path):
    """Untied, the head once kept an ``lm_head.bias`` next to the ``decoder.bias`` the logits used: without a
    gradient (plain DDP fails on it), not resized by resize_token_embeddings, so the saved model did not load."""
    model = _lm_head_model(head, tie).train()
    inputs = _inputs(head, model.config)
    model(**inputs, labels=inputs["input_ids"]).loss.backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []
    model.eval().resize_token_embeddings(120)
    head_ = model.lm_head
    assert head_.decoder.bias is head_.bias and head_.bias.shape == (120,)
    inputs["input_ids"][0, 0] = 119  # a new token
    with torch.no_grad():
        unshifted = model(**inputs).logits
        head_.bias[100:] += 5.0  # the new rows' bias reaches the logits
        before = model(**inputs).logits
    torch.testing.assert_close(before - unshifted, (torch.arange(120) >= 100).float().expand_as(before) * 5)
    model.save_pretrained(tmp_path)
    again, info = HEADS[head].from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert again.lm_head.decoder.bias is again.lm_head.bias
    with torch.no_grad():
        torch.testing.assert_close(again.eval()(**inputs).logits, before, rtol=0, atol=1e-5)


@pytest.mark.parametrize("head", ["masked_lm", "causal_lm"])
def test_an_untied_checkpoint_with_both_bias_keys_loads_the_decoder_bias(head, tmp_path, caplog, monkeypatch):
    """Earlier releases saved an untied head's unused ``lm_head.bias`` next to ``lm_head.decoder.bias``: such a
    checkpoint loads, silently, with the bias its logits used."""
    import logging

    from safetensors.torch import load_file, save_file

    monkeypatch.setattr(logging.getLogger("transformers"), "propagate", True)  # to caplog

    model = _lm_head_model(head, tie=False)
    inputs = _inputs(head, model.config)
    with torch.no_grad():
        before = model(**inputs).logits
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["lm_head.decoder.bias"] = weights["lm_head.bias"]
    # the old layout: lm_head.bias saved too, unused (never trained)
    weights["lm_head.bias"] = torch.zeros_like(weights["lm_head.bias"])
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with caplog.at_level("WARNING"):
        again, info = HEADS[head].from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert "will NOT tie" not in caplog.text and again.lm_head.decoder.bias is again.lm_head.bias
    with torch.no_grad():
        torch.testing.assert_close(again.eval()(**inputs).logits, before, rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", ["auto", "blocked"])
def test_an_empty_batch_gives_empty_outputs(backend):
    """A rank's empty share of an uneven split: empty logits and hidden states, not a reshape error."""
    cfg = tiny_config(attention_pattern=P.BigBird(block=8), attention_backend=backend)
    model = SparseTransformerForMaskedLM(cfg)
    ids = torch.zeros(0, 40, dtype=torch.long)
    out = model(ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
    assert out.logits.shape == (0, 40, cfg.vocab_size) and out.hidden_states[-1].shape == (
        0,
        40,
        cfg.hidden_size,
    )


@pytest.mark.parametrize("shape", [(12,), (2, 1, 12, 12), (2, 12, 12)], ids=["1d", "4d", "3d"])
def test_an_attention_mask_that_is_not_batch_by_seq_is_refused(shape):
    """A 1D row and a 4D (batch, 1, q, kv) mask raised a bare IndexError."""
    model = SparseTransformerForMaskedLM(tiny_config()).eval()
    ids = torch.randint(2, 97, (1 if len(shape) == 1 else 2, 12))
    with pytest.raises(
        ValueError,
        match=rf"attention_mask must have shape \(batch, seq\) = \(\d, 12\).*got {re.escape(str(shape))}",
    ):
        model(ids, attention_mask=torch.ones(shape, dtype=torch.long))
