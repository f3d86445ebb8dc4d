"""Summarization models: automatic global attention (forward and generate), hf-sparse encoder kernels equal to
LED's attention, LED checkpoints, the extractive head, saving and remote code."""

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSeq2SeqLM,
    LEDConfig,
    LEDForConditionalGeneration,
)

from hf_sparse import patterns as P
from hf_sparse.tasks.summarization.configuration_summarization import (
    LEDSummarizationConfig,
    LongformerExtractiveSummarizationConfig,
)
from hf_sparse.tasks.summarization.data import encode_extractive
from hf_sparse.tasks.summarization.modeling_summarization import (
    LEDForSummarization,
    LongformerForExtractiveSummarization,
    build_global_attention_mask,
)
from tests.models.summarization_tiny import tiny_extractive, tiny_led, tiny_led_config, tiny_tokenizer

SENT, QSEP = 5, 6


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _ids(batch=2, n=37, seed=0, low=7, high=40):
    return torch.randint(low, high, (batch, n), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------ global mask


@pytest.mark.parametrize(
    "global_attention,expected_row0,expected_row1",
    [
        (["first"], [1, 0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0]),
        (["first", "sentences"], [1, 1, 0, 0, 1, 0, 0, 0], [1, 0, 0, 1, 0, 0, 0, 0]),
        (["first", "query"], [1, 1, 1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0]),  # row 1: no separator
        (["sentences", "query"], [1, 1, 1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 0, 0, 0, 0]),
    ],
)
def test_global_mask_rules(global_attention, expected_row0, expected_row1):
    ids = torch.tensor([[0, SENT, 9, QSEP, SENT, 9, QSEP, 9], [0, 9, 9, SENT, 9, 9, 1, 1]])
    mask = torch.tensor([[1] * 8, [1] * 6 + [0, 0]])
    g = build_global_attention_mask(
        ids, mask, global_attention=global_attention, sentence_token_id=SENT, query_separator_token_id=QSEP
    )
    assert g.tolist() == [expected_row0, expected_row1]


def test_global_mask_never_on_padding():
    ids = torch.tensor([[0, 9, SENT, 1]])
    g = build_global_attention_mask(ids, torch.tensor([[0, 1, 0, 0]]), global_attention=["first", "sentences"],
                                    sentence_token_id=SENT)  # fmt: skip
    assert g.tolist() == [[0, 1, 0, 0]]  # "first": the row's first token


def test_global_mask_first_is_each_rows_first_token():
    """A left-padded row's <s> follows its padding: "first" marked position 0 (padding, then dropped), so the row
    had no global token."""
    ids = torch.tensor([[0, 9, 9, 9, 2], [1, 1, 0, 9, 2], [1, 1, 1, 1, 1]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 0, 0]])
    g = build_global_attention_mask(ids, mask, global_attention=["first"])
    assert g.tolist() == [[1, 0, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 0, 0]]


def test_global_mask_from_embeddings_only_first():
    g = build_global_attention_mask(None, None, global_attention=["first"], shape=(2, 5))
    assert g.tolist() == [[1, 0, 0, 0, 0]] * 2
    with pytest.raises(ValueError, match="needs input_ids"):
        build_global_attention_mask(None, None, global_attention=["first", "sentences"], shape=(2, 5))


# ------------------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"global_attention": ["first", "sentences"]}, "needs sentence_token_id"),
        ({"global_attention": ["first", "query"]}, "needs query_separator_token_id"),
        ({"global_attention": ["first", "words"]}, "entries must be in"),
        ({"global_attention": "first"}, "must be a list"),
        ({"sentence_token_id": 10**6}, "token id in"),
        ({"encoder_attention_pattern": {"type": "no_such_pattern"}}, "encoder_attention_pattern"),
        ({"encoder_attention_pattern": [{"type": "sliding_window", "window": 8}] * 3}, "one per layer"),
        ({"encoder_attention_backend": "fast"}, "encoder_attention_backend"),
    ],
)
def test_led_config_rejects(tok, kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny_led_config(tok, **kwargs)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"global_attention": ["first", "sentences"]}, "needs sentence_token_id"),
        ({"global_attention": ["query"]}, "needs query_separator_token_id"),
        ({"global_attention": "first"}, "must be a list"),
        ({"encoder_attention_backend": "fast"}, "encoder_attention_backend"),
    ],
)
def test_led_from_pretrained_kwargs_are_checked(tok, tmp_path, kwargs, match):
    """``from_pretrained(path, key=value)`` sets attributes after ``__init__``: before, the first two failed at the
    first forward with an ``AttributeError`` ('bool' object has no attribute 'long'), and "first" loaded silently."""
    tiny_led(tok).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=match):
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path, **kwargs)


