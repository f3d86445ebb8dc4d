"""Converted checkpoints reproduce their source models."""

import pytest
import torch
import transformers
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertModel,
    LongformerConfig,
    LongformerForMaskedLM,
    LongformerModel,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaForTokenClassification,
)

from hf_sparse import patterns as P
from hf_sparse.conversion import from_bert, from_longformer

SMALL = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip


def _ids(cfg, B=2, n=40, pad=None):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, cfg.vocab_size, (B, n), generator=g)
    am = torch.ones(B, n, dtype=torch.long)
    am[1, n - 7 :] = 0
    if pad is not None:
        ids[1, n - 7 :] = pad
    return ids, am


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: BertModel(BertConfig(max_position_embeddings=64, **SMALL)), "last_hidden_state"),
        (lambda: BertForMaskedLM(BertConfig(max_position_embeddings=64, **SMALL)), "logits"),
        (
            lambda: BertForSequenceClassification(
                BertConfig(max_position_embeddings=64, num_labels=3, **SMALL)
            ),
            "logits",
        ),
        (lambda: RobertaForMaskedLM(RobertaConfig(max_position_embeddings=66, **SMALL)), "logits"),
        # untied decoders keep their own weight; BERT's head transform uses hidden_act (RoBERTa's: gelu)
        (
            lambda: BertForMaskedLM(
                BertConfig(max_position_embeddings=64, tie_word_embeddings=False, **SMALL)
            ),
            "logits",
        ),
        (
            lambda: RobertaForMaskedLM(
                RobertaConfig(max_position_embeddings=66, tie_word_embeddings=False, **SMALL)
            ),
            "logits",
        ),
        (
            lambda: BertForMaskedLM(BertConfig(max_position_embeddings=64, hidden_act="relu", **SMALL)),
            "logits",
        ),
        (
            lambda: BertForMaskedLM(BertConfig(max_position_embeddings=64, hidden_act="silu", **SMALL)),
            "logits",
        ),
        (
            lambda: RobertaForMaskedLM(RobertaConfig(max_position_embeddings=66, hidden_act="relu", **SMALL)),
            "logits",
        ),
        (
            lambda: RobertaForTokenClassification(
                RobertaConfig(max_position_embeddings=66, num_labels=5, **SMALL)
            ),
            "logits",
        ),
    ],
)
def test_bert_and_roberta_with_a_covering_pattern_give_the_original_outputs(make, field):
    torch.manual_seed(0)
    src = make().eval()
    ids, am = _ids(src.config, pad=src.config.pad_token_id)
    model = from_bert(src, P.SlidingWindow(window=128)).eval()  # covers all 40 positions
    with torch.no_grad():
        want = getattr(src(input_ids=ids, attention_mask=am), field)
        got = getattr(model(input_ids=ids, attention_mask=am), field)
    if got.dim() > 2:  # per-token outputs: padding positions are not compared (zero attention there)
        got, want = got[am.bool()], want[am.bool()]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_saved_checkpoint_keeps_its_head(tmp_path):
    """from_bert(path) builds the head the checkpoint has (BertForMaskedLM -> masked LM), not the base."""
    from hf_sparse.models.sparse_transformer import SparseTransformerForMaskedLM

    torch.manual_seed(0)
    src = BertForMaskedLM(BertConfig(max_position_embeddings=64, **SMALL)).eval()
    src.save_pretrained(tmp_path / "mlm")
    model = from_bert(str(tmp_path / "mlm"), P.SlidingWindow(window=128)).eval()
    assert isinstance(model, SparseTransformerForMaskedLM)
    ids, am = _ids(src.config)
    with torch.no_grad():
        want, got = (
            src(input_ids=ids, attention_mask=am).logits,
            model(input_ids=ids, attention_mask=am).logits,
        )
    torch.testing.assert_close(got[am.bool()], want[am.bool()], atol=1e-5, rtol=1e-5)
    assert type(from_bert(str(tmp_path / "mlm"), P.SlidingWindow(window=128), head="base")).__name__ == (
        "SparseTransformerModel"
    )


