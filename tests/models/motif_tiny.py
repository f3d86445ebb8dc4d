"""Tiny random motif models (both backbones) for tests."""

from hf_sparse.tasks.motif.configuration_motif import LongformerMotifConfig
from hf_sparse.tasks.motif.modeling_motif import LongformerForMotifDetection

MOTIFS = ["CTCF", "SP1"]


def backbone(kind: str = "sparse_transformer", max_tokens: int = 130, **overrides) -> dict:
    """A 2-layer, 32-wide encoder over the 10 single-nucleotide DNA tokens, ``max_tokens`` positions."""
    bb = dict(
        vocab_size=10,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=0,
    )
    if kind == "longformer":
        bb.update(model_type="longformer", attention_window=16, max_position_embeddings=max_tokens + 1)
    else:
        bb.update(
            model_type="sparse_transformer",
            max_position_embeddings=max_tokens,
            position_embedding_type="rotary",
            attention_pattern={"type": "sliding_window", "window": 16},
        )
    bb.update(overrides)
    return bb


def motif_config(kind: str = "sparse_transformer", max_tokens: int = 130, backbone_overrides=None, **kw):
    kw.setdefault("motif_names", MOTIFS)
    kw.setdefault("classifier_dropout", 0.0)
    return LongformerMotifConfig(backbone=backbone(kind, max_tokens, **(backbone_overrides or {})), **kw)


def motif_model(kind: str = "sparse_transformer", **kw) -> LongformerForMotifDetection:
    return LongformerForMotifDetection(motif_config(kind, **kw)).eval()