@pytest.mark.parametrize("encoder_attention_pattern", [None, {"type": "longformer", "window": 8}])
def test_led_input_past_the_position_table_is_a_clear_error(tok, encoder_attention_pattern):
    """Before: a bare ``IndexError: index out of range in self``. LED pads to a multiple of the window first."""
    model = tiny_led(tok, encoder_attention_pattern=encoder_attention_pattern)  # 512 positions, window 8
    dec = torch.randint(10, len(tok), (1, 3))
    with torch.no_grad():
        model(input_ids=torch.randint(10, len(tok), (1, 512)), decoder_input_ids=dec)
        with pytest.raises(
            ValueError, match="out of range: max_encoder_position_embeddings is 512 .input of length 513"
        ):
            model(input_ids=torch.randint(10, len(tok), (1, 513)), decoder_input_ids=dec)


def test_led_config_roundtrip_and_auto(tok, tmp_path):
    config = tiny_led_config(tok, global_attention=["sentences", "first"], sentence_token_id=SENT,
                             encoder_attention_pattern=P.BigBird(block=8, seed=1))  # fmt: skip
    assert config.global_attention == ["first", "sentences"]  # canonical order
    assert config.encoder_attention_pattern["type"] == "bigbird"
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, LEDSummarizationConfig)
    assert {k: v for k, v in loaded.to_dict().items() if k != "_name_or_path"} == {
        k: v for k, v in config.to_dict().items() if k != "_name_or_path"
    }
    assert not loaded.supports_query
    assert isinstance(AutoModelForSeq2SeqLM.from_config(config), LEDForSummarization)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"sentence_features": ["position", "nope"]}, "sentence_features"),
        ({"sentence_features": "position"}, "list of names"),
        ({"loss": "hinge"}, "loss must be"),
        ({"positive_weight": 0}, "positive_weight"),
        ({"max_chunk_length": 10**6}, "max_chunk_length"),
        ({"head_hidden_size": 0}, "head_hidden_size"),
    ],
)
def test_extractive_config_rejects(tok, kwargs, match):
    from tests.models.summarization_tiny import tiny_extractive_config

    with pytest.raises(ValueError, match=match):
        tiny_extractive_config(tok, **kwargs)


# ------------------------------------------------------------------------------------------ abstractive


def test_forward_builds_the_mask_when_none_is_given(tok):
    model = tiny_led(tok, global_attention=["first", "sentences"], sentence_token_id=SENT)
    ids = _ids()
    ids[:, [0, 9, 20]] = torch.tensor([0, SENT, SENT])
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0
    labels = _ids(n=6, seed=1)
    explicit = build_global_attention_mask(
        ids, mask, global_attention=["first", "sentences"], sentence_token_id=SENT
    )
    with torch.no_grad():
        auto = model(input_ids=ids, attention_mask=mask, labels=labels)
        given = model(input_ids=ids, attention_mask=mask, global_attention_mask=explicit, labels=labels)
        none = model(
            input_ids=ids, attention_mask=mask, global_attention_mask=torch.zeros_like(ids), labels=labels
        )
    torch.testing.assert_close(auto.logits, given.logits, rtol=0, atol=0)
    torch.testing.assert_close(
        auto.encoder_last_hidden_state, given.encoder_last_hidden_state, rtol=0, atol=0
    )
    change = (auto.encoder_last_hidden_state - none.encoder_last_hidden_state).abs().max()
    assert change > 1e-3  # the globals change the encoder's output