def test_an_untied_relu_head_saves_and_reloads(tmp_path):
    """The converted head's activation and untied decoder are in its config and weights: it reloads as it was."""
    from transformers import AutoModelForMaskedLM

    torch.manual_seed(0)
    cfg = BertConfig(max_position_embeddings=64, tie_word_embeddings=False, hidden_act="relu", **SMALL)
    src = BertForMaskedLM(cfg).eval()
    model = from_bert(src, P.SlidingWindow(window=128)).eval()
    assert model.config.lm_head_act == "relu" and model.config.tie_word_embeddings is False
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert loaded.config.lm_head_act == "relu" and loaded.config.tie_word_embeddings is False
    ids, am = _ids(cfg)
    with torch.no_grad():
        want = src(input_ids=ids, attention_mask=am).logits
        got = loaded(input_ids=ids, attention_mask=am).logits
    torch.testing.assert_close(got[am.bool()], want[am.bool()], atol=1e-5, rtol=1e-5)


def test_longer_context_tiles_position_embeddings():
    src = RobertaForMaskedLM(RobertaConfig(max_position_embeddings=66, **SMALL))
    model = from_bert(src, P.SlidingWindow(window=16), max_position_embeddings=258)
    old = src.roberta.embeddings.position_embeddings.weight
    new = model.sparse_transformer.embeddings.position_embeddings.weight
    assert new.shape[0] == 258 and model.config.max_position_embeddings == 258
    torch.testing.assert_close(new[:66], old)
    torch.testing.assert_close(new[66:130], old[2:66])  # RoBERTa offset: rows 0, 1 are padding rows
    ids = torch.randint(3, 99, (1, 200))
    assert model(ids).logits.shape == (1, 200, 99)  # runs past the old limit


