"""The recipe keys every task shares: the encoder (backbone) of a new model, one spelling for all.

Each task's ``Arguments`` dataclass subclasses :class:`BackboneArguments` (redeclaring a field only to
change its default) and calls ``super().__post_init__()``. A recipe that still uses an old spelling
(:data:`RENAMED_KEYS`) is rejected by the recipe loader with the key and its new name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar

from ..attention.dispatch import BACKENDS

#: old recipe key -> its one spelling now (the recipe loader names both in its error)
RENAMED_KEYS = {
    "backbone_type": "backbone",
    "hidden_dropout": "hidden_dropout_prob",
    "dropout": "hidden_dropout_prob",
    "encoder_attention_pattern": "attention_pattern",
}


@dataclass
class BackboneArguments:
    """The encoder of a new model (``model_name_or_path`` unset); ignored when a saved model is loaded."""

    #: the encoders a task can build (``backbone``'s valid values)
    backbones: ClassVar[tuple[str, ...]] = ("longformer", "sparse_transformer")

    backbone: str = field(
        default="longformer",
        metadata={
            "help": "New model's encoder: 'longformer' or 'sparse_transformer' (summarization: 'led')."
        },
    )
    hidden_size: int = field(default=64, metadata={"help": "New model: hidden size."})
    num_hidden_layers: int = field(default=2, metadata={"help": "New model: encoder layers."})
    num_attention_heads: int = field(default=4, metadata={"help": "New model: attention heads."})
    intermediate_size: int = field(default=256, metadata={"help": "New model: feed-forward size."})
    attention_window: int = field(
        default=64,
        metadata={
            "help": "New model: sliding-window size in tokens (Longformer: even; sparse: the pattern's)."
        },
    )
    attention_pattern: dict | None = field(
        default=None,
        metadata={
            "help": "hf-sparse pattern spec of a sparse_transformer backbone (or LED's encoder); None: the "
            "task's window pattern (LED: its own attention)."
        },
    )
    attention_backend: str = field(
        default="auto",
        metadata={"help": f"hf-sparse attention kernel: one of {BACKENDS} (all exact)."},
    )
    position_embedding_type: str = field(
        default="absolute",
        metadata={"help": "sparse_transformer backbone positions: 'absolute' (learned table) or 'rotary'."},
    )
    hidden_dropout_prob: float = field(default=0.1, metadata={"help": "New model: dropout in the encoder."})
    attention_dropout: float | None = field(
        default=None,
        metadata={
            "help": "New model: dropout on the attention probabilities (None: hidden_dropout_prob). 0 keeps "
            "torch's fused attention kernel on CPU."
        },
    )
    classifier_dropout: float = field(default=0.1, metadata={"help": "Dropout before the task heads."})

    def __post_init__(self):
        if self.backbone not in self.backbones:
            raise ValueError(f"backbone must be one of {self.backbones}, got {self.backbone!r}")
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "attention_window"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads ({self.num_attention_heads})"
            )
        if self.backbone in ("longformer", "led") and self.attention_window % 2:
            raise ValueError(
                f"attention_window must be even for {self.backbone}, got {self.attention_window}"
            )
        if self.attention_pattern is not None and not isinstance(self.attention_pattern, dict):
            raise TypeError(f"attention_pattern must be a pattern spec dict, got {self.attention_pattern!r}")
        if self.backbone == "longformer":  # Longformer has its own attention: these would be ignored
            # the task's default (not set by the recipe) or, for the positions, what Longformer uses anyway
            allowed = {f.name: (f.default,) for f in fields(self)}
            allowed["position_embedding_type"] += ("absolute",)
            for name in ("attention_pattern", "attention_backend", "position_embedding_type"):
                if getattr(self, name) not in allowed[name]:
                    raise ValueError(
                        f"{name}={getattr(self, name)!r} has no effect with backbone: longformer (Longformer's own "
                        f"sliding window of attention_window tokens and absolute positions); use backbone: "
                        f"sparse_transformer for hf-sparse patterns and kernels, or remove {name}"
                    )
        if self.attention_pattern is not None:
            from ..patterns import from_dict

            try:  # a misspelt parameter fails now, not when the model is built
                from_dict(self.attention_pattern)
            except (TypeError, ValueError, KeyError) as e:
                message = e.args[0] if isinstance(e, KeyError) and e.args else e
                raise ValueError(
                    f"attention_pattern={self.attention_pattern!r} is not a valid pattern: {message}"
                ) from e
        if self.attention_backend not in BACKENDS:
            raise ValueError(f"attention_backend must be one of {BACKENDS}, got {self.attention_backend!r}")
        if self.position_embedding_type not in ("absolute", "rotary"):
            raise ValueError(
                f"position_embedding_type must be 'absolute' or 'rotary', got {self.position_embedding_type!r}"
            )
        for name in ("hidden_dropout_prob", "attention_dropout", "classifier_dropout"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0.0 <= value < 1.0):
                raise ValueError(f"{name} must be a probability in [0, 1), got {value!r}")

    @property
    def attention_dropout_prob(self) -> float:
        """``attention_dropout``, else ``hidden_dropout_prob``."""
        return self.hidden_dropout_prob if self.attention_dropout is None else self.attention_dropout

    def encoder_config(self, vocab_size: int, pad_token_id: int, max_length: int, **extra) -> dict:
        """The ``backbone`` dict of a task config for a new encoder reading ``max_length`` tokens: a
        Longformer (``attention_window``; RoBERTa-style positions from ``pad_token_id + 1``) or a
        SparseTransformer (``attention_pattern``, else :meth:`default_pattern`, and its kernel);
        ``extra`` keys are added (or replace) last."""
        common = {
            "vocab_size": vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_dropout_prob": self.hidden_dropout_prob,
            "attention_probs_dropout_prob": self.attention_dropout_prob,
            "pad_token_id": pad_token_id,
        }
        if self.backbone == "longformer":
            return {
                "model_type": "longformer",
                **common,
                "attention_window": self.attention_window,
                "max_position_embeddings": max_length + pad_token_id + 1,
                "type_vocab_size": 1,
                **extra,
            }
        spec = {
            "model_type": "sparse_transformer",
            **common,
            "max_position_embeddings": max_length,
            "attention_pattern": self.attention_pattern or self.default_pattern(),
            "attention_backend": self.attention_backend,
            "position_embedding_type": self.position_embedding_type,
            **extra,
        }
        if spec.get("position_ids_style") == "roberta" and "max_position_embeddings" not in extra:
            spec["max_position_embeddings"] = (
                max_length + pad_token_id + 1
            )  # its positions start past the pad row
        return spec

    def default_pattern(self) -> dict:
        """A sparse_transformer backbone's pattern when the recipe sets none: Longformer's window."""
        return {"type": "longformer", "window": self.attention_window}


__all__ = ["RENAMED_KEYS", "BackboneArguments"]