@pytest.mark.parametrize("encoder_attention_pattern", [None, {"type": "longformer", "window": 8}])
def test_mask_reaches_the_encoder_during_generate(tok, encoder_attention_pattern):
    model = tiny_led(tok, global_attention=["first", "sentences"], sentence_token_id=SENT,
                     encoder_attention_pattern=encoder_attention_pattern)  # fmt: skip
    ids = _ids(n=24)
    ids[:, 12] = SENT
    seen = []
    attn = model.led.encoder.layers[0].self_attn.longformer_self_attn
    handle = attn.register_forward_pre_hook(
        lambda m, a, kw: seen.append(kw["is_index_global_attn"][:, :24].clone()), with_kwargs=True
    )
    try:
        out = model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=2, max_new_tokens=4
        )
    finally:
        handle.remove()
    assert out.shape[0] == 2 and len(seen) == 1  # the encoder runs once, with the globals the model built
    assert seen[0].nonzero()[:, 1].tolist() == [0, 12, 0, 12]


@pytest.mark.parametrize("encoder_attention_pattern", [None, {"type": "longformer", "window": 8}])
def test_led_refuses_left_padded_input(tok, encoder_attention_pattern):
    """LED's learned positions count from the first column: a left-padded row generated another summary than the
    same document alone (and lost its global <s>), without a word."""
    model = tiny_led(tok, encoder_attention_pattern=encoder_attention_pattern)
    docs = ["the model reads long papers and meetings . we propose a new method", "we propose a new method"]
    tok.padding_side = "left"
    try:
        left = tok(docs, return_tensors="pt", padding=True)
    finally:
        tok.padding_side = "right"
    right = tok(docs, return_tensors="pt", padding=True)
    kw = dict(max_new_tokens=3, do_sample=False)
    with torch.no_grad():
        with pytest.raises(
            ValueError, match=r"attention_mask: row\(s\) \[1\] start with padding.*padding_side='right'"
        ):
            model.generate(**left, **kw)
        with pytest.raises(ValueError, match="start with padding"):
            model(**left, decoder_input_ids=left["input_ids"][:, :2])
        batch = model.generate(**right, **kw)
        alone = model.generate(**tok(docs[1:], return_tensors="pt"), **kw)
    assert torch.equal(batch[1], alone[0])


def test_led_generate_checks_the_decoder_position_table_up_front(tok):
    """Past max_decoder_position_embeddings LED's decoder raised a bare IndexError, after every step before it; the
    last token is never fed, so 64 rows take 65 decoder tokens (the start token and 64 new ones)."""
    model = tiny_led(tok)  # max_decoder_position_embeddings=64
    ids = torch.randint(10, len(tok), (1, 9))
    calls = []
    model.get_decoder().register_forward_pre_hook(lambda *_: calls.append(1))
    kw = dict(do_sample=False, num_beams=1)
    with torch.no_grad():
        assert model.generate(ids, max_new_tokens=64, min_new_tokens=64, **kw).shape[1] == 65
        calls.clear()
        with pytest.raises(
            ValueError, match=r"max_new_tokens=65 .*max_decoder_position_embeddings=64.* at most 64 new"
        ):
            model.generate(ids, max_new_tokens=65, min_new_tokens=65, **kw)
        with pytest.raises(ValueError, match=r"max_length=66 .*max_decoder_position_embeddings=64"):
            model.generate(ids, max_length=66, **kw)
    assert not calls  # refused before the first decoding step


def _led_pair(window=8, layers=2):
    kw = dict(vocab_size=60, d_model=32, encoder_layers=layers, decoder_layers=1, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, attention_window=window,
              max_encoder_position_embeddings=256, max_decoder_position_embeddings=32)  # fmt: skip
    torch.manual_seed(0)
    return LEDForConditionalGeneration(LEDConfig(**kw)).eval()


@pytest.mark.parametrize("n,globals_", [(37, [0]), (40, [0, 5, 33]), (19, [0, 1, 2, 3])])
def test_sparse_kernels_equal_led_attention(n, globals_):
    """hf-sparse's Longformer pattern over LED's projections gives LED's encoder outputs (no padding needed)."""
    led = _led_pair()
    sparse = LEDForSummarization.from_led(
        led, encoder_attention_pattern={"type": "longformer", "window": 8}
    ).eval()
    ids = _ids(n=n, high=60)
    mask = torch.ones_like(ids)
    mask[1, n - 7 :] = 0
    g = torch.zeros_like(ids)
    g[:, globals_] = 1
    with torch.no_grad():
        want = led.get_encoder()(
            input_ids=ids, attention_mask=mask, global_attention_mask=g
        ).last_hidden_state
        got = sparse.get_encoder()(
            input_ids=ids, attention_mask=mask, global_attention_mask=g
        ).last_hidden_state
    valid = mask.bool()
    torch.testing.assert_close(got[valid], want[valid], rtol=1e-5, atol=2e-5)