@pytest.mark.parametrize("globals_", [False, True])
@pytest.mark.parametrize("windows", [[8, 8], [4, 8]])
def test_longformer_conversion_matches_longformer_hidden_states(globals_, windows):
    torch.manual_seed(0)
    cfg = LongformerConfig(max_position_embeddings=130, attention_window=windows, **SMALL)
    src = LongformerModel(cfg).eval()
    ids, am = _ids(cfg, n=45, pad=cfg.pad_token_id)
    gm = torch.zeros_like(am)
    if globals_:
        gm[:, 0] = 1
        gm[0, 17] = 1
    model = from_longformer(src).eval()
    assert model.config.global_projections
    with torch.no_grad():
        want = src(input_ids=ids, attention_mask=am, global_attention_mask=gm).last_hidden_state
        got = model(input_ids=ids, attention_mask=am, global_attention_mask=gm).last_hidden_state
    keep = am.bool()
    torch.testing.assert_close(got[keep], want[keep], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("B", [1, 2])
def test_longformer_conversion_gives_longformer_gradients(B):
    """Through the global tokens' rows too (their own projections, written over the local outputs)."""
    torch.manual_seed(0)
    cfg = LongformerConfig(max_position_embeddings=130, attention_window=[8, 8], **SMALL)
    src = LongformerModel(cfg).train()
    ids, am = _ids(cfg, B=2, n=45, pad=cfg.pad_token_id)
    ids, am = ids[-B:], am[-B:]  # B = 1: the padded sequence
    gm = torch.zeros_like(am)
    gm[:, 0] = 1
    gm[0, 17] = 1
    model = from_longformer(src).train()
    keep = am.bool()
    for m in (src, model):
        out = m(input_ids=ids, attention_mask=am, global_attention_mask=gm).last_hidden_state
        (out[keep] * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
    grads = dict(model.named_parameters())
    for name in ("query_global", "key_global", "value_global", "query", "value"):
        want = src.encoder.layer[1].attention.self.get_submodule(name).weight.grad
        got = [p.grad for n, p in grads.items() if n.endswith(f"layer.1.attention.self.{name}.weight")]
        assert len(got) == 1, name
        torch.testing.assert_close(got[0], want, atol=1e-4, rtol=1e-4, msg=lambda m, w=name: f"{w}: {m}")


@pytest.mark.parametrize("tied", [True, False])
def test_longformer_masked_lm_head_converts(tied):
    torch.manual_seed(0)
    cfg = LongformerConfig(
        max_position_embeddings=130, attention_window=[8, 8], tie_word_embeddings=tied, **SMALL
    )
    src = LongformerForMaskedLM(cfg).eval()
    ids, am = _ids(cfg, n=33, pad=cfg.pad_token_id)
    gm = torch.zeros_like(am)
    gm[:, 0] = 1
    model = from_longformer(src).eval()
    with torch.no_grad():
        want = src(input_ids=ids, attention_mask=am, global_attention_mask=gm).logits
        got = model(input_ids=ids, attention_mask=am, global_attention_mask=gm).logits
    torch.testing.assert_close(got[am.bool()], want[am.bool()], atol=1e-4, rtol=1e-4)


def test_conversion_errors():
    with pytest.raises(ValueError, match="from_longformer needs a Longformer model, got model_type='bert'"):
        from_longformer(BertModel(BertConfig(**SMALL)))
    with pytest.raises(ValueError, match="use from_longformer"):
        from_bert(LongformerModel(LongformerConfig(attention_window=8, **SMALL)), P.Causal())
    with pytest.raises(ValueError, match="head must be one of"):
        from_bert(BertModel(BertConfig(**SMALL)), P.Causal(), head="summarize")
    with pytest.raises(TypeError, match="model_or_path must be a PreTrainedModel or a path"):
        from_bert(3, P.Causal())


def _bert(**kw):
    return BertConfig(max_position_embeddings=64, **SMALL, **kw)


def _roberta(**kw):
    return RobertaConfig(max_position_embeddings=66, **SMALL, **kw)


@pytest.mark.parametrize(
    "make, head, new",
    [
        (lambda: BertModel(_bert(), add_pooling_layer=False), None, ["pooler.dense.weight"]),
        (lambda: BertForMaskedLM(_bert()), "base", ["pooler.dense.weight"]),
        (lambda: RobertaForMaskedLM(_roberta()), "base", ["pooler.dense.weight"]),
        (lambda: BertForMaskedLM(_bert()), "token_classification", ["classifier.weight"]),
        (
            lambda: BertForMaskedLM(_bert()),
            "multiple_choice",
            ["sparse_transformer.pooler.dense.weight", "classifier.weight"],
        ),
        (lambda: RobertaForMaskedLM(_roberta()), "question_answering", ["qa_outputs.weight"]),
        (lambda: BertModel(_bert()), "sequence_classification", ["classifier.out_proj.weight"]),
        (lambda: RobertaForTokenClassification(_roberta()), "masked_lm", ["lm_head.dense.weight"]),
    ],
)
def test_another_head_or_a_missing_pooler_is_initialised_and_reported(make, head, new, caplog):
    """The source's encoder is kept; the new head (and a pooler the source lacks) is initialised and logged."""
    torch.manual_seed(0)
    src = make().eval()
    with caplog.at_level("WARNING", logger="hf_sparse.conversion"):
        model = from_bert(src, P.SlidingWindow(window=128), head=head).eval()
    report = next(r.getMessage() for r in caplog.records if "newly initialized" in r.getMessage())
    assert all(repr(n) in report for n in new), report
    ids, am = _ids(src.config, pad=src.config.pad_token_id)
    with torch.no_grad():
        want = src.base_model(input_ids=ids, attention_mask=am).last_hidden_state
        got = model.base_model(input_ids=ids, attention_mask=am).last_hidden_state
    torch.testing.assert_close(got[am.bool()], want[am.bool()], atol=1e-5, rtol=1e-5)


def test_a_missing_encoder_weight_is_still_an_error():
    src = BertForMaskedLM(_bert())
    src.bert.encoder.layer[0].attention.self.query = None  # its weights are no longer in the state dict
    with pytest.raises(ValueError, match=r"missing \['encoder\.layer\.0\.attention\.self\.query\.weight'"):
        from_bert(src, P.SlidingWindow(window=128), head="base")


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda: transformers.XmodForMaskedLM(
                transformers.XmodConfig(max_position_embeddings=66, **SMALL)
            ),
            "model_type='xmod'; X-MOD's per-language adapter layers",
        ),
        (
            lambda: transformers.BertLMHeadModel(_bert(is_decoder=True)),
            "unsupported head: BertLMHeadModel has none of the heads",
        ),
    ],
)
def test_unconvertible_sources_are_refused_up_front(make, match):
    with pytest.raises(ValueError, match=match):
        from_bert(make(), P.Causal())


def test_the_source_dtype_is_kept():
    src = BertForMaskedLM(_bert()).to(torch.bfloat16)
    model = from_bert(src, P.SlidingWindow(window=128))
    assert model.dtype == torch.bfloat16 and model.config.dtype == torch.bfloat16
    torch.testing.assert_close(
        model.sparse_transformer.encoder.layer[1].output.dense.weight,
        src.bert.encoder.layer[1].output.dense.weight,
        atol=0,
        rtol=0,
    )


