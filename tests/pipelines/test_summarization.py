"""The long-document-summarization pipeline: extractive budgets and chunking, abstractive generation options,
truncation warnings, plain LED, and clear errors for bad input."""

import copy

import pytest
import torch
from transformers import LEDConfig, LEDForConditionalGeneration, pipeline

import hf_sparse  # noqa: F401  (registers the task)
from hf_sparse.tasks.summarization.data import synthetic_copy_documents
from hf_sparse.tasks.summarization.modeling_summarization import LongformerForExtractiveSummarization
from hf_sparse.tasks.summarization.pipeline import LongDocumentSummarizationPipeline
from tests.models.summarization_tiny import tiny_extractive, tiny_extractive_config, tiny_led, tiny_tokenizer
from tests.pipelines.outputs import assert_same_outputs

SENT, QSEP = 5, 6
DOC = " ".join(synthetic_copy_documents(1, num_sentences=(8, 8), seed=7)[0]["document"].split())


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def extractive(tok):
    torch.manual_seed(0)
    return pipeline("long-document-summarization", model=tiny_extractive(tok), tokenizer=tok)


@pytest.fixture(scope="module")
def abstractive(tok):
    torch.manual_seed(0)
    model = tiny_led(tok, global_attention=["first", "sentences", "query"], sentence_token_id=SENT,
                     query_separator_token_id=QSEP)  # fmt: skip
    return pipeline("long-document-summarization", model=model, tokenizer=tok)


def test_task_is_registered(extractive):
    assert isinstance(extractive, LongDocumentSummarizationPipeline) and extractive.kind == "extractive"


def test_extractive_budgets(extractive):
    out = extractive(DOC)
    assert out["num_sentences"] == 8 and out["chunks"] == 1
    assert len(out["sentences"]) == 3 and out["sentence_indices"] == sorted(out["sentence_indices"])
    assert out["summary_text"] == " ".join(out["sentences"])
    two = extractive(DOC, max_sentences=2)
    assert len(two["sentences"]) == 2
    words = extractive(DOC, max_words=12)
    assert sum(len(s.split()) for s in words["sentences"]) <= 12 and words["sentences"]
    assert extractive({"text": DOC})["summary_text"] == out["summary_text"]
    batch = extractive([DOC, DOC], max_sentences=1)
    assert isinstance(batch, list) and len(batch) == 2


def test_extractive_long_input_is_chunked_not_truncated(tok):
    model = tiny_extractive(tok, max_chunk_length=40)
    pipe = pipeline("long-document-summarization", model=model, tokenizer=tok)
    long_doc = " ".join(d["document"] for d in synthetic_copy_documents(6, seed=2))
    out = pipe(long_doc, max_sentences=4)
    assert out["chunks"] > 3  # 40 tokens per chunk
    assert out["num_sentences"] == len(hf_sparse.tasks.summarization.sentences.split_sentences(long_doc))
    # every sentence got a score: the scores of the picked sentences are real (not the padding score)
    assert all(s > -1e3 for s in out["scores"]) and len(out["sentences"]) == 4


def _documents(n: int, seed: int) -> list[str]:
    """Documents of different lengths (3 to 20 sentences)."""
    docs = synthetic_copy_documents(n, num_sentences=(3, 20), seed=seed)
    return [" ".join(d["document"].split()) for d in docs]


@pytest.mark.parametrize("backbone_type", ["longformer", "sparse_transformer"])
def test_extractive_batched_equals_unbatched(tok, backbone_type):
    """Chunks of several documents share a forward pass; every chunk's sentence scores stay its own."""
    torch.manual_seed(0)
    model = tiny_extractive(tok, backbone_type, max_chunk_length=40)
    docs = _documents(5, seed=3)
    one = pipeline("long-document-summarization", model=model, tokenizer=tok)(docs, batch_size=1)
    assert len({o["chunks"] for o in one}) > 1 and max(o["chunks"] for o in one) > 1
    pipe = pipeline("long-document-summarization", model=model, tokenizer=tok, batch_size=3)
    assert_same_outputs(pipe(docs), one)
    assert_same_outputs(pipe(docs, batch_size=1), one)  # the call overrides the constructor
    assert_same_outputs(pipe(docs[2]), one[2])  # a single document's chunks are batched too