def test_sparse_kernels_any_pattern_trains(tok):
    model = tiny_led(
        tok, encoder_attention_pattern=[P.BigBird(block=8, seed=0), P.Dilated(window=8, dilation=2)]
    )
    model.train()
    ids = _ids(n=45)
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=_ids(n=5, seed=2))
    out.loss.backward()
    grads = [
        p.grad
        for n, p in model.named_parameters()
        if "encoder.layers.0.self_attn.longformer_self_attn.query." in n
    ]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)
    with pytest.raises(ValueError, match="output_attentions"):
        model(input_ids=ids, labels=_ids(n=5, seed=2), output_attentions=True)


def test_from_led_copies_weights_and_adds_markers(tok, tmp_path):
    led = _led_pair()
    led.save_pretrained(tmp_path / "led")
    tokenizer = tiny_tokenizer()
    plain = LEDForSummarization.from_led(str(tmp_path / "led")).eval()
    ids = _ids(n=30, high=60)
    g = torch.zeros_like(ids)
    g[:, 0] = 1
    with torch.no_grad():
        want = led(input_ids=ids, global_attention_mask=g, decoder_input_ids=ids[:, :4]).logits
        got = plain(input_ids=ids, decoder_input_ids=ids[:, :4]).logits  # mask built: first token
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)

    small = _led_pair()
    small.resize_token_embeddings(30)  # fewer ids than the tokenizer: it must grow
    wrapped = LEDForSummarization.from_led(small, tokenizer=tokenizer, global_attention=["first", "query"])
    assert wrapped.config.query_separator_token_id == tokenizer.convert_tokens_to_ids("<query_sep>")
    assert wrapped.get_input_embeddings().weight.shape[0] == len(tokenizer) and wrapped.supports_query
    with pytest.raises(ValueError, match="needs the tokenizer"):
        LEDForSummarization.from_led(_led_pair(), global_attention=["first", "sentences"])
    with pytest.raises(TypeError, match="model_or_path"):
        LEDForSummarization.from_led(123)


def test_led_checkpoint_loads_with_from_pretrained(tmp_path):
    led = _led_pair()
    led.save_pretrained(tmp_path)
    model = LEDForSummarization.from_pretrained(tmp_path).eval()
    assert isinstance(model.config, LEDSummarizationConfig) and model.config.global_attention == ["first"]
    ids = _ids(n=16, high=60)
    g = torch.zeros_like(ids)
    g[:, 0] = 1
    with torch.no_grad():
        want = led(input_ids=ids, global_attention_mask=g, decoder_input_ids=ids[:, :3]).logits
        got = model(input_ids=ids, decoder_input_ids=ids[:, :3]).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_save_and_reload(tok, tmp_path):
    model = tiny_led(tok, global_attention=["first", "sentences"], sentence_token_id=SENT,
                     encoder_attention_pattern={"type": "sliding_window", "window": 8})  # fmt: skip
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_summarization.LEDForSummarization"
    assert "long-document-summarization" in config["custom_pipelines"]
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is LEDForSummarization
    shared = loaded.led.shared.weight  # still tied after loading (declared ties, not one shared module)
    assert loaded.led.encoder.embed_tokens.weight is shared and loaded.lm_head.weight is shared
    ids = _ids(n=20)
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(input_ids=ids, decoder_input_ids=ids[:, :3]).logits,
            model(input_ids=ids, decoder_input_ids=ids[:, :3]).logits,
            rtol=0, atol=1e-6,
        )  # fmt: skip


@pytest.mark.parametrize("encoder_attention_pattern", [None, {"type": "longformer", "window": 8}])
def test_checkpoint_without_the_embeddings_reports_them_missing(tok, tmp_path, encoder_attention_pattern):
    """The shared embedding (source of the encoder's, decoder's and LM head's tied weights) is a real parameter:
    a checkpoint without it reports it missing, so it is initialised, not kept as whatever the model held."""
    from safetensors.torch import load_file, save_file

    tiny_led(tok, encoder_attention_pattern=encoder_attention_pattern).save_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    weights = {k: v for k, v in load_file(path).items() if "shared" not in k and "embed_tokens." not in k}
    save_file(weights, path, metadata={"format": "pt"})
    loaded, info = LEDForSummarization.from_pretrained(tmp_path, output_loading_info=True)
    assert "led.shared.weight" in info["missing_keys"]
    assert not any(k.startswith("led.encoder.layers") for k in info["missing_keys"])