def test_roberta_position_table_counts_its_offset_rows():
    """As documented: max_position_embeddings=N gives a RoBERTa-style model N - pad_token_id - 1 tokens."""
    src = RobertaForMaskedLM(_roberta())
    model = from_bert(src, P.SlidingWindow(window=8), max_position_embeddings=130).eval()
    with torch.no_grad():
        model(torch.randint(3, 99, (1, 128)))
        with pytest.raises(ValueError, match="position id 130 is out of range"):
            model(torch.randint(3, 99, (1, 129)))


def test_question_answering_matches_except_at_padding():
    """As documented: padding queries get a zero attention output, so QA logits differ only at padding and the
    loss (a softmax over all positions) matches once padding logits are masked."""
    from transformers import BertForQuestionAnswering

    torch.manual_seed(0)
    src = BertForQuestionAnswering(_bert()).eval()
    model = from_bert(src, P.SlidingWindow(window=128)).eval()
    ids, am = _ids(src.config, pad=src.config.pad_token_id)
    with torch.no_grad():
        want, got = src(input_ids=ids, attention_mask=am), model(input_ids=ids, attention_mask=am)
    keep = am.bool()
    for field in ("start_logits", "end_logits"):
        torch.testing.assert_close(
            getattr(got, field)[keep], getattr(want, field)[keep], atol=1e-5, rtol=1e-5
        )
    start, end = torch.tensor([3, 5]), torch.tensor([6, 9])

    def loss(out):
        s, e = (getattr(out, f).masked_fill(~keep, float("-inf")) for f in ("start_logits", "end_logits"))
        return (torch.nn.functional.cross_entropy(s, start) + torch.nn.functional.cross_entropy(e, end)) / 2

    torch.testing.assert_close(loss(got), loss(want), atol=1e-6, rtol=1e-6)


def _longformer(**kw):
    return LongformerConfig(
        max_position_embeddings=130, attention_window=[8, 8], sep_token_id=2, **SMALL, **kw
    )


def test_longformer_sequence_classification_makes_cls_global_without_a_mask():
    """LongformerForSequenceClassification makes [CLS] global when no global_attention_mask is given; so does
    the converted head."""
    torch.manual_seed(0)
    src = transformers.LongformerForSequenceClassification(_longformer(num_labels=2)).eval()
    model = from_longformer(src).eval()
    assert model.config.global_first_token
    ids, am = _ids(src.config, n=33, pad=src.config.pad_token_id)
    with torch.no_grad():
        torch.testing.assert_close(
            model(input_ids=ids, attention_mask=am).logits,
            src(input_ids=ids, attention_mask=am).logits,
            atol=1e-4,
            rtol=1e-4,
        )
    token = from_longformer(src, head="token_classification")  # Longformer's token head adds no globals
    assert not token.config.global_first_token


def _question_and_context(cfg, B=2, n=33):
    """``<s> question </s></s> context </s>`` rows (the three separators Longformer's heads ask for), the
    question of another length in each row, the second row padded."""
    ids, am = _ids(cfg, B=B, n=n, pad=cfg.pad_token_id)
    for row, (q, end) in enumerate([(6, n - 1), (11, n - 8)][:B]):
        ids[row, 0] = cfg.bos_token_id
        ids[row, [q, q + 1, end]] = cfg.sep_token_id
    return ids, am