def test_abstractive_batched_equals_unbatched(abstractive):
    docs = _documents(4, seed=4)
    one = abstractive(docs, batch_size=1, max_length=8)
    assert len({o["input_tokens"] for o in one}) == len(docs)
    assert_same_outputs(abstractive(docs, batch_size=3, max_length=8), one)


def test_abstractive_generation_options(abstractive):
    out = abstractive(
        DOC, num_beams=2, max_length=6, min_length=2, no_repeat_ngram_size=2, length_penalty=1.5
    )
    assert isinstance(out["summary_text"], str) and out["truncated"] is False
    ids = abstractive.tokenizer(out["summary_text"], add_special_tokens=False)["input_ids"]
    assert len(ids) <= 6
    q = abstractive(DOC, query="w1 w2", max_length=4)
    assert q["input_tokens"] > out["input_tokens"]  # query prefix and separator
    assert abstractive({"text": DOC, "query": "w3"}, max_length=4)["summary_text"] is not None


def test_abstractive_mask_reaches_the_encoder(abstractive):
    seen = []
    attn = abstractive.model.led.encoder.layers[0].self_attn.longformer_self_attn
    handle = attn.register_forward_pre_hook(
        lambda m, a, kw: seen.append(kw["is_index_global_attn"][0]), with_kwargs=True
    )
    try:
        abstractive(DOC, query="w1 w2", max_length=4)
    finally:
        handle.remove()
    ids = next(iter(abstractive.preprocess(DOC, query="w1 w2")))["input_ids"][0]
    g = seen[0][: len(ids)]
    assert g[:4].all()  # <s>, query w1 w2, <query_sep>
    assert g[ids == SENT].all() and int(g.sum()) == 4 + int((ids == SENT).sum())


def test_abstractive_long_input_warns_and_says_so(abstractive):
    with pytest.warns(UserWarning, match=r"truncated to its first 20 tokens"):
        out = abstractive(DOC, max_input_length=20, max_length=4)
    assert out["truncated"] is True and out["input_tokens"] > 20
    with pytest.raises(ValueError, match="encoder limit"):
        abstractive(DOC, max_input_length=10**6)


