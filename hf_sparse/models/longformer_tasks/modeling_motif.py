"""DNA motif detection: per-position motif tags and a sequence-level head over a long encoder."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import BCEWithLogitsLoss, CrossEntropyLoss
from transformers import PreTrainedModel
from transformers.utils import ModelOutput

from .backbone import backbone_config, build_backbone, every_k_global
from .configuration_motif import LongformerMotifConfig


@dataclass
class MotifDetectionOutput(ModelOutput):
    """``logits``: (batch, seq, tags) per-position BIO scores; ``sequence_logits``: (batch, outputs)."""

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    sequence_logits: torch.FloatTensor | None = None
    hidden_states: tuple | None = None
    attentions: tuple | None = None


class LongformerMotifPreTrainedModel(PreTrainedModel):
    config_class = LongformerMotifConfig
    config: LongformerMotifConfig
    base_model_prefix = "backbone"
    supports_gradient_checkpointing = True
    _no_split_modules = ["LongformerLayer", "SparseTransformerLayer"]
    _supports_sdpa = False
    export_code_hook = None  # set by hf_sparse: writes the self-contained modelling code on save

    def save_pretrained(self, save_directory, *args, **kwargs):
        out = super().save_pretrained(save_directory, *args, **kwargs)
        if type(self).export_code_hook is not None and kwargs.get("is_main_process", True):
            type(self).export_code_hook(self, save_directory)
        return out


class LongformerForMotifDetection(LongformerMotifPreTrainedModel):
    """Motif tagging (BIO per motif, per position) and motif presence / sequence class.

    Global attention: the caller's ``global_attention_mask``, or else the first token and every
    ``config.global_every``-th position.
    """

    def __init__(self, config: LongformerMotifConfig):
        super().__init__(config)
        self.backbone = build_backbone(backbone_config(config.backbone))
        hidden = config.hidden_size
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.token_classifier = nn.Linear(hidden, config.num_labels) if config.motif_names else None
        self.sequence_head = None
        if config.sequence_task is not None:
            self.sequence_head = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Dropout(config.classifier_dropout),
                                               nn.Linear(hidden, config.num_sequence_outputs))  # fmt: skip
        self.post_init()

    def get_input_embeddings(self):
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.backbone.set_input_embeddings(value)

    def default_global_attention_mask(self, input_ids, attention_mask=None):
        return every_k_global(
            input_ids, attention_mask, self.config.global_every, self.config.global_first_token
        )

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, labels=None, sequence_labels=None,
                inputs_embeds=None, output_attentions=None, output_hidden_states=None, return_dict=None, **kwargs):  # fmt: skip
        """``labels`` (batch, seq): tag ids, -100 where no loss is taken; ``sequence_labels``: (batch,
        motifs) multi-hot floats for motif presence, or (batch,) class ids."""
        ref = input_ids if input_ids is not None else inputs_embeds[..., 0]
        if global_attention_mask is None:
            global_attention_mask = every_k_global(
                ref, attention_mask, self.config.global_every, self.config.global_first_token
            )
        out = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask,
            inputs_embeds=inputs_embeds, output_attentions=output_attentions, output_hidden_states=output_hidden_states,
            return_dict=True,
        )  # fmt: skip
        hidden = self.dropout(out.last_hidden_state)
        logits = self.token_classifier(hidden) if self.token_classifier is not None else None
        seq_logits = self.sequence_head(hidden[:, 0]) if self.sequence_head is not None else None
        loss = None
        if labels is not None and logits is not None:
            loss = CrossEntropyLoss()(
                logits.reshape(-1, logits.shape[-1]), labels.to(logits.device).reshape(-1)
            )
        if sequence_labels is not None and seq_logits is not None:
            sequence_labels = sequence_labels.to(seq_logits.device)
            if self.config.sequence_task == "motif_presence":
                seq_loss = BCEWithLogitsLoss()(seq_logits, sequence_labels.to(seq_logits.dtype))
            else:
                seq_loss = CrossEntropyLoss()(seq_logits, sequence_labels.long().view(-1))
            seq_loss = self.config.sequence_loss_weight * seq_loss
            loss = seq_loss if loss is None else loss + seq_loss
        res = MotifDetectionOutput(loss=loss, logits=logits, sequence_logits=seq_logits,
                                   hidden_states=getattr(out, "hidden_states", None), attentions=getattr(out, "attentions", None))  # fmt: skip
        use = self.config.return_dict if return_dict is None else return_dict
        return res if use else res.to_tuple()


__all__ = ["LongformerForMotifDetection", "LongformerMotifPreTrainedModel", "MotifDetectionOutput"]