@pytest.mark.parametrize("head, side", [("question_answering", "before"), ("multiple_choice", "after")])
def test_longformer_heads_pick_global_tokens_from_sep_tokens_as_longformer_does(head, side):
    """Without a global_attention_mask, LongformerForQuestionAnswering makes the question (before the first
    </s>) global and LongformerForMultipleChoice the tokens after the first </s></s>; the converted heads too."""
    torch.manual_seed(0)
    cls = {
        "question_answering": "LongformerForQuestionAnswering",
        "multiple_choice": "LongformerForMultipleChoice",
    }
    src = getattr(transformers, cls[head])(_longformer(initializer_range=0.3)).eval()
    model = from_longformer(src).eval()
    ids, am = _question_and_context(src.config)
    if head == "multiple_choice":  # (batch, choices, seq)
        ids, am = torch.stack([ids, ids.roll(1, 0)], 1), torch.stack([am, am.roll(1, 0)], 1)
    keep = am.bool()
    with torch.no_grad():
        want, got = src(input_ids=ids, attention_mask=am), model(input_ids=ids, attention_mask=am)
        no_globals = model(input_ids=ids, attention_mask=am, global_attention_mask=torch.zeros_like(ids))
    fields = ("start_logits", "end_logits") if head == "question_answering" else ("logits",)
    for field in fields:
        w, g = getattr(want, field), getattr(got, field)
        if head == "question_answering":
            w, g = w[keep], g[keep]  # padding queries differ, as for every head (documented)
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
    # an explicit mask still wins (all zeros: no global tokens)
    assert not torch.allclose(getattr(no_globals, fields[0]), getattr(got, fields[0]), atol=1e-3)
    assert model.config.global_tokens_from_sep == side and not model.config.global_first_token


@pytest.mark.parametrize(
    "make, convert",
    [
        (
            lambda: BertForMaskedLM(_bert()),
            lambda src, **kw: from_bert(src, P.SlidingWindow(window=16), **kw),
        ),
        (lambda: LongformerForMaskedLM(_longformer()), from_longformer),
    ],
    ids=["from_bert", "from_longformer"],
)
def test_config_overrides_replace_what_the_source_gives(make, convert):
    src = make().eval()
    overrides = dict(
        hidden_dropout_prob=0.2,
        attention_probs_dropout_prob=0.3,
        classifier_dropout=0.4,
        global_first_token=True,
        position_ids_style="bert",
    )
    model = convert(src, head="sequence_classification", **overrides)
    assert {k: getattr(model.config, k) for k in overrides} == overrides
    labels = {0: "O", 1: "B-PER", 2: "I-PER"}
    model = convert(src, head="token_classification", id2label=labels)
    assert model.config.id2label == labels and model.classifier.out_features == 3
    model = convert(src, head="token_classification", num_labels=5)
    assert model.config.num_labels == 5 and model.classifier.out_features == 5
    with pytest.raises(ValueError, match=r"hidden_size=64 cannot be overridden.*hidden_size=32"):
        convert(src, hidden_size=64)


def test_a_classification_head_with_other_labels_keeps_the_encoder(caplog):
    src = BertForSequenceClassification(_bert(num_labels=2)).eval()
    with caplog.at_level("WARNING", logger="hf_sparse.conversion"):
        model = from_bert(src, P.SlidingWindow(window=128), num_labels=4).eval()
    assert model.config.num_labels == 4 and model.classifier.out_proj.out_features == 4
    assert any("classifier.out_proj.weight" in r.getMessage() for r in caplog.records)
    torch.testing.assert_close(model.classifier.dense.weight, src.bert.pooler.dense.weight)


def test_label_overrides_are_made_whole_and_checked():
    """``label2id`` alone renames the source's classes (three stay three, the classifier is kept); labels that
    disagree, and keys that are neither config fields nor loading arguments, are errors, not unused attributes."""
    src = BertForSequenceClassification(_bert(num_labels=3)).eval()
    names = {"negative": 0, "neutral": 1, "positive": 2}
    model = from_bert(src, P.SlidingWindow(window=128), label2id=names).eval()
    assert model.config.num_labels == 3 and model.config.label2id == names
    assert model.config.id2label == {0: "negative", 1: "neutral", 2: "positive"}
    torch.testing.assert_close(model.classifier.out_proj.weight, src.classifier.weight)
    with pytest.raises(ValueError, match="does not invert id2label"):
        from_bert(src, P.SlidingWindow(window=128), label2id=names, id2label={0: "a", 1: "b", 2: "c"})
    with pytest.raises(ValueError, match="num_labels=2 does not fit the labels"):
        from_bert(src, P.SlidingWindow(window=128), label2id=names, num_labels=2)
    with pytest.raises(ValueError, match="hidden_dropout=0.3 is neither.*did you mean 'hidden_dropout_prob'"):
        from_bert(src, P.SlidingWindow(window=128), hidden_dropout=0.3)


