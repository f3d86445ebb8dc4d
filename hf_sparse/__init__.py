"""hf-sparse: exact, fast, linear-memory sparse attention for Hugging Face Transformers."""

from . import patterns
from .attention import sparse_attention
from .attention.integration import register_attention
from .models import register_models
from .models.sparse_transformer import (
    SparsePatternCache,
    SparseTransformerConfig,
    SparseTransformerForCausalLM,
    SparseTransformerForMaskedLM,
    SparseTransformerForMultipleChoice,
    SparseTransformerForQuestionAnswering,
    SparseTransformerForSequenceClassification,
    SparseTransformerForTokenClassification,
    SparseTransformerModel,
)
from .pipelines import register_pipelines
from .tasks import register_tasks

__version__ = "0.1.0"

register_attention()
register_models()
register_tasks()
register_pipelines()

__all__ = [
    "SparsePatternCache",
    "SparseTransformerConfig",
    "SparseTransformerForCausalLM",
    "SparseTransformerForMaskedLM",
    "SparseTransformerForMultipleChoice",
    "SparseTransformerForQuestionAnswering",
    "SparseTransformerForSequenceClassification",
    "SparseTransformerForTokenClassification",
    "SparseTransformerModel",
    "__version__",
    "patterns",
    "register_attention",
    "register_models",
    "register_pipelines",
    "register_tasks",
    "sparse_attention",
]
