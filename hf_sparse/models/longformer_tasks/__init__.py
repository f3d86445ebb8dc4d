"""What the task models share: the encoder backbone (a transformers Longformer or an hf-sparse
SparseTransformer, built from ``config.backbone``) and the pre-trained base class that also saves the
remote code. Each task's configuration and model live in its folder, ``hf_sparse/tasks/<task>/``."""

from .backbone import backbone_config, block_multiple, build_backbone, every_k_global
from .remote_code import ExportCodeMixin, LongformerTaskPreTrainedModel

__all__ = [
    "ExportCodeMixin",
    "LongformerTaskPreTrainedModel",
    "backbone_config",
    "block_multiple",
    "build_backbone",
    "every_k_global",
]
