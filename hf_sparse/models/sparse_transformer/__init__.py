from .cache_sparse_transformer import PatternCacheLayer, SparsePatternCache
from .configuration_sparse_transformer import SparseTransformerConfig
from .modeling_sparse_transformer import (
    LORA_TARGET_MODULES,
    SparseTransformerForCausalLM,
    SparseTransformerForMaskedLM,
    SparseTransformerForMultipleChoice,
    SparseTransformerForQuestionAnswering,
    SparseTransformerForSequenceClassification,
    SparseTransformerForTokenClassification,
    SparseTransformerModel,
    SparseTransformerPreTrainedModel,
)

__all__ = [
    "LORA_TARGET_MODULES",
    "PatternCacheLayer",
    "SparsePatternCache",
    "SparseTransformerConfig",
    "SparseTransformerForCausalLM",
    "SparseTransformerForMaskedLM",
    "SparseTransformerForMultipleChoice",
    "SparseTransformerForQuestionAnswering",
    "SparseTransformerForSequenceClassification",
    "SparseTransformerForTokenClassification",
    "SparseTransformerModel",
    "SparseTransformerPreTrainedModel",
]