def test_plain_led_gets_a_global_first_token(tok):
    kw = dict(vocab_size=len(tok), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, attention_window=8,
              max_encoder_position_embeddings=256, max_decoder_position_embeddings=32)  # fmt: skip
    led = LEDForConditionalGeneration(LEDConfig(**kw)).eval()
    seen = []
    led.led.encoder.layers[0].self_attn.longformer_self_attn.register_forward_pre_hook(
        lambda m, a, kw: seen.append(kw["is_index_global_attn"][0].nonzero().flatten().tolist()),
        with_kwargs=True,
    )
    pipe = pipeline("long-document-summarization", model=led, tokenizer=tok)
    assert isinstance(pipe(DOC, max_length=4)["summary_text"], str)
    assert seen == [[0]]
    with pytest.raises(ValueError, match="no query support"):
        pipe(DOC, query="w1")


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda p: p(""), ValueError, "text is empty"),
        (lambda p: p("   \n"), ValueError, "text is empty"),
        (lambda p: p(42), TypeError, "text must be a str"),
        (lambda p: p(["ok. Fine.", None]), TypeError, "text must be a str"),
        (lambda p: p({"document": DOC}), ValueError, "'text' \\(required\\)"),
        (lambda p: p(DOC, query="w1"), ValueError, "no query support"),
        (lambda p: p(DOC, max_sentences=0), ValueError, "max_sentences must be a positive int, got 0"),
        (lambda p: p(DOC, max_words=-3), ValueError, "max_words must be a positive int, got -3"),
        (lambda p: p(DOC, max_sentences=2.5), ValueError, "max_sentences must be a positive int, got 2.5"),
        (lambda p: p(DOC, num_beams=4), ValueError, "apply to abstractive models"),
        (lambda p: p(DOC, temperature=0.5), ValueError, "unknown option"),
        (lambda p: p("\u200b\u200b"), ValueError, r"text is empty: '\\u200b\\u200b' gives no token"),
        (lambda p: p({"text": "\x00\x00"}), ValueError, r"text is empty: '\\x00\\x00' gives no token"),
        (lambda p: p(DOC, 1), TypeError, r"takes one positional argument \(the inputs\), got 1 more \[1\]"),
        (lambda p: p([DOC, DOC], 1), TypeError, "takes one positional argument"),
    ],
)
def test_extractive_bad_input(extractive, call, error, match):
    with pytest.raises(error, match=match):
        call(extractive)


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda p: p(""), ValueError, "text is empty"),
        (lambda p: p(b"bytes"), TypeError, "text must be a str"),
        (lambda p: p(DOC, query=3), TypeError, "query must be a str"),
        (lambda p: p(DOC, query=" "), ValueError, "query is empty"),
        (lambda p: p({"text": DOC, "query": "a"}, query="b"), ValueError, "give it once"),
        (lambda p: p(DOC, max_sentences=3), ValueError, "apply to extractive models"),
        (lambda p: p(DOC, num_beams=0), ValueError, "num_beams must be a positive int, got 0"),
        (lambda p: p(DOC, min_length=5, max_length=2), ValueError, "min_length"),
        (lambda p: p(DOC, length_penalty="long"), TypeError, "length_penalty"),
        (lambda p: p(DOC, max_input_length=0), ValueError, "max_input_length must be a positive int, got 0"),
        (lambda p: p("\u200b\u200b"), ValueError, r"text is empty: '\\u200b\\u200b' gives no token"),
        (lambda p: p("\x00\x00"), ValueError, r"text is empty: '\\x00\\x00' gives no token"),
        (lambda p: p(DOC, query="\u200b"), ValueError, r"query is empty: '\\u200b' gives no token"),
        (lambda p: p(DOC, 8), TypeError, r"takes one positional argument \(the inputs\), got 1 more \[8\]"),
    ],
)
def test_abstractive_bad_input(abstractive, call, error, match):
    with pytest.raises(error, match=match):
        call(abstractive)


def test_rejects_other_models(tok):
    from hf_sparse import SparseTransformerConfig, SparseTransformerModel

    model = SparseTransformerModel(SparseTransformerConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                                           num_attention_heads=2, intermediate_size=64))  # fmt: skip
    with pytest.raises(ValueError, match="model_type='sparse_transformer'"):
        LongDocumentSummarizationPipeline(model=model, tokenizer=tok)


def test_progress_bar_over_many_documents(extractive, capsys):
    shown = extractive([DOC] * 16)
    assert len(shown) == 16 and "long-document-summarization" in capsys.readouterr().err
    assert extractive([DOC] * 16, progress=False) == shown
    assert "long-document-summarization" not in capsys.readouterr().err
    with pytest.raises(ValueError, match="no documents"):
        extractive([])


@pytest.mark.parametrize("kind", ["extractive", "abstractive"])
def test_constructor_progress_is_the_default_of_every_call(tok, kind, capsys):
    torch.manual_seed(0)
    model = tiny_extractive(tok) if kind == "extractive" else tiny_led(tok)
    kwargs = {} if kind == "extractive" else {"max_length": 4}
    quiet = pipeline("long-document-summarization", model=model, tokenizer=tok, progress=False)
    capsys.readouterr()
    assert len(quiet([DOC] * 16, **kwargs)) == 16
    assert "long-document-summarization" not in capsys.readouterr().err
    shown = pipeline("long-document-summarization", model=model, tokenizer=tok, progress=True)
    assert len(shown([DOC] * 2, **kwargs)) == 2  # a bar even for a short list
    assert "long-document-summarization" in capsys.readouterr().err