@pytest.mark.hub
def test_led_base_from_the_hub():
    """The online path: allenai/led-base-16384 wrapped with sentence globals and hf-sparse kernels."""
    from transformers import AutoTokenizer

    if os.environ.get("HF_HUB_OFFLINE") == "1":
        pytest.skip("offline")
    tokenizer = AutoTokenizer.from_pretrained("allenai/led-base-16384")
    direct = LEDForSummarization.from_pretrained("allenai/led-base-16384")
    assert isinstance(direct, LEDForSummarization)
    model = LEDForSummarization.from_led(
        "allenai/led-base-16384", tokenizer=tokenizer, global_attention=["first", "sentences"],
        encoder_attention_pattern={"type": "longformer", "window": 1024},
    ).eval()  # fmt: skip
    ids = tokenizer(
        "<sent> Long documents need sparse attention. <sent> This one is short.", return_tensors="pt"
    )
    out = model.generate(**ids, max_new_tokens=8)
    assert out.shape[0] == 1


# ------------------------------------------------------------------------------------------ extractive


@pytest.mark.parametrize("backbone_type", ["longformer", "sparse_transformer"])
@pytest.mark.parametrize("loss", ["bce", "listwise"])
def test_extractive_scores_and_loss(tok, backbone_type, loss):
    model = tiny_extractive(tok, backbone_type, loss=loss, positive_weight=5.0)
    sents = ["The model reads long papers.", "We propose a new method.", "The end."]
    chunk = encode_extractive(tok, sents, max_length=64, sentence_token_id=SENT)[0]
    ids = torch.tensor(
        [chunk.input_ids, chunk.input_ids[:8] + [tok.eos_token_id] + [1] * (len(chunk.input_ids) - 9)]
    )
    mask = (ids != 1).long()
    feats = torch.rand(2, 3, 2)
    labels = torch.tensor([[0.0, 1.0, 0.0], [1.0, -100, -100]])
    model.train()
    out = model(input_ids=ids, attention_mask=mask, sentence_features=feats, labels=labels)
    assert out.logits.shape == (2, 3)
    assert out.logits[1, 1:].eq(-1e4).all()  # row 1 has one sentence marker
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert model.backbone.get_input_embeddings().weight.grad.abs().sum() > 0


def test_extractive_global_attention_on_markers(tok):
    model = tiny_extractive(tok)
    ids = torch.tensor([[0, SENT, 9, 9, SENT, 9, 2]])
    g = model.default_global_attention_mask(ids, torch.ones_like(ids))
    assert g.tolist() == [[1, 1, 0, 0, 1, 0, 0]]
    positions, valid = model.sentence_positions(ids)
    assert positions.tolist() == [[1, 4]] and valid.all()


def test_extractive_rejects_bad_inputs(tok):
    model = tiny_extractive(tok)
    ids = torch.tensor([[0, SENT, 9, SENT, 9, 2]])
    with pytest.raises(ValueError, match="pass sentence_features"):
        model(input_ids=ids)
    with pytest.raises(ValueError, match="sentence_features must be"):
        model(input_ids=ids, sentence_features=torch.zeros(1, 2, 5))
    with pytest.raises(ValueError, match="markers"):
        model(input_ids=ids, sentence_features=torch.zeros(1, 1, 2))
    with pytest.raises(ValueError, match="needs input_ids"):
        model(input_ids=None)


def test_listwise_loss_prefers_oracle_sentences(tok):
    """Training on one chunk raises the oracle sentence to the top score."""
    torch.manual_seed(0)
    model = tiny_extractive(tok, loss="listwise", sentence_features=[])
    ids = torch.tensor([[0] + [t for k in range(6) for t in (SENT, 7 + k, 20 + k)] + [2]])
    labels = torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0, 0.0]])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(30):
        opt.zero_grad()
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        assert model(input_ids=ids).logits.argmax(-1).item() == 3