def test_from_longformer_lengthens_the_context():
    torch.manual_seed(0)
    src = LongformerModel(_longformer()).eval()
    model = from_longformer(src, max_position_embeddings=258).eval()
    assert model.config.max_position_embeddings == 258
    old, new = src.embeddings.position_embeddings.weight, model.embeddings.position_embeddings.weight
    torch.testing.assert_close(new[:130], old)
    torch.testing.assert_close(new[130:258], old[2:130])  # the pad_token_id + 1 offset rows are not repeated
    ids, am = _ids(src.config, n=33, pad=src.config.pad_token_id)
    with torch.no_grad():
        want = src(input_ids=ids, attention_mask=am).last_hidden_state
        got = model(input_ids=ids, attention_mask=am).last_hidden_state
        assert model(torch.randint(3, 99, (1, 200))).last_hidden_state.shape == (1, 200, 32)
    torch.testing.assert_close(got[am.bool()], want[am.bool()], atol=1e-4, rtol=1e-4)


def test_loading_arguments_go_to_from_pretrained(tmp_path):
    BertForMaskedLM(_bert()).save_pretrained(tmp_path)
    for dtype in ("dtype", "torch_dtype"):
        model = from_bert(str(tmp_path), P.SlidingWindow(window=16), **{dtype: torch.bfloat16})
        assert model.dtype == torch.bfloat16 and model.config.dtype == torch.bfloat16
    model = from_bert(str(tmp_path), P.SlidingWindow(window=16), revision="main", local_files_only=True)
    model.save_pretrained(tmp_path / "converted")
    saved = (tmp_path / "converted" / "config.json").read_text()
    assert '"revision"' not in saved and '"local_files_only"' not in saved
    with pytest.raises(
        ValueError, match=r"\['dtype'\] are from_pretrained arguments.*a loaded BertForMaskedLM"
    ):
        from_bert(BertForMaskedLM(_bert()), P.SlidingWindow(window=16), dtype=torch.bfloat16)


def test_generic_config_fields_are_carried_across():
    fields = dict(
        tokenizer_class="RobertaTokenizer",
        sep_token_id=2,
        finetuning_task="mnli",
        prefix="x",
        output_hidden_states=True,
        task_specific_params={"foo": 1},
    )
    src = transformers.RobertaForSequenceClassification(_roberta(num_labels=3, **fields))
    model = from_bert(src, P.SlidingWindow(window=8))
    assert {k: getattr(model.config, k, None) for k in fields} == fields
    assert model.config.add_cross_attention is False