def test_abstractive_random_blocks_give_the_same_summaries_whatever_the_batch_size(tok):
    """An LED encoder on hf-sparse BigBird kernels draws its random blocks for the padded length: documents
    batched with longer ones got other summaries than alone."""
    torch.manual_seed(0)
    model = tiny_led(tok, init_std=0.3, encoder_attention_pattern={"type": "bigbird", "block": 8, "seed": 0},
                     global_attention=["first", "sentences"], sentence_token_id=SENT)  # fmt: skip
    pipe = pipeline("long-document-summarization", model=model, tokenizer=tok)
    docs = [
        " ".join(d["document"].split()) for d in synthetic_copy_documents(3, num_sentences=(3, 40), seed=3)
    ]
    one = [pipe(d, max_length=8) for d in docs]
    assert len({o["input_tokens"] for o in one}) == 3
    assert_same_outputs(pipe(docs, batch_size=3, max_length=8), one)


def test_extractive_sparse_backbone_is_not_padded_past_its_position_table(tok):
    """200 positions (not a multiple of 64): chunks of up to 200 tokens were padded to 256."""
    cfg = tiny_extractive_config(tok, "sparse_transformer")
    cfg.backbone["max_position_embeddings"] = 200
    torch.manual_seed(0)
    pipe = pipeline("long-document-summarization", model=LongformerForExtractiveSummarization(cfg).eval(),
                    tokenizer=tok)  # fmt: skip
    docs = [DOC * 3, DOC]
    one = pipe(docs, batch_size=1)
    assert one[0]["num_sentences"] > one[1]["num_sentences"]
    assert_same_outputs(pipe(docs, batch_size=2), one)


def test_num_return_sequences_keeps_each_documents_summaries(abstractive):
    """generate_kwargs num_return_sequences=n: every document gets its own n summaries (a list of n dicts,
    best first, as transformers' text2text-generation), batched exactly as one at a time."""
    docs = _documents(3, seed=5)
    gen = dict(
        max_length=8, no_repeat_ngram_size=1, generate_kwargs={"num_return_sequences": 2, "num_beams": 2}
    )
    one = [abstractive(d, **gen) for d in docs]
    assert all(isinstance(o, list) and len(o) == 2 for o in one)
    best = [abstractive(d, max_length=8, no_repeat_ngram_size=1, num_beams=2)["summary_text"] for d in docs]
    assert [o[0]["summary_text"] for o in one] == best
    assert_same_outputs(abstractive(docs, batch_size=3, **gen), one)
    assert isinstance(abstractive(DOC, max_length=4, generate_kwargs={"num_return_sequences": 1}), dict)


def _plain_led(tok):
    torch.manual_seed(0)
    kw = dict(vocab_size=len(tok), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, attention_window=8,
              max_encoder_position_embeddings=256, max_decoder_position_embeddings=32,
              pad_token_id=tok.pad_token_id, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)  # fmt: skip
    return LEDForConditionalGeneration(LEDConfig(**kw)).eval()


@pytest.mark.parametrize("kind", ["extractive", "abstractive", "plain_led"])
def test_left_padding_tokenizer_gives_the_same_outputs(tok, kind):
    """Rows are padded on the right whatever the tokenizer's padding_side (global first token, sentence
    features), and the tokenizer keeps its own setting."""
    torch.manual_seed(0)
    model = {"extractive": lambda: tiny_extractive(tok, max_chunk_length=40), "abstractive": lambda: tiny_led(tok),
             "plain_led": lambda: _plain_led(tok)}[kind]()  # fmt: skip
    left = copy.deepcopy(tok)
    left.padding_side = "left"
    kw = {} if kind == "extractive" else {"max_length": 8, "no_repeat_ngram_size": 1}
    docs = _documents(3, seed=4)
    want = pipeline("long-document-summarization", model=model, tokenizer=tok)(docs, batch_size=1, **kw)
    pipe = pipeline("long-document-summarization", model=model, tokenizer=left)
    seen = []
    if kind != "extractive":
        model.led.encoder.layers[0].self_attn.longformer_self_attn.register_forward_pre_hook(
            lambda m, a, kw: seen.append(kw["is_index_global_attn"].clone()), with_kwargs=True
        )
    assert_same_outputs(pipe(docs, batch_size=3, **kw), want, tol=1e-5)
    assert_same_outputs([pipe(d, **kw) for d in docs], want, tol=1e-5)
    assert left.padding_side == "left"
    if seen:  # the first token of every row of the batch is global
        assert seen[0].shape[0] == 3 and seen[0][:, 0].all()


