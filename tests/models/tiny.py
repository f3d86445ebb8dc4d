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


def set_checkpointing(model, on: bool = True):
    """transformers' activation checkpointing under the installed release's name (5.24 renamed
    ``gradient_checkpointing_enable``/``_disable``, and warns on the old names)."""
    prefix = "activation" if hasattr(model, "activation_checkpointing_enable") else "gradient"
    getattr(model, f"{prefix}_checkpointing_{'enable' if on else 'disable'}")()