def test_listwise_loss_groups_rows_by_document(tok):
    """With document_index the softmax runs over all chunks of a document (a chunk without an oracle sentence
    still contributes its sentences as negatives); without it every row is ranked alone."""
    model = tiny_extractive(tok, loss="listwise", sentence_features=[])
    logits = torch.tensor([[2.0, 0.0], [1.0, -1e4], [0.5, 3.0]])
    valid = torch.tensor([[True, True], [True, False], [True, True]])
    labels = torch.tensor([[1.0, 0.0], [0.0, -100.0], [0.0, 1.0]])
    grouped = model._loss(logits, labels, valid, torch.tensor([0, 0, 1]))
    doc0 = -(2.0 - torch.logsumexp(torch.tensor([2.0, 0.0, 1.0]), 0))
    doc1 = -(3.0 - torch.logsumexp(torch.tensor([0.5, 3.0]), 0))
    torch.testing.assert_close(grouped, (doc0 + doc1) / 2)
    alone = model._loss(logits, labels, valid)  # row 1 has no oracle sentence: skipped
    row0 = -(2.0 - torch.logsumexp(torch.tensor([2.0, 0.0]), 0))
    torch.testing.assert_close(alone, (row0 + doc1) / 2)
    with pytest.raises(ValueError, match="document_index"):
        model._loss(logits, labels, valid, torch.tensor([0, 1]))


def test_extractive_auto_and_save(tok, tmp_path):
    model = tiny_extractive(tok)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"]["AutoModel"] == (
        "modeling_summarization.LongformerForExtractiveSummarization"
    )
    loaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(loaded, LongformerForExtractiveSummarization)
    assert isinstance(loaded.config, LongformerExtractiveSummarizationConfig)
    model.resize_token_embeddings(len(tok) + 3)
    assert model.config.backbone["vocab_size"] == len(tok) + 3


def test_saved_summarizers_load_without_the_package(tok, tmp_path):
    """Both models' folders load with trust_remote_code where hf_sparse cannot be imported."""
    led = tiny_led(tok, global_attention=["first", "sentences"], sentence_token_id=SENT,
                   encoder_attention_pattern={"type": "longformer", "window": 8})  # fmt: skip
    ext = tiny_extractive(tok, "sparse_transformer")
    led.save_pretrained(tmp_path / "led")
    ext.save_pretrained(tmp_path / "ext")
    ids = torch.tensor([[0, SENT, 9, 10, 11, SENT, 12, 13, 2]])
    feats = torch.rand(1, 2, 2)
    with torch.no_grad():
        want_led = led(input_ids=ids, decoder_input_ids=ids[:, :3]).logits
        want_ext = ext(input_ids=ids, sentence_features=feats).logits
    torch.save({"ids": ids, "feats": feats}, tmp_path / "inputs.pt")
    script = f"""
import sys; sys.modules['hf_sparse'] = None; sys.dont_write_bytecode = True
import torch, transformers
d = torch.load({str(tmp_path / "inputs.pt")!r})
led = transformers.AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path / "led")!r}, trust_remote_code=True).eval()
ext = transformers.AutoModel.from_pretrained({str(tmp_path / "ext")!r}, trust_remote_code=True).eval()
with torch.no_grad():
    a = led(input_ids=d['ids'], decoder_input_ids=d['ids'][:, :3]).logits
    b = ext(input_ids=d['ids'], sentence_features=d['feats']).logits
torch.save((a, b), {str(tmp_path / "out.pt")!r})
print(type(led).__module__, type(ext).__module__)
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_MODULES_CACHE"] = str(tmp_path / "modules")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=240)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("transformers_modules") == 2
    got_led, got_ext = torch.load(tmp_path / "out.pt")
    torch.testing.assert_close(got_led, want_led, rtol=0, atol=1e-6)
    torch.testing.assert_close(got_ext, want_ext, rtol=0, atol=1e-6)


def test_gradient_checkpointing_config_checkpoints_the_new_encoder_without_deprecation_warnings(tok):
    """``gradient_checkpointing=True`` reaches the hf-sparse encoder that replaces LED's, through whichever of
    transformers' names (``activation_checkpointing_enable`` from 5.24, ``gradient_checkpointing_enable`` before)
    the installed version has, without the deprecated alias's FutureWarning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        model = LEDForSummarization(tiny_led_config(tok, gradient_checkpointing=True))
    assert model.led.encoder.gradient_checkpointing
    assert all(layer.gradient_checkpointing for layer in model.led.encoder.layers)
    assert not LEDForSummarization(tiny_led_config(tok)).led.encoder.gradient_checkpointing