def test_long_query_is_reported_and_warned(abstractive, tok):
    query = " ".join(["w1"] * 140)  # 140 tokens: the abstractive model reads 128
    with pytest.warns(
        UserWarning, match=r"query is longer than the model reads.*last 12 tokens were not read"
    ):
        out = abstractive(DOC, query=query, max_length=4)
    assert out["truncated"] is True and out["truncated_query_tokens"] == 12
    short = abstractive(DOC, query="w1", max_length=4)
    assert short["truncated"] is False and short["truncated_query_tokens"] == 0
    assert out["input_tokens"] == short["input_tokens"] + 139  # the whole query counted
    model = tiny_extractive(tok, query_separator_token_id=QSEP)
    pipe = pipeline("long-document-summarization", model=model, tokenizer=tok)
    with pytest.warns(UserWarning, match=r"last 76 tokens were not read"):  # the extractive model reads 64
        assert pipe(DOC, query=query)["truncated_query_tokens"] == 76
    assert pipe(DOC, query="w1")["truncated_query_tokens"] == 0


def test_default_input_limit_is_a_multiple_of_leds_window(tok):
    """LED pads its input to a multiple of attention_window: the default limit rounds the position table
    (100) down to one (96), so a long document is truncated, not a position error."""
    torch.manual_seed(0)
    pipe = pipeline("long-document-summarization", tokenizer=tok,
                    model=tiny_led(tok, max_encoder_position_embeddings=100, attention_window=16))  # fmt: skip
    assert pipe.max_input_tokens() == 96
    long_doc = " ".join(_documents(6, seed=1))
    with pytest.warns(UserWarning, match=r"max_input_length=96; it was truncated to its first 96 tokens"):
        out = pipe(long_doc, max_length=4)
    assert out["truncated"] is True and out["input_tokens"] > 100
    with pytest.raises(ValueError, match="max_input_length must be <= 96"):
        pipe(long_doc, max_input_length=100)
    sparse = tiny_led(tok, max_encoder_position_embeddings=100, encoder_attention_pattern={"type": "longformer",
                                                                                         "window": 8})  # fmt: skip
    assert pipeline("long-document-summarization", model=sparse, tokenizer=tok).max_input_tokens() == 100


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (
            {"max_length": 66},
            r"max_length=66 is past the decoder's position table .*=64\): max_length must be <= 65",
        ),
        ({"max_new_tokens": 65}, r"max_new_tokens=65 .*max_new_tokens must be <= 64"),
        ({"generate_kwargs": {"max_new_tokens": 100}}, r"max_new_tokens=100 .* must be <= 64"),
        ({"generate_kwargs": {"max_length": 100}}, r"max_length=100 .* must be <= 65"),
    ],
)
def test_summary_past_the_decoder_position_table_is_a_value_error(abstractive, kwargs, match):
    with pytest.raises(ValueError, match=match):
        abstractive(DOC, **kwargs)


def test_new_token_options_are_top_level_options(abstractive):
    out = abstractive(DOC, max_new_tokens=3, min_new_tokens=1)
    assert len(abstractive.tokenizer(out["summary_text"], add_special_tokens=False)["input_ids"]) <= 3
    with pytest.raises(ValueError, match="max_new_tokens must be a positive int, got 0"):
        abstractive(DOC, max_new_tokens=0)


@pytest.mark.parametrize("where", ["generate_kwargs", "generation_config"])
def test_a_dict_from_generate_gives_the_same_summaries(abstractive, where):
    plain = abstractive([DOC, DOC[: len(DOC) // 2]], max_new_tokens=5, batch_size=2)
    config = abstractive.model.generation_config
    saved = config.return_dict_in_generate
    try:
        if where == "generate_kwargs":
            kwargs = {"generate_kwargs": {"return_dict_in_generate": True, "output_scores": True}}
        else:
            config.return_dict_in_generate, kwargs = True, {}
        got = abstractive([DOC, DOC[: len(DOC) // 2]], max_new_tokens=5, batch_size=2, **kwargs)
    finally:
        config.return_dict_in_generate = saved
    assert got == plain
