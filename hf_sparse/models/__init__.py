"""Model families, and their registration with the transformers Auto classes (on import)."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .sparse_transformer import (
    LORA_TARGET_MODULES,
    SparseTransformerConfig,
    SparseTransformerForCausalLM,
    SparseTransformerForMaskedLM,
    SparseTransformerForMultipleChoice,
    SparseTransformerForQuestionAnswering,
    SparseTransformerForSequenceClassification,
    SparseTransformerForTokenClassification,
    SparseTransformerModel,
)

#: Auto class -> model class, for every SparseTransformer head (also written to ``auto_map``).
SPARSE_TRANSFORMER_AUTO = {
    AutoModel: SparseTransformerModel,
    AutoModelForMaskedLM: SparseTransformerForMaskedLM,
    AutoModelForCausalLM: SparseTransformerForCausalLM,
    AutoModelForSequenceClassification: SparseTransformerForSequenceClassification,
    AutoModelForTokenClassification: SparseTransformerForTokenClassification,
    AutoModelForMultipleChoice: SparseTransformerForMultipleChoice,
    AutoModelForQuestionAnswering: SparseTransformerForQuestionAnswering,
}


def register_auto(config_cls, mapping: dict, lora_targets=None):
    """Register a config with AutoConfig and its heads with the Auto model classes (idempotent),
    and tell peft the default LoRA target modules of the model type."""
    model_type = config_cls.model_type
    try:
        AutoConfig.register(model_type, config_cls)
    except ValueError:  # already registered by an earlier import
        pass
    for auto_cls, model_cls in mapping.items():
        try:
            auto_cls.register(config_cls, model_cls, exist_ok=True)
        except TypeError:  # older transformers without exist_ok
            auto_cls.register(config_cls, model_cls)
    if lora_targets:
        try:
            from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as targets
        except ImportError:
            return
        targets.setdefault(model_type, list(lora_targets))


def register_models():
    register_auto(SparseTransformerConfig, SPARSE_TRANSFORMER_AUTO, LORA_TARGET_MODULES)


__all__ = ["SPARSE_TRANSFORMER_AUTO", "register_auto", "register_models"]
