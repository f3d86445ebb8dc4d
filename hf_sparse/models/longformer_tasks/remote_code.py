"""What every task model in this package shares: the pre-trained base class (BERT/Longformer weight
initialisation, gradient checkpointing, no-split modules) and ``save_pretrained`` that also writes the
remote code (:class:`ExportCodeMixin`, shared with SparseTransformer)."""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from ...attention.integration import ATTN_IMPLEMENTATION, check_config
from ..sparse_transformer.modeling_sparse_transformer import ExportCodeMixin
from .backbone import BACKBONE_KEY_MAPPING, BACKBONE_LAYERS, backbone_config, check_positions


class LongformerTaskPreTrainedModel(ExportCodeMixin, PreTrainedModel):
    """Base of the task models whose encoder is ``config.backbone`` (a Longformer or SparseTransformer);
    subclasses set ``config_class``."""

    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    # per model: the layer of its backbone (see post_init); a name not in the model makes FSDP's auto-wrap raise
    _no_split_modules = None
    # left unset, a task model runs its backbone's own attention (Longformer's; SparseTransformer's "hf_sparse"), never
    # transformers' "sdpa" default; get_correct_attn_implementation takes "sdpa" for a SparseTransformer backbone
    _supports_sdpa = False
    _supports_flash_attn = False
    # the heads average their own losses: the Trainer must divide them by the gradient-accumulation steps
    # (it guesses from forward(**kwargs) that the loss divides by its num_items_in_batch instead)
    accepts_loss_kwargs = False

    def __init__(self, config, *inputs, **kwargs):
        config.validate_task()  # what from_pretrained(path, key=value) or `config.key = value` changed since __init__
        super().__init__(config, *inputs, **kwargs)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """transformers' ``from_pretrained``; the encoder of a backbone checkpoint saved with a head
        (``LongformerForMaskedLM``, as ``allenai/longformer-base-4096``: ``longformer.*``;
        ``SparseTransformerForMaskedLM``: ``sparse_transformer.*``) loads into ``backbone``
        (:data:`~hf_sparse.models.longformer_tasks.backbone.BACKBONE_KEY_MAPPING`, before any ``key_mapping`` given),
        and the task heads are reported missing."""
        kwargs["key_mapping"] = {**BACKBONE_KEY_MAPPING, **(kwargs.get("key_mapping") or {})}
        return super().from_pretrained(*args, **kwargs)

    def get_correct_attn_implementation(self, requested_attention, is_init_check=False):
        """With a SparseTransformer backbone, what is asked for is what the backbone runs (``build_backbone``), checked
        against the backbone's config (``"hf_sparse"`` needs its ``attention_pattern``); left unset (None), the
        backbone keeps its own default, ``"hf_sparse"``, which the task config, having no ``attention_pattern`` of its
        own, cannot carry. A Longformer backbone runs Longformer's own attention: ``"eager"`` (or unset) only."""
        if self.config.backbone.get("model_type") != "sparse_transformer":
            if requested_attention not in (None, "eager"):
                raise ValueError(
                    f"{type(self).__name__} with a Longformer backbone runs Longformer's own attention and takes "
                    f"attn_implementation='eager' only, got {requested_attention!r}; a SparseTransformer backbone "
                    "(backbone={'model_type': 'sparse_transformer', ...}) runs 'eager', 'sdpa' or 'hf_sparse'"
                )
            return "eager"
        if requested_attention is None:
            return None
        if requested_attention == ATTN_IMPLEMENTATION:  # the pattern is the backbone's, not the task config's
            check_config(backbone_config(self.config.backbone))
            return requested_attention
        if requested_attention == "sdpa":  # SparseTransformer's _supports_sdpa
            return requested_attention
        return super().get_correct_attn_implementation(requested_attention, is_init_check)

    def check_positions(self, input_ids=None, inputs_embeds=None) -> None:
        """``ValueError`` for an input past a Longformer backbone's position table (the encoder's own
        ``IndexError`` names nothing); see :func:`~hf_sparse.models.longformer_tasks.backbone.check_positions`."""
        check_positions(self.backbone.config, input_ids, inputs_embeds)

    def post_init(self):
        """transformers' ``post_init``, with ``_no_split_modules`` the backbone's layer (one FSDP unit each); the
        backbone's own ``_no_split_modules`` are added by transformers."""
        self._no_split_modules = [BACKBONE_LAYERS[self.config.backbone["model_type"]]]
        super().post_init()

    def output_flags(self, output_attentions=None, output_hidden_states=None) -> tuple[bool, bool]:
        """The call's ``output_attentions`` / ``output_hidden_states``, else this model's config's (the backbone has
        a config of its own, which ``from_pretrained(..., output_hidden_states=True)`` does not reach)."""
        cfg = self.config
        return (
            cfg.output_attentions if output_attentions is None else output_attentions,
            cfg.output_hidden_states if output_hidden_states is None else output_hidden_states,
        )

    def resize_token_embeddings(self, *args, **kwargs):
        """transformers' resize; ``config.vocab_size`` (set by it) is ``config.backbone["vocab_size"]``, which a
        saved model reloads with; the backbone module's own config follows too."""
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        self.backbone.config.vocab_size = self.config.vocab_size
        return embeddings

    def _init_weights(self, module):
        """BERT/Longformer initialisation with the backbone's ``initializer_range``."""
        std = self.config.backbone.get("initializer_range", 0.02)
        if isinstance(module, (nn.Linear, nn.Conv1d)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


__all__ = ["ExportCodeMixin", "LongformerTaskPreTrainedModel"]
