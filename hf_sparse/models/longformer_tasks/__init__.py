"""Task heads over transformers' Longformer/LED (or hf-sparse SparseTransformer) encoders."""

from .backbone import backbone_config, block_multiple, build_backbone, every_k_global
from .configuration_dialogue import LongformerDialogueConfig
from .configuration_motif import LongformerMotifConfig
from .configuration_summarization import LEDSummarizationConfig, LongformerExtractiveSummarizationConfig
from .modeling_dialogue import DialogueOutput, LongformerForDialogue
from .modeling_motif import LongformerForMotifDetection, MotifDetectionOutput
from .modeling_summarization import (
    ExtractiveSummarizationOutput,
    LEDForSummarization,
    LongformerForExtractiveSummarization,
    build_global_attention_mask,
)

__all__ = [
    "DialogueOutput",
    "ExtractiveSummarizationOutput",
    "LEDForSummarization",
    "LEDSummarizationConfig",
    "LongformerDialogueConfig",
    "LongformerExtractiveSummarizationConfig",
    "LongformerForExtractiveSummarization",
    "LongformerForDialogue",
    "LongformerForMotifDetection",
    "LongformerMotifConfig",
    "MotifDetectionOutput",
    "backbone_config",
    "block_multiple",
    "build_backbone",
    "build_global_attention_mask",
    "every_k_global",
]