@pytest.mark.parametrize(
    "make",
    [
        lambda: BertForSequenceClassification(_bert(num_labels=3, initializer_range=0.3)),
        lambda: transformers.RobertaForSequenceClassification(_roberta(initializer_range=0.3)),
        lambda: transformers.BertForQuestionAnswering(_bert(initializer_range=0.3)),
        lambda: transformers.BertForMultipleChoice(_bert(initializer_range=0.3)),
    ],
    ids=["bert-classification", "roberta-classification", "question-answering", "multiple-choice"],
)
def test_converted_heads_that_read_cls_make_it_global(make):
    """Without a global_attention_mask (Trainer batches, pipelines) the converted classification, QA and
    multiple-choice heads make [CLS] global, as SparseTransformer's heads do, so a Longformer pattern's Global()
    part applies; with a window covering the input that is BERT's own maths."""
    torch.manual_seed(0)
    src = make().eval()
    ids, am = _ids(src.config, pad=src.config.pad_token_id)
    mc = isinstance(src, transformers.BertForMultipleChoice)
    if mc:  # (batch, choices, seq)
        ids, am = torch.stack([ids, ids.roll(1, 0)], 1), torch.stack([am, am.roll(1, 0)], 1)
    cls_global = torch.zeros_like(ids)
    cls_global[..., 0] = 1
    field = "start_logits" if isinstance(src, transformers.BertForQuestionAnswering) else "logits"
    sparse = from_bert(src, P.Longformer(window=4)).eval()
    with torch.no_grad():
        default = getattr(sparse(input_ids=ids, attention_mask=am), field)
        with_cls = getattr(sparse(input_ids=ids, attention_mask=am, global_attention_mask=cls_global), field)
        without = getattr(
            sparse(input_ids=ids, attention_mask=am, global_attention_mask=0 * cls_global), field
        )
    torch.testing.assert_close(default, with_cls)
    assert not torch.allclose(default, without, atol=1e-3)
    assert sparse.config.global_first_token
    covering = from_bert(src, P.SlidingWindow(window=128)).eval()
    with torch.no_grad():
        want = getattr(src(input_ids=ids, attention_mask=am), field)
        got = getattr(covering(input_ids=ids, attention_mask=am), field)
    if field == "start_logits":  # padding positions differ (documented)
        got, want = got[am.bool()], want[am.bool()]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_pre_training_checkpoints_convert_their_masked_lm_head(tmp_path, caplog):
    """BertForPreTraining, as an instance or a saved folder, becomes the masked-LM head with the same MLM logits;
    its next-sentence-prediction head has no counterpart and is reported, not silently dropped."""
    from hf_sparse.models.sparse_transformer import SparseTransformerForMaskedLM

    torch.manual_seed(0)
    src = transformers.BertForPreTraining(_bert()).eval()
    src.save_pretrained(tmp_path)
    ids, am = _ids(src.config)
    with torch.no_grad():
        want = src(input_ids=ids, attention_mask=am).prediction_logits[am.bool()]
    with caplog.at_level("WARNING", logger="hf_sparse.conversion"):
        from_instance = from_bert(src, P.SlidingWindow(window=128)).eval()
    assert any("'cls.seq_relationship.weight'" in r.getMessage() for r in caplog.records)
    for model in (from_instance, from_bert(str(tmp_path), P.SlidingWindow(window=128)).eval()):
        assert isinstance(model, SparseTransformerForMaskedLM)
        with torch.no_grad():
            got = model(input_ids=ids, attention_mask=am).logits[am.bool()]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "make",
    [
        lambda: transformers.BertLMHeadModel(_bert(is_decoder=True)),
        lambda: transformers.RobertaForCausalLM(_roberta(is_decoder=True)),
        lambda: transformers.BertForNextSentencePrediction(_bert()),
    ],
    ids=["BertLMHeadModel", "RobertaForCausalLM", "BertForNextSentencePrediction"],
)
def test_a_saved_head_from_bert_does_not_convert_is_refused_as_the_instance_is(make, tmp_path):
    """A folder whose head from_bert cannot convert raises the instance's error instead of silently becoming the
    bare encoder (its head weights dropped); head= converts the encoder under a chosen head, as for an instance."""
    src = make()
    name = type(src).__name__
    src.save_pretrained(tmp_path)
    for source in (src, str(tmp_path)):
        with pytest.raises(
            ValueError, match=f"unsupported head: {name} has none of the heads from_bert converts"
        ):
            from_bert(source, P.SlidingWindow(window=8))
    assert (
        type(from_bert(str(tmp_path), P.SlidingWindow(window=8), head="base")).__name__
        == "SparseTransformerModel"
    )


def _tokenizer(tmp_path, model_max_length):
    words = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", *"the cat sat on a mat".split()]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    special = dict(
        cls_token="<s>", sep_token="</s>", pad_token="<pad>", unk_token="<unk>", mask_token="<mask>"
    )
    return transformers.BertTokenizer(
        str(tmp_path / "vocab.txt"), model_max_length=model_max_length, **special
    )


@pytest.mark.parametrize(
    "make, length, tokens",
    [
        (lambda: RobertaForMaskedLM(_roberta()), 130, 128),  # pad_token_id + 1 = 2 offset rows
        (lambda: BertForMaskedLM(_bert()), 130, 130),
        (lambda: LongformerModel(_longformer()), 258, 256),
    ],
    ids=["roberta", "bert", "longformer"],
)
def test_a_given_tokenizer_gets_the_converted_length(make, length, tokens, tmp_path):
    """A lengthened model's tokenizer truncates at the new length, not at the source's (Longformer's recipe)."""
    tok = _tokenizer(tmp_path, model_max_length=32)
    src = make()
    convert = from_longformer if isinstance(src, LongformerModel) else from_bert
    args = () if convert is from_longformer else (P.SlidingWindow(window=8),)
    model = convert(src, *args, max_position_embeddings=length, tokenizer=tok).eval()
    assert tok.model_max_length == tokens
    ids = tok(" ".join(["the cat sat on a mat"] * 60), truncation=True, return_tensors="pt")["input_ids"]
    assert ids.shape == (1, tokens)
    with torch.no_grad():
        model(ids)  # every token has a position
    with pytest.raises(TypeError, match="tokenizer must be a transformers tokenizer or None, got str"):
        convert(src, *args, tokenizer="roberta-base")
