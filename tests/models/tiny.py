"""Tiny random SparseTransformer configs for tests."""

from hf_sparse.models.sparse_transformer import SparseTransformerConfig


def tiny_config(**overrides):
    kw = dict(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=256,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attention_pattern={"type": "sliding_window", "window": 8},
        num_labels=3,
    )
    kw.update(overrides)
    return SparseTransformerConfig(**kw)


def tiny_decoder_config(pattern, **overrides):
    return tiny_config(is_decoder=True, attention_pattern=pattern, eos_token_id=None, **overrides)
