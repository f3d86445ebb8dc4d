"""Tiny summarization models and a word-level tokenizer for the summarization tests (offline, random weights)."""

from __future__ import annotations

from hf_sparse.tasks.summarization.configuration_summarization import (
    LEDSummarizationConfig,
    LongformerExtractiveSummarizationConfig,
)
from hf_sparse.tasks.summarization.data import (
    add_summarization_tokens,
    synthetic_copy_documents,
    train_summarization_tokenizer,
)
from hf_sparse.tasks.summarization.modeling_summarization import (
    LEDForSummarization,
    LongformerForExtractiveSummarization,
)

WORDS = (
    "the model reads long papers and meetings . we propose a new method for summaries of documents".split()
)


def tiny_tokenizer(n_docs: int = 40):
    """Word-level tokenizer over the synthetic copy vocabulary and a few English words (ids 0-6 special)."""
    docs = synthetic_copy_documents(n_docs, seed=0)
    texts = [d["document"] for d in docs] + [" ".join(WORDS)] * 2
    tok = train_summarization_tokenizer(texts, min_frequency=1)
    add_summarization_tokens(tok)
    return tok


def tiny_led_config(tokenizer, **overrides) -> LEDSummarizationConfig:
    kwargs = dict(
        vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, attention_window=8,
        max_encoder_position_embeddings=512, max_decoder_position_embeddings=64, dropout=0.0,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    kwargs.update(overrides)
    return LEDSummarizationConfig(**kwargs)


def tiny_led(tokenizer, **overrides) -> LEDForSummarization:
    model = LEDForSummarization(tiny_led_config(tokenizer, **overrides)).eval()
    model.generation_config.max_length = 12
    return model


def tiny_extractive_config(tokenizer, backbone_type: str = "longformer", **overrides):
    common = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, pad_token_id=tokenizer.pad_token_id, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)  # fmt: skip
    if backbone_type == "longformer":
        backbone = dict(model_type="longformer", attention_window=8, max_position_embeddings=258, **common)
    else:
        backbone = dict(model_type="sparse_transformer", max_position_embeddings=256, global_projections=True,
                        attention_pattern={"type": "longformer", "window": 8}, **common)  # fmt: skip
    kwargs = dict(
        backbone=backbone, sentence_token_id=tokenizer.convert_tokens_to_ids("<sent>"),
        sentence_features=["position", "centrality"], classifier_dropout=0.0,
    )  # fmt: skip
    kwargs.update(overrides)
    return LongformerExtractiveSummarizationConfig(**kwargs)


def tiny_extractive(tokenizer, backbone_type: str = "longformer", **overrides):
    return LongformerForExtractiveSummarization(
        tiny_extractive_config(tokenizer, backbone_type, **overrides)
    ).eval()
