"""What every task model in this package shares: the pre-trained base class (BERT/Longformer weight
initialisation, gradient checkpointing, no-split modules) and ``save_pretrained`` that also writes the
remote code (:class:`ExportCodeMixin`, shared with SparseTransformer)."""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from ..sparse_transformer.modeling_sparse_transformer import ExportCodeMixin
from .backbone import BACKBONE_LAYERS


class LongformerTaskPreTrainedModel(ExportCodeMixin, PreTrainedModel):
    """Base of the task models whose encoder is ``config.backbone`` (a Longformer or SparseTransformer);
    subclasses set ``config_class``."""

    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    # per model: the layer of its backbone (see post_init); a name not in the model makes FSDP's auto-wrap raise
    _no_split_modules = None
    _supports_sdpa = False  # Longformer's and hf-sparse's own attention; no attn_implementation switch
    _supports_flash_attn = False
    # the heads average their own losses: the Trainer must divide them by the gradient-accumulation steps
    # (it guesses from forward(**kwargs) that the loss divides by its num_items_in_batch instead)
    accepts_loss_kwargs = False

    def get_correct_attn_implementation(self, requested_attention, is_init_check=False):
        """With a SparseTransformer backbone, what is asked for is what the backbone runs (``build_backbone``); left
        unset (None), the backbone keeps its own default, ``"hf_sparse"``, which the task config, having no
        ``attention_pattern`` of its own, cannot carry. A Longformer backbone ignores the setting."""
        if requested_attention is None and self.config.backbone.get("model_type") == "sparse_transformer":
            return None
        return super().get_correct_attn_implementation(requested_attention, is_init_check)

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
