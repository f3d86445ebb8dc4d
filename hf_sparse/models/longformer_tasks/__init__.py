"""Task heads over transformers' Longformer/LED (or hf-sparse SparseTransformer) encoders."""

from .backbone import backbone_config, block_multiple, build_backbone, every_k_global
from .configuration_dialogue import LongformerDialogueConfig
from .configuration_motif import LongformerMotifConfig
from .modeling_dialogue import DialogueOutput, LongformerForDialogue
from .modeling_motif import LongformerForMotifDetection, MotifDetectionOutput

__all__ = [
    "DialogueOutput",
    "LongformerDialogueConfig",
    "LongformerForDialogue",
    "LongformerForMotifDetection",
    "LongformerMotifConfig",
    "MotifDetectionOutput",
    "backbone_config",
    "block_multiple",
    "build_backbone",
    "every_k_global",
]
